package scenarios

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestColorsOnlyOnATerminal runs leasewal under a pseudo-terminal (util-linux
// `script`): colors and box-drawing timelines appear there, and nowhere else:
// not through a pipe, not with NO_COLOR or --no-color, never in JSON.
func TestColorsOnlyOnATerminal(t *testing.T) {
	scriptCmd, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no `script` (util-linux) to make a pseudo-terminal")
	}
	walPath, _ := filepath.Abs("../testdata/seeds/lease_expiry.wal")
	base := []string{binary(), "--wal", walPath, "--now", "2026-01-01T00:10:00Z"}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "NO_COLOR=") && !strings.HasPrefix(kv, "LEASEWAL_") {
			env = append(env, kv)
		}
	}
	underTTY := func(extraEnv []string, args ...string) string {
		cmd := exec.Command(scriptCmd, "-qec", strings.Join(append(base, args...), " "), "/dev/null")
		cmd.Env = append(append([]string{}, env...), extraEnv...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v under a pseudo-terminal: %v\n%s", args, err, out)
		}
		return string(out)
	}
	piped := func(args ...string) string {
		cmd := exec.Command(base[0], append(base[1:], args...)...)
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return string(out)
	}
	const esc = "\x1b["
	if out := underTTY(nil, "inspect", "T1", "--timeline"); !strings.Contains(out, esc) || !strings.Contains(out, "━") {
		t.Fatalf("no colors or box characters on a terminal:\n%s", out)
	}
	if out := underTTY(nil, "inspect"); !strings.Contains(out, esc+"32mCOMPLETED") {
		t.Fatalf("states are not colored on a terminal:\n%q", out)
	}
	for name, out := range map[string]string{
		"NO_COLOR":   underTTY([]string{"NO_COLOR=1"}, "inspect", "T1", "--timeline"),
		"--no-color": underTTY(nil, "inspect", "T1", "--timeline", "--no-color"),
		"-o json":    underTTY(nil, "inspect", "T1", "-o", "json"),
		"a pipe":     piped("inspect", "T1", "--timeline"),
		"log, piped": piped("log"),
	} {
		if strings.Contains(out, esc) || bytes.ContainsRune([]byte(out), '━') {
			t.Fatalf("colors with %s:\n%q", name, out)
		}
	}
}

// TestProgressOnlyOnATerminal: a read of a WAL over 64 MiB draws a progress
// bar on stderr under a pseudo-terminal (bytes done, rate, then "done"), and
// none with -o json, nor through a pipe.
func TestProgressOnlyOnATerminal(t *testing.T) {
	t.Parallel()
	scriptCmd, err := exec.LookPath("script")
	if err != nil {
		t.Skip("no `script` (util-linux) to make a pseudo-terminal")
	}
	// Payloads near the limit make a WAL of 64 MiB from a thousand records,
	// which reads in a fraction of the time of a history that long.
	dir := t.TempDir()
	walPath, batchPath := filepath.Join(dir, "big.wal"), filepath.Join(dir, "batch.jsonl")
	var batch bytes.Buffer
	for i := range 1040 {
		fmt.Fprintf(&batch, "{\"payload\":\"%s%d\"}\n", strings.Repeat("x", 65000), i)
	}
	if err := os.WriteFile(batchPath, batch.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(binary(), "--wal", walPath, "submit", "--batch-file", batchPath, "-o", "json").CombinedOutput(); err != nil {
		t.Fatalf("submitting the batch: %v\n%.500s", err, out)
	}
	if info, err := os.Stat(walPath); err != nil || info.Size() < 64<<20 {
		t.Fatalf("the WAL is too small for a bar: %v %v", info.Size(), err)
	}
	verify := func(args ...string) string {
		line := "stty cols 120 rows 40; " + strings.Join(append([]string{binary(), "--wal", walPath, "verify"}, args...), " ")
		out, err := exec.Command(scriptCmd, "-qec", line, "/dev/null").Output()
		if err != nil {
			t.Fatalf("verify %v under a pseudo-terminal: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := verify(); !strings.Contains(out, "reading "+walPath) || !strings.Contains(out, "MiB/s") || !strings.Contains(out, "done") {
		t.Fatalf("no progress bar on a terminal:\n%q", out)
	}
	if out := verify("-o", "json"); strings.Contains(out, "reading ") {
		t.Fatalf("a progress bar with -o json:\n%q", out)
	}
	cmd := exec.Command(binary(), "--wal", walPath, "verify")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() != 0 {
		t.Fatalf("verify through a pipe: %v, stderr %q", err, stderr.String())
	}
}
