package index

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
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
