package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
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
	return "tasks " + jsonOf(allTasks(s)) + "\n" + lookups(s, names, now)
}

// lookups is answers without the listing of every task.
func lookups(s *State, names []string, now int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seq %d at %d\n", s.LastSeq(), s.LastAt())
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
		d, err := s.DecideSubmit(Submit{Payload: "p0", Window: Duration(time.Minute), Policy: RetryPolicy{MaxAttempts: 1}, RequestID: name}, now)
		fmt.Fprintf(&b, "  submit %s %v\n", jsonOf(d), err)
		d, err = s.DecideLease(LeaseRequest{Worker: "W0", Duration: time.Second, RequestID: name}, now)
		fmt.Fprintf(&b, "  lease %s %v\n", jsonOf(d), err)
		if ok {
			for _, a := range t.Attempts {
				d, err = s.DecideComplete(t.ID, a.LeaseID, now)
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

func replay(t *testing.T, s *State, recs []Record) {
	t.Helper()
	for _, r := range recs {
		if err := s.Apply(r); err != nil {
			t.Fatalf("record %d: %v", r.Seq, err)
		}
	}
}

// TestArchivePlusSnapshotPlusTailEqualsReplay: for random histories, the
// finished tasks archived at a random record, then again (the new archive
// copying the first) at a later one, a snapshot taken there and loaded with
// the archive, then the rest of the records applied, answer every lookup and
// decision exactly as a full replay does; and so does the state that did the
// archiving and went on.
func TestArchivePlusSnapshotPlusTailEqualsReplay(t *testing.T) {
	histories := 300
	if testing.Short() {
		histories = 60
	}
	archived := 0
	for seed := range histories {
		recs := randomRecords(t, uint64(seed))
		full := New()
		replay(t, full, recs)
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		first := rng.IntN(len(recs) + 1)
		second := first + rng.IntN(len(recs)-first+1)

		s := New()
		replay(t, s, recs[:first])
		if _, err := s.ArchiveFinished(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		replay(t, s, recs[first:second])
		b, err := s.ArchiveFinished()
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		archived += s.archive.Len()
		if inMemory, finished := s.InMemory(); finished != 0 || inMemory+s.archive.Len() != len(allTasks(s)) {
			t.Fatalf("seed %d: %d tasks in memory, %d finished, after archiving", seed, inMemory, finished)
		}
		archive, err := OpenArchive(b)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		loaded, err := LoadSnapshot(s.Snapshot(), archive)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		replay(t, loaded, recs[second:])
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
	if archived == 0 {
		t.Fatal("no history finished a task: the test archived nothing")
	}
	t.Logf("%d histories, %d tasks archived in all", histories, archived)
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

// archivedState replays a long random history in two parts and archives the
// finished tasks after each, so that its archive holds a copied old part.
func archivedState(t *testing.T, seed uint64) (*State, []byte) {
	recs := randomHistory(t, seed, 500)
	s := New()
	replay(t, s, recs[:len(recs)/2])
	if _, err := s.ArchiveFinished(); err != nil {
		t.Fatal(err)
	}
	replay(t, s, recs[len(recs)/2:])
	b, err := s.ArchiveFinished()
	if err != nil {
		t.Fatal(err)
	}
	return s, b
}

// TestDamagedArchiveNeverAnswersWrong flips bits all over an archive, one at
// a time (a different bit of every third byte): each damaged archive either
// does not open, or answers every lookup, decision and listing as the intact
// one does, or reports damage (Damage) by the time it has answered
// differently. The checkpoint code relies on this to void a command and
// replay the WAL.
func TestDamagedArchiveNeverAnswersWrong(t *testing.T) {
	s, good := archivedState(t, 1)
	snapshot := s.Snapshot()
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
	for i := 0; i < len(good); i += 3 {
		bad := bytes.Clone(good)
		bad[i] ^= 1 << (i % 8)
		archive, err := OpenArchive(bad)
		if err != nil {
			refused++
			continue
		}
		loaded, err := LoadSnapshot(snapshot, archive)
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
	t.Logf("%d-byte archive of %d tasks, %d flips: %d refused on open, %d detected by a lookup, %d unread by the lookups",
		len(good), s.archive.Len(), (len(good)+2)/3, refused, detected, unread)
	if detected == 0 || refused == 0 || unread == 0 {
		t.Fatal("the flips did not reach the header, the lookups and the records no lookup reads")
	}
}

func TestOpenArchiveRefusesCutsAndGarbage(t *testing.T) {
	_, good := archivedState(t, 2)
	for cut := range len(good) {
		if _, err := OpenArchive(good[:cut]); err == nil {
			t.Fatalf("an archive cut at %d of %d opened", cut, len(good))
		}
	}
	if _, err := OpenArchive(append(bytes.Clone(good), 0)); err == nil {
		t.Fatal("trailing bytes accepted")
	}
	other, _ := archivedState(t, 3)
	other.lastSeq++ // a snapshot that names no archive, or another one
	if _, err := LoadSnapshot(New().Snapshot(), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadSnapshot(other.Snapshot(), nil); err != ErrArchiveMismatch {
		t.Fatalf("a snapshot naming an archive loaded without it: %v", err)
	}
}

// TestArchivingOverADamagedArchiveFails: a new archive copies the old one's
// records only after checking them against its header, so damage no lookup
// has read yet is found there instead of being copied on.
func TestArchivingOverADamagedArchiveFails(t *testing.T) {
	s, good := archivedState(t, 4)
	bad := bytes.Clone(good)
	archive, err := OpenArchive(bad)
	if err != nil {
		t.Fatal(err)
	}
	bad[len(archiveMagic)+archiveHeaderSize+4+10] ^= 1 // inside the first record
	loaded, err := LoadSnapshot(s.Snapshot(), archive)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loaded.ArchiveFinished(); !errors.Is(err, ErrArchive) || loaded.Damage() == nil {
		t.Fatalf("archiving over a damaged archive: %v, damage %v", err, loaded.Damage())
	}
}
