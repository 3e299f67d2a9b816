package index

import (
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
	bolt "go.etcd.io/bbolt"
)

// TestWritersOfOneIndexEachCommitAsTheyAsk: a server's pipe writes the
// tasks an end releases (WriteTasks, never synced) into the database its
// committer writes (Write, synced when asked), from another goroutine.
// Whether a commit is synced is bbolt's NoSync, a field of the database
// read as it commits: each writer sets it within its own transaction, so
// neither commits the other's as it asked for its own (the race detector
// finds the field written outside the lock that orders writers). The index
// they leave holds every task and is whole once a Write holds every record.
func TestWritersOfOneIndexEachCommitAsTheyAsk(t *testing.T) {
	db := mustOpen(t, filepath.Join(t.TempDir(), "q.index"))
	st := state.New()
	applyAll(t, st, history(t, 2, 200))
	hot := st.Hot()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Go(func() {
		for i := range 40 {
			if err := db.Write(hot, st.Head(), Meta{Position: wal.Position{Count: 100 + i, End: 9000}, Seq: int64(100 + i)}, i%2 == 0); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Go(func() {
		for i := range 40 {
			if err := db.WriteTasks(hot[:3], int64(150+i), st.LastAt(), "boot"); err != nil {
				errs <- err
				return
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := db.Write(hot, st.Head(), Meta{Position: wal.Position{Count: 300, End: 9000}, Seq: 300}, true); err != nil {
		t.Fatal(err)
	}
	if m, _, err := db.Meta(); err != nil || m.Partial || m.Seq != 300 {
		t.Fatalf("after a Write of every record: %+v, %v; want seq 300, not partial", m, err)
	}
	loaded, r := mustLoad(t, db)
	defer r.Close()
	for _, want := range hot {
		got, err := loaded.Task(want.ID)
		if err != nil || got.State != want.State {
			t.Fatalf("%s: %v, %v; want %s", want.ID, got, err, want.State)
		}
	}
}

// TestAnIndexCutShortIsDamaged: an index shorter than its pages (a size
// the file system did not keep through a power loss: bbolt does not sync
// it as it grows the file) is damaged as Meta reads it, whatever page was
// cut; a read of one cut deep returns (the transaction it began ends), and
// so do Close and an open for writing.
func TestAnIndexCutShortIsDamaged(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.index")
	db := mustOpen(t, path)
	st := state.New()
	applyAll(t, st, history(t, 3, 3000))
	if err := db.Write(st.Hot(), st.Head(), Meta{Position: wal.Position{Count: 3000, End: 9000}, Seq: 3000}, true); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	whole := info.Size()
	for _, size := range []int64{whole - 4096, whole / 2} {
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		db, err := Open(path, false, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := db.Meta(); err == nil || !strings.Contains(err.Error(), "damaged") {
			t.Errorf("cut to %d of %d bytes: Meta says %v, want damaged", size, whole, err)
		}
		if r, err := db.Read(); err == nil {
			r.Close()
		}
		closed := make(chan error, 1)
		go func() { closed <- db.Close() }()
		select {
		case <-closed:
		case <-time.After(time.Minute): // a hang guard
			t.Fatalf("cut to %d of %d bytes: Close still waits after a minute for a read transaction left open", size, whole)
		}
	}
	if db, err := Open(path, true, time.Second); err == nil {
		_ = db.Close()
		t.Fatal("an index cut to half its pages opened for writing")
	}
}

// TestAFailedOpenForWritingIsNotWaitedFor: bbolt's open for writing panics
// on a damaged freelist page after it has mapped the file and locked it,
// and the mapping holds the lock until the process ends. A later open of
// that file in the process says it is damaged at once, where it would wait
// its whole timeout for the lock the process itself holds; a new index in
// its place opens.
func TestAFailedOpenForWritingIsNotWaitedFor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.index")
	db := mustOpen(t, path)
	st := state.New()
	applyAll(t, st, history(t, 4, 300))
	if err := db.Write(st.Hot(), st.Head(), Meta{Position: wal.Position{Count: 300, End: 9000}, Seq: 300}, true); err != nil {
		t.Fatal(err)
	}
	pageSize := db.db.Info().PageSize
	var freelist int64 = -1
	err := db.db.View(func(tx *bolt.Tx) error {
		for id := 2; int64(id*pageSize) < tx.Size(); id++ {
			if p, err := tx.Page(id); err == nil && p != nil && p.Type == "freelist" {
				freelist = int64(id * pageSize)
			}
		}
		return nil
	})
	if err != nil || freelist < 0 {
		t.Fatalf("no freelist page found (%v)", err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt(make([]byte, pageSize), freelist)
		err = errors.Join(err, f.Close())
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, writing := range []bool{true, true, false} {
		opened := make(chan error, 1)
		go func() {
			db, err := Open(path, writing, time.Minute)
			if err == nil {
				_ = db.Close()
			}
			opened <- err
		}()
		select {
		case err := <-opened:
			if err == nil || !strings.Contains(err.Error(), "damaged") {
				t.Fatalf("open %d (writing %v) of the index with its freelist zeroed: %v, want damaged", i+1, writing, err)
			}
		case <-time.After(2 * time.Minute): // a hang guard
			t.Fatalf("open %d (writing %v) of the index with its freelist zeroed still waits after 2 minutes, for the lock of the open that failed", i+1, writing)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	db = mustOpen(t, path)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestAPanicOnAPartsProcessorIsTheWritesError: a write's tasks are worked
// out in parts on every processor; a panic in a part that runs on a
// goroutine of its own (here a LEASED task without its lease, which no
// state holds) fails the write as damage, as one on the transaction's own
// goroutine does, and the process goes on; nothing of the write is kept.
func TestAPanicOnAPartsProcessorIsTheWritesError(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	db := mustOpen(t, filepath.Join(t.TempDir(), "q.index"))
	st := state.New()
	applyAll(t, st, history(t, 3, 3000))
	hot := st.Hot()
	if len(hot) < 3*256 {
		t.Fatalf("%d tasks: too few for a part of their own", len(hot))
	}
	broken := *hot[len(hot)-1] // in the last part, on a goroutine of its own
	broken.State, broken.Lease = state.Leased, nil
	hot[len(hot)-1] = &broken
	err := db.Write(hot, st.Head(), Meta{Position: wal.Position{Count: 1}, Seq: 1}, false)
	if err == nil || !strings.Contains(err.Error(), "the index is damaged") {
		t.Fatalf("a write whose part panicked: %v", err)
	}
	if _, _, err := db.Meta(); !errors.Is(err, ErrNoIndex) {
		t.Fatalf("after the failed write, the index says: %v", err)
	}
}
