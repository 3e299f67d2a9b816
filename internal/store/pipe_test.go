package store_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/gatedfs"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
	"github.com/leasewal/leasewal/state"
)

// leaseOne and addOne are a batch's decisions: lease the next task to W,
// submit a task.
func leaseOne(leased *[]string) func(tx *store.Tx) error {
	return func(tx *store.Tx) error {
		d, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute}, tx.Now)
		if err != nil {
			return err
		}
		*leased = append(*leased, d.TaskID)
		return tx.Commit(d.Records)
	}
}

func addOne(tx *store.Tx) error {
	d, err := tx.State.DecideSubmit(state.Submit{Payload: "p", Window: state.Duration(time.Minute), Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
	if err != nil {
		return err
	}
	return tx.Commit(d.Records)
}

// TestPipe: in a pipe, a batch is decided on the state that includes the
// batches before it while their fsync has not returned; each flight ends
// once its batch is durable; the WAL stays locked until the pipe closes,
// and then holds every batch.
func TestPipe(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	plain := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0)})
	submit(t, plain, "first") // T1
	fsys := gatedfs.New()
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0), FS: fsys})
	defer h.Close()
	p, err := h.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var leased []string
	told := make(chan [][]state.Record, 1) // the first batch's then: its records, once durable
	_, committed, first, err := p.Batch([]func(*store.Tx) error{leaseOne(&leased), addOne}, func(errs []error, committed [][]state.Record, err error) {
		if err != nil || errs[0] != nil || errs[1] != nil {
			t.Errorf("the first batch's then heard %v, %v", err, errs)
		}
		told <- committed
	})
	if err != nil || len(committed[0]) != 1 || len(committed[1]) != 1 {
		t.Fatalf("the first batch: %v %v", err, committed)
	}
	<-fsys.Syncing // its fsync is under way, and held
	_, _, second, err := p.Batch([]func(*store.Tx) error{leaseOne(&leased)}, nil)
	if err != nil || len(leased) != 2 || leased[1] != "T2" {
		t.Fatalf("the second batch, decided while the first's fsync runs: %v, leased %v (want T1, then the T2 the first created)", err, leased)
	}
	select {
	case <-first.Settled():
		t.Fatal("the first batch settled before its fsync returned")
	default:
	}
	var locked *store.LockTimeoutError
	if err := store.Open(store.Options{Path: path, LockTimeout: 10 * time.Millisecond}).Read(func(*store.Tx) error { return nil }); !errors.As(err, &locked) {
		t.Fatalf("a reader while the pipe holds the WAL: %v, want a lock timeout", err)
	}
	fsys.Gate <- nil // the first fsync returns
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	if heard := <-told; !reflect.DeepEqual(heard, committed) {
		t.Fatalf("the first batch's then heard %v, want %v", heard, committed)
	}
	fsys.Gated.Store(false)
	select {
	case <-fsys.Syncing: // the second's, begun before the gate opened
		fsys.Gate <- nil
	case <-second.Settled():
	}
	if err := second.Wait(); err != nil {
		t.Fatal(err)
	}
	p.Close()
	submit(t, plain, "after") // a local writer gets the lock back
	plain.Close()
	var last int64
	check := store.Open(store.Options{Path: path, LockTimeout: time.Second, Verifier: state.NewVerifier()})
	defer check.Close()
	if err := check.Read(func(tx *store.Tx) error { last = tx.State.LastSeq(); return nil }); err != nil || last != 5 {
		t.Fatalf("the WAL after the pipe: %v, %d records, want 5", err, last)
	}
}

// TestPipeFsyncFails: when a batch's fsync fails, closing the pipe cuts the
// WAL back to what was durable before it, and the batch and every batch
// written after it are answered with the failure, rolled back: none of
// their records is left, none is decided again, and the handle decides on
// the WAL as it is. The pipe takes no batch after the failure
// (ErrPipeStopped: nothing of it decided).
func TestPipeFsyncFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	plain := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0)})
	submit(t, plain, "first") // T1
	plain.Close()
	before, _ := os.ReadFile(path)
	fsys := gatedfs.New()
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0), FS: fsys})
	defer h.Close()
	p, err := h.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	heard := map[string][]error{} // what each batch's then heard, and how often
	then := func(name string) store.Then {
		return func(errs []error, _ [][]state.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			heard[name] = append(heard[name], err)
		}
	}
	_, _, first, err := p.Batch([]func(*store.Tx) error{addOne}, then("the batch whose fsync failed"))
	if err != nil {
		t.Fatal(err)
	}
	<-fsys.Syncing
	_, _, second, err := p.Batch([]func(*store.Tx) error{addOne}, then("the batch written after it"))
	if err != nil {
		t.Fatal(err)
	}
	fsys.Gated.Store(false) // the rollback's own fsync goes through
	fsys.Gate <- errors.New("injected: EIO")
	<-second.Settled()
	if _, _, _, err := p.Batch([]func(*store.Tx) error{addOne}, nil); !errors.Is(err, store.ErrPipeStopped) || !p.Stopped() {
		t.Fatalf("a batch after the failed fsync: %v, want ErrPipeStopped", err)
	}
	p.Close()
	for name, f := range map[string]*store.Flight{"the batch whose fsync failed": first, "the batch written after it": second} {
		var failed *store.AppendError
		if err := f.Wait(); !errors.As(err, &failed) || !failed.RolledBack {
			t.Fatalf("%s: %v, want a rolled-back append error", name, err)
		}
		if len(heard[name]) != 1 || heard[name][0] != f.Wait() { // told once, by the time Close returned
			t.Fatalf("%s: its then heard %v, want once %v", name, heard[name], f.Wait())
		}
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatalf("the WAL was not cut back:\n%s\nwant\n%s", after, before)
	}
	submit(t, h, "again") // decided on the WAL as it is: T2, seq 2
	var last int64
	if err := h.Read(func(tx *store.Tx) error { last = tx.State.LastSeq(); return nil }); err != nil || last != 2 {
		t.Fatalf("after the failure: %v, %d records, want 2", err, last)
	}
}

// TestAPipeSaysWhenToWriteTheIndex: a server under steady load never finds
// its pipe idle, so it closes it when Due says Close would write the index;
// without that, it held every task it decided. Due comes once a batch's
// worth waits (not before, not again at once), and after each Close the
// handle holds less than two batches. The first pipe has no index, so no
// committer, and must come due; a later one's committer writes the index
// as the pipe goes, and a pipe whose committer keeps up never comes due
// (how fast it is depends on the machine): it is closed after 100 batches.
func TestAPipeSaysWhenToWriteTheIndex(t *testing.T) {
	const batch = 300 // SpillAfter: the most tasks a writer holds before it writes the index
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0), Resident: true, SpillAfter: batch})
	defer h.Close()
	fns := make([]func(*store.Tx) error, 50)
	for i := range fns {
		fns[i] = addOne
	}
	inMemory := func() (n int) {
		if err := h.Read(func(tx *store.Tx) error { n = tx.State.HotCount(); return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for closes := 0; closes < 4; {
		// A committer that had not committed when the pipe before closed
		// leaves its tasks in memory: this pipe holds them from its start.
		held, submits := inMemory(), 0
		p, err := h.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		due := false
		for batches := 0; !due && batches < 100; batches++ {
			_, _, f, err := p.Batch(fns, nil)
			if err == nil {
				err = f.Wait()
			}
			if err != nil {
				t.Fatal(err)
			}
			submits += len(fns)
			due = p.Due()
		}
		switch {
		case !due && !p.Committing():
			t.Fatalf("pipe %d, with no committer, held %d submits over %d tasks in memory and never said it was due", closes+1, submits, held)
		case due && held+submits < batch:
			t.Fatalf("pipe %d was due after %d submits over %d tasks in memory: before a batch (%d) was held", closes+1, submits, held, batch)
		}
		p.Close()
		closes++
		if n := inMemory(); n >= 2*batch {
			t.Fatalf("after the pipe's close %d: %d tasks in memory (a batch is %d)", closes, n, batch)
		}
	}
	held := inMemory()
	p, err := h.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if _, _, _, err := p.Batch(fns, nil); err != nil || p.Due() && held+len(fns) < batch {
		t.Fatalf("due again at once after a close, over %d tasks in memory (%v)", held, err)
	}
}

// committingPipe opens h's pipe, which must have a committer, and a close
// of it that closes it once, however often called.
func committingPipe(t *testing.T, h *store.Handle) (*store.Pipe, func()) {
	t.Helper()
	p, err := h.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	closePipe := func() { once.Do(p.Close) }
	if !p.Committing() {
		closePipe()
		t.Fatal("a resident handle's pipe over an index has no committer")
	}
	return p, closePipe
}

// TestAServerWritesTheIndexOffItsRequestPath: while a server's pipe holds
// the WAL, a committer follows what it made durable and writes the index,
// and the pipe decides on the state the committer prepared from then on
// (its own tasks in memory let go). The WAL it writes so is byte for byte
// the one a writer holding every task in memory writes for the same
// requests, and after it every handle answers as a full replay does.
func TestAServerWritesTheIndexOffItsRequestPath(t *testing.T) {
	dir := t.TempDir()
	path := backlogWAL(t, dir, 3000, 1000)
	stateOf(t, path) // the index, built
	twin := copyOf(t, path)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	fsys := gatedfs.New()
	fsys.Gated.Store(false)
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(now), Resident: true, FS: fsys})
	defer h.Close()
	full := store.Open(store.Options{Path: twin, LockTimeout: time.Minute, Clock: fixedClock(now), FullReplay: true})
	defer full.Close()
	var leased, twinLeased []string
	batch := func(leased *[]string) []func(*store.Tx) error {
		return []func(*store.Tx) error{addOne, leaseOne(leased), addOne, leaseOne(leased), addOne}
	}
	p, closePipe := committingPipe(t, h)
	defer closePipe()
	for range 3 {
		for range 40 {
			_, _, f, err := p.Batch(batch(&leased), nil)
			if err == nil {
				err = f.Wait()
			}
			if _, _, werr := full.WriteBatch(batch(&twinLeased)); err != nil || werr != nil {
				t.Fatal(err, werr)
			}
		}
		if err := p.WaitCommitted(int(p.LastSeq())); err != nil {
			t.Fatal(err)
		}
		// Records after the commit, their fsync held so that no commit takes
		// them: the first batch takes the committer's state once written, and
		// applies its own records to it.
		fsys.Gated.Store(true)
		for range 2 {
			_, _, _, err := p.Batch(batch(&leased), nil)
			if _, _, werr := full.WriteBatch(batch(&twinLeased)); err != nil || werr != nil {
				t.Fatal(err, werr)
			}
		}
		hot := p.HotCount()
		fsys.Gated.Store(false)
		<-fsys.Syncing
		fsys.Gate <- nil
		if hot == 0 || hot > 2*5 {
			t.Fatalf("after taking the committer's state, the pipe holds %d tasks in memory, not those of the last 2 batches", hot)
		}
	}
	closePipe()
	if !bytes.Equal(mustRead(t, path), mustRead(t, twin)) {
		t.Fatal("the WAL written over the committer's states differs from the one a writer holding every task wrote")
	}
	if want := replayedAnswers(t, path, now); answersAt(t, path, now, false, store.Options{}) != want {
		t.Fatal("from the index the committer wrote, a new handle answers differently from a full replay")
	}
	if count, ok := store.IndexOf(path); !ok || count < bytes.Count(mustRead(t, path), []byte("\n"))-1-2*5 {
		t.Fatalf("the committer's index holds %d records (%v): not all but the last batches'", count, ok)
	}
}

// TestACopyIsWrittenOnlyOnceDurable: a server's committer writes what the
// pipe copied only once the WAL is durable up to it. A copy taken while its
// batch's fsync is held waits; when that fsync fails, the pipe cuts the WAL
// back and the copy is never written (the index holds no record the WAL
// does not); when it succeeds, the same copy is written.
func TestACopyIsWrittenOnlyOnceDurable(t *testing.T) {
	path := backlogWAL(t, t.TempDir(), 3000, 1000)
	stateOf(t, path) // the index, built
	fsys := gatedfs.New()
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(t0 + 400*86_400_000), Resident: true, FS: fsys})
	defer h.Close()
	var leased []string
	batch := []func(*store.Tx) error{addOne, leaseOne(&leased), addOne}
	for _, fails := range []bool{true, false} {
		fsys.Gated.Store(false)
		p, closePipe := committingPipe(t, h)
		defer closePipe()
		_, _, f, err := p.Batch(batch, nil)
		if err == nil {
			err = f.Wait()
		}
		if err == nil {
			err = p.WaitCommitted(int(p.LastSeq()))
		}
		if err != nil {
			closePipe()
			t.Fatal(err)
		}
		durable := p.IndexedBy()
		fsys.Gated.Store(true)
		if _, _, f, err = p.Batch(batch, nil); err != nil {
			closePipe()
			t.Fatal(err)
		}
		waiting := p.CaptureWatched()
		<-fsys.Syncing
		select {
		case <-waiting:
		case <-time.After(2 * time.Minute):
			t.Fatal("the committer did not look at what the WAL has made durable in 2 minutes after a copy past it")
		}
		if got := p.IndexedBy(); got != durable {
			t.Fatalf("with the fsync held, the committer wrote the index up to record %d, past the %d made durable", got, durable)
		}
		if fails {
			fsys.Gate <- errors.New("injected: EIO")
			fsys.Gated.Store(false)
			closePipe() // it cuts the WAL back, and answers the batch
			if err := f.Wait(); err == nil {
				t.Fatal("a batch whose fsync failed was answered durable")
			}
			if n, ok := store.IndexOf(path); !ok || n != durable || n != walRecords(t, path) {
				t.Fatalf("after a failed fsync the index holds %d records (loads: %v), the WAL %d; want %d", n, ok, walRecords(t, path), durable)
			}
			continue
		}
		fsys.Gated.Store(false)
		fsys.Gate <- nil
		err = f.Wait()
		if err == nil {
			err = p.WaitCommitted(int(p.LastSeq()))
		}
		records := int(p.LastSeq())
		closePipe()
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := store.IndexOf(path); !ok || n != records || n != walRecords(t, path) {
			t.Fatalf("once durable, the index holds %d records (loads: %v), the WAL %d; want %d", n, ok, walRecords(t, path), records)
		}
	}
	now := t0 + 401*86_400_000
	if got, want := answersAt(t, path, now, false, store.Options{}), replayedAnswers(t, path, now); got != want {
		t.Fatal("from the index the committer wrote, a new handle answers differently from a full replay")
	}
}

// TestAStoppedPipeHandsItsCommitterNothing: a record the state refuses
// after the gate passed it (a decision that broke a rule) may leave the
// pipe's state half changed: the pipe stops, and hands its committer no
// copy of that state, which the index would hold as the truth; the records
// before it stand, and the next command answers as a full replay.
func TestAStoppedPipeHandsItsCommitterNothing(t *testing.T) {
	path := backlogWAL(t, t.TempDir(), 3000, 1000)
	stateOf(t, path) // the index, built
	now := t0 + 400*86_400_000
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(now), Resident: true})
	defer h.Close()
	p, closePipe := committingPipe(t, h)
	defer closePipe()
	_, _, f, err := p.Batch([]func(*store.Tx) error{addOne}, nil)
	if err == nil {
		err = f.Wait()
	}
	if err == nil {
		err = p.WaitCommitted(int(p.LastSeq()))
	}
	if err != nil {
		t.Fatal(err)
	}
	if p.CaptureNow() {
		t.Fatal("a pipe with nothing new handed its committer a copy")
	}
	refused := func(tx *store.Tx) error { // well formed, and about a task no record created
		return tx.Commit([]state.Record{{Type: state.TaskCompleted, TaskID: "T999999", LeaseID: "L999999"}})
	}
	errs, _, f, err := p.Batch([]func(*store.Tx) error{addOne, refused}, nil)
	var refusal *store.RefusedRecordError
	if err != nil || !errors.As(errs[1], &refusal) || !p.Stopped() {
		t.Fatalf("a record the state refuses: batch %v, its operation %v, pipe stopped %v", err, errs[1], p.Stopped())
	}
	if err := f.Wait(); err != nil {
		t.Fatal(err)
	}
	if p.CaptureNow() {
		t.Fatal("a pipe that stopped on a record its state refused handed that state to its committer")
	}
	closePipe()
	if got, want := answersAt(t, path, now, false, store.Options{}), replayedAnswers(t, path, now); got != want {
		t.Fatal("after a pipe stopped on a refused record, a new handle answers differently from a full replay")
	}
}

// TestAPipeSeesWhoWaits: a pipe that holds the WAL sees a local writer, and
// a local reader, that wait for its lock (each holds the turnstile while it
// waits: the pipe created it, else a reader would not queue in it), and
// nothing else: the server closes the pipe for them instead of waiting to
// be idle.
func TestAPipeSeesWhoWaits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	plain := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0)})
	submit(t, plain, "first")
	plain.Close()
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0), Resident: true})
	defer h.Close()
	for _, waiter := range []struct {
		name string
		wait func(*store.Handle) error
	}{
		{"reader", func(l *store.Handle) error { return l.Read(func(*store.Tx) error { return nil }) }},
		{"writer", func(l *store.Handle) error { return l.Write(addOne) }},
	} {
		p, err := h.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		if p.Wanted() {
			t.Fatalf("before the %s: the pipe says someone waits", waiter.name)
		}
		local := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(t0)})
		done := make(chan error, 1)
		go func() { done <- waiter.wait(local) }()
		testwait.UntilLockWaiters(t, path, 1)
		if !p.Wanted() {
			t.Fatalf("the pipe does not see the %s that waits for the WAL", waiter.name)
		}
		p.Close()
		if err := <-done; err != nil {
			t.Fatalf("the %s, once the pipe closed: %v", waiter.name, err)
		}
		local.Close()
	}
}

// TestAPipeDecidesEachBatchAtItsTime: a pipe lives as long as requests keep
// coming, so each batch reads the clock: a lease granted 30 s into the pipe
// is stamped, and lapses, 30 s later than one granted at its start.
func TestAPipeDecidesEachBatchAtItsTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	var now atomic.Int64
	now.Store(t0)
	clock := func(lastAt int64) (int64, error) { return max(now.Load(), lastAt), nil }
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: clock, Resident: true})
	defer h.Close()
	submit(t, h, "a")
	submit(t, h, "b")
	p, err := h.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var leased []string
	var stamped []int64
	const later = 30_000 // within the tasks' window of a minute
	for _, at := range []int64{t0, t0 + later} {
		now.Store(at)
		errs, committed, f, err := p.Batch([]func(*store.Tx) error{leaseOne(&leased)}, nil)
		if err == nil {
			err = errors.Join(errs[0], f.Wait())
		}
		if err != nil || len(committed[0]) != 1 {
			t.Fatalf("the batch at %d: %v %v", at, err, committed)
		}
		stamped = append(stamped, committed[0][0].At)
	}
	if stamped[0] != t0 || stamped[1] != t0+later {
		t.Fatalf("the leases were stamped at %v; want %d and %d ms later", stamped, t0, later)
	}
}

// TestAServerWritesAnEndsDependentsAChunkAtATime: a server's pipe, and its
// committer after it, apply an end that many tasks in the index wait for a
// chunk at a time, and the pipe leases the tasks it released; the index
// they leave answers as a full replay does, and says it holds every record,
// the last end's too, which the pipe closed before the committer took.
func TestAServerWritesAnEndsDependentsAChunkAtATime(t *testing.T) {
	const each, chunk = 150, 64
	path, leases := dependentsWAL(t, each, chunk)
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(t0 + 400*86_400_000), Resident: true, SpillAfter: chunk})
	defer h.Close()
	p, closePipe := committingPipe(t, h)
	defer closePipe()
	var leased []string
	for i, fns := range [][]func(*store.Tx) error{
		{func(tx *store.Tx) error { return endOf(tx, "ok", leases["ok"]) }, leaseOne(&leased)},
		{func(tx *store.Tx) error { return endOf(tx, "bad", leases["bad"]) }, leaseOne(&leased)},
	} {
		errs, _, f, err := p.Batch(fns, nil)
		if err == nil {
			err = errors.Join(errs[0], errs[1], f.Wait())
		}
		if hot := p.HotCount(); hot >= chunk {
			t.Errorf("after an end that %d tasks wait for, the pipe holds %d tasks in memory: they were not written a chunk at a time", each, hot)
		}
		if err == nil && i == 0 {
			err = p.WaitCommitted(int(p.LastSeq()))
		}
		if err != nil {
			closePipe()
			t.Fatal(err)
		}
	}
	closePipe()
	if len(leased) != 2 || leased[0] == leased[1] {
		t.Fatalf("the pipe leased %v after the ends; want two tasks they released", leased)
	}
	now := t0 + 401*86_400_000
	if got, want := answersAt(t, path, now, false, store.Options{}), replayedAnswers(t, path, now); got != want {
		t.Fatal("from the index the committer wrote a chunk at a time, a new handle answers differently from a full replay")
	}
	if n, ok := store.IndexOf(path); !ok || n != walRecords(t, path) {
		t.Fatalf("the index holds %d records (loads: %v), the WAL %d", n, ok, walRecords(t, path))
	}
}

// TestAServerMeetingADamagedFreelistBuildsTheIndexAgain: an index whose
// freelist page is damaged reads well, but bbolt's open for writing
// panics on it. A server's pipe that meets it removes it (as a one-shot
// writer does), decides on the WAL, and leaves an index the next command
// trusts; it never waits on a lock its own failed open left.
func TestAServerMeetingADamagedFreelistBuildsTheIndexAgain(t *testing.T) {
	dir := t.TempDir()
	path := backlogWAL(t, dir, 3000, 1000)
	stateOf(t, path) // the index, built
	zeroFreelist(t, path+".index")
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	var warnings []string
	var mu sync.Mutex
	warn := func(s string) { mu.Lock(); warnings = append(warnings, s); mu.Unlock() }
	done := make(chan error, 1)
	go func() {
		h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(now), Resident: true, Warn: warn})
		defer h.Close()
		p, err := h.Pipe()
		if err != nil {
			done <- err
			return
		}
		var leased []string
		for range 20 {
			_, _, f, err := p.Batch([]func(*store.Tx) error{addOne, leaseOne(&leased)}, nil)
			if err == nil {
				err = f.Wait()
			}
			if err != nil {
				p.Close()
				done <- err
				return
			}
		}
		p.Close()
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute): // a hang guard
		t.Fatal("the server's pipe over an index with a damaged freelist still runs after 3 minutes: waiting on the index's lock?")
	}
	mu.Lock()
	said := strings.Join(warnings, "\n")
	mu.Unlock()
	if !strings.Contains(said, "damaged") {
		t.Errorf("nothing said of the damaged index; the warnings:\n%s", said)
	}
	if want := replayedAnswers(t, path, now); answersAt(t, path, now, false, store.Options{}) != want {
		t.Error("after the server, a command answers differently from a full replay")
	}
	if _, ok := store.IndexOf(path); !ok {
		t.Error("after the server, there is no index the next command trusts")
	}
}

// zeroFreelist zeroes the page bbolt's newest meta names as its freelist.
func zeroFreelist(t *testing.T, path string) {
	t.Helper()
	b := mustRead(t, path)
	// A meta page: its page header (16 bytes), then magic, version, page
	// size, flags (4 each), the root bucket (16), the freelist's page and
	// the page count (8 each), the transaction id (8).
	pageSize := int(binary.LittleEndian.Uint32(b[16+8:]))
	meta := func(page int) (freelist, txid uint64) {
		m := b[page*pageSize+16:]
		return binary.LittleEndian.Uint64(m[32:]), binary.LittleEndian.Uint64(m[48:])
	}
	f0, tx0 := meta(0)
	f1, tx1 := meta(1)
	freelist := f0
	if tx1 > tx0 {
		freelist = f1
	}
	if freelist < 2 || (int(freelist)+1)*pageSize > len(b) {
		t.Fatalf("the meta names page %d as the freelist, in a file of %d bytes", freelist, len(b))
	}
	clear(b[int(freelist)*pageSize : int(freelist+1)*pageSize])
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestBatchAlone: with nothing in flight, BatchAlone fsyncs its batch
// itself and returns it settled, its then heard; behind a batch whose
// fsync is under way it queues its own behind it, as Batch does, and both
// settle in order; an fsync of its own that fails stops the pipe, and
// Close cuts the WAL back and answers the batch with the failure.
func TestBatchAlone(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	plain := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0)})
	submit(t, plain, "first") // T1
	plain.Close()
	fsys := gatedfs.New()
	fsys.Gated.Store(false)
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0), FS: fsys})
	defer h.Close()
	p, err := h.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	var heard atomic.Int32
	_, _, alone, err := p.BatchAlone([]func(*store.Tx) error{addOne}, func([]error, [][]state.Record, error) { heard.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-alone.Settled():
	default:
		t.Fatal("BatchAlone returned with nothing in flight before its batch settled")
	}
	if err := alone.Wait(); err != nil || heard.Load() != 1 || p.LastSeq() != 2 {
		t.Fatalf("the batch alone: %v, then heard %d times, durable up to %d (want nil, 1, 2)", err, heard.Load(), p.LastSeq())
	}

	fsys.Gated.Store(true)
	_, _, first, err := p.Batch([]func(*store.Tx) error{addOne}, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-fsys.Syncing // the syncer's fsync of the first, held
	type written struct {
		f   *store.Flight
		err error
	}
	alongside := func() <-chan written {
		done := make(chan written, 1)
		go func() {
			_, _, f, err := p.BatchAlone([]func(*store.Tx) error{addOne}, nil)
			done <- written{f, err}
		}()
		return done
	}
	var behind written
	select {
	case behind = <-alongside():
	case <-fsys.Syncing: // only this batch's own fsync can begin while the first's is held
		t.Fatal("a batch behind one in flight began an fsync of its own")
	}
	if behind.err != nil {
		t.Fatal(behind.err)
	}
	select {
	case <-behind.f.Settled():
		t.Fatal("a batch behind one in flight settled before the fsync under way returned")
	default:
	}
	fsys.Gated.Store(false)
	fsys.Gate <- nil
	if err := first.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := behind.f.Wait(); err != nil || p.LastSeq() != 4 {
		t.Fatalf("the batch behind: %v, durable up to %d (want 4)", err, p.LastSeq())
	}

	// The syncer answers a run before it counts it off: a batch alone
	// before then would be handed to it rather than fsynced where it came.
	testwait.Until(t, "the syncer to count off the batches it answered", func() bool { return p.InFlight() == 0 }, func() string {
		return fmt.Sprint(p.InFlight(), " in flight")
	})
	before, _ := os.ReadFile(path)
	fsys.Gated.Store(true)
	done := alongside()
	<-fsys.Syncing          // its own fsync, on BatchAlone's goroutine
	fsys.Gated.Store(false) // the rollback's own fsync goes through
	fsys.Gate <- errors.New("injected: EIO")
	w := <-done
	if w.err != nil || !p.Stopped() {
		t.Fatalf("a batch alone whose fsync failed: %v, pipe stopped %v (want it written and the pipe stopped)", w.err, p.Stopped())
	}
	p.Close()
	var failed *store.AppendError
	if err := w.f.Wait(); !errors.As(err, &failed) || !failed.RolledBack {
		t.Fatalf("the batch whose own fsync failed: %v, want a rolled-back append error", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatalf("the WAL was not cut back:\n%s\nwant\n%s", after, before)
	}
}
