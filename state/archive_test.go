package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// answers renders everything a state answers about a set of names: every
// task in creation order, each name looked up as a task id, a request id, a
// lease id and a lease request id, and the decisions that depend on those
// lookups (submit with that request id, lease with it, complete with that
// lease). Two states that give the same answers cannot be told apart by a
// command.
func answers(s *State, names []string, now int64) string {
	return "tasks " + jsonOf(allTasks(s)) + "\neach " + jsonOf(eachTask(s, false)) + "\neach live " + idsOf(unfinished(eachTask(s, true))) +
		"\nin any order " + jsonOf(inAnyOrder(s, false)) + "\nlive in any order " + idsOf(unfinished(inAnyOrder(s, true))) +
		"\n" + lookups(s, names, now)
}

// inAnyOrder is what EachTaskInAnyOrder hands out, put in creation order.
func inAnyOrder(s *State, live bool) []*Task {
	var out []*Task
	if err := s.EachTaskInAnyOrder(live, func(t *Task) bool { out = append(out, t); return true }); err != nil {
		panic(err)
	}
	slices.SortFunc(out, byCreation)
	return out
}

// eachTask is what EachTask hands out (a failure is the test's).
func eachTask(s *State, live bool) []*Task {
	var out []*Task
	if err := s.EachTask(live, func(t *Task) bool { out = append(out, t); return true }); err != nil {
		panic(err)
	}
	return out
}

// lookups is answers without the listing of every task; with the decisions
// that read every unfinished task (expire, the next event, leases by queue,
// the live tasks) at now and later.
func lookups(s *State, names []string, now int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seq %d at %d\n", s.LastSeq(), s.LastAt())
	for _, at := range []int64{now, now + 60_000, now + 3_600_000} {
		fmt.Fprintf(&b, "at %d: expire %s; next event %d; live %s; stats %s\n", at, jsonOf(s.DecideExpire(at)), s.NextEventAt(at), idsOf(unfinished(s.Live())), jsonOf(s.QueueStats(at)))
		for _, queues := range [][]string{nil, {"default"}, {"q1", "q2"}} {
			d, err := s.DecideLease(LeaseRequest{Worker: "W9", Duration: time.Second, Queues: queues}, at)
			fmt.Fprintf(&b, "  lease in %v: %s %v\n", queues, jsonOf(d), err)
		}
	}
	for _, d := range s.Domains() {
		fmt.Fprintf(&b, "domain %s %+v %v %v %v\n", d.Name, d.Lease, d.Backlog, d.Processed.Sorted(), d.Failed.Sorted())
	}
	for _, name := range names {
		t, taskErr := s.lookupTask(name)
		ok := t != nil
		sub, subErr := s.submitted(name)
		owner, ownerErr := s.leaseOwner(name)
		lr, lrErr := s.leaseRequested(name)
		fmt.Fprintf(&b, "%s: task %v %s; submit %s; lease of %s; lease request %+v; damage %v\n", name, ok, idOf(t), idOf(sub), owner, lr,
			errors.Join(taskErr, subErr, ownerErr, lrErr) != nil)
		if ok {
			w, err := s.Explain(t.ID, now)
			fmt.Fprintf(&b, "  why %s %v\n", jsonOf(w), err)
		}
		d, err := s.DecideSubmit(Submit{Payload: "p0", Window: Duration(time.Minute), Policy: RetryPolicy{MaxAttempts: 1}, RequestID: name}, now)
		fmt.Fprintf(&b, "  submit %s %v\n", jsonOf(d), err)
		d, err = s.DecideLease(LeaseRequest{Worker: "W0", Duration: time.Second, RequestID: name}, now)
		fmt.Fprintf(&b, "  lease %s %v\n", jsonOf(d), err)
		if ok {
			for _, a := range t.Attempts {
				d, err = s.DecideComplete(t.ID, a.LeaseID, "", now)
				fmt.Fprintf(&b, "  complete %s %s %v\n", a.LeaseID, jsonOf(d), err)
			}
		}
	}
	return b.String()
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// unfinished is the tasks that are not terminal: Live may hold ended ones.
func unfinished(tasks []*Task) []*Task {
	var out []*Task
	for _, t := range tasks {
		if !t.State.Terminal() {
			out = append(out, t)
		}
	}
	return out
}

func idsOf(tasks []*Task) string {
	var ids []string
	for _, t := range tasks {
		ids = append(ids, t.ID)
	}
	return strings.Join(ids, " ")
}

func idOf(t *Task) string {
	if t == nil {
		return "-"
	}
	return t.ID
}

// namesIn lists every id a state knows, and some it does not.
func namesIn(s *State) []string { return namesOf(allTasks(s)) }

// namesOf lists the ids of tasks, and some ids no task has.
func namesOf(tasks []*Task) []string {
	names := []string{"T999", "L999", "R999", "nope", ""}
	for _, t := range tasks {
		names = append(names, t.ID, t.RequestID)
		for _, a := range t.Attempts {
			names = append(names, a.LeaseID)
			if a.RequestID != "" {
				names = append(names, a.RequestID)
			}
		}
	}
	return names
}

// compact is Compact with the archive, failing the test on an error.
func compact(t *testing.T, s *State) (archive, cold []byte) {
	t.Helper()
	archive, cold, err := compactBytes(s, true, true)
	if err != nil {
		t.Fatal(err)
	}
	return archive, cold
}

// compactBytes rewrites the archive (with archive) and the cold set (with
// cold) into memory, one file each (MoveOut, Rewrite): it returns the new
// files' bytes (nil for one not asked for).
func compactBytes(s *State, archive, cold bool) (archiveBytes, coldBytes []byte, err error) {
	rewrite := func(yes bool) Move {
		if yes {
			return Rewrite
		}
		return Stay
	}
	err = s.MoveOut(rewrite(archive), rewrite(cold), func(isCold bool, write func(io.Writer) error) (*Archive, error) {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			return nil, err
		}
		if isCold {
			coldBytes = b.Bytes()
		} else {
			archiveBytes = b.Bytes()
		}
		return OpenArchive(b.Bytes(), nil)
	})
	return archiveBytes, coldBytes, err
}

// load opens an archive and a cold set and loads a snapshot with them.
func load(snapshot, archiveBytes, coldBytes []byte) (*State, error) {
	archive, err := OpenArchive(archiveBytes, nil)
	if err != nil {
		return nil, err
	}
	cold, err := OpenArchive(coldBytes, nil)
	if err != nil {
		return nil, err
	}
	return LoadSnapshot(snapshot, []*Archive{archive}, []*Archive{cold})
}

func replay(t *testing.T, s *State, recs []Record) {
	t.Helper()
	for _, r := range recs {
		if err := s.Apply(r); err != nil {
			t.Fatalf("record %d: %v", r.Seq, err)
		}
	}
}

// TestArchivePlusSnapshotPlusTailEqualsReplay: for random histories, the
// tasks compacted at a random record (finished ones to the archive, the
// others to the cold set), then again (the new archive copying the first) at
// a later one, a snapshot taken there and loaded with both, compacted once
// more part way through the rest of the records, answer every lookup and
// decision exactly as a full replay does; and so does the state that did the
// compacting and went on.
func TestArchivePlusSnapshotPlusTailEqualsReplay(t *testing.T) {
	histories := 300
	if testing.Short() {
		histories = 60
	}
	archived, cold0 := 0, 0
	for seed := range histories {
		recs := randomRecords(t, uint64(seed))
		full := New()
		replay(t, full, recs)
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		first := rng.IntN(len(recs) + 1)
		second := first + rng.IntN(len(recs)-first+1)

		s := New()
		replay(t, s, recs[:first])
		compact(t, s)
		replay(t, s, recs[first:second])
		b, cold := compact(t, s)
		archived, cold0 = archived+s.archive.Len(), cold0+s.cold.Len()
		if inMemory, _ := s.InMemory(); inMemory != 0 || s.archive.Len()+s.cold.Len() != len(allTasks(s)) {
			t.Fatalf("seed %d: %d tasks in memory after compacting", seed, inMemory)
		}
		loaded, err := load(snap(s), b, cold)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		third := second + rng.IntN(len(recs)-second+1)
		replay(t, loaded, recs[second:third])
		if _, _, err := compactBytes(loaded, rng.IntN(2) == 0, rng.IntN(2) == 0); err != nil { // a cold set written over a cold set, or not
			t.Fatalf("seed %d: %v", seed, err)
		}
		replay(t, loaded, recs[third:])
		replay(t, s, recs[second:])

		now := full.LastAt() + 5_000
		names := namesIn(full)
		want := answers(full, names, now)
		for name, got := range map[string]*State{"loaded": loaded, "archiving": s} {
			if a := answers(got, names, now); a != want {
				t.Fatalf("seed %d, archived at %d and %d, %s state answers differently:\n%s", seed, first, second, name, firstDiff(a, want))
			}
			if err := got.Damage(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
	}
	if archived == 0 || cold0 == 0 {
		t.Fatalf("the test archived %d tasks and put %d in cold sets: it needs both", archived, cold0)
	}
	t.Logf("%d histories, %d tasks archived and %d put in cold sets in all", histories, archived, cold0)
}

// memorySink is a Sink that keeps each file in memory.
func memorySink(_ bool, write func(io.Writer) error) (*Archive, error) {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return nil, err
	}
	return OpenArchive(b.Bytes(), nil)
}

// keptFiles is a Sink's memory of the bytes of each file it wrote, so that
// a test can open them again as another process would (no filter, nothing
// read yet).
type keptFiles map[*Archive][]byte

func (k keptFiles) sink(_ bool, write func(io.Writer) error) (*Archive, error) {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return nil, err
	}
	a, err := OpenArchive(b.Bytes(), nil)
	if err == nil {
		k[a] = b.Bytes()
	}
	return a, err
}

// reload loads s's snapshot with its runs opened again from their bytes.
func (k keptFiles) reload(t *testing.T, s *State) *State {
	t.Helper()
	archive, cold := s.Archives()
	reopen := func(runs []*Archive) (out []*Archive) {
		for _, r := range runs {
			a, err := OpenArchive(k[r], nil)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, a)
		}
		return out
	}
	loaded, err := LoadSnapshot(s.Snapshot(), reopen(archive), reopen(cold))
	if err != nil {
		t.Fatalf("a snapshot of %d and %d runs: %v", len(archive), len(cold), err)
	}
	return loaded
}

// TestSpilledRunsAnswerAsAFullReplay: for random histories, a state that
// spills every few records (runs laid on the archive and the cold set, the
// last merged as they pile up) answers every lookup and decision exactly as
// a full replay does, at random points on the way and at the end, and so
// does its snapshot loaded with its runs opened again (a checkpoint naming
// runs), which then goes on with the records after; it holds no more runs
// than a binary counter of its spills; and compacted (the runs merged into
// one file each), snapshotted and loaded, it answers the same too, and so
// does the state that compacted and went on.
func TestSpilledRunsAnswerAsAFullReplay(t *testing.T) {
	histories := 300
	if testing.Short() {
		histories = 60
	}
	mostRuns, merged := 0, 0
	for seed := range histories {
		recs := randomRecords(t, uint64(seed))
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		full, s := New(), New()
		files := keptFiles{}
		var resumed *State // loaded from a snapshot of runs, then fed the records after
		spills, every := 0, 1+rng.IntN(6)
		for i, r := range recs {
			if err := full.Apply(r); err != nil {
				t.Fatalf("seed %d record %d: %v", seed, r.Seq, err)
			}
			if err := s.Apply(r); err != nil {
				t.Fatalf("seed %d record %d, spilled: %v", seed, r.Seq, err)
			}
			if resumed != nil {
				if err := resumed.Apply(r); err != nil {
					t.Fatalf("seed %d record %d, resumed from a snapshot of runs: %v", seed, r.Seq, err)
				}
			}
			if s.InMemoryCount() < every {
				continue
			}
			if err := s.Spill(files.sink); err != nil {
				t.Fatalf("seed %d: spill after record %d: %v", seed, r.Seq, err)
			}
			spills++
			archive, cold := s.Archives()
			if bound := bits.Len(uint(spills)) + 1; len(archive) > bound || len(cold) > bound {
				t.Fatalf("seed %d: %d and %d runs after %d spills (at most %d)", seed, len(archive), len(cold), spills, bound)
			}
			mostRuns = max(mostRuns, len(archive), len(cold))
			if rng.IntN(6) == 0 {
				now := full.LastAt() + int64(rng.IntN(120_000))
				names := namesIn(full)
				want := answers(full, names, now)
				if got := answers(s, names, now); got != want {
					t.Fatalf("seed %d, after record %d of %d (%d spills): the spilled state answers differently:\n%s", seed, i, len(recs), spills, firstDiff(got, want))
				}
				if got := answers(files.reload(t, s), names, now); got != want {
					t.Fatalf("seed %d, after record %d of %d (%d spills): its snapshot loaded with its runs answers differently:\n%s", seed, i, len(recs), spills, firstDiff(got, want))
				}
				if resumed == nil {
					resumed = files.reload(t, s)
				}
			}
		}
		now := full.LastAt() + 5_000
		names := namesIn(full)
		want := answers(full, names, now)
		if resumed != nil {
			if got := answers(resumed, names, now); got != want {
				t.Fatalf("seed %d: a state loaded from a snapshot of runs and fed the records after answers differently:\n%s", seed, firstDiff(got, want))
			}
			if err := resumed.Damage(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		archive, cold := compact(t, s)
		loaded, err := load(snap(s), archive, cold)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if a, c := s.Archives(); len(a) != 1 || len(c) != 1 {
			t.Fatalf("seed %d: %d and %d files after compacting", seed, len(a), len(c))
		}
		merged += spills
		for name, got := range map[string]*State{"loaded": loaded, "compacted": s} {
			if a := answers(got, names, now); a != want {
				t.Fatalf("seed %d (%d spills), %s state answers differently:\n%s", seed, spills, name, firstDiff(a, want))
			}
			if err := got.Damage(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
	}
	if mostRuns < 3 {
		t.Fatalf("at most %d runs on a shelf: the test needs more", mostRuns)
	}
	t.Logf("%d histories, %d spills, at most %d runs on a shelf", histories, merged, mostRuns)
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d\n got  %s\n want %s", i, g[i], w[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(g), len(w))
}

// archivedState replays a long random history in two parts and compacts
// after each, so that its archive holds a copied old part; it returns the
// archive's bytes and the cold set's.
func archivedState(t *testing.T, seed uint64) (*State, []byte, []byte) {
	recs := randomHistory(t, seed, 500)
	s := New()
	replay(t, s, recs[:len(recs)/2])
	compact(t, s)
	replay(t, s, recs[len(recs)/2:])
	archive, cold := compact(t, s)
	return s, archive, cold
}

// TestDamagedArchiveNeverAnswersWrong flips bits all over an archive, one at
// a time (a different bit of every third byte under LEASEWAL_SOAK=1, of every
// seventh else): each damaged archive either
// does not open, or answers every lookup, decision and listing as the intact
// one does, or reports damage (Damage) by the time it has answered
// differently. The checkpoint code relies on this to void a command and
// replay the WAL.
func TestDamagedArchiveNeverAnswersWrong(t *testing.T) {
	s, goodArchive, goodCold := archivedState(t, 1)
	for _, part := range []string{"archive", "cold set"} {
		t.Run(part, func(t *testing.T) {
			flipEveryThirdByte(t, s, goodArchive, goodCold, part == "cold set")
		})
	}
}

func flipEveryThirdByte(t *testing.T, s *State, goodArchive, goodCold []byte, flipCold bool) {
	good := goodArchive
	if flipCold {
		good = goodCold
	}
	snapshot := snap(s)
	var probed []*Task // every other task, so that some records are read by no lookup
	for i, task := range allTasks(s) {
		if i%2 == 0 {
			probed = append(probed, task)
		}
	}
	names := namesOf(probed)
	now := s.LastAt() + 5_000
	want, wantList := lookups(s, names, now), jsonOf(allTasks(s))
	refused, detected, unread := 0, 0, 0
	step := 7
	if soaking() {
		step = 3
	}
	for i := 0; i < len(good); i += step {
		bad := bytes.Clone(good)
		bad[i] ^= 1 << (i % 8)
		archive, cold := bad, goodCold
		if flipCold {
			archive, cold = goodArchive, bad
		}
		loaded, err := load(snapshot, archive, cold)
		if err != nil {
			refused++
			continue
		}
		got := lookups(loaded, names, now)
		switch {
		case loaded.Damage() != nil:
			detected++
		case got != want:
			t.Fatalf("byte %d flipped: a different answer without damage reported:\n%s", i, firstDiff(got, want))
		default:
			unread++
			if jsonOf(allTasks(loaded)) != wantList && loaded.Damage() == nil {
				t.Fatalf("byte %d flipped: a different listing without damage reported", i)
			}
		}
	}
	t.Logf("%d bytes, %d flips: %d refused on open, %d detected by a lookup, %d unread by the lookups",
		len(good), (len(good)+2)/3, refused, detected, unread)
	// Every record of a cold set is read by the decisions that read every
	// unfinished task (expire, the listing), so none goes unread there.
	if detected == 0 || refused == 0 || (unread == 0 && !flipCold) {
		t.Fatal("the flips did not reach the header, the lookups and the records no lookup reads")
	}
}

func TestOpenArchiveRefusesCutsAndGarbage(t *testing.T) {
	_, archive, cold := archivedState(t, 2)
	for _, good := range [][]byte{archive, cold} {
		for cut := range len(good) {
			if _, err := OpenArchive(good[:cut], nil); err == nil {
				t.Fatalf("an archive cut at %d of %d opened", cut, len(good))
			}
		}
		if _, err := OpenArchive(append(bytes.Clone(good), 0), nil); err == nil {
			t.Fatal("trailing bytes accepted")
		}
	}
	other, otherArchive, otherCold := archivedState(t, 3)
	other.lastSeq++ // a snapshot that names no archive, or another one
	if _, err := LoadSnapshot(snap(New()), nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSnapshot(snap(other), nil, nil); err != ErrArchiveMismatch {
		t.Fatalf("a snapshot naming an archive loaded without it: %v", err)
	}
	if _, err := load(snap(other), otherArchive, cold); err != ErrArchiveMismatch {
		t.Fatalf("a snapshot loaded with another cold set: %v", err)
	}
	if _, err := load(snap(other), otherArchive, otherCold); err != nil {
		t.Fatal(err)
	}
}

// TestArchivingOverADamagedArchiveFails: a new archive copies the old one's
// records only after checking them against its header, so damage no lookup
// has read yet is found there instead of being copied on.
func TestArchivingOverADamagedArchiveFails(t *testing.T) {
	s, good, cold := archivedState(t, 4)
	bad := bytes.Clone(good)
	archive, err := OpenArchive(bad, nil)
	if err != nil {
		t.Fatal(err)
	}
	bad[len(archiveMagic)+10] ^= 1 // inside the first record
	coldSet, err := OpenArchive(cold, nil)
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadSnapshot(snap(s), []*Archive{archive}, []*Archive{coldSet})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := compactBytes(loaded, true, false); !errors.Is(err, ErrArchive) || loaded.Damage() == nil {
		t.Fatalf("archiving over a damaged archive: %v, damage %v", err, loaded.Damage())
	}
}

// TestLeasesFromAColdSetSkipWhatTheyLeased: a resident server leases from
// the front of its cold set's lease order, each lease superseding the copy
// it leased; the shelf remembers how many copies at the front are
// superseded, so that the next pick does not read past them all again (a
// pick that grew with every lease before it), and the picks are still the
// oldest tasks, in order.
func TestLeasesFromAColdSetSkipWhatTheyLeased(t *testing.T) {
	s := New()
	for range 600 {
		run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(defaultSubmit, t0) })
	}
	compact(t, s)
	for i := range 300 {
		d := run(t, s, sec(1), func() (Decision, error) {
			return s.DecideLease(LeaseRequest{Worker: "W", Duration: time.Minute}, sec(1))
		})
		if want := fmt.Sprintf("T%d", i+1); d.TaskID != want {
			t.Fatalf("lease %d picked %s, want %s", i+1, d.TaskID, want)
		}
		if got := s.cold.superseded[0]; got != i {
			t.Fatalf("before lease %d the shelf knew %d copies at its front superseded, want %d", i+1, got, i)
		}
	}
}

// TestColdSetInCreationOrder: a cold set of several runs, some copies
// superseded (leased since), lists its tasks in creation order by merging
// each run's lease order a priority at a time, as the full replay lists
// them: of a few priorities, and of every one (2,001 streams a run).
func TestColdSetInCreationOrder(t *testing.T) {
	for _, priorities := range []int{3, MaxPriority - MinPriority + 1} {
		full, s := New(), New()
		apply := func(r Record) {
			t.Helper()
			for _, st := range []*State{full, s} {
				if err := st.Apply(next(st, r)); err != nil {
					t.Fatalf("%d priorities: %v", priorities, err)
				}
			}
		}
		tasks := priorities + 500
		for i := range tasks {
			r := created(fmt.Sprintf("T%d", i+1), sec(1), time.Hour, policy(3, 0, 0))
			p := MinPriority + (i*7919)%priorities // not in creation order
			notBefore := sec(1)
			r.Priority, r.Queue, r.NotBefore = &p, "default", &notBefore
			apply(r)
			if i%(tasks/3) == tasks/3-1 {
				if err := s.Spill(memorySink); err != nil {
					t.Fatal(err)
				}
			}
		}
		for i := 0; i < tasks; i += 5 { // supersedes the cold copies of these
			apply(granted(fmt.Sprintf("T%d", i+1), fmt.Sprintf("L%d", i+1), "w", 1, sec(2), sec(100)))
		}
		if _, cold := s.Archives(); len(cold) < 2 {
			t.Fatalf("%d priorities: %d runs in the cold set, want several", priorities, len(cold))
		}
		for _, run := range s.cold.runs {
			distinct := map[int32]bool{}
			c := run.cursor(partOrder)
			for b, ok := c.next(); ok; b, ok = c.next() {
				distinct[readOrderEntry(b).priority] = true
			}
			if groups := run.priorityGroups(); len(groups) != len(distinct) {
				t.Fatalf("%d priorities: a run of %d priorities makes %d streams", priorities, len(distinct), len(groups))
			}
		}
		listedAsReplayed(t, fmt.Sprintf("%d priorities", priorities), s, full)
	}
}

// TestArchiveInCreationOrder: finished tasks read back from the cold set
// (older) and just created ones (newer) finish in turn, so memory holds them
// out of creation order; each spill still adds them to the archive as one
// batch in creation order, so that the archive lists in creation order by
// merging a batch per spill, as the full replay lists them.
func TestArchiveInCreationOrder(t *testing.T) {
	full, s := New(), New()
	apply := func(r Record) {
		t.Helper()
		for _, st := range []*State{full, s} {
			if err := st.Apply(next(st, r)); err != nil {
				t.Fatal(err)
			}
		}
	}
	spill := func() {
		t.Helper()
		if err := s.Spill(memorySink); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 300 {
		apply(created(fmt.Sprintf("T%d", i+1), sec(1), time.Hour, policy(3, 0, 0)))
	}
	spill()
	spills, leases := 0, 0
	for i := range 300 {
		older, newer := fmt.Sprintf("T%d", i+1), fmt.Sprintf("T%d", 301+i)
		at := sec(float64(2 + i))
		apply(created(newer, at, time.Hour, policy(3, 0, 0)))
		for _, id := range []string{newer, older} {
			leases++
			lease := fmt.Sprintf("L%d", leases)
			apply(granted(id, lease, "w", 1, at, at+60_000))
			apply(onLease(TaskCompleted, id, lease, at))
		}
		if i%100 == 99 {
			spill()
			spills++
		}
	}
	batches := 0
	for _, run := range s.archive.runs {
		batches += len(run.batches())
	}
	if batches != spills {
		t.Fatalf("%d spills made %d batches of the archive in creation order", spills, batches)
	}
	listedAsReplayed(t, "interleaved", s, full)
}

// listedAsReplayed fails the test unless s lists its tasks (EachTask) as
// the full replay lists them, each with its state.
func listedAsReplayed(t *testing.T, what string, s, full *State) {
	t.Helper()
	var got, want []string
	if err := s.EachTask(false, func(t *Task) bool { got = append(got, t.ID+" "+string(t.State)); return true }); err != nil {
		t.Fatal(err)
	}
	for _, t := range allTasks(full) {
		want = append(want, t.ID+" "+string(t.State))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%s: %d tasks listed, want %d; first: %.300v", what, len(got), len(want), got)
	}
}
