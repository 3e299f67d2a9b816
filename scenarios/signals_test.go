package scenarios

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/leasewal/leasewal/internal/testwait"
)

// TestWaitersInterrupted: wait and lease --wait stopped by SIGINT or SIGTERM
// answer INTERRUPTED and exit as a shell does after the signal, as run does.
func TestWaitersInterrupted(t *testing.T) {
	t.Parallel()
	walPath := filepath.Join(t.TempDir(), "q.wal")
	run(t, walPath, nil, "submit", "--payload", "P")
	for _, c := range []struct {
		args []string
		sig  syscall.Signal
		exit int
	}{
		{[]string{"wait", "T1"}, syscall.SIGINT, 130},
		{[]string{"wait", "T1", "--timeout", "1h"}, syscall.SIGTERM, 143},
		{[]string{"lease", "--worker", "W", "--queue", "elsewhere", "--wait", "1h"}, syscall.SIGINT, 130},
		{[]string{"lease", "--worker", "W", "--queue", "elsewhere", "--wait", "1h"}, syscall.SIGTERM, 143},
	} {
		cmd := exec.Command(binary(), append(c.args, "-o", "json")...)
		cmd.Env = append(os.Environ(), "LEASEWAL_WAL="+walPath, "NO_COLOR=1")
		var out bytes.Buffer
		cmd.Stdout = &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, strings.Join(c.args, " ")+" to wait on the WAL", func() bool { return testwait.HoldsInotify(cmd.Process.Pid) }, nil)
		cmd.Process.Signal(c.sig)
		err := cmd.Wait()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != c.exit || !strings.Contains(out.String(), `"result":"INTERRUPTED"`) {
			t.Errorf("%v after %v: %v, %q; want exit %d and INTERRUPTED", c.args, c.sig, err, out.String(), c.exit)
		}
	}
}

// TestRunHeartbeatsAndSaysWhatItLost: a runner heartbeats while its child
// works (inspect --workers lists it), a child that finished after its task
// was aborted is CANCELLED (not LOST: it was not stopped), and a runner that
// settled less than it leased exits 3.
func TestRunHeartbeatsAndSaysWhatItLost(t *testing.T) {
	t.Parallel()
	walPath := filepath.Join(t.TempDir(), "q.wal")
	run(t, walPath, nil, "submit", "--payload", "P")
	// The child waits until its worker is listed, then until its task is
	// aborted, then ends well: its completion comes too late. The lease is
	// long, so that no extension finds the abort first.
	child := `until "$1" inspect --workers -o json | grep -q '"worker_id":"RW"'; do sleep 0.05; done
touch "$2"
until grep -q TaskAborted "$LEASEWAL_WAL"; do sleep 0.05; done`
	listed := filepath.Join(t.TempDir(), "listed")
	cmd := exec.Command(binary(), "run", "--worker", "RW", "--duration", "1h", "-o", "json", "--", "sh", "-c", child, "child", binary(), listed)
	cmd.Env = append(os.Environ(), "LEASEWAL_WAL="+walPath, "NO_COLOR=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the child to see its worker in inspect --workers", func() bool { _, err := os.Stat(listed); return err == nil }, errOut.String)
	if code, _, stderr := run(t, walPath, nil, "abort", "T1", "--reason", "operator"); code != 0 {
		t.Fatal(stderr)
	}
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 3 || !strings.Contains(out.String(), `"outcome":"CANCELLED","exit":0`) ||
		!strings.Contains(errOut.String(), "1 of 1 leases ended LOST or CANCELLED") || strings.Contains(errOut.String(), "stopping its child") {
		t.Fatalf("run: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
}

// TestRunReleasesWhenStopped: a runner stopped by SIGTERM gives its leases
// back instead of failing them or letting them lapse: the task is WAITING
// again at once, with the attempt not counted, and another worker takes it.
func TestRunReleasesWhenStopped(t *testing.T) {
	t.Parallel()
	walPath := filepath.Join(t.TempDir(), "q.wal")
	run(t, walPath, nil, "submit", "--payload", "P", "--max-attempts", "1")
	started := filepath.Join(t.TempDir(), "started")
	cmd := exec.Command(binary(), "run", "--worker", "RW", "--duration", "1h", "-o", "json", "--", "sh", "-c", `touch "$1"; sleep 600`, "child", started)
	cmd.Env = append(os.Environ(), "LEASEWAL_WAL="+walPath, "NO_COLOR=1")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the child to start", func() bool { _, err := os.Stat(started); return err == nil }, errOut.String)
	cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 143 || !strings.Contains(out.String(), `"task_id":"T1","lease_id":"L1","attempt":1,"outcome":"RELEASED"`) {
		t.Fatalf("run: %v\nstdout: %s\nstderr: %s", err, out.String(), errOut.String())
	}
	if code, stdout, stderr := run(t, walPath, nil, "lease", "--worker", "W2", "-o", "json"); code != 0 || !strings.Contains(stdout, `"lease_id":"L2","worker_id":"W2","attempt":1`) {
		t.Fatalf("lease after the release: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, stderr := run(t, walPath, nil, "log", "--type", "LeaseReleased", "-o", "tsv"); code != 0 || !strings.Contains(stdout, "LeaseReleased\tT1\tL1") {
		t.Fatalf("log: exit %d\n%s%s", code, stdout, stderr)
	}
}
