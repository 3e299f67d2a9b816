package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The regression tests of the defects outside probing found (issue 12), one
// or more per point; each failed before its fix.

// brokenWriter fails every write with err.
type brokenWriter struct{ err error }

func (w brokenWriter) Write([]byte) (int, error) { return 0, w.err }

func cliTo(stdout *bytes.Buffer, w interface{ Write([]byte) (int, error) }, args ...string) (int, string) {
	var errOut bytes.Buffer
	code := Main(args, strings.NewReader(""), w, &errOut)
	return code, errOut.String()
}

// Point 4: an operation that was recorded but whose answer could not be
// written is exit 8, naming the record and how to get the answer again; a
// reader whose stdout is closed stops quietly; any other stdout failure is exit 1.
func TestAnswerThatCannotBeWritten(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	code, stderr := cliTo(nil, brokenWriter{syscall.ENOSPC}, "--wal", walPath, "--now", "2026-01-01T00:00:00Z", "submit", "--payload", "P", "-o", "json")
	if code != ExitAnswerLost || !strings.Contains(stderr, "WAS recorded (record 1)") || !strings.Contains(stderr, "--request-id R1") {
		t.Fatalf("submit to a full stdout: exit %d, %q", code, stderr)
	}
	code, stderr = cliTo(nil, brokenWriter{syscall.ENOSPC}, "--wal", walPath, "--now", "+1s", "lease", "--worker", "W", "--request-id", "poll-1")
	if code != ExitAnswerLost || !strings.Contains(stderr, "record 2") || !strings.Contains(stderr, "--request-id poll-1") {
		t.Fatalf("lease to a full stdout: exit %d, %q", code, stderr)
	}
	if code, _, _ := cli("--wal", walPath, "--now", "+1s", "lease", "--worker", "W", "--request-id", "poll-1", "-o", "json"); code != 0 {
		t.Fatalf("the repeat that gets the answer again: exit %d", code)
	}
	if code, stderr := cliTo(nil, brokenWriter{syscall.EPIPE}, "--wal", walPath, "--now", "+1s", "log"); code != 0 || stderr != "" {
		t.Fatalf("log into a closed pipe: exit %d, %q", code, stderr)
	}
	if code, stderr := cliTo(nil, brokenWriter{syscall.ENOSPC}, "--wal", walPath, "--now", "+1s", "inspect"); code != ExitInternal || !strings.Contains(stderr, "writing the answer to stdout") {
		t.Fatalf("inspect to a full stdout: exit %d, %q", code, stderr)
	}
}

// Point 5: with -o json, wherever it stands, every error is one JSON
// document on stdout; an unknown command or subcommand is exit 2 with a
// suggestion, never help with exit 0.
func TestUsageErrorsAreJSONAndSuggest(t *testing.T) {
	for _, args := range [][]string{
		{"lease", "--wroker", "A", "-o", "json"},
		{"-o", "json", "leaes"},
		{"--output=json", "worklease", "aquire"},
		{"-ojson", "submit", "--bogus"},
	} {
		code, out, stderr := cli(args...)
		var doc map[string]any
		if code != ExitUsage || json.Unmarshal([]byte(out), &doc) != nil || doc["result"] != "ERROR" || doc["error"] != "Usage" || strings.Count(stderr, "\n") != 1 {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, out, stderr)
		}
	}
	t.Setenv("LEASEWAL_OUTPUT", "json")
	if code, out, _ := cli("inspect", "--bogus"); code != ExitUsage || !strings.HasPrefix(out, `{"result":"ERROR"`) {
		t.Fatalf("LEASEWAL_OUTPUT=json and an unknown flag: exit %d, %q", code, out)
	}
	for args, want := range map[string]string{"worklease aquire": `did you mean "acquire"`, "leaes": `did you mean "lease"`, "worklease": "needs a command: one of acquire, succeed, fail, inspect"} {
		code, out, stderr := cli(strings.Fields(args)...)
		if code != ExitUsage || !strings.Contains(stderr, want) || strings.Contains(out, "Usage:") {
			t.Fatalf("%s: exit %d, %q %q", args, code, out, stderr)
		}
	}
}

// Point 6: a WAL path that is not a regular file, or cannot become one, is
// exit 2 at once: never a hang (a FIFO), never a loop (a dangling symlink),
// never exit 1 (a symlink loop, a missing directory).
func TestPathsThatCannotBeAWAL(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, "dangling"))
	os.Symlink(filepath.Join(dir, "loop2"), filepath.Join(dir, "loop1"))
	os.Symlink(filepath.Join(dir, "loop1"), filepath.Join(dir, "loop2"))
	for name, want := range map[string]string{"fifo": "a FIFO", "dangling": "a symlink to nothing", "loop1": "a symlink loop", "missing/q.wal": "a directory that does not exist"} {
		for _, verb := range [][]string{{"inspect"}, {"submit", "--payload", "P"}, {"lease", "--worker", "W"}} {
			// A lock timeout far past the hang guard: a path that made the
			// command wait (a FIFO's open, a lock) fails the guard.
			var code int
			var out, stderr string
			returnsBeforeHangGuard(t, fmt.Sprint(name, verb), func() {
				code, out, stderr = cli(append([]string{"--wal", filepath.Join(dir, name), "--lock-timeout", "1h", "-o", "json"}, verb...)...)
			})
			if code != ExitUsage || !strings.Contains(stderr, want) || !strings.Contains(out, `"error":"BadWALPath"`) {
				t.Fatalf("%s %v: exit %d, %q %q", name, verb, code, out, stderr)
			}
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "nowhere")); err == nil {
		t.Fatal("a write through a dangling symlink created its target")
	}
}

// Point 7: the fsync of the directory of a new WAL fails after the link: the
// link is taken back and the command says the operation did not happen, so
// that a retry cannot create a second task.
func TestNewWALWhoseDirectoryCannotBeSynced(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	t.Setenv("LEASEWAL_FAILPOINT", "dirsync-eio")
	code, _, stderr := cli("--wal", walPath, "submit", "--payload", "P")
	if _, err := os.Stat(walPath); code != ExitInternal || !strings.Contains(stderr, "did not happen") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("exit %d, %q, WAL: %v", code, stderr, err)
	}
}

// Point 2: times out of range, or that look like unix seconds, are refused;
// a computed time saturates at the end of the year 9999.
func TestTimesOutOfRange(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	for now, want := range map[string]string{
		"9223372036854775000":     "outside the years 0001 to 9999",
		"1767225600":              "looks like unix seconds",
		"99999999999999999999999": "past the year 9999",
		"-5":                      "must not be negative",
	} {
		if code, _, stderr := cli("--wal", walPath, "--now", now, "submit", "--payload", "P"); code != ExitUsage || !strings.Contains(stderr, want) {
			t.Fatalf("--now %s: exit %d, %q", now, code, stderr)
		}
	}
	if _, err := os.Stat(walPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused --now wrote a WAL")
	}
	code, out, _ := cli("--wal", walPath, "--now", "9999-12-31T23:59:00Z", "submit", "--payload", "P", "--window", "2562047h", "-o", "json")
	if code != 0 || !strings.Contains(out, `"deadline":"9999-12-31T23:59:59.999Z"`) {
		t.Fatalf("a window past the year 9999: exit %d, %s", code, out)
	}
	code, out, _ = cli("--wal", walPath, "--now", "+0s", "lease", "--worker", "W", "--duration", "2562047h", "-o", "json")
	if code != 0 || !strings.Contains(out, `"expiry":"9999-12-31T23:59:59.999Z"`) {
		t.Fatalf("a lease past the year 9999: exit %d, %s", code, out)
	}
	if code, _, stderr := cli("--wal", walPath, "--now", "+2562047h", "expire"); code != ExitUsage || !strings.Contains(stderr, "outside the years 0001 to 9999") {
		t.Fatalf("--now +DURATION past the year 9999: exit %d, %q", code, stderr)
	}
	if code, _, stderr := cli("--wal", walPath, "verify"); code != 0 {
		t.Fatalf("verify: %s", stderr)
	}
}

// Point 3: every number from every source is validated; an unknown key in
// the config file is named.
func TestSettingsAreValidated(t *testing.T) {
	dir := t.TempDir()
	walPath := filepath.Join(dir, "q.wal")
	cli("--wal", walPath, "worklease", "acquire", "--domain", "d", "--offset", "1")
	before, _ := os.ReadFile(walPath)
	t.Setenv("LEASEWAL_WORKLEASE_MAX_RETRIES", "3x")
	if code, _, stderr := cli("--wal", walPath, "worklease", "fail", "--domain", "d", "--token", "K1"); code != ExitUsage || !strings.Contains(stderr, `"3x"`) {
		t.Fatalf("LEASEWAL_WORKLEASE_MAX_RETRIES=3x: exit %d, %q", code, stderr)
	}
	os.Unsetenv("LEASEWAL_WORKLEASE_MAX_RETRIES")
	lots := filepath.Join(dir, "lots.yaml")
	os.WriteFile(lots, []byte("worklease:\n  max_retries: lots\n"), 0o644)
	if code, _, stderr := cli("--wal", walPath, "--config", lots, "worklease", "fail", "--domain", "d", "--token", "K1"); code != ExitUsage || !strings.Contains(stderr, `"lots"`) {
		t.Fatalf("max_retries: lots: exit %d, %q", code, stderr)
	}
	typo := filepath.Join(dir, "typo.yaml")
	os.WriteFile(typo, []byte("outptu: json\n"), 0o644)
	if code, _, stderr := cli("--wal", walPath, "--config", typo, "inspect"); code != ExitUsage || !strings.Contains(stderr, `unknown key "outptu"`) {
		t.Fatalf("outptu: exit %d, %q", code, stderr)
	}
	if after, _ := os.ReadFile(walPath); !bytes.Equal(before, after) {
		t.Fatal("a refused setting changed the WAL")
	}
	if code, _, stderr := cli("--wal", walPath, "--lock-timeout", "soon", "inspect"); code != ExitUsage || !strings.Contains(stderr, "lock-timeout") {
		t.Fatalf("--lock-timeout soon: exit %d, %q", code, stderr)
	}
}

// Point 14: a relative wal in a config file given by --config is resolved
// against the file's directory; the actor's user is looked up by uid when
// $USER is unset.
func TestConfigPathsAndActor(t *testing.T) {
	dir := t.TempDir()
	os.Mkdir(filepath.Join(dir, "conf"), 0o755)
	cfg := filepath.Join(dir, "conf", "leasewal.yaml")
	os.WriteFile(cfg, []byte("wal: data.wal\n"), 0o644)
	if code, _, stderr := cli("--config", cfg, "submit", "--payload", "P"); code != 0 {
		t.Fatal(stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "conf", "data.wal")); err != nil {
		t.Fatalf("the WAL named by a config file is not beside it: %v", err)
	}
	t.Setenv("USER", "")
	t.Setenv("LOGNAME", "cronjob") // cron sets only this
	if actor := defaultActor(); !strings.HasPrefix(actor, "cronjob@") {
		t.Fatalf("actor %q without $USER; want $LOGNAME's, cronjob@…", actor)
	}
	t.Setenv("LOGNAME", "")
	u, err := user.Current()
	if err != nil {
		t.Skip("no user for this uid")
	}
	if actor := defaultActor(); !strings.HasPrefix(actor, u.Username+"@") {
		t.Fatalf("actor %q without $USER and $LOGNAME; want %s@…", actor, u.Username)
	}
}

// Point 14: a record dated in the future freezes lease expiry until the
// clock catches up: say so. A missing WAL is named when a command finds
// nothing because of it.
func TestClockBehindAndMissingWAL(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	if code, _, stderr := cli("--wal", walPath, "lease", "--worker", "W"); code != ExitNotFound || !strings.Contains(stderr, "does not exist yet") {
		t.Fatalf("lease on a missing WAL: exit %d, %q", code, stderr)
	}
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	cli("--wal", walPath, "--now", future, "submit", "--payload", "P")
	if code, _, stderr := cli("--wal", walPath, "inspect"); code != 0 || !strings.Contains(stderr, "behind the last record's time") || !strings.Contains(stderr, "no lease expires") {
		t.Fatalf("a WAL from the future: exit %d, %q", code, stderr)
	}
}

// Point 12: no control character from the WAL reaches the terminal.
func TestControlCharactersAreEscaped(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	payload := "x\x1b[31mred\x07\r\n"
	cli("--wal", walPath, "--now", "2026-01-01T00:00:00Z", "submit", "--payload", payload)
	for _, args := range [][]string{
		{"lease", "--worker", "W\u009b1"},
		{"inspect"}, {"inspect", "T1"}, {"log"}, {"inspect", "--workers"}, {"inspect", "T1", "--timeline"},
		{"fail", "--task", "T1", "--lease", "L1", "--reason", "bad\x1b]0;title\x07"},
	} {
		code, out, stderr := cli(append([]string{"--wal", walPath, "--now", "+1s"}, args...)...)
		if strings.ContainsAny(out+stderr, "\x1b\x07\r\u009b") {
			t.Fatalf("%v (exit %d) wrote a control character: %q %q", args, code, out, stderr)
		}
	}
	if _, out, _ := cli("--wal", walPath, "inspect", "T1", "--now", "+1s", "-o", "json"); !strings.Contains(out, `x\u001b[31mred`) {
		t.Fatalf("JSON must keep the payload exactly: %s", out)
	}
}

// Point 13: inspect of a task filtered out by --state, a task named twice, and --until 0.
func TestInspectEdges(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	cli("--wal", walPath, "--now", "2026-01-01T00:00:00Z", "submit", "--payload", "P")
	cli("--wal", walPath, "--now", "+0s", "lease", "--worker", "W")
	if code, out, stderr := cli("--wal", walPath, "--now", "+1s", "inspect", "T1", "--state", "WAITING", "-o", "json"); code != 0 || !strings.Contains(out, `"tasks":[]`) {
		t.Fatalf("inspect T1 --state WAITING of a LEASED task: exit %d, %s %s", code, out, stderr)
	}
	if code, out, _ := cli("--wal", walPath, "--now", "+1s", "inspect", "T1", "T1", "-o", "json"); code != 0 || strings.Count(out, `"task_id":"T1","state"`) != 1 || !strings.Contains(out, `"counts":{"LEASED":1}`) {
		t.Fatalf("inspect T1 T1: %s", out)
	}
	if code, _, stderr := cli("--wal", walPath, "inspect", "--until", "0"); code != ExitUsage || !strings.Contains(stderr, "1 or more") {
		t.Fatalf("--until 0: exit %d, %q", code, stderr)
	}
}

// Point 9: a payload within the 64 KiB limit is accepted whatever its bytes,
// even when JSON writes each as six.
func TestPayloadOfControlBytesWithinTheLimit(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	for _, fill := range []string{"\x01", "<"} {
		payload := filepath.Join(t.TempDir(), "p")
		os.WriteFile(payload, bytes.Repeat([]byte(fill), 64<<10), 0o644)
		if code, _, stderr := cli("--wal", walPath, "submit", "--payload-file", payload); code != 0 {
			t.Fatalf("64 KiB of %q: exit %d, %q", fill, code, stderr)
		}
	}
	if code, _, stderr := cli("--wal", walPath, "verify"); code != 0 {
		t.Fatal(stderr)
	}
}

// Issue 13's bad input that a script file cannot spell: a queue name with a
// control character is refused, in submit and in lease.
func TestQueueNameWithAControlCharacter(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	for _, args := range [][]string{{"submit", "--payload", "P", "--queue", "a\x1bb"}, {"lease", "--worker", "W", "--queue", "mail,a\nb"}} {
		if code, _, stderr := cli(append([]string{"--wal", walPath}, args...)...); code != ExitUsage || !strings.Contains(stderr, "control character") {
			t.Fatalf("%q: exit %d, %q", args, code, stderr)
		}
	}
	if _, err := os.Stat(walPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatal("a refused queue name wrote a WAL")
	}
}
