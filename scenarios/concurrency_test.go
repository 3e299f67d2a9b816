package scenarios

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/testwait"
)

// TestLockTimeout: a writer holding the exclusive lock (paused after its
// write by a failpoint) makes other writers and readers wait, and give up with
// exit 6 once --lock-timeout has passed.
func TestLockTimeout(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	run(t, walPath, nil, "submit", "--payload", "P")
	// The holder sleeps far longer than any loaded machine needs for the
	// checks below; it is killed once they are done.
	holder := exec.Command(binary(), "submit", "--payload", "Q")
	holder.Env = append(os.Environ(), "LEASEWAL_WAL="+walPath, "LEASEWAL_FAILPOINT=after-write:sleep="+testwait.HangGuard.String())
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the holder to write its record (it holds the lock from then on)", func() bool {
		wal, _ := os.ReadFile(walPath)
		return strings.Contains(string(wal), `"payload":"Q"`)
	}, nil)
	for _, args := range [][]string{{"lease", "--worker", "W1"}, {"inspect"}} {
		start := time.Now()
		code, out, errOut := run(t, walPath, nil, append(args, "--lock-timeout", "200ms", "-o", "json")...)
		if code != 6 || !strings.Contains(out, `"error":"LockTimeout"`) || !strings.Contains(errOut, "is busy: another leasewal held its lock for the whole 200ms waited") {
			t.Fatalf("%v: exit %d %s %s", args, code, out, errOut)
		}
		if waited := time.Since(start); waited < 200*time.Millisecond {
			t.Fatalf("%v gave up after %s", args, waited)
		}
	}
	holder.Process.Kill()
	holder.Wait()
	if code, out, _ := run(t, walPath, nil, "verify", "-o", "json"); code != 0 || !strings.Contains(out, `"records":2`) {
		t.Fatalf("verify: %d %s", code, out)
	}
}

// TestConcurrentWorkers: many processes lease, complete and submit against one
// WAL at once. The lock serializes them: verify passes, no lease is granted
// twice, and every COMMITTED answer matches a TaskCompleted record.
func TestConcurrentWorkers(t *testing.T) {
	t.Parallel()
	walPath := filepath.Join(t.TempDir(), "q.wal")
	for i := range 20 {
		run(t, walPath, nil, "submit", "--payload", fmt.Sprint("job ", i), "--window", "1h")
	}
	leaseRE := regexp.MustCompile(`"task_id":"(T\d+)","lease_id":"(L\d+)"`)
	var mu sync.Mutex
	committed := map[string]string{} // task -> lease, as workers were told
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 12; i++ {
				code, out, _ := run(t, walPath, nil, "lease", "--worker", fmt.Sprint("W", w), "--duration", "1m", "-o", "json")
				if code == 4 {
					return
				}
				m := leaseRE.FindStringSubmatch(out)
				if code != 0 || m == nil {
					t.Errorf("lease: exit %d %s", code, out)
					return
				}
				if code, out, _ = run(t, walPath, nil, "complete", "--task", m[1], "--lease", m[2], "-o", "json"); code != 0 {
					t.Errorf("complete %s %s: exit %d %s", m[1], m[2], code, out)
					return
				}
				mu.Lock()
				if prev, dup := committed[m[1]]; dup {
					t.Errorf("%s committed twice: %s and %s", m[1], prev, m[2])
				}
				committed[m[1]] = m[2]
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(committed) != 20 {
		t.Fatalf("%d tasks committed, want 20", len(committed))
	}
	data, _ := os.ReadFile(walPath)
	for task, lease := range committed {
		if !bytes.Contains(data, fmt.Appendf(nil, `"type":"TaskCompleted","actor":"crash","task_id":"%s","lease_id":"%s"`, task, lease)) {
			t.Fatalf("COMMITTED %s under %s has no TaskCompleted record", task, lease)
		}
	}
	if code, out, _ := run(t, walPath, nil, "verify", "-o", "json"); code != 0 || !strings.Contains(out, `"COMPLETED":20`) {
		t.Fatalf("verify: %d %s", code, out)
	}
}

// TestActorIsAuditOnly plays the same story under two different actors: the
// WALs differ only in their actor fields.
func TestActorIsAuditOnly(t *testing.T) {
	story := [][]string{
		{"submit", "--payload", "P", "--max-attempts", "2", "--now", t0},
		{"lease", "--worker", "W1", "--now", "+0s"},
		{"fail", "--task", "T1", "--lease", "L1", "--reason", "x", "--now", "+1s"},
		{"lease", "--worker", "W2", "--duration", "5s", "--now", "+1s"},
		{"complete", "--task", "T1", "--lease", "L2", "--now", "+10s"},
		{"worklease", "acquire", "--domain", "D", "--offset", "1", "--now", "+1s"},
		{"worklease", "fail", "--domain", "D", "--token", "K1", "--now", "+1s"},
		{"expire", "--now", "+1m"},
	}
	wals := map[string][]byte{}
	for _, actor := range []string{"alice", "bob@elsewhere:1"} {
		walPath := filepath.Join(t.TempDir(), "q.wal")
		for _, args := range story {
			run(t, walPath, []string{"LEASEWAL_ACTOR=" + actor}, args...)
		}
		data, _ := os.ReadFile(walPath)
		if !bytes.Contains(data, []byte(`"actor":"`+actor+`"`)) {
			t.Fatalf("the actor %q is not recorded", actor)
		}
		wals[actor] = regexp.MustCompile(`(?m)^[0-9a-f]{8} |"actor":"[^"]*",`).ReplaceAll(data, nil)
	}
	if !bytes.Equal(wals["alice"], wals["bob@elsewhere:1"]) {
		t.Fatalf("the actor changed a decision:\n%s\n%s", wals["alice"], wals["bob@elsewhere:1"])
	}
}
