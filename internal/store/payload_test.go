package store_test

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// submitter opens a handle on path whose clock moves a second a command,
// and a submit through it that notes each task's payload in want.
func submitter(t *testing.T, path string, want map[string]string) (*store.Handle, func(payload string, window time.Duration)) {
	writer := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: func(lastAt int64) (int64, error) { return lastAt + 1000, nil }})
	return writer, func(payload string, window time.Duration) {
		t.Helper()
		if err := writer.Write(func(tx *store.Tx) error {
			d, err := tx.State.DecideSubmit(state.Submit{Payload: payload, Window: state.Duration(window), Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
			if err == nil {
				err = tx.Commit(d.Records)
				want[d.TaskID] = payload
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLongPayloadsReadBack: payloads longer than a state holds are held as
// where the WAL has them, and every way back to them gives the text
// submitted: a replay from the start that moves tasks out of memory, the
// handle that wrote them, the index, a lease's answer, a requeue (whose TaskCreated copies a payload the state
// does not hold), and a compacted WAL, whose base holds them in its parts.
func TestLongPayloadsReadBack(t *testing.T) {
	path := t.TempDir() + "/q.wal"
	rng := rand.New(rand.NewPCG(3, 5))
	want := map[string]string{} // task id → payload
	writer, submit := submitter(t, path, want)
	for i := range 400 {
		submit(fmt.Sprintf("%d %s", i, strings.Repeat(string([]rune{'p', 'é', '"', '\\', '\n', '☃'}[rng.IntN(6)]), rng.IntN(2*state.InlinePayloadBytes))), time.Hour)
	}
	held := 0
	check := func(what string, h *store.Handle, counts bool) {
		t.Helper()
		err := h.Read(func(tx *store.Tx) error {
			tasks, err := tx.State.Tasks()
			if err != nil {
				return err
			}
			if len(tasks) != len(want) {
				return fmt.Errorf("%d tasks, want %d", len(tasks), len(want))
			}
			for _, task := range tasks {
				got, err := tx.Payload(task.Payload)
				switch {
				case err != nil:
					return err
				case got != want[task.ID]:
					return fmt.Errorf("%s: payload %.40q…, want %.40q…", task.ID, got, want[task.ID])
				case (task.Payload.Ref() != nil) != (len(got) > state.InlinePayloadBytes):
					return fmt.Errorf("%s: a payload of %d bytes, held as a reference: %v", task.ID, len(got), task.Payload.Ref() != nil)
				case counts && task.Payload.Ref() != nil:
					held++
				}
			}
			return nil
		})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	check("the writer", writer, false)
	check("a replay moving tasks out of memory", store.Open(store.Options{Path: path, LockTimeout: time.Minute, SpillAfter: 17}), true)
	if held == 0 {
		t.Fatal("no payload was held as a reference")
	}

	// A lease answers with its task's payload; a task failed for good and
	// requeued gets its payload copied into a new TaskCreated.
	long := ""
	for id, p := range want {
		if len(p) > state.InlinePayloadBytes && (long == "" || id < long) {
			long = id
		}
	}
	if err := writer.Write(func(tx *store.Tx) error {
		d, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute, TaskID: long}, tx.Now)
		if err != nil {
			return err
		}
		lease, err := answers.Lease(d, tx.Payload)
		if err != nil || lease.Payload != want[long] {
			return fmt.Errorf("the lease on %s answered %.40q (%v)", long, lease.Payload, err)
		}
		if err := tx.Commit(d.Records); err != nil {
			return err
		}
		f, err := tx.State.DecideFail(long, d.LeaseID, "bad", true, tx.Now)
		if err != nil {
			return err
		}
		if err := tx.Commit(f.Records); err != nil {
			return err
		}
		r, err := tx.State.DecideRequeue(long, "", tx.Now)
		if err != nil {
			return err
		}
		if r.Records[0].PayloadAt == nil {
			return fmt.Errorf("the requeue's TaskCreated holds the payload: the test reads nothing back")
		}
		want[r.TaskID] = want[long]
		return tx.Commit(r.Records)
	}); err != nil {
		t.Fatal(err)
	}
	check("after a requeue, a new replay", handle(path, nil), false)

	// The index keeps the references: a replay building it writes them,
	// and the commands after read them from it.
	for i := range 50 {
		submit(fmt.Sprint(i, strings.Repeat("c", 500)), time.Second)
	}
	for range 2 { // the second replays the expiries the first wrote
		building := store.Open(store.Options{Path: path, LockTimeout: time.Minute, SpillAfter: 17, Clock: func(lastAt int64) (int64, error) { return lastAt + 1000, nil }})
		if err := building.Write(func(tx *store.Tx) error {
			d, err := tx.State.DecideExpire(tx.Now)
			return cmp.Or(err, tx.Commit(d.Records))
		}); err != nil {
			t.Fatal(err)
		}
		building.Close()
	}
	if _, ok := store.IndexOf(path); !ok {
		t.Fatalf("no index: the test reads nothing from it (%v)", store.Beside(path))
	}
	held = 0
	check("from the index", handle(path, nil), true)
	if held == 0 {
		t.Fatal("no payload read from the index was held as a reference")
	}
	if _, err := store.Open(store.Options{Path: path, LockTimeout: time.Minute, SpillAfter: 29, Clock: fixedClock(0)}).Compact(keepAll); err != nil {
		t.Fatal(err)
	}
	held = 0
	check("from the compacted WAL's base", store.Open(store.Options{Path: path, LockTimeout: time.Minute, SpillAfter: 31}), true)
	if held == 0 {
		t.Fatal("no payload loaded from the base was held as a reference")
	}
	if code, out, errOut := cli("--wal", path, "verify", "--history"); code != 0 {
		t.Fatalf("verify --history: exit %d %s %s", code, out, errOut)
	}
}

// TestALongPayloadLeasedInTheBatchThatSubmitsIt: a lease decided in the
// same group commit as its task's submit answers with the payload, which
// is then in a frame the batch has staged, not yet written.
func TestALongPayloadLeasedInTheBatchThatSubmitsIt(t *testing.T) {
	h := handle(t.TempDir()+"/q.wal", nil)
	payloads := []string{strings.Repeat("a", 3*state.InlinePayloadBytes), strings.Repeat("b", 2*state.InlinePayloadBytes)}
	for round, payload := range payloads { // into a new WAL, then after the first batch's records
		var got string
		submit := func(payload string, priority int) func(tx *store.Tx) error {
			return func(tx *store.Tx) error {
				d, err := tx.State.DecideSubmit(state.Submit{Payload: payload, Window: state.Duration(time.Hour), Policy: state.RetryPolicy{MaxAttempts: 1}, Priority: priority}, tx.Now)
				if err == nil {
					err = tx.Commit(d.Records)
				}
				return err
			}
		}
		lease := func(tx *store.Tx) error {
			d, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute}, tx.Now)
			if err != nil {
				return err
			}
			l, err := answers.Lease(d, tx.Payload)
			if err == nil {
				got = l.Payload
				err = tx.Commit(d.Records)
			}
			return err
		}
		errs, _, err := h.WriteBatch([]func(*store.Tx) error{submit("later", 0), submit(payload, 1), submit("later", 0), lease})
		if err = errors.Join(append(errs, err)...); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if got != payload {
			t.Fatalf("round %d: the lease answered a payload of %d bytes, want the %d submitted", round, len(got), len(payload))
		}
	}
}

// TestALongPayloadRequeuedInTheBatchThatSubmitsIt: a requeue decided in the
// same group commit as its task's submit copies the payload from the frame
// the batch has staged.
func TestALongPayloadRequeuedInTheBatchThatSubmitsIt(t *testing.T) {
	h := handle(t.TempDir()+"/q.wal", nil)
	payload := strings.Repeat("r", 2*state.InlinePayloadBytes)
	var requeued string
	errs, _, err := h.WriteBatch([]func(*store.Tx) error{func(tx *store.Tx) error {
		d, err := tx.State.DecideSubmit(state.Submit{Payload: payload, Window: state.Duration(time.Hour), Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
		if err == nil {
			err = tx.Commit(d.Records)
		}
		return err
	}, func(tx *store.Tx) error {
		l, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute}, tx.Now)
		if err == nil {
			err = tx.Commit(l.Records)
		}
		if err != nil {
			return err
		}
		f, err := tx.State.DecideFail(l.TaskID, l.LeaseID, "bad", true, tx.Now)
		if err == nil {
			err = tx.Commit(f.Records)
		}
		if err != nil {
			return err
		}
		r, err := tx.State.DecideRequeue(l.TaskID, "", tx.Now)
		if err == nil {
			requeued, err = r.TaskID, tx.Commit(r.Records)
		}
		return err
	}})
	if err = errors.Join(append(errs, err)...); err != nil {
		t.Fatal(err)
	}
	check := handle(h.Path(), nil)
	if err := check.Read(func(tx *store.Tx) error {
		task, err := tx.State.Task(requeued)
		if err != nil {
			return err
		}
		got, err := tx.Payload(task.Payload)
		if err == nil && got != payload {
			err = fmt.Errorf("the requeue %s has a payload of %d bytes, not the %d submitted", requeued, len(got), len(payload))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestABasesPayloadsAreReadPartByPart: the long payloads of a compacted
// WAL's tasks, read in the order the base holds them (as a listing or the
// next compaction reads them), read each part of the base about once,
// rather than the parts a payload lies in once for every payload: the bytes
// read stay within twice the file's size, and every payload is the one
// submitted.
func TestABasesPayloadsAreReadPartByPart(t *testing.T) {
	path := t.TempDir() + "/q.wal"
	want := map[string]string{}
	writer, submit := submitter(t, path, want)
	defer writer.Close()
	for i := range 2000 {
		submit(fmt.Sprintf("%d %s", i, strings.Repeat("x", 4*state.InlinePayloadBytes+i%97)), time.Hour)
	}
	if _, err := writer.Compact(keepAll); err != nil {
		t.Fatal(err)
	}
	got, read, err := store.PayloadsRead(path)
	info, _ := os.Stat(path)
	if err != nil || !maps.Equal(got, want) || read > 2*info.Size() {
		t.Fatalf("%d payloads read (%d wanted, equal: %v), %d bytes of a %d-byte WAL: %v", len(got), len(want), maps.Equal(got, want), read, info.Size(), err)
	}
}

// TestTheGateOfABatchKeepsItsOrder: a batch's records pass the gate on
// every processor, and still the first bad record in order is the one
// refused, with nothing written, and every long payload of a batch that
// passes is read back from the frame it was written at.
func TestTheGateOfABatchKeepsItsOrder(t *testing.T) {
	t.Cleanup(func(n int) func() { return func() { runtime.GOMAXPROCS(n) } }(runtime.GOMAXPROCS(4)))
	path := t.TempDir() + "/q.wal"
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	defer h.Close()
	want := map[string]string{}
	batch := func(round int, bad ...int) error {
		return h.Write(func(tx *store.Tx) error {
			subs := make([]state.Submit, 2000)
			for i := range subs {
				subs[i] = state.Submit{Payload: fmt.Sprintf("%d-%d %s", round, i, strings.Repeat("x", i%(2*state.InlinePayloadBytes))), Policy: state.RetryPolicy{MaxAttempts: 1}, Window: state.Duration(time.Hour)}
			}
			ds, recs, err := tx.State.DecideSubmits(subs, tx.Now)
			if err != nil {
				return err
			}
			for _, i := range bad {
				recs[i].Payload = "not UTF-8 \xff"
			}
			if err := tx.Commit(recs); err != nil {
				return err
			}
			for i, d := range ds {
				want[d.TaskID] = subs[i].Payload
			}
			return nil
		})
	}
	if err := batch(1); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var refused *store.RefusedRecordError
	if err := batch(2, 1500, 700); !errors.As(err, &refused) || refused.Seq != 2000+701 {
		t.Fatalf("a batch with bad records 700 and 1500: %v, want record %d refused", err, 2000+701)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("a refused batch changed the WAL")
	}
	if err := batch(3); err != nil {
		t.Fatal(err)
	}
	reader := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	defer reader.Close()
	if err := reader.Read(func(tx *store.Tx) error {
		tasks, err := tx.State.Tasks()
		if err != nil || len(tasks) != len(want) {
			return fmt.Errorf("%d tasks (%v), want %d", len(tasks), err, len(want))
		}
		for _, task := range tasks {
			if got, err := tx.Payload(task.Payload); err != nil || got != want[task.ID] {
				return fmt.Errorf("%s: payload %.30q… (%v), want %.30q…", task.ID, got, err, want[task.ID])
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
