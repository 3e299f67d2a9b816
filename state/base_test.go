package state

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// baseAt builds the base of the state that recs lead to, as its records
// read back from their encoding (so the hand-written decoder reads them).
func baseAt(t *testing.T, s *State, keptFrom int64, history string) []Record {
	t.Helper()
	recs, _, _, err := baseRecords(s, s.LastAt()+1_000, keptFrom, history, strings.Repeat("ab", 32), 0x1234abcd)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		body, err := EncodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if recs[i], err = DecodeRecord(body); err != nil {
			t.Fatalf("%s: %v", body[:min(len(body), 80)], err)
		}
	}
	return recs
}

// baseRecords are the records of the base of s, built in memory.
func baseRecords(s *State, at, keptFrom int64, history, hash string, chainFrom uint32) (recs []Record, kept, dropped int, err error) {
	var tasks bytes.Buffer
	snap, err := s.WriteBase(&tasks, keptFrom, nil)
	if err != nil {
		return nil, 0, 0, err
	}
	err = snap.Records(at, history, hash, chainFrom, &tasks, func(r Record) error { recs = append(recs, r); return nil })
	return recs, snap.Kept, snap.Dropped, err
}

// retained is the state without the finished tasks that ended before
// keptFrom, as the first bases were built: the snapshot of it is the
// snapshot a base of s holds.
func retained(s *State, keptFrom int64) *State {
	r := *s
	r.order = make([]*Task, 0, len(s.order))
	for _, t := range s.order {
		if !t.State.Terminal() || t.Ended >= keptFrom {
			r.order = append(r.order, t)
		}
	}
	r.live = make([]*Task, 0, len(s.live)-s.ended)
	for _, t := range s.live {
		if !t.State.Terminal() {
			r.live = append(r.live, t)
		}
	}
	r.ended = 0
	return &r
}

// verified replays recs through a Verifier: every invariant of the base's
// state and of every record after it is checked.
func verified(t *testing.T, recs []Record) *State {
	t.Helper()
	v := NewVerifier()
	for _, r := range recs {
		if err := v.Step(r); err != nil {
			t.Fatalf("record %d (%s): %v", r.Seq, r.Type, err)
		}
	}
	return v.State
}

// TestBasePlusTailEqualsReplay: for random histories, a base keeping every
// task, taken at a random record, followed by the records after it (and
// compacted again at a later record: a base built on a base), answers every
// lookup, decision and listing exactly as a full replay does.
func TestBasePlusTailEqualsReplay(t *testing.T) {
	histories := 300
	if testing.Short() {
		histories = 60
	}
	for seed := range histories {
		recs := randomRecords(t, uint64(seed))
		full := New()
		replay(t, full, recs)
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		first := 1 + rng.IntN(len(recs))
		second := first + rng.IntN(len(recs)-first+1)

		s := New()
		replay(t, s, recs[:first])
		compacted := append(baseAt(t, s, MinTime, HistoryKept), recs[first:second]...)
		again := verified(t, compacted)
		if again.Base() == nil || again.Base().Seq != int64(first) {
			t.Fatalf("seed %d: base %+v, want seq %d", seed, again.Base(), first)
		}
		if second > first {
			compacted = append(baseAt(t, again, MinTime, HistoryDropped), recs[second:]...)
		} else {
			compacted = append(compacted, recs[second:]...)
		}
		got := verified(t, compacted)

		now := full.LastAt() + 5_000
		names := namesIn(full)
		if a, want := answers(got, names, now), answers(full, names, now); a != want {
			t.Fatalf("seed %d, compacted at %d and %d, answers differently:\n%s", seed, first, second, firstDiff(a, want))
		}
	}
}

// TestBaseDropsWhatEndedBeforeTheRetention: a base keeps every unfinished
// task and every task that ended at or after kept_from, each answering as in
// the full replay; every other task is unknown, and says it was compacted.
func TestBaseDropsWhatEndedBeforeTheRetention(t *testing.T) {
	dropped, kept := 0, 0
	for seed := range 200 {
		recs := randomRecords(t, uint64(seed))
		full := New()
		replay(t, full, recs)
		rng := rand.New(rand.NewPCG(uint64(seed), 13))
		keptFrom := recs[rng.IntN(len(recs))].At
		got := verified(t, baseAt(t, full, keptFrom, HistoryKept))

		var keptNames []string
		for _, task := range allTasks(full) {
			_, err := got.Task(task.ID)
			if task.State.Terminal() && task.Ended < keptFrom {
				var refused *Error
				if !errors.As(err, &refused) || refused.Kind != NotFound || !strings.Contains(err.Error(), "compacted on") {
					t.Fatalf("seed %d: %s ended at %d, before %d, yet: %v", seed, task.ID, task.Ended, keptFrom, err)
				}
				dropped++
				continue
			}
			if err != nil {
				t.Fatalf("seed %d: %s was kept, yet: %v", seed, task.ID, err)
			}
			keptNames = append(keptNames, task.ID, task.RequestID)
			for _, a := range task.Attempts {
				keptNames = append(keptNames, a.LeaseID, a.RequestID)
			}
			kept++
		}
		keptNames = slices.DeleteFunc(keptNames, func(s string) bool { return s == "" })
		now := full.LastAt() + 5_000
		if a, want := lookups(got, keptNames, now), lookups(full, keptNames, now); a != want {
			t.Fatalf("seed %d, kept from %d, answers differently:\n%s", seed, keptFrom, firstDiff(a, want))
		}
	}
	if dropped == 0 || kept == 0 {
		t.Fatalf("dropped %d tasks and kept %d: the test needs both", dropped, kept)
	}
}

// TestBaseRefusals: a base that is not whole, not first, or not what its
// digest says is refused like any bad record.
func TestBaseRefusals(t *testing.T) {
	recs := randomRecords(t, 1)
	full := New()
	replay(t, full, recs)
	base := baseAt(t, full, MinTime, HistoryKept)
	tamper := func(i int, fn func(*Record)) []Record {
		c := slices.Clone(base)
		fn(&c[i])
		return c
	}
	last := len(base) - 1
	cases := map[string]struct {
		recs []Record
		want string
	}{
		"not first":        {append(slices.Clone(recs[:1]), base...), "must open the WAL"},
		"part missing":     {append(slices.Clone(base[:1]), base[last]), "ends after 0"},
		"record inside":    {append(slices.Clone(base[:2]), recs[0]), "incomplete"},
		"digest":           {tamper(last, func(r *Record) { r.Digest = strings.Repeat("0", 64) }), "digest"},
		"part out of turn": {tamper(1, func(r *Record) { r.Part = 2 }), "does not follow"},
		"chain_from":       {tamper(last, func(r *Record) { r.ChainFrom = "" }), "chain_from"},
		"stray chain_from": {append(slices.Clone(base), Record{ChainFrom: "00000000", Seq: full.LastSeq() + 1, At: full.LastAt(), Type: TaskCreated}), "only a BaseEnd"},
	}
	for name, c := range cases {
		v := NewVerifier()
		var err error
		for _, r := range c.recs {
			if err = v.Step(r); err != nil {
				break
			}
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", name, err, c.want)
		}
	}
}

// TestBaseOfASpilledStateIsTheSame: the base built from a state whose tasks
// were written into a source at random records (an index, as a replay
// writes one) is byte for byte the base of the state that holds them all, which is the snapshot of that state less what the retention drops, as
// the first bases were built: a base is a function of the history alone.
func TestBaseOfASpilledStateIsTheSame(t *testing.T) {
	histories := 200
	if testing.Short() {
		histories = 40
	}
	spills := 0
	for seed := range histories {
		recs := randomRecords(t, uint64(seed))
		rng := rand.New(rand.NewPCG(uint64(seed), 17))
		full, spilled, src := New(), New(), newMemSource()
		replay(t, full, recs)
		for _, r := range recs {
			replay(t, spilled, []Record{r})
			if rng.IntN(8) == 0 {
				src.write(spilled)
				spills++
			}
		}
		ended := []int64{MinTime}
		for _, task := range allTasks(full) {
			if task.State.Terminal() {
				ended = append(ended, task.Ended, task.Ended+1)
			}
		}
		keptFrom := ended[rng.IntN(len(ended))]
		r := retained(full, keptFrom)
		want := snap(r)
		for name, s := range map[string]*State{"full": full, "spilled": spilled} {
			var tasks bytes.Buffer
			snap, err := s.WriteBase(&tasks, keptFrom, nil)
			if err != nil {
				t.Fatalf("seed %d, %s: %v", seed, name, err)
			}
			got := slices.Concat(snap.Head, tasks.Bytes(), snap.Tail)
			if !bytes.Equal(got, want) {
				t.Fatalf("seed %d, %s, kept from %d: the base's snapshot differs from the retained state's (%d bytes, want %d)", seed, name, keptFrom, len(got), len(want))
			}
			if kept := len(retained(full, keptFrom).order); snap.Kept != kept || snap.Kept+snap.Dropped != len(full.order) {
				t.Fatalf("seed %d, %s: kept %d and dropped %d of %d tasks, want %d kept", seed, name, snap.Kept, snap.Dropped, len(full.order), kept)
			}
		}
	}
	if spills == 0 {
		t.Fatal("no state was spilled")
	}
}

// TestABaseLoadsPartByPart: a base of many parts, its tasks running from one
// part into the next, loads as the tasks come in, and a replay that writes
// them into a source between parts (as a replay building the index does)
// answers as the full replay does once the base and the records after it
// are read, through the Verifier's checks.
func TestABaseLoadsPartByPart(t *testing.T) {
	recs := randomHistory(t, 3, 1500)
	payload := strings.Repeat("p", 12_000)
	for i := range recs {
		if recs[i].Type == TaskCreated && recs[i].Schedule == "" {
			recs[i].Payload = payload + recs[i].Payload // a base of several parts from a history quick to make
		}
	}
	full := New()
	replay(t, full, recs)
	at := len(recs) * 2 / 3
	s := New()
	replay(t, s, recs[:at])
	base := baseAt(t, s, MinTime, HistoryKept)
	if len(base) < 5 {
		t.Fatalf("the base has %d parts: the test needs tasks across parts", len(base)-2)
	}
	t.Logf("a base of %d parts holding %d tasks", len(base)-2, len(s.order))
	for _, spillAt := range []int{0, 4, 25} {
		v, src := NewVerifier(), newMemSource()
		moved := 0
		for _, r := range append(slices.Clone(base), recs[at:]...) {
			if err := v.Step(r); err != nil {
				t.Fatalf("spilling at %d: record %d (%s): %v", spillAt, r.Seq, r.Type, err)
			}
			if inMemory := v.State.HotCount(); spillAt > 0 && r.Type == BasePart && inMemory >= spillAt {
				src.write(v.State)
				moved += inMemory
			}
		}
		if spillAt > 0 && moved == 0 {
			t.Fatalf("spilling at %d: no task was moved out while the base loaded", spillAt)
		}
		now := full.LastAt() + 5_000
		names := namesIn(full)
		if a, want := answers(v.State, names, now), answers(full, names, now); a != want {
			t.Fatalf("spilling at %d, the base loaded part by part answers differently:\n%s", spillAt, firstDiff(a, want))
		}
	}
}
