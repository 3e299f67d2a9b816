package client

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// FileError is a token or certificate file that cannot be used: the
// caller's to fix, nothing was sent.
type FileError struct{ msg string }

func (e *FileError) Error() string { return e.msg }

func fileErr(format string, args ...any) error { return &FileError{msg: fmt.Sprintf(format, args...)} }

func withoutPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// ReadToken reads a bearer token from the file at path ("" for none),
// a server's or a client's alike. A file others can read is refused before
// it is read, as ssh refuses such a key: a secret that others can read is
// no secret.
func ReadToken(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	if info, err := os.Stat(path); err == nil && info.Mode().Perm()&0o077 != 0 {
		return "", fileErr("--token-file %s can be read by others (mode %04o): make it private with 'chmod 600 %s'", path, info.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fileErr("cannot read --token-file %s: %v", path, withoutPath(err))
	}
	return strings.TrimSpace(string(b)), nil
}

// LoadCA reads the PEM certificates of the file at path.
func LoadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fileErr("cannot read --ca %s: %v", path, withoutPath(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fileErr("--ca %s holds no PEM certificate", path)
	}
	return pool, nil
}

// httpClients holds the HTTP clients of a process, one per CA file, so
// that connections are reused across its requests.
var httpClients sync.Map // CA path -> *http.Client

// HTTPTrusting is the HTTP client for servers whose certificates the CA
// file at caPath signs ("": the system's), one per file in a process.
func HTTPTrusting(caPath string) (*http.Client, error) {
	if c, ok := httpClients.Load(caPath); ok {
		return c.(*http.Client), nil
	}
	c := &http.Client{Timeout: 10 * time.Minute}
	if caPath != "" {
		pool, err := LoadCA(caPath)
		if err != nil {
			return nil, err
		}
		transport := http.DefaultTransport.(*http.Transport).Clone()
		transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		c.Transport = transport
	}
	actual, _ := httpClients.LoadOrStore(caPath, c)
	return actual.(*http.Client), nil
}
