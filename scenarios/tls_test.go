package scenarios

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"leasewal/internal/testwait"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, made here.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leasewal test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600)
	return certFile, keyFile
}

// TestServeOverTLS: serve --tls-cert/--tls-key answers https; a client that
// trusts the certificate (--ca) is answered, one that does not is told so
// (exit 2, nothing sent), and plain http to it gets nothing decided.
func TestServeOverTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("s3cret\n"), 0o600)
	walPath := filepath.Join(dir, "q.wal")
	server := exec.Command(binary(), "--wal", walPath, "serve", "--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile, "--token-file", token)
	stderr, err := server.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	defer server.Process.Kill()
	lines := bufio.NewScanner(stderr)
	var url string
	for url == "" && lines.Scan() { // the server says where it serves once it does
		if _, after, ok := strings.Cut(lines.Text(), " on "); ok && strings.Contains(lines.Text(), "serving") {
			url = after
		}
	}
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		t.Fatalf("the server said %q", url)
	}
	go func() {
		for lines.Scan() {
		}
	}()
	client := []string{"LEASEWAL_SERVER=" + url, "LEASEWAL_TOKEN_FILE=" + token}
	if code, out, errOut := run(t, walPath, append(client, "LEASEWAL_CA="+certFile), "submit", "--payload", "over tls", "-o", "json"); code != 0 || !strings.Contains(out, `"result":"ACK"`) {
		t.Fatalf("a client trusting the certificate: exit %d %s %s", code, out, errOut)
	}
	if code, _, errOut := run(t, walPath, client, "inspect"); code != 2 || !strings.Contains(errOut, "certificate is not trusted") || !strings.Contains(errOut, "--ca") {
		t.Fatalf("a client not trusting it: exit %d %s", code, errOut)
	}
	plain := []string{"LEASEWAL_SERVER=http" + strings.TrimPrefix(url, "https"), "LEASEWAL_TOKEN_FILE=" + token}
	if code, _, errOut := run(t, walPath, plain, "submit", "--payload", "in clear"); code == 0 {
		t.Fatalf("plain http to the TLS port was answered: %s", errOut)
	}
	server.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- server.Wait() }()
	var exit error
	testwait.Until(t, "the server to exit on SIGTERM", func() bool {
		select {
		case exit = <-done:
			return true
		default:
			return false
		}
	}, nil)
	var ee *exec.ExitError
	if exit != nil && !errors.As(exit, &ee) {
		t.Fatal(exit)
	} else if exit != nil {
		t.Fatalf("serve exited %v on SIGTERM", exit)
	}
	if code, out, _ := run(t, walPath, nil, "log", "-o", "json"); code != 0 || strings.Count(out, "TaskCreated") != 1 || strings.Contains(out, "in clear") {
		t.Fatalf("the WAL holds:\n%s", out)
	}
}
