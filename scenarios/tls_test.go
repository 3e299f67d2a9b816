package scenarios

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/leasewal/leasewal/internal/testcert"
	"github.com/leasewal/leasewal/internal/testwait"
)

// startServe starts leasewal serve with args and returns it once it says
// where it serves, with that URL and what it says on stderr from then on.
func startServe(t *testing.T, args ...string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	return startServeEnv(t, nil, args...)
}

// startServeEnv is startServe with env added to the process's environment.
func startServeEnv(t *testing.T, env []string, args ...string) (*exec.Cmd, string, *lockedBuffer) {
	t.Helper()
	server := exec.Command(binary(), args...)
	server.Env = append(os.Environ(), env...)
	stderr, err := server.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Process.Kill(); server.Wait() })
	lines := bufio.NewScanner(stderr)
	var url string
	for url == "" && lines.Scan() { // it says where it serves once it does
		if _, after, ok := strings.Cut(lines.Text(), " on "); ok && strings.Contains(lines.Text(), "serving") {
			url = after
		}
	}
	if url == "" {
		t.Fatalf("serve %v ended without serving", args)
	}
	rest := &lockedBuffer{}
	go func() {
		for lines.Scan() {
			rest.WriteString(lines.Text() + "\n")
		}
	}()
	return server, url, rest
}

// lockedBuffer is a strings.Builder safe for one writer and many readers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) WriteString(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.WriteString(s)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestServeOverTLS: serve --tls-cert/--tls-key answers https; a client that
// trusts the certificate (--ca) is answered, one that does not is told so
// (exit 2, nothing sent), and plain http to it gets nothing decided.
func TestServeOverTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ca := testcert.NewAuthority(t, "test CA")
	_, certFile, keyFile := ca.Issue(t, "server", dir)
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("s3cret\n"), 0o600)
	walPath := filepath.Join(dir, "q.wal")
	server, url, _ := startServe(t, "--wal", walPath, "serve", "--listen", "127.0.0.1:0", "--tls-cert", certFile, "--tls-key", keyFile, "--token-file", token)
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		t.Fatalf("the server said %q", url)
	}
	client := []string{"LEASEWAL_SERVER=" + url, "LEASEWAL_TOKEN_FILE=" + token}
	if code, out, errOut := run(t, walPath, append(client, "LEASEWAL_CA="+caFile), "submit", "--payload", "over tls", "-o", "json"); code != 0 || !strings.Contains(out, `"result":"ACK"`) {
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

// TestClusterOverTLS: three serve processes whose HTTP and raft both speak
// TLS with certificates from one CA form a cluster (joins over https), a
// submit through a follower is forwarded to the leader, and every node's
// WAL ends the same.
func TestClusterOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewAuthority(t, "cluster CA")
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o644); err != nil {
		t.Fatal(err)
	}
	var urls []string
	var logs []*lockedBuffer
	// Raft's addresses are given, not taken from the system: a joining node
	// tells the leader its --raft-bind. Below Linux's ephemeral ports, as
	// cluster.sh's, so that no test's outgoing connection holds one.
	base := 10000 + rand.IntN(20000)
	for i, name := range []string{"n1", "n2", "n3"} {
		_, cert, key := ca.Issue(t, name, dir)
		args := []string{"--wal", filepath.Join(dir, name+".wal"), "--ca", caFile, "serve", "--listen", "127.0.0.1:0",
			"--tls-cert", cert, "--tls-key", key, "--raft-id", name, "--raft-dir", filepath.Join(dir, name+".raft"),
			"--raft-bind", fmt.Sprintf("127.0.0.1:%d", base+i)}
		if i > 0 {
			args = append(args, "--join", urls[0])
		}
		_, url, log := startServe(t, args...)
		urls, logs = append(urls, url), append(logs, log)
		if i == 0 { // the founder leads before anyone joins
			testwait.Until(t, "n1 to lead", func() bool {
				_, out, _ := run(t, "", []string{"LEASEWAL_SERVER=" + url, "LEASEWAL_CA=" + caFile}, "submit", "--payload", "first", "--request-id", "first")
				return strings.Contains(out, "ACK")
			}, log.String)
		}
	}
	for i, log := range logs[1:] {
		testwait.Until(t, fmt.Sprintf("n%d to join over https", i+2), func() bool { return strings.Contains(log.String(), "joined the cluster") }, log.String)
	}
	follower := []string{"LEASEWAL_SERVER=" + urls[2], "LEASEWAL_CA=" + caFile}
	if code, out, errOut := run(t, "", follower, "submit", "--payload", "through a follower", "-o", "json"); code != 0 || !strings.Contains(out, "ACK") {
		t.Fatalf("a submit through n3: exit %d %s %s", code, out, errOut)
	}
	same := func() bool {
		a, _ := os.ReadFile(filepath.Join(dir, "n1.wal"))
		for _, name := range []string{"n2", "n3"} {
			if b, _ := os.ReadFile(filepath.Join(dir, name+".wal")); string(a) != string(b) || !strings.Contains(string(b), "through a follower") {
				return false
			}
		}
		return true
	}
	testwait.Until(t, "every node's WAL to hold both records", same, func() string { return logs[0].String() + logs[1].String() + logs[2].String() })
}
