package cmd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCommandLine runs random command lines (verbs, flags, values and orders
// drawn from the real ones, and bytes the fuzzer invents) in process against
// a small WAL, and fails on a panic or on exit 1: bad input of any shape must
// be a clear refusal with its documented code, never an internal error.
// The verbs that wait (none yet besides the lock) are left out by giving
// every call a short lock timeout and an explicit --now.
func FuzzCommandLine(f *testing.F) {
	for _, seed := range []string{
		"submit --payload P --window 5m",
		"submit --payload P --max-attempts 0",
		"lease --worker W --duration 30s",
		"lease --worker W --task T1 --request-id R",
		"extend --task T1 --lease L1 --duration 1s",
		"complete --task T1 --lease L1",
		"fail --task T1 --lease L1 --reason r --permanent",
		"expire",
		"inspect T1 --until 2 --timeline",
		"inspect --state waiting --workers",
		"log --task T1 --from 1 --to 3 --since +1s --until +1m --type LeaseGranted",
		"verify",
		"repair",
		"heartbeat --worker W",
		"worklease acquire --domain d --offset 3",
		"worklease fail --domain d --token K1 --max-retries -1",
		"worklease inspect --domain d",
		"inspect -o yaml",
		"--now +1h lease --worker W",
		"completion bash",
	} {
		f.Add(seed)
	}
	dir := f.TempDir()
	base := filepath.Join(dir, "base.wal")
	for _, args := range [][]string{
		{"submit", "--payload", "P", "--now", "2026-01-01T00:00:00Z"},
		{"lease", "--worker", "W", "--now", "+1s"},
		{"worklease", "acquire", "--domain", "d", "--offset", "1", "--now", "+1s"},
	} {
		if code, _, stderr := cli(append([]string{"--wal", base}, args...)...); code != 0 {
			f.Fatal(stderr)
		}
	}
	f.Fuzz(func(t *testing.T, line string) {
		args := strings.Fields(line)
		wal := filepath.Join(t.TempDir(), "q.wal")
		data := mustRead(t, base)
		if err := os.WriteFile(wal, data, 0o644); err != nil {
			t.Fatal(err)
		}
		full := append([]string{"--wal", wal, "--lock-timeout", "100ms", "--now", "+5s"}, args...)
		var out, errOut bytes.Buffer
		var code int
		returnsBeforeHangGuard(t, fmt.Sprintf("%q", line), func() { code = Main(full, strings.NewReader("stdin payload"), &out, &errOut) })
		if code == ExitInternal {
			t.Fatalf("%q: exit 1: %s", line, errOut.String())
		}
	})
}
