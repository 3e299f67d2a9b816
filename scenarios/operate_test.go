package scenarios

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/internal/testwait"
)

// TestServeFiresOnTime: a resident server writes a schedule's firings by
// itself, with no other command: each slot once, in order, and a worker
// waiting on the queue through the server takes the task fired.
func TestServeFiresOnTime(t *testing.T) {
	t.Parallel()
	walPath := filepath.Join(t.TempDir(), "q.wal")
	server, url, _ := startServe(t, "--wal", walPath, "serve", "--listen", "127.0.0.1:0")
	defer server.Process.Kill()
	if code, stdout, stderr := run(t, walPath, nil, "--server", url, "schedule", "add", "beat", "--every", "1s", "--", "--payload", "p", "--queue", "beats"); code != 0 {
		t.Fatalf("schedule add: exit %d\n%s%s", code, stdout, stderr)
	}
	fired := func() int {
		b, _ := os.ReadFile(walPath)
		return strings.Count(string(b), `"schedule":"beat","slot"`)
	}
	testwait.Until(t, "the server to fire three slots of beat by itself", func() bool { return fired() >= 3 }, nil)
	code, stdout, stderr := run(t, walPath, nil, "--server", url, "lease", "--worker", "W", "--queue", "beats", "--wait", "1m", "-o", "json")
	if code != 0 || !strings.Contains(stdout, `"payload":"p"`) {
		t.Fatalf("lease --wait: exit %d\n%s%s", code, stdout, stderr)
	}
	server.Process.Kill()
	server.Wait()
	if code, stdout, stderr := run(t, walPath, nil, "verify"); code != 0 {
		t.Fatalf("verify: exit %d\n%s%s", code, stdout, stderr)
	}
	if code, stdout, _ := run(t, walPath, nil, "log", "--type", "TaskCreated", "-o", "tsv"); code != 0 || strings.Count(stdout, "request=beat@") != strings.Count(stdout, "TaskCreated") {
		t.Fatalf("every task is a firing of beat, each slot once:\n%s", stdout)
	}
}

// TestLeaseWaitWakesOnResume: a worker waiting on a paused queue takes its
// task when the queue is resumed, and one waiting on a pause --for wakes at
// its end by itself.
func TestLeaseWaitWakesOnResume(t *testing.T) {
	t.Parallel()
	walPath := filepath.Join(t.TempDir(), "q.wal")
	run(t, walPath, nil, "submit", "--payload", "m", "--queue", "mail")
	run(t, walPath, nil, "pause", "mail")
	cmd := exec.Command(binary(), "lease", "--worker", "W", "--queue", "mail", "--wait", "1h", "-o", "json")
	cmd.Env = append(os.Environ(), "LEASEWAL_WAL="+walPath, "NO_COLOR=1")
	var out bytes.Buffer
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "lease --wait to wait on the WAL", func() bool { return testwait.HoldsInotify(cmd.Process.Pid) }, nil)
	if code, stdout, stderr := run(t, walPath, nil, "resume", "mail"); code != 0 {
		t.Fatalf("resume: exit %d\n%s%s", code, stdout, stderr)
	}
	if err := cmd.Wait(); err != nil || !strings.Contains(out.String(), `"result":"LEASED","task_id":"T1"`) {
		t.Fatalf("lease --wait after the resume: %v %s", err, out.String())
	}

	run(t, walPath, nil, "submit", "--payload", "m2", "--queue", "mail")
	run(t, walPath, nil, "pause", "mail", "--for", "1s")
	code, stdout, stderr := run(t, walPath, nil, "lease", "--worker", "W", "--queue", "mail", "--wait", "1h", "-o", "json")
	if code != 0 || !strings.Contains(stdout, `"task_id":"T2"`) {
		t.Fatalf("lease --wait through a pause --for: exit %d\n%s%s", code, stdout, stderr)
	}
}
