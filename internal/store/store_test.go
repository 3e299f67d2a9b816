package store_test

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// countingFS counts the WAL's writes and fsyncs, and fails what it is told to.
type countingFS struct {
	store.OS
	mu                sync.Mutex
	writes, syncs     int
	failWriteFile     func(path string) bool
	failKeep          bool
	keepAttempts      int
	writeFileAttempts map[string]int
}

func (c *countingFS) WAL(s wal.Storage) wal.Storage { return &countingStorage{Storage: s, fs: c} }

func (c *countingFS) WriteFile(path string, data []byte) error {
	return c.WriteStream(path, func(w io.Writer) error { _, err := w.Write(data); return err })
}

func (c *countingFS) WriteStream(path string, write func(io.Writer) error) error {
	c.mu.Lock()
	if c.writeFileAttempts == nil {
		c.writeFileAttempts = map[string]int{}
	}
	c.writeFileAttempts[filepath.Base(path)]++
	c.mu.Unlock()
	if c.failWriteFile != nil && c.failWriteFile(path) {
		return errors.New("injected: disk full")
	}
	return c.OS.WriteStream(path, write)
}

func (c *countingFS) Keep(name string, src io.Reader) error {
	c.keepAttempts++
	if c.failKeep {
		return errors.New("injected: cannot save")
	}
	return c.OS.Keep(name, src)
}

type countingStorage struct {
	wal.Storage
	fs *countingFS
}

func (s *countingStorage) WriteAt(p []byte, off int64) (int, error) {
	s.fs.writes++
	return s.Storage.WriteAt(p, off)
}

func (s *countingStorage) Sync() error {
	s.fs.syncs++
	return s.Storage.Sync()
}

const t0 = int64(1767225600000)

func fixedClock(at int64) store.Clock {
	return func(lastAt int64) (int64, error) { return max(at, lastAt), nil }
}

func submit(t *testing.T, h *store.Handle, payload string) {
	t.Helper()
	err := h.Write(func(tx *store.Tx) error {
		d, err := tx.State.DecideSubmit(state.Submit{Payload: payload, Window: state.Duration(time.Minute), Policy: state.RetryPolicy{MaxAttempts: 2}}, tx.Now)
		if err != nil {
			return err
		}
		return tx.Commit(d.Records)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestOneWriteOneFsyncPerCommand: every record a command decides goes to the
// WAL in one write, made durable by one fsync (revision 1's expire fsynced
// per record, so a failure on the second left the first behind).
func TestOneWriteOneFsyncPerCommand(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	fsys := &countingFS{}
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0), FS: fsys})
	defer h.Close()
	for i := range 3 {
		submit(t, h, fmt.Sprint("p", i))
	}
	for _, id := range []string{"T1", "T2", "T3"} {
		if err := h.Write(func(tx *store.Tx) error {
			d, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Second, TaskID: id}, tx.Now)
			if err != nil {
				return err
			}
			return tx.Commit(d.Records)
		}); err != nil {
			t.Fatal(err)
		}
	}
	fsys.writes, fsys.syncs = 0, 0
	var committed int
	h2 := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0 + 120_000), FS: fsys})
	defer h2.Close()
	err := h2.Write(func(tx *store.Tx) error {
		d, err := tx.State.DecideExpire(tx.Now)
		if err != nil {
			return err
		}
		if err := tx.Commit(d.Records); err != nil {
			return err
		}
		committed = len(tx.Committed)
		return nil
	})
	if err != nil || committed != 6 { // each lease lapses at +30s, and the window closes at +60s: LeaseExpired, TaskDead
		t.Fatalf("expire: %d records, %v", committed, err)
	}
	if fsys.writes != 1 || fsys.syncs != 1 {
		t.Fatalf("expire of %d records made %d writes and %d fsyncs of the WAL; want 1 and 1", committed, fsys.writes, fsys.syncs)
	}
}

// TestIndexFailuresNeverFailAnOperation: the index is derived state; where
// it cannot be written (its name taken by a directory), each write is a
// warning at most, the operation stands, and every handle answers as a
// full replay does.
func TestIndexFailuresNeverFailAnOperation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	if err := os.Mkdir(path+store.IndexSuffix, 0o700); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	ticking := func(lastAt int64) (int64, error) { return max(t0, lastAt+1000), nil }
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: ticking, Warn: func(msg string) { warnings = append(warnings, msg) }})
	defer h.Close()
	for i := range store.IndexAfter + 2*store.IndexTail { // past the index's rules; tasks die at once, so finished ones pile up
		if err := h.Write(func(tx *store.Tx) error {
			d, err := tx.State.DecideSubmit(state.Submit{Payload: fmt.Sprint("p", i), Window: state.Duration(time.Millisecond), Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
			if err != nil {
				return err
			}
			if err := tx.Commit(d.Records); err != nil {
				return err
			}
			d, err = tx.State.DecideExpire(tx.Now) // the task before is DEAD now
			return cmp.Or(err, tx.Commit(d.Records))
		}); err != nil {
			t.Fatalf("operation %d failed because the index could not be written: %v", i, err)
		}
	}
	if len(warnings) == 0 {
		t.Fatal("no warning that the index could not be written")
	}
	now := t0 + int64(48*time.Hour/time.Millisecond)
	want := replayedAnswers(t, path, now)
	for _, writing := range []bool{false, true} {
		if got := answersAt(t, path, now, writing, store.Options{}); got != want {
			t.Fatalf("writing %v: without an index, a command answers differently from a full replay", writing)
		}
	}
}

// must cut appends nothing and says why; the WAL is as it was.
func TestTornTailKeepsakeFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0)})
	submit(t, h, "p")
	h.Close()
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`0badc0de {"seq":2,"ty`)
	f.Close()
	before, _ := os.ReadFile(path)
	fsys := &countingFS{failKeep: true}
	h = store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0), FS: fsys})
	defer h.Close()
	err := h.Write(func(tx *store.Tx) error {
		d, _ := tx.State.DecideSubmit(state.Submit{Payload: "q", Window: state.Duration(time.Minute), Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
		return tx.Commit(d.Records)
	})
	after, _ := os.ReadFile(path)
	if err == nil || !strings.Contains(err.Error(), "saving the torn tail") || string(after) != string(before) || fsys.keepAttempts == 0 {
		t.Fatalf("err %v, %d keep attempts, WAL changed: %v", err, fsys.keepAttempts, string(after) != string(before))
	}
}

// TestLongLivedHandleCatchesUp: a handle used for many operations reads only
// what others appended since its last position, and its state stays what a
// full replay gives; a WAL replaced under it is read afresh.
func TestLongLivedHandleCatchesUp(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	var seen []int64
	long := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0)})
	defer long.Close()
	other := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0)})
	defer other.Close()
	for i := range 5 {
		submit(t, long, fmt.Sprint("a", i))
		submit(t, other, fmt.Sprint("b", i))
	}
	counting := store.Open(store.Options{Path: path, LockTimeout: time.Second, FullReplay: true, OnRecord: func(r state.Record, _ *store.Tx) error {
		seen = append(seen, r.Seq)
		return nil
	}})
	defer counting.Close()
	if err := counting.Read(func(*store.Tx) error { return nil }); err != nil || len(seen) != 10 {
		t.Fatalf("full replay saw %v, %v", seen, err)
	}
	var last int64
	long.Read(func(tx *store.Tx) error { last = tx.State.LastSeq(); return nil })
	if last != 10 {
		t.Fatalf("the long-lived handle is at seq %d, want 10", last)
	}
	// Replace the WAL with a shorter one: the handle's position is stale.
	replacement := filepath.Join(filepath.Dir(path), "new.wal")
	h := store.Open(store.Options{Path: replacement, LockTimeout: time.Second, Clock: fixedClock(t0)})
	submit(t, h, "x")
	h.Close()
	if err := os.Rename(replacement, path); err != nil {
		t.Fatal(err)
	}
	long.Read(func(tx *store.Tx) error { last = tx.State.LastSeq(); return nil })
	if last != 1 {
		t.Fatalf("after the WAL was replaced the handle is at seq %d, want 1", last)
	}
}

// TestReplacedWhileWaitingForTheLock: a WAL replaced by rename while a writer
// waits for its lock (an operator restoring a backup) is never written behind
// the new file's back: the waiting writer starts over on the new file, and no
// lease id is granted twice.
func TestReplacedWhileWaitingForTheLock(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "q.wal")
	setup := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0)})
	submit(t, setup, "p")
	setup.Close()
	backup, _ := os.ReadFile(path)

	lease := func(h *store.Handle, hold chan struct{}, held chan<- struct{}) (string, error) {
		var id string
		err := h.Write(func(tx *store.Tx) error {
			if held != nil {
				close(held)
				<-hold
			}
			d, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute}, tx.Now)
			if err != nil {
				return err
			}
			id = d.LeaseID
			return tx.Commit(d.Records)
		})
		return id, err
	}
	first := store.Open(store.Options{Path: path, LockTimeout: testwait.HangGuard, Clock: fixedClock(t0)})
	defer first.Close()
	second := store.Open(store.Options{Path: path, LockTimeout: testwait.HangGuard, Clock: fixedClock(t0)})
	defer second.Close()
	hold, held := make(chan struct{}), make(chan struct{})
	firstDone := make(chan string)
	go func() {
		id, err := lease(first, hold, held)
		if err != nil {
			t.Error(err)
		}
		firstDone <- id
	}()
	<-held
	secondDone := make(chan string)
	go func() {
		id, err := lease(second, nil, nil)
		if err != nil {
			t.Error(err)
		}
		secondDone <- id
	}()
	testwait.UntilLockWaiters(t, path, 1) // the second writer is now waiting for the lock
	restored := filepath.Join(dir, "restored.wal")
	os.WriteFile(restored, backup, 0o644)
	if err := os.Rename(restored, path); err != nil {
		t.Fatal(err)
	}
	close(hold)
	firstID, secondID := <-firstDone, <-secondDone
	// The first writer appended to the file it had locked, which the rename
	// unlinked; the second must have appended to the restored one.
	check := store.Open(store.Options{Path: path, LockTimeout: time.Second, Verifier: state.NewVerifier()})
	defer check.Close()
	var records int64
	if err := check.Read(func(tx *store.Tx) error { records = tx.State.LastSeq(); return nil }); err != nil {
		t.Fatal(err)
	}
	if firstID != "L1" || secondID != "L1" || records != 2 {
		t.Fatalf("first granted %s on the replaced file, second %s; the restored WAL holds %d records (want L1, L1 on the restored file, 2)", firstID, secondID, records)
	}
}

// TestIndexTruncatedInPlaceIsDamageNotACrash: a resident handle reads
// tasks from the index's mapped file; cut in place under it (another
// process truncating it), a read of a page gone is damage, said in a
// warning, and the handle answers from the WAL, never crashes.
func TestIndexTruncatedInPlaceIsDamageNotACrash(t *testing.T) {
	path := backlogWAL(t, t.TempDir(), 3000, 300)
	answersAt(t, path, t0, true, store.Options{}) // builds the index
	var warnings []string
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Resident: true, Warn: func(m string) { warnings = append(warnings, m) }})
	defer h.Close()
	count := func() int {
		var n int
		if err := h.Read(func(tx *store.Tx) error {
			tasks, err := tx.State.Tasks()
			n = len(tasks)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	want := count() // the index is the handle's now
	cut, got := false, 0
	if err := h.Read(func(tx *store.Tx) error {
		if !cut {
			cut = true
			if err := os.Truncate(path+store.IndexSuffix, 8192); err != nil {
				t.Fatal(err)
			}
		}
		tasks, err := tx.State.Tasks() // pages of the index's mapping are gone under the first read
		got = len(tasks)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got != want || !strings.Contains(strings.Join(warnings, " "), "damaged") {
		t.Fatalf("after the index was cut in place: %d tasks, want %d (warnings %q)", got, want, warnings)
	}
	if got := count(); got != want {
		t.Fatalf("the operation after: %d tasks, want %d", got, want)
	}
}

// failingSync fails every fsync of the WAL (and, so, its rollback too is
// only a truncate).
type failingSync struct{ wal.Storage }

func (failingSync) Sync() error { return errors.New("injected: fsync failed") }

type failingSyncFS struct{ store.OS }

func (failingSyncFS) WAL(s wal.Storage) wal.Storage { return failingSync{s} }

// TestGroupCommit: a batch decides its operations one after the other, each
// against the state that includes the decisions before it, and writes them
// all in one write and one fsync; when that write fails, nothing of the
// batch is in the WAL and the batch's error voids every answer.
func TestGroupCommit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	fsys := &countingFS{}
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0), FS: fsys})
	defer h.Close()
	submit(t, h, "first") // T1
	fsys.writes, fsys.syncs = 0, 0
	var leased []string
	lease := func(tx *store.Tx) error {
		d, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute}, tx.Now)
		if err != nil {
			return err
		}
		leased = append(leased, d.TaskID)
		return tx.Commit(d.Records)
	}
	add := func(tx *store.Tx) error {
		d, err := tx.State.DecideSubmit(state.Submit{Payload: "p", Window: state.Duration(time.Minute), Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
		if err != nil {
			return err
		}
		return tx.Commit(d.Records)
	}
	errs, committed, err := h.WriteBatch([]func(*store.Tx) error{lease, add, lease, lease})
	if err != nil || fsys.writes != 1 || fsys.syncs != 1 {
		t.Fatalf("batch: %v, %d writes, %d fsyncs", err, fsys.writes, fsys.syncs)
	}
	// The second lease sees the task the submit before it created; the third finds nothing.
	if strings.Join(leased, ",") != "T1,T2," || errs[3] != nil || len(committed[3]) != 0 || committed[2][0].Seq != 4 {
		t.Fatalf("leased %q, errors %v, committed %v", leased, errs, committed)
	}
	before, _ := os.ReadFile(path)
	broken := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0), FS: failingSyncFS{}})
	defer broken.Close()
	_, _, err = broken.WriteBatch([]func(*store.Tx) error{add, add})
	after, _ := os.ReadFile(path)
	var ae *store.AppendError
	if !errors.As(err, &ae) || string(after) != string(before) {
		t.Fatalf("a failed batch: %v; the WAL changed: %v", err, string(after) != string(before))
	}
}

// TestCompleteAndLease: a completion and the next lease in one write and one
// fsync, the lease decided on the state that includes the completion; a
// repeat (a lost answer) is the same completion and the same next lease,
// writing nothing; a next lease no state could grant is refused before
// anything is decided; a completion under a lapsed lease still leases next.
func TestCompleteAndLease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	fsys := &countingFS{}
	h := store.Open(store.Options{Path: path, LockTimeout: time.Second, Clock: fixedClock(t0), FS: fsys})
	defer h.Close()
	submit(t, h, "first")  // T1
	submit(t, h, "second") // T2
	lease := func(tx *store.Tx) error {
		d, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute, TaskID: "T1"}, tx.Now)
		if err != nil {
			return err
		}
		return tx.Commit(d.Records)
	}
	if err := h.Write(lease); err != nil { // L1 on T1
		t.Fatal(err)
	}
	next := state.LeaseRequest{Worker: "W", Duration: time.Minute}
	completeAndLease := func() (done, leased state.Decision, records []state.Record) {
		t.Helper()
		errs, committed, err := h.WriteBatch([]func(*store.Tx) error{func(tx *store.Tx) error {
			var err error
			done, leased, err = tx.CompleteAndLease("T1", "L1", "", next)
			return err
		}})
		if err != nil || errs[0] != nil {
			t.Fatalf("complete and lease: %v %v", err, errs[0])
		}
		return done, leased, committed[0]
	}
	fsys.writes, fsys.syncs = 0, 0
	done, leased, records := completeAndLease()
	if done.Outcome != state.ResultCommitted || leased.Outcome != state.ResultLeased || leased.TaskID != "T2" || len(records) != 2 ||
		records[0].Type != state.TaskCompleted || records[1].Type != state.LeaseGranted || records[1].RequestID != "next-after-L1" {
		t.Fatalf("completed %+v, leased %+v, records %+v", done, leased, records)
	}
	if fsys.writes != 1 || fsys.syncs != 1 {
		t.Fatalf("%d writes and %d fsyncs; want 1 and 1", fsys.writes, fsys.syncs)
	}
	before, _ := os.ReadFile(path)
	done, leased, records = completeAndLease()
	if !done.Duplicate || leased.LeaseID != "L2" || !leased.Duplicate || len(records) != 0 {
		t.Fatalf("the repeat: completed %+v, leased %+v, records %+v", done, leased, records)
	}
	next.Worker = ""
	errs, _, err := h.WriteBatch([]func(*store.Tx) error{func(tx *store.Tx) error {
		_, _, err := tx.CompleteAndLease("T2", "L2", "", next)
		return err
	}})
	var refusal *state.Error
	if err != nil || !errors.As(errs[0], &refusal) || refusal.Kind != state.InvalidInput {
		t.Fatalf("a next lease without a worker: %v %v", err, errs[0])
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("a repeat or a refused request wrote the WAL")
	}
	// outside a batch too: one write, one fsync
	submit(t, h, "third") // T3
	next.Worker = "W"
	fsys.writes, fsys.syncs = 0, 0
	if err := h.Write(func(tx *store.Tx) error {
		done, leased, err := tx.CompleteAndLease("T2", "L2", "", next)
		if err == nil && (done.Outcome != state.ResultCommitted || leased.TaskID != "T3" || len(tx.Committed) != 2) {
			err = fmt.Errorf("completed %+v, leased %+v, committed %d", done, leased, len(tx.Committed))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if fsys.writes != 1 || fsys.syncs != 1 {
		t.Fatalf("outside a batch: %d writes and %d fsyncs; want 1 and 1", fsys.writes, fsys.syncs)
	}
}
