package index

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

const t0 = int64(1767225600000) // 2026-01-01T00:00:00Z

// history is a random history decided and applied by state: tasks in a few
// queues and priorities, with and without windows, delayed, leased,
// extended, completed, failed, expired, aborted, redacted and requeued.
func history(t *testing.T, seed uint64, steps int) []state.Record {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 3))
	s, now := state.New(), t0
	var recs []state.Record
	commit := func(d state.Decision, err error) {
		if err != nil || len(d.Records) == 0 {
			return
		}
		for _, r := range d.Records {
			r.Seq, r.At = s.LastSeq()+1, now
			if err := s.Apply(r); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
			recs = append(recs, r)
		}
	}
	queues := []string{"default", "mail", "img"}
	for range steps {
		now += int64(rng.IntN(20_000))
		live := s.Live()
		var task *state.Task
		if len(live) > 0 {
			task = live[rng.IntN(len(live))]
		}
		switch op := rng.IntN(10); {
		case op < 3 || task == nil:
			window := state.NoWindow
			if rng.IntN(2) == 0 {
				window = state.Duration(time.Duration(30+rng.IntN(300)) * time.Second)
			}
			commit(s.DecideSubmit(state.Submit{Payload: fmt.Sprint("p", rng.IntN(9)), Window: window, Queue: queues[rng.IntN(3)], Priority: rng.IntN(5) - 2,
				Delay: time.Duration(rng.IntN(2)*rng.IntN(60)) * time.Second, Policy: state.RetryPolicy{MaxAttempts: 1 + rng.IntN(3), Backoff: state.Duration(time.Second), BackoffMax: state.Duration(time.Minute)}}, now))
		case op < 5:
			req := ""
			if rng.IntN(2) == 0 {
				req = fmt.Sprint("lr", rng.IntN(50))
			}
			commit(s.DecideLease(state.LeaseRequest{Worker: fmt.Sprint("W", rng.IntN(3)), Duration: time.Duration(5+rng.IntN(60)) * time.Second, RequestID: req}, now))
		case op < 7 && task.Lease != nil:
			commit(s.DecideComplete(task.ID, task.Lease.ID, "", now))
		case op < 8 && task.Lease != nil:
			commit(s.DecideFail(task.ID, task.Lease.ID, "boom", rng.IntN(3) == 0, now))
		case op < 9:
			commit(s.DecideExpire(now))
		default:
			switch rng.IntN(3) {
			case 0:
				commit(s.DecideAbort(task.ID, "no", now))
			case 1:
				commit(s.DecideRedact(task.ID, "pii", now))
			default:
				for _, old := range mustTasks(t, s) {
					if old.State.Terminal() {
						commit(s.DecideRequeue(old.ID, "", now))
						break
					}
				}
			}
		}
	}
	return recs
}

func mustTasks(t *testing.T, s *state.State) []*state.Task {
	t.Helper()
	tasks, err := s.Tasks()
	if err != nil {
		t.Fatal(err)
	}
	return tasks
}

// TestTheIndexHoldsTheTasks: a state written into the index at random
// records (its hot tasks each time, as a replay and a writer write them)
// and read back from it, holds at the end what a full replay holds: every
// task byte for byte, the unfinished ones, every id, each queue's lease
// order, the times time ends something and a waiting task wakes, and the
// head.
func TestTheIndexHoldsTheTasks(t *testing.T) {
	histories := 60
	if testing.Short() {
		histories = 15
	}
	for seed := range uint64(histories) {
		recs := history(t, seed, 300)
		full := state.New()
		for _, r := range recs {
			if err := full.Apply(r); err != nil {
				t.Fatal(err)
			}
		}
		db, err := Open(filepath.Join(t.TempDir(), "q.wal.index"), true, 0)
		if err != nil {
			t.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(seed, 5))
		st := state.New()
		var r *Reader
		write := func() {
			if r != nil {
				r.Close()
			}
			if err := db.Write(st.Hot(), st.Head(), Meta{Position: wal.Position{Count: int(st.LastSeq())}, Seq: st.LastSeq()}, true); err != nil {
				t.Fatal(err)
			}
			if r, err = db.Read(); err != nil {
				t.Fatal(err)
			}
			st.Flushed(r)
		}
		ref := state.New() // the same records, in memory alone
		for _, rec := range recs {
			if err := st.Apply(rec); err != nil {
				t.Fatalf("seed %d: record %d over the index: %v", seed, rec.Seq, err)
			}
			if err := ref.Apply(rec); err != nil {
				t.Fatal(err)
			}
			for _, w := range []string{"", "W0", "W1", "W2"} { // a lease of a task read from the index, taken over in memory
				if got, want := leasesOf(st, w), leasesOf(ref, w); got != want || st.Damage() != nil {
					t.Fatalf("seed %d, record %d: the leases of %q over the index: %s (%v), want %s", seed, rec.Seq, w, got, st.Damage(), want)
				}
			}
			if rng.IntN(12) == 0 {
				write()
			}
		}
		write()
		checkHolds(t, seed, r, full)
		meta, head, err := db.Meta()
		if err != nil || meta.Seq != full.LastSeq() || !bytes.Equal(head, full.Head()) {
			t.Fatalf("seed %d: meta %+v %v; the head is the state's: %v", seed, meta, err, bytes.Equal(head, full.Head()))
		}
		r.Close()
		db.Close()
	}
}

// leasesOf lists the tasks s says worker (any, for "") holds as recorded.
func leasesOf(s *state.State, worker string) string {
	var ids []string
	s.EachLeased(worker, func(t *state.Task) bool { ids = append(ids, t.ID+" "+t.Lease.ID); return true })
	slices.Sort(ids)
	return strings.Join(ids, ", ")
}

// checkHolds compares what the index answers with what the tasks of a
// full replay say, by plain loops over them.
func checkHolds(t *testing.T, seed uint64, r *Reader, full *state.State) {
	t.Helper()
	tasks := mustTasks(t, full)
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("seed %d: "+format, append([]any{seed}, args...)...)
	}
	var got, unfinished [][]byte
	if err := r.Each(false, func(task *state.Task) bool { got = append(got, state.AppendTask(nil, task)); return true }); err != nil {
		fail("%v", err)
	}
	if err := r.Each(true, func(task *state.Task) bool { unfinished = append(unfinished, state.AppendTask(nil, task)); return true }); err != nil {
		fail("%v", err)
	}
	var want, wantUnfinished [][]byte
	queues := map[string][]state.OrderEntry{}
	type due struct{ at, n int64 }
	var lapses, wakes []due
	for _, task := range tasks {
		n := state.Number(task.ID)
		want = append(want, state.AppendTask(nil, task))
		if stored, err := r.Task(n); err != nil || !bytes.Equal(state.AppendTask(nil, stored), state.AppendTask(nil, task)) {
			fail("%s read by number differs (%v)", task.ID, err)
		}
		for _, key := range []struct {
			lookup func(string) (int64, error)
			id     string
		}{{r.Submitted, task.RequestID}} {
			if got, err := key.lookup(key.id); err != nil || got != n {
				fail("request id %s names task %d, want %d (%v)", key.id, got, n, err)
			}
		}
		for _, a := range task.Attempts {
			if got, _ := r.LeaseOwner(a.LeaseID); got != n {
				fail("lease %s names task %d, want %d", a.LeaseID, got, n)
			}
			if a.RequestID != "" {
				if got, _ := r.LeaseRequested(a.RequestID); got != n {
					fail("lease request %s names task %d, want %d", a.RequestID, got, n)
				}
			}
		}
		if task.State.Terminal() {
			continue
		}
		wantUnfinished = append(wantUnfinished, state.AppendTask(nil, task))
		queues[task.Queue] = append(queues[task.Queue], task.Order(n))
		if at := task.LapseAt(); at != 0 {
			lapses = append(lapses, due{at, n})
		}
		if at := task.WakeAt(); at != 0 {
			wakes = append(wakes, due{at, n})
		}
	}
	if !slices.EqualFunc(got, want, bytes.Equal) || !slices.EqualFunc(unfinished, wantUnfinished, bytes.Equal) {
		fail("%d tasks and %d unfinished listed, want %d and %d", len(got), len(unfinished), len(want), len(wantUnfinished))
	}
	if n, _ := r.Submitted("nobody"); n != 0 {
		fail("an unknown request id names task %d", n)
	}
	if task, _ := r.Task(1 << 40); task != nil {
		fail("an unknown number names %s", task.ID)
	}
	names, err := r.Queues()
	if err != nil || !slices.Equal(names, slices.Sorted(maps.Keys(queues))) {
		fail("queues %v (%v), want %v", names, err, slices.Sorted(maps.Keys(queues)))
	}
	counts := map[string]int{}
	for _, task := range tasks {
		if !task.State.Terminal() {
			counts[task.Queue]++
		}
	}
	if n, err := r.Unfinished(nil); err != nil || n != len(wantUnfinished) {
		fail("%d unfinished (%v), want %d", n, err, len(wantUnfinished))
	}
	for q, want := range counts {
		if n, err := r.Unfinished([]string{q, "nowhere"}); err != nil || n != want {
			fail("%d unfinished in queue %s (%v), want %d", n, q, err, want)
		}
	}
	for q, order := range queues {
		slices.SortFunc(order, func(a, b state.OrderEntry) int {
			return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Num, b.Num))
		})
		var listed []state.OrderEntry
		if err := r.Queued(q, state.OrderEntry{}, func(e state.OrderEntry) bool { listed = append(listed, e); return true }); err != nil || !slices.Equal(listed, order) {
			fail("queue %s in lease order:\n%+v\nwant\n%+v", q, listed, order)
		}
		for i, after := range order { // a pick resumes after the entries it knows hot
			var rest []state.OrderEntry
			if err := r.Queued(q, after, func(e state.OrderEntry) bool { rest = append(rest, e); return true }); err != nil || !slices.Equal(rest, order[i+1:]) {
				fail("queue %s after %+v:\n%+v\nwant\n%+v", q, after, rest, order[i+1:])
			}
		}
	}
	held := map[string][]int64{} // a worker's leases as recorded, in creation order
	for _, task := range tasks {
		if task.State == state.Leased {
			held[task.Lease.Worker] = append(held[task.Lease.Worker], state.Number(task.ID))
		}
	}
	var everyone []int64
	for _, w := range slices.Sorted(maps.Keys(held)) {
		everyone = append(everyone, held[w]...)
	}
	for _, w := range append(slices.Collect(maps.Keys(held)), "", "nobody", "W") {
		want := held[w]
		if w == "" {
			want = everyone
		}
		var listed []int64
		if err := r.Leased(w, func(n int64) bool { listed = append(listed, n); return true }); err != nil || !slices.Equal(listed, want) {
			fail("the leases of worker %q: %v (%v), want %v", w, listed, err, want)
		}
	}
	byTime := func(a, b due) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.n, b.n)) }
	slices.SortFunc(lapses, byTime)
	upcoming := slices.SortedFunc(slices.Values(append(slices.Clone(lapses), wakes...)), byTime)
	for _, at := range []int64{t0 - 1, t0 + 60_000, t0 + 600_000, t0 + 3_600_000, state.MaxTime} {
		var got, want []due
		for _, d := range lapses {
			if d.at <= at {
				want = append(want, d)
			}
		}
		if err := r.Lapsing(at, func(n int64) bool { got = append(got, due{0, n}); return true }); err != nil {
			fail("%v", err)
		}
		if len(got) != len(want) || slices.ContainsFunc(got, func(g due) bool { return !slices.ContainsFunc(want, func(w due) bool { return w.n == g.n }) }) {
			fail("lapsing by %d: %v, want %v", at, got, want)
		}
		for _, times := range []struct {
			name string
			read func(int64, func(at, n int64) bool) error
			all  []due
		}{{"upcoming", r.Upcoming, upcoming}, {"wakes", r.Wakes, slices.SortedFunc(slices.Values(wakes), byTime)}} {
			got, want := []due(nil), []due(nil)
			for _, d := range times.all {
				if d.at > at {
					want = append(want, d)
				}
			}
			if err := times.read(at, func(when, n int64) bool { got = append(got, due{when, n}); return true }); err != nil {
				fail("%v", err)
			}
			if !slices.Equal(got, want) {
				fail("%s after %d: %v, want %v", times.name, at, got, want)
			}
		}
	}
}

// TestAnIndexItCannotReadIsNone: an index of another schema, an empty
// file, and damaged copies of a good one (bytes flipped, cut short, pages
// zeroed) never panic and never answer: opening, its meta or a read say
// it cannot be used.
func TestAnIndexItCannotReadIsNone(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.index")
	st := writtenIndex(t, good, 1, 300)
	if _, err := Open(filepath.Join(dir, "none.index"), false, 0); err != ErrNoIndex {
		t.Fatalf("a missing index: %v", err)
	}
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	damaged := map[string][]byte{"empty": {}, "cut short": data[:len(data)/3], "another schema": nil}
	for i := 0; i < len(data); i += len(data) / 12 {
		flipped := bytes.Clone(data)
		for j := i; j < min(i+64, len(flipped)); j++ {
			flipped[j] ^= 0x5a
		}
		damaged[fmt.Sprint("flipped at ", i)] = flipped
		zeroed := bytes.Clone(data)
		clear(zeroed[i:min(i+4096, len(zeroed))])
		damaged[fmt.Sprint("zeroed at ", i)] = zeroed
	}
	for name, b := range damaged {
		path := filepath.Join(dir, "damaged.index")
		if name == "another schema" {
			db, _ := Open(path, true, 0)
			if err := db.db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bMeta).Put(kSchema, []byte{0, 0, 0, 0, 0, 0, 0, 9}) }); err != nil {
				t.Fatal(err)
			}
			db.Close()
		} else if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		usable := readsWhole(path, st) // a damaged page may be a free one: then it reads whole, as it should
		os.Remove(path)
		if usable && (name == "another schema" || name == "empty" || name == "cut short") {
			t.Fatalf("%s: the index was read", name)
		}
	}
}

// writtenIndex writes at path the index of a random history of steps
// records (history), in one write, and says the state it holds.
func writtenIndex(t *testing.T, path string, seed uint64, steps int) *state.State {
	t.Helper()
	db, err := Open(path, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := state.New()
	for _, r := range history(t, seed, steps) {
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Write(st.Hot(), st.Head(), Meta{Position: wal.Position{Count: steps, End: int64(steps) * 30}, Seq: st.LastSeq()}, true); err != nil {
		t.Fatal(err)
	}
	return st
}

// readsWhole reports whether the index at path opens and reads as the
// state's, without a panic: damage is an error, or no answer at all.
func readsWhole(path string, st *state.State) bool {
	db, err := Open(path, false, 0)
	if err != nil {
		return false
	}
	defer db.Close()
	if _, _, err := db.Meta(); err != nil {
		return false
	}
	r, err := db.Read()
	if err != nil {
		return false
	}
	defer r.Close()
	n := 0
	if err := r.Each(false, func(*state.Task) bool { n++; return true }); err != nil {
		return false
	}
	tasks, _ := st.Tasks()
	return n == len(tasks)
}

// TestAWriteTakesTheCopyOverAStaleNote: a state that read its tasks (and
// the notes of their keys, Task.Stored) from an index at one transaction
// writes them where the copies are others than it read: the same index
// after another state wrote it further (as another process does between
// two operations of a server), or another index file whose transaction
// count is the one it read at. The index then holds what a full replay
// holds, keys of the newer copies removed: the notes are not taken. The
// longer histories' writes hold more tasks than one processor takes: cut
// into parts, each of which reads its copies and notes on a processor of
// its own (update).
func TestAWriteTakesTheCopyOverAStaleNote(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	txID := func(db *DB) int {
		tx, err := db.db.Begin(false)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		return tx.ID()
	}
	write := func(db *DB, st *state.State) {
		if err := db.Write(st.Hot(), st.Head(), Meta{Position: wal.Position{Count: int(st.LastSeq())}, Seq: st.LastSeq()}, true); err != nil {
			t.Fatal(err)
		}
	}
	histories := []int{30, 3}
	if testing.Short() {
		histories = []int{8, 1}
	}
	for seed := range uint64(histories[0] + histories[1]) {
		steps := 300
		if seed >= uint64(histories[0]) {
			steps = 4000
		}
		for _, otherFile := range []bool{false, true} {
			recs := history(t, seed, steps)
			prefix, mid := len(recs)/3, 2*len(recs)/3
			full := state.New()
			applyAll(t, full, recs)
			dir := t.TempDir()
			first := mustOpen(t, filepath.Join(dir, "a.index"))
			for i := 0; i < prefix; i += 7 { // a transaction every few records
				built, r := mustLoad(t, first)
				applyAll(t, built, recs[i:min(i+7, prefix)])
				r.Close()
				write(first, built)
			}
			// stale reads the index at one transaction; another state
			// writes the records up to mid, into that index or another.
			stale, r := mustLoad(t, first)
			applyAll(t, stale, recs[prefix:])
			r.Close()
			target := first
			if otherFile {
				target = mustOpen(t, filepath.Join(dir, "b.index"))
				other := state.New()
				applyAll(t, other, recs[:mid])
				write(target, other)
				for txID(target) < txID(first) {
					if err := target.MarkSynced(); err != nil {
						t.Fatal(err)
					}
				}
				if txID(target) != txID(first) {
					t.Fatalf("seed %d: the other file is %d transactions in, the first %d", seed, txID(target), txID(first))
				}
			} else {
				other, r := mustLoad(t, first)
				applyAll(t, other, recs[prefix:mid])
				r.Close()
				write(first, other)
			}
			write(target, stale)
			r, err := target.Read()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(r.Close) // before the index's: a close waits for every read
			checkHolds(t, seed, r, full)
			r.Close()
		}
	}
}

func applyAll(t *testing.T, st *state.State, recs []state.Record) {
	t.Helper()
	for _, r := range recs {
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
}

func mustOpen(t *testing.T, path string) *DB {
	t.Helper()
	db, err := Open(path, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// mustLoad is a state that reads its tasks from db as of its last write
// (a new index: none), and its read, which a write of db waits for.
func mustLoad(t *testing.T, db *DB) (*state.State, *Reader) {
	t.Helper()
	r, err := db.Read()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	_, head, err := db.Meta()
	if errors.Is(err, ErrNoIndex) {
		return state.New(), r
	}
	if err != nil {
		t.Fatal(err)
	}
	st, err := state.LoadHead(head, r)
	if err != nil {
		t.Fatal(err)
	}
	return st, r
}

// TestANoteIsOfOneTask: a copy of a task read from the index, written
// under another number (as a task made from another would be), takes
// none of the first task's keys away: a note is of its task's copy only.
func TestANoteIsOfOneTask(t *testing.T) {
	st := state.New()
	applyAll(t, st, history(t, 1, 60))
	db := mustOpen(t, filepath.Join(t.TempDir(), "q.wal.index"))
	meta := Meta{Position: wal.Position{Count: int(st.LastSeq())}, Seq: st.LastSeq()}
	if err := db.Write(st.Hot(), st.Head(), meta, true); err != nil {
		t.Fatal(err)
	}
	r, err := db.Read()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	first, err := r.Task(1)
	if err != nil || first == nil || first.Stored == nil {
		t.Fatalf("task 1: %v, %v", first, err)
	}
	r.Close()
	other := *first
	other.ID, other.RequestID, other.Attempts = "T100000", "another", nil
	if err := db.Write([]*state.Task{&other}, st.Head(), meta, true); err != nil {
		t.Fatal(err)
	}
	if r, err = db.Read(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	if n, err := r.Submitted(first.RequestID); n != 1 || err != nil {
		t.Fatalf("request id %s names task %d (%v), want 1", first.RequestID, n, err)
	}
}

// TestAPartOfARecordKeepsTheIndexPartial: WriteTasks marks the index
// partial up to its record; a Write of an earlier position keeps the mark,
// one that holds the latest such record clears it.
func TestAPartOfARecordKeepsTheIndexPartial(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "q.index"), true, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st := state.New()
	for _, r := range history(t, 1, 300) {
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	hot := st.Hot()
	write := func(seq int64) {
		t.Helper()
		if err := db.Write(hot, st.Head(), Meta{Position: wal.Position{Count: int(seq), End: 9000}, Seq: seq}, false); err != nil {
			t.Fatal(err)
		}
	}
	part := func(seq int64) {
		t.Helper()
		if err := db.WriteTasks(hot[:3], seq, st.LastAt(), "boot"); err != nil {
			t.Fatal(err)
		}
	}
	partial := func() bool {
		t.Helper()
		m, _, err := db.Meta()
		if err != nil {
			t.Fatal(err)
		}
		return m.Partial
	}
	write(100)
	for _, step := range []struct {
		do   func()
		want bool
	}{
		{func() { part(102) }, true},
		{func() { part(101) }, true}, // the mark stays at 102
		{func() { write(101) }, true},
		{func() { write(102) }, false},
		{func() { part(103) }, true},
		{func() { write(110) }, false},
	} {
		step.do()
		if got := partial(); got != step.want {
			t.Fatalf("partial %v, want %v", got, step.want)
		}
	}
}

// TestEveryReadFindsAFlippedEntry: an entry of any bucket with a byte of
// its key or of its value flipped where it lies in the file (its leaf, a
// branch page that names it, a free page keeping an older copy) is never
// an answer: each read of the index says it is damaged, or answers as the
// good index does. bbolt keeps no checksum of its pages: a value flipped
// is read as it reads, and a key flipped can send a seek past the entries
// it seeks, or hide its entry from a walk.
func TestEveryReadFindsAFlippedEntry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.index")
	db, err := Open(good, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	st := state.New()
	recs := history(t, 5, 3000)
	now := recs[len(recs)-1].At
	apply := func(d state.Decision, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range d.Records {
			r.Seq, r.At = st.LastSeq()+1, now
			if err := st.Apply(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, r := range recs {
		if err := st.Apply(r); err != nil {
			t.Fatal(err)
		}
		if i == len(recs)/2 { // a second write leaves older pages free
			if err := db.Write(st.Hot(), st.Head(), Meta{Position: wal.Position{Count: i + 1}, Seq: st.LastSeq()}, true); err != nil {
				t.Fatal(err)
			}
		}
	}
	live := st.Live()
	for i := range 20 { // tasks that wait for others: the after bucket
		apply(st.DecideSubmit(state.Submit{Payload: "w", Queue: "mail", Window: state.NoWindow, Policy: state.RetryPolicy{MaxAttempts: 1}, After: []string{live[i%len(live)].ID, live[(i*7+1)%len(live)].ID}}, now))
	}
	for i := range 6 {
		apply(st.DecideLease(state.LeaseRequest{Worker: fmt.Sprint("W", i%3), Duration: time.Minute}, now))
	}
	if err := db.Write(st.Hot(), st.Head(), Meta{Position: wal.Position{Count: len(recs) + 26}, Seq: st.LastSeq()}, true); err != nil {
		t.Fatal(err)
	}
	var entries [][3][]byte // bucket, key, value
	rng := rand.New(rand.NewPCG(5, 44))
	err = db.db.View(func(tx *bolt.Tx) error {
		for _, name := range buckets {
			if bytes.Equal(name, bMeta) {
				continue
			}
			var all [][3][]byte
			_ = tx.Bucket(name).ForEach(func(k, v []byte) error {
				all = append(all, [3][]byte{name, bytes.Clone(k), bytes.Clone(v)})
				return nil
			})
			if len(all) == 0 {
				t.Fatalf("bucket %s is empty: the history holds none of its entries", name)
			}
			rng.Shuffle(len(all), func(i, j int) { all[i], all[j] = all[j], all[i] })
			entries = append(entries, all[:min(len(all), 6)]...)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, task := range mustTasks(t, st) {
		ids = append(ids, task.RequestID)
		for _, a := range task.Attempts {
			ids = append(ids, a.LeaseID, a.RequestID)
		}
	}
	slices.Sort(ids)
	ids = slices.Compact(ids)
	asked := probe{ids: ids, last: int64(len(mustTasks(t, st))), after: map[string][]state.OrderEntry{}}
	want, err := everyAnswer(good, &asked, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range want {
		if a.damaged {
			t.Fatalf("the good index: %s %d: damaged", a.what, a.of)
		}
	}
	images, found := 0, 0
	try := func(b []byte, what string, walks bool) {
		path := filepath.Join(dir, "flipped.index")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		images++
		got, err := everyAnswer(path, &asked, walks)
		if err != nil {
			found++
			return
		}
		damaged := false
		for i, a := range got {
			if a.damaged {
				damaged = true
			} else if w := want[i]; a.what != w.what || a.of != w.of || !slices.Equal(a.got, w.got) {
				t.Fatalf("%s: %s", what, difference(a, w))
			}
		}
		if damaged {
			found++
		}
	}
	// A branch page's entry that names its neighbour's page: a leaf read
	// twice by a walk (bbolt's page header: id, flags, count; a branch
	// entry: pos, key size, page id). A seek past it misses the leaf it no
	// longer names, and nothing it reads can tell (docs/design.md): the
	// walks alone are asked.
	const pageSize, branchPage = 4096, 0x01
	for page := 0; page+pageSize <= len(data); page += pageSize {
		if binary.LittleEndian.Uint16(data[page+8:]) != branchPage {
			continue
		}
		for i := 1; i < int(binary.LittleEndian.Uint16(data[page+10:])); i++ {
			entry := page + 16 + 16*i
			b := bytes.Clone(data)
			copy(b[entry+8:entry+16], b[entry-16+8:])
			try(b, fmt.Sprintf("entry %d of the branch page at %d naming the page before", i, page), true)
			// Its key (the first key of the page it names) flipped: a seek
			// goes down a page early or late.
			key, size := entry+int(binary.LittleEndian.Uint32(data[entry:])), int(binary.LittleEndian.Uint32(data[entry+4:]))
			b = bytes.Clone(data)
			b[key+rng.IntN(size)] ^= byte(1 + rng.IntN(255))
			try(b, fmt.Sprintf("the key of entry %d of the branch page at %d flipped", i, page), false)
		}
	}
	for _, e := range entries {
		type flip struct {
			where string
			at    int
		}
		var flips []flip
		for at, rest := 0, data; ; {
			i := bytes.Index(rest, e[1])
			if i < 0 {
				break
			}
			if page := (at + i) / pageSize * pageSize; at+i < page+16+16*int(binary.LittleEndian.Uint16(data[page+10:])) {
				// The bytes of a page's header or of its entries' headers
				// (page numbers, offsets, sizes) that happen to read as the
				// entry: a page number flipped into a loop makes bbolt loop
				// (docs/not-done.md), which is not what this flips.
				at, rest = at+i+1, rest[i+1:]
				continue
			}
			flips = append(flips, flip{fmt.Sprintf("key at %d", at+i), at + i + rng.IntN(len(e[1]))})
			if len(e[2]) > 0 && bytes.HasPrefix(rest[i+len(e[1]):], e[2]) {
				flips = append(flips, flip{fmt.Sprintf("value at %d", at+i), at + i + len(e[1]) + rng.IntN(len(e[2]))})
			}
			at, rest = at+i+1, rest[i+1:]
		}
		if len(flips) == 0 {
			t.Fatalf("the entry %q of %s is nowhere in the file", e[1], e[0])
		}
		for _, f := range flips {
			b := bytes.Clone(data)
			b[f.at] ^= byte(1 + rng.IntN(255))
			try(b, fmt.Sprintf("an entry of %s, its %s flipped (byte %d)", e[0], f.where, f.at), false)
		}
	}
	if found == 0 {
		t.Fatalf("none of %d flipped entries was found damaged", images)
	}
	t.Logf("%d flipped entries: %d found damaged, the others (free pages) answer as the good index", images, found)
}

// answer is one read's answer: what was read (of what), and what it said,
// or that it found damage.
type answer struct {
	what    string
	of      int64
	got     []int64
	damaged bool
}

// probe is what everyAnswer asks of an index: lookups of ids (request and
// lease ids), reads of tasks 0 to last, and reads of a queue's lease order
// from after each of after's entries and of times from each of times; the
// read of a good index sets after and times.
type probe struct {
	ids   []string
	last  int64
	after map[string][]state.OrderEntry
	times []int64
}

// everyAnswer is what each read of the index at path answers, each on its
// own, or the error that opening it meets; with walks, only the reads of
// every task, from the first key on.
func everyAnswer(path string, p *probe, walks bool) ([]answer, error) {
	db, err := Open(path, false, 0)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	if _, _, err := db.Meta(); err != nil {
		return nil, err
	}
	r, err := db.Read()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []answer
	say := func(what string, of int64, got []int64, err error) {
		if err != nil {
			var damage *damageError
			if !errors.As(err, &damage) && !strings.Contains(err.Error(), "the index is damaged") { // a bbolt panic is caught as damage too
				panic(fmt.Sprintf("%s %d: %v: not damage", what, of, err))
			}
			got = nil
		}
		out = append(out, answer{what, of, got, err != nil})
	}
	collect := func(each func(func(int64) bool) error) ([]int64, error) {
		var got []int64
		err := each(func(n int64) bool { got = append(got, n); return true })
		return got, err
	}
	for i, unfinished := range []bool{false, true} {
		var b []byte
		sum := crc32.NewIEEE()
		err := r.Each(unfinished, func(t *state.Task) bool {
			b = state.AppendTask(b[:0], t)
			_, _ = sum.Write(b)
			return true
		})
		say("each (0: every task, 1: unfinished), the CRC of the tasks", int64(i), []int64{int64(sum.Sum32())}, err)
	}
	if walks {
		return out, nil
	}
	for n := range p.last + 1 {
		t, err := r.Task(n)
		var sum int64 = -1 // none
		if t != nil {
			sum = int64(crc32.ChecksumIEEE(state.AppendTask(nil, t)))
		}
		say("task", n, []int64{sum}, err)
	}
	queues, err := r.Queues()
	say(fmt.Sprint("queues ", queues), 0, nil, err)
	n, err := r.Unfinished(nil)
	say("unfinished", 0, []int64{int64(n)}, err)
	for _, q := range []string{"default", "mail", "img"} {
		n, err := r.Unfinished([]string{q})
		say("unfinished of "+q, 0, []int64{int64(n)}, err)
		order := p.after[q] == nil
		queued := func(after state.OrderEntry) ([]int64, error) {
			var got []int64
			err := r.Queued(q, after, func(e state.OrderEntry) bool {
				leased := int64(0)
				if e.Leased {
					leased = 1
				}
				if order && e.Num%5 == 0 {
					p.after[q] = append(p.after[q], e)
				}
				got = append(got, e.Num, int64(e.Priority), e.From, e.To, leased)
				return true
			})
			return got, err
		}
		got, err := queued(state.OrderEntry{})
		say("queued of "+q, 0, got, err)
		order = false
		for _, e := range p.after[q] {
			got, err := queued(e)
			say("queued of "+q+" after", e.Num, got, err)
		}
	}
	for _, worker := range []string{"", "W0", "W1", "W2"} {
		got, err := collect(func(fn func(int64) bool) error { return r.Leased(worker, fn) })
		say("leased by "+worker, 0, got, err)
	}
	var times []int64
	err = r.Upcoming(math.MinInt64, func(at, n int64) bool {
		if p.times == nil && len(times)%20 == 0 {
			p.times = append(p.times, at)
		}
		times = append(times, at, n)
		return true
	})
	say("upcoming", 0, times, err)
	for _, at := range p.times {
		got, err := collect(func(fn func(int64) bool) error { return r.Lapsing(at, fn) })
		say("lapsing until", at, got, err)
		got = got[:0]
		err = r.Wakes(at, func(at, n int64) bool { got = append(got, at, n); return true })
		say("wakes after", at, got, err)
	}
	for n := range p.last + 1 {
		got, err := collect(func(fn func(int64) bool) error { return r.Dependents(n, 0, fn) })
		say("dependents of", n, got, err)
	}
	for i, id := range p.ids {
		for _, lookup := range []func(string) (int64, error){r.Submitted, r.LeaseOwner, r.LeaseRequested} {
			n, err := lookup(id)
			say("lookup of the id numbered", int64(i), []int64{n}, err)
		}
	}
	return out, nil
}

// difference says how a read's answer differs from a good index's.
func difference(got, want answer) string {
	j := 0
	for j < min(len(got.got), len(want.got)) && got.got[j] == want.got[j] {
		j++
	}
	return fmt.Sprintf("%s %d answered, and differently: %d numbers, want %d; from the %dth on %v, want %v", got.what, got.of,
		len(got.got), len(want.got), j, got.got[j:min(j+6, len(got.got))], want.got[j:min(j+6, len(want.got))])
}

// TestALoopOfPagesIsDamage: a branch page that names itself, a page named
// twice (a page above it, or its neighbour's), or a page past the file's
// end is damage to CheckPages, for every branch page of a written index;
// the index itself passes. bbolt would follow the first two for ever, its
// cursor's stack growing until the process runs out of memory.
func TestALoopOfPagesIsDamage(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.index")
	writtenIndex(t, good, 9, 3000)
	data, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	check := func(b []byte) error {
		path := filepath.Join(dir, "loop.index")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := Open(path, false, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		return db.CheckPages()
	}
	if err := check(data); err != nil {
		t.Fatalf("the index as written: %v", err)
	}
	const pageSize = 4096
	branches := 0
	for page := 0; page+pageSize <= len(data); page += pageSize {
		if binary.LittleEndian.Uint16(data[page+8:]) != branchFlag {
			continue
		}
		branches++
		id := binary.LittleEndian.Uint64(data[page:])
		count := int(binary.LittleEndian.Uint16(data[page+10:]))
		names := map[string]uint64{"itself": id, "a page past the file end": uint64(len(data) / pageSize)}
		if count > 1 {
			names["its first child's page"] = binary.LittleEndian.Uint64(data[page+pageHeader+8:])
		}
		for what, child := range names {
			b := bytes.Clone(data)
			binary.LittleEndian.PutUint64(b[page+pageHeader+(count-1)*branchEntry+8:], child)
			if err := check(b); err == nil || !strings.Contains(err.Error(), "the index is damaged") {
				t.Fatalf("branch page %d (of %d entries) whose last entry names %s: %v", id, count, what, err)
			}
		}
	}
	if branches < 3 {
		t.Fatalf("the index has %d branch pages: the history is too short to test them", branches)
	}
	// The tree of the buckets themselves, one leaf, taken for a branch
	// page: its entries read as page numbers.
	db, err := Open(good, false, 0)
	if err != nil {
		t.Fatal(err)
	}
	var root uint64
	_ = db.db.View(func(tx *bolt.Tx) error { root = uint64(tx.Cursor().Bucket().Root()); return nil })
	db.Close()
	b := bytes.Clone(data)
	binary.LittleEndian.PutUint16(b[root*pageSize+8:], branchFlag)
	if err := check(b); err == nil || !strings.Contains(err.Error(), "its buckets") {
		t.Fatalf("the buckets' leaf (page %d) taken for a branch page: %v", root, err)
	}
}
