package cmd

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestReadersKeepTheirOutcomeOnAClosedPipe: a command that wrote nothing
// exits with its outcome's code, quietly, when its reader goes away
// ('… | head -1' under set -o pipefail); one that wrote keeps exit 8.
func TestReadersKeepTheirOutcomeOnAClosedPipe(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	at := []string{"--wal", walPath} // the wall clock: wait waits in real time
	for range 3 {
		if code, _, stderr := cli(append(at, "submit", "--payload", "P")...); code != 0 {
			t.Fatal(stderr)
		}
	}
	closed := brokenWriter{syscall.EPIPE}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"wait", "T1", "T2", "T3", "--for", "COMPLETED", "--timeout", "1ms"}, ExitWaitedOut},
		{[]string{"wait", "T1", "--for", "COMPLETED", "--timeout", "1ms", "-o", "json"}, ExitWaitedOut},
		{[]string{"lease", "--worker", "W", "--queue", "elsewhere"}, ExitNotFound}, // EMPTY: nothing written
		{[]string{"inspect", "T1"}, ExitOK},
		{[]string{"log"}, ExitOK},
		{[]string{"stats"}, ExitOK},
		{[]string{"report", "-o", "html"}, ExitOK},
	} {
		before, _ := os.ReadFile(walPath)
		code, stderr := cliTo(nil, closed, append(at, c.args...)...)
		if code != c.want || stderr != "" {
			t.Errorf("%v into a closed pipe: exit %d %q, want %d quietly", c.args, code, stderr, c.want)
		}
		if after, _ := os.ReadFile(walPath); string(after) != string(before) {
			t.Errorf("%v wrote to the WAL", c.args)
		}
	}
	if code, stderr := cliTo(nil, closed, append(at, "lease", "--worker", "W")...); code != ExitAnswerLost || !strings.Contains(stderr, "WAS recorded") {
		t.Errorf("a lease into a closed pipe: exit %d %q, want 8 naming the record", code, stderr)
	}
}

// TestFollowEndsWhenItsReaderGoes: 'log --follow | head -3' returns once
// head has its three lines, without waiting for a fourth record.
func TestFollowEndsWhenItsReaderGoes(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	for range 3 {
		if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "P"); code != 0 {
			t.Fatal(stderr)
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	done := make(chan int)
	go func() {
		code, _ := cliTo(nil, w, "--wal", walPath, "log", "--follow")
		done <- code
	}()
	lines := bufio.NewScanner(r)
	for range 3 {
		if !lines.Scan() {
			t.Fatalf("log --follow ended before three lines: %v", lines.Err())
		}
	}
	r.Close() // head exits
	returnsBeforeHangGuard(t, "log --follow after its reader went away", func() {
		if code := <-done; code != 0 {
			t.Errorf("log --follow: exit %d", code)
		}
	})
}
