package scenarios

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"leasewal/internal/testwait"
)

// TestServeFiresOnTime: a resident server writes a schedule's firings by
// itself, with no other command: each slot once, in order, and a worker
// waiting on the queue through the server takes the task fired.
func TestServeFiresOnTime(t *testing.T) {
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
