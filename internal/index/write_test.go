package index

import (
	"path/filepath"
	"sync"
	"testing"

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
	db, err := Open(filepath.Join(t.TempDir(), "q.index"), true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := state.New()
	for _, r := range history(t, 2, 200) {
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
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
