package cmd

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
)

// cli runs leasewal in-process and returns its exit code, stdout and stderr.
func cli(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := Main(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

// returnsBeforeHangGuard runs fn and fails the test, naming what, when fn has
// not returned within the hang guard: that is a hang, not a slow machine.
func returnsBeforeHangGuard(t testing.TB, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(testwait.HangGuard):
		t.Fatalf("hang guard: %s did not return in %s", what, testwait.HangGuard)
	}
}

// storeOptions are the store's options for e's WAL, for the tests that open
// a handle themselves.
func (e env) storeOptions() store.Options {
	return store.Options{Path: e.WAL, LockTimeout: e.LockTimeout, Actor: e.Actor, Clock: e.clock, Fault: e.Fault}
}
