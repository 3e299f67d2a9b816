package cmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/wal"
)

// Hand-made WALs that break one invariant each, with valid checksums: verify
// must exit 5 naming the invariant and the record. The files in testdata/bad
// are rebuilt from these bodies (LEASEWAL_UPDATE_GOLDEN=1 rewrites them).

const (
	created1 = `{"seq":%d,"at":1767225600000,"type":"TaskCreated","task_id":"T1","payload":"P","window":"5m0s","retry_policy":{"max_attempts":1,"backoff":"0s","backoff_max":"0s"},"request_id":"R1"}`
	created2 = `{"seq":%d,"at":1767225600000,"type":"TaskCreated","task_id":"T2","payload":"P","window":"5m0s","retry_policy":{"max_attempts":1,"backoff":"0s","backoff_max":"0s"},"request_id":"R2"}`
	grant    = `{"seq":%d,"at":%d,"type":"LeaseGranted","task_id":"%s","lease_id":"%s","worker_id":"W1","attempt":%d,"expiry":%d}`
	acquire  = `{"seq":%d,"at":1767225600000,"type":"WorkAcquired","domain":"orders","offset":%d,"token":"%s"}`
	enqueue  = `{"seq":%d,"at":1767225600000,"type":"WorkEnqueued","domain":"orders","offset":%d}`
	succeed  = `{"seq":%d,"at":1767225600000,"type":"WorkSucceeded","domain":"orders","offset":%d,"token":"%s","acquired_at":%d%s}`
)

var badWALs = []struct {
	name      string
	bodies    []string
	seq       int64
	invariant string
}{
	{"task_inv1_two_current_leases", []string{f(created1, 1), f(grant, 2, t0ms, "T1", "L1", 1, t0ms+30000), f(grant, 3, t0ms+1000, "T1", "L2", 2, t0ms+31000)}, 3, "invariant 1"},
	{"task_inv1_lease_of_another_task", []string{f(created1, 1), f(created2, 2), f(grant, 3, t0ms, "T1", "L1", 1, t0ms+30000),
		`{"seq":4,"at":1767225601000,"type":"TaskCompleted","task_id":"T2","lease_id":"L1"}`}, 4, "invariant 1"},
	{"task_inv3_terminal_transition", []string{f(created1, 1), f(grant, 2, t0ms, "T1", "L1", 1, t0ms+30000),
		`{"seq":3,"at":1767225601000,"type":"TaskCompleted","task_id":"T1","lease_id":"L1"}`,
		`{"seq":4,"at":1767225602000,"type":"TaskFailed","task_id":"T1","lease_id":"L1","reason":"late"}`}, 4, "invariant 3"},
	{"task_inv4_attempt_skipped", []string{f(created1, 1), f(grant, 2, t0ms, "T1", "L1", 2, t0ms+30000)}, 2, "invariant 4"},
	{"task_inv5_seq_gap", []string{f(created1, 1), f(created2, 3)}, 2, "invariant 5"},
	{"task_inv5_time_backwards", []string{f(created1, 1), f(grant, 2, t0ms-1, "T1", "L1", 1, t0ms+30000)}, 2, "invariant 5"},
	{"task_inv5_lease_id_reused", []string{f(created1, 1), f(created2, 2), f(grant, 3, t0ms, "T1", "L1", 1, t0ms+30000), f(grant, 4, t0ms, "T2", "L1", 1, t0ms+30000)}, 4, "invariant 5"},
	{"work_inv1_two_in_flight", []string{f(acquire, 1, 1, "K1"), f(acquire, 2, 2, "K2")}, 2, "work invariant 1"},
	{"work_inv2_current_offset_queued", []string{f(acquire, 1, 1, "K1"), f(enqueue, 2, 1)}, 2, "work invariant 2"},
	{"work_inv3_non_head_acquired", []string{f(acquire, 1, 1, "K1"), f(enqueue, 2, 2), f(enqueue, 3, 3), f(succeed, 4, 1, "K1", t0ms, `,"hint":2`), f(acquire, 5, 3, "K2")}, 5, "work invariant 3"},
	{"work_inv4_processed_reacquired", []string{f(acquire, 1, 1, "K1"), f(succeed, 2, 1, "K1", t0ms, ""), f(acquire, 3, 1, "K2")}, 3, "work invariant 4"},
	{"work_inv5_wrong_token", []string{f(acquire, 1, 1, "K1"), f(succeed, 2, 1, "K2", t0ms, "")}, 2, "work invariant 5"},
	{"work_inv6_replaced_lease_record", []string{f(acquire, 1, 1, "K1"), f(succeed, 2, 1, "K1", t0ms+5000, "")}, 2, "work invariant 6"},
}

const t0ms = int64(1767225600000)

func f(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func TestBadWALs(t *testing.T) {
	update := os.Getenv("LEASEWAL_UPDATE_GOLDEN") == "1"
	for _, c := range badWALs {
		t.Run(c.name, func(t *testing.T) {
			built := filepath.Join(t.TempDir(), c.name+".wal")
			l, err := wal.Create(built, []byte(c.bodies[0]), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, b := range c.bodies[1:] {
				if _, err := l.Append([]byte(b)); err != nil {
					t.Fatal(err)
				}
			}
			l.Close()
			golden := filepath.Join("..", "testdata", "bad", c.name+".wal")
			data, _ := os.ReadFile(built)
			if update {
				writeGolden(t, golden, data)
			}
			if want, _ := os.ReadFile(golden); !bytes.Equal(data, want) {
				t.Fatalf("%s is out of date; rerun with LEASEWAL_UPDATE_GOLDEN=1", golden)
			}
			code, out, _ := cli("--wal", golden, "verify", "-o", "json")
			var e errorView
			if err := json.Unmarshal([]byte(out), &e); err != nil || code != ExitDamaged {
				t.Fatalf("exit %d: %s", code, out)
			}
			if e.Seq == nil || *e.Seq != c.seq || !strings.Contains(e.Message, "["+c.invariant+":") {
				t.Fatalf("want record %d and %q, got %s", c.seq, c.invariant, out)
			}
		})
	}
}
