package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// answersOf is what a state answers about every task it names and a few it
// does not, its listing, its queues, and the decisions of a lease, a repeated
// submit and an expire at now, and every payload read back: JSON, to
// compare.
func answersOf(t *testing.T, tx *store.Tx) string {
	t.Helper()
	st, now := tx.State, tx.Now
	tasks, err := st.Tasks()
	if err != nil {
		t.Fatal(err)
	}
	var out []any
	add := func(v any, err error) {
		if err != nil {
			v = err.Error()
		}
		out = append(out, v)
	}
	add(tasks, nil)
	for _, task := range tasks {
		payload, err := tx.Payload(task.Payload)
		add(payload, err)
		add(st.Task(task.ID))
		add(st.DecideSubmit(state.Submit{Payload: payload, RequestID: task.RequestID, Window: task.Window, Policy: task.Policy, Queue: task.Queue, Priority: task.Priority}, now))
		add(st.Explain(task.ID, now))
	}
	add(st.Task("T999999"))
	add(st.QueueStats(now), nil)
	add(st.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute}, now))
	add(st.DecideExpire(now), nil)
	add(st.NextEventAt(now), nil)
	b, err := json.Marshal(out)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// replayedAnswers is answersOf a full replay of a copy of the WAL at path,
// at now.
func replayedAnswers(t *testing.T, path string, now int64) string {
	t.Helper()
	var answers string
	full := store.Open(store.Options{Path: copyOf(t, path), FullReplay: true, Clock: fixedClock(now)})
	defer full.Close()
	if err := full.Read(func(tx *store.Tx) error { answers = answersOf(t, tx); return nil }); err != nil {
		t.Fatal(err)
	}
	return answers
}

// copyOf copies the WAL at path into a directory of its own.
func copyOf(t *testing.T, path string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "q.wal")
	if err := os.WriteFile(dst, mustRead(t, path), 0o644); err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestSpilledReplayAnswersAsAFullReplay: a replay from the WAL's start that
// moves its tasks out of memory every few dozen (an archive and a cold set
// of its own, unlinked temporary files) answers every lookup, listing and
// decision as a replay holding them all in memory does; a writer's replay
// spills to runs beside the WAL instead, and its checkpoint names them as
// they are, which the next command uses and answers alike from; no other
// file is left behind (the runs merged away are removed as they go).
func TestSpilledReplayAnswersAsAFullReplay(t *testing.T) {
	src := backlogWAL(t, t.TempDir(), 3000, 300)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	want := replayedAnswers(t, src, now)

	reader := copyOf(t, src)
	held, runs := 0, 0 // the most tasks in memory, and runs on a shelf, at any record of the replay
	h := store.Open(store.Options{Path: reader, SpillAfter: 40, Clock: fixedClock(now), OnRecord: func(_ state.Record, tx *store.Tx) error {
		archive, cold := tx.State.Archives()
		held, runs = max(held, tx.State.InMemoryCount()), max(runs, len(archive), len(cold))
		return nil
	}})
	err := h.Read(func(tx *store.Tx) error {
		if archive, cold := tx.State.Archives(); archive == nil || cold == nil {
			t.Fatal("a replay of 3,000 records spilling every 40 tasks spilled no archive or no cold set")
		}
		// Whatever was spilled before, a spill comes every 40 tasks, and
		// the runs merged as they pile up stay about log2(spills).
		if held > 40 || runs > 8 {
			t.Fatalf("a replay spilling every 40 tasks held up to %d in memory, on up to %d runs", held, runs)
		}
		if got := answersOf(t, tx); got != want {
			t.Fatalf("the spilled replay answers differently:\n%s\nwant\n%s", got, want)
		}
		return nil
	})
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(reader)); len(entries) != 1 {
		t.Fatalf("a reader left files beside the WAL: %v", entries)
	}

	writer := copyOf(t, src)
	w := store.Open(store.Options{Path: writer, SpillAfter: 40, Clock: fixedClock(now)})
	submit(t, w, "after the spills")
	w.Close()
	wantAfter := replayedAnswers(t, writer, now)
	next := store.Open(store.Options{Path: writer, Clock: fixedClock(now)})
	defer next.Close()
	var named int
	err = next.Read(func(tx *store.Tx) error {
		if count, ok := store.LoadCheckpoint(writer); !ok || count != int(tx.State.LastSeq()) {
			t.Fatalf("the writer's checkpoint: %d records, ok %v", count, ok)
		}
		archive, cold := tx.State.Archives()
		if named = len(archive) + len(cold); len(archive) < 2 || len(cold) < 2 {
			t.Fatalf("the writer's checkpoint names %d and %d runs: its replay's runs were copied again", len(archive), len(cold))
		}
		if got := answersOf(t, tx); got != wantAfter || !strings.Contains(got, "after the spills") {
			t.Fatalf("the command after the writer answers differently from a full replay:\n%.600s\nwant\n%.600s", got, wantAfter)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(filepath.Dir(writer))
	if caches := store.Caches(writer); len(entries) != 1+len(caches) || len(caches) != 1+named {
		t.Fatalf("beside the WAL after a writer spilled: %v; want it, its checkpoint and the %d runs it names", entries, named)
	}
}

// spillFailingFS refuses every spill, as a full or read-only directory would.
type spillFailingFS struct{ store.OS }

func (spillFailingFS) Spill(string) (*os.File, error) { return nil, errors.New("injected: no space") }

// TestSpillFailureKeepsTheTasksInMemory: when the replay cannot spill, it
// warns once and goes on with every task in memory, answering as ever.
func TestSpillFailureKeepsTheTasksInMemory(t *testing.T) {
	src := backlogWAL(t, t.TempDir(), 1000, 100)
	want := replayedAnswers(t, src, t0)
	var warnings []string
	h := store.Open(store.Options{Path: copyOf(t, src), SpillAfter: 40, Clock: fixedClock(t0), FS: spillFailingFS{},
		Warn: func(s string) { warnings = append(warnings, s) }})
	defer h.Close()
	err := h.Read(func(tx *store.Tx) error {
		if got := answersOf(t, tx); got != want {
			t.Fatal("a replay that could not spill answers differently")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "injected: no space") || !strings.Contains(warnings[0], "in memory") {
		t.Fatalf("warnings: %q", warnings)
	}
}

// leasedThenLater writes a history in which 100 tasks are leased, 200 more
// submitted, then the first 100 completed: a replay spilling every 40 tasks
// moves the leased ones out, with their attempts, before their completions.
func leasedThenLater(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, Clock: fixedClock(t0)})
	defer h.Close()
	write := func(decide func(tx *store.Tx) (state.Decision, error)) {
		t.Helper()
		if err := h.Write(func(tx *store.Tx) error {
			d, err := decide(tx)
			if err != nil {
				return err
			}
			return tx.Commit(d.Records)
		}); err != nil {
			t.Fatal(err)
		}
	}
	for range 100 {
		submit(t, h, "early")
	}
	for range 100 {
		write(func(tx *store.Tx) (state.Decision, error) {
			return tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Hour}, tx.Now)
		})
	}
	for range 200 {
		submit(t, h, "later")
	}
	for i := 1; i <= 100; i++ {
		write(func(tx *store.Tx) (state.Decision, error) {
			return tx.State.DecideComplete(fmt.Sprintf("T%d", i), fmt.Sprintf("L%d", i), "", tx.Now)
		})
	}
	return path
}

// TestSpillingVerifierFindsWhatAFullOneFinds: verify's replay spills its
// tasks too (the Verifier keeps its own account of every task by number,
// not by the task in memory). On a good history it answers as a replay
// holding every task in memory; on the same history with an early task's
// completion repeated at its end (that task long moved out of memory), it
// refuses the same record with the same words.
func TestSpillingVerifierFindsWhatAFullOneFinds(t *testing.T) {
	good := leasedThenLater(t)
	scanned, err := wal.Scan(mustRead(t, good))
	if err != nil {
		t.Fatal(err)
	}
	var bodies [][]byte
	var early []byte
	for _, f := range scanned.Frames {
		bodies = append(bodies, f.Body)
		if early == nil && strings.Contains(string(f.Body), `"TaskCompleted"`) {
			early = f.Body
		}
	}
	r, err := state.DecodeRecord(early)
	if err != nil {
		t.Fatal(err)
	}
	last, err := state.DecodeRecord(bodies[len(bodies)-1])
	if err != nil {
		t.Fatal(err)
	}
	r.Seq, r.At = int64(len(bodies)+1), last.At
	again, err := state.EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "q.wal")
	l, err := wal.Create(bad, bodies[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range append(bodies[1:], again) {
		if _, err := l.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()

	verify := func(path string, spillAfter int) (records int, counts string, err error) {
		v := state.NewVerifier()
		h := store.Open(store.Options{Path: copyOf(t, path), Verifier: v, SpillAfter: spillAfter, Clock: fixedClock(t0)})
		defer h.Close()
		err = h.Read(func(tx *store.Tx) error {
			if archive, cold := tx.State.Archives(); spillAfter == 40 && (archive == nil || cold == nil) {
				t.Fatal("the verifier's replay spilled nothing")
			}
			var states []string
			return tx.State.EachTask(false, func(task *state.Task) bool {
				states = append(states, task.ID+" "+string(task.At(tx.Now).State))
				counts = strings.Join(states, ",")
				return true
			})
		})
		return v.Records, counts, err
	}
	wantRecords, wantCounts, err := verify(good, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if records, counts, err := verify(good, 40); err != nil || records != wantRecords || counts != wantCounts {
		t.Fatalf("spilling: %d records, %v; holding every task: %d records", records, err, wantRecords)
	}
	_, _, wantErr := verify(bad, 1<<30)
	_, _, gotErr := verify(bad, 40)
	t.Logf("refused: %v", gotErr)
	if wantErr == nil || gotErr == nil || gotErr.Error() != wantErr.Error() {
		t.Fatalf("a repeated completion: spilling says %v, holding every task says %v", gotErr, wantErr)
	}
}

// TestSpillingByBytes: a replay of tasks with large payloads moves them out
// of memory by the bytes it has read, long before their count would make it
// (here, never), and answers as a replay holding them all.
func TestSpillingByBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	var batch strings.Builder
	for i := range 300 {
		fmt.Fprintf(&batch, "{\"payload\":\"%s %d\"}\n", strings.Repeat("p", 4000), i)
	}
	batchFile := filepath.Join(t.TempDir(), "batch.ndjson")
	if err := os.WriteFile(batchFile, []byte(batch.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli("--wal", path, "--now", "2026-01-01T00:00:00Z", "submit", "--batch-file", batchFile, "--window", "1h"); code != 0 {
		t.Fatalf("the batch: exit %d %s %s", code, out, errOut)
	}
	now := t0 + int64(time.Minute/time.Millisecond)
	want := replayedAnswers(t, path, now)
	h := store.Open(store.Options{Path: copyOf(t, path), SpillAfter: 1 << 20, SpillAfterBytes: 64 << 10, Clock: fixedClock(now)})
	defer h.Close()
	err := h.Read(func(tx *store.Tx) error {
		if _, cold := tx.State.Archives(); store.LenOf(cold) < 250 {
			t.Fatalf("%d of 300 tasks of 4 KB moved out by a replay spilling every 64 KiB read", store.LenOf(cold))
		}
		if got := answersOf(t, tx); got != want {
			t.Fatalf("the replay spilled by bytes answers differently:\n%s\nwant\n%s", got, want)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAResidentHandleBoundsBytesToo: a resident handle (a server) taking
// tasks of 4 KB writes a new cold set by the bytes written since the last
// one, not only by their count, so that memory holds a few dozen of them
// rather than hundreds.
func TestAResidentHandleBoundsBytesToo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, Resident: true, SpillAfterBytes: 64 << 10, Clock: fixedClock(t0)})
	defer h.Close()
	for i := range 200 {
		submit(t, h, fmt.Sprint(strings.Repeat("p", 4000), i))
	}
	err := h.Read(func(tx *store.Tx) error {
		_, cold := tx.State.Archives()
		if inMemory := tx.State.InMemoryCount(); inMemory > 40 || store.LenOf(cold)+inMemory < 200 {
			t.Fatalf("%d tasks of 4 KB in memory and %d in the cold set after 200 submits with a 64 KiB bound", inMemory, store.LenOf(cold))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAResidentHandleAddsRuns: a resident handle (a server) over a growing
// backlog moves tasks out of memory into new runs, merged as they pile up,
// instead of rewriting the cold set and the archive whole, so that what it
// holds in memory stays a batch however large the backlog; its checkpoint
// names the runs, and a command loading it answers as a full replay; the
// runs no checkpoint names are gone from beside the WAL; and caches removed
// under it (another writer, or a person) are never named by its next
// checkpoint: it writes new runs instead.
func TestAResidentHandleAddsRuns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	at := t0
	ticking := func(lastAt int64) (int64, error) { at += 10; return max(at, lastAt), nil }
	const batch = 100 // SpillAfter: the most a resident handle lets wait for a run (65,536 unless told)
	h := store.Open(store.Options{Path: path, Resident: true, SpillAfter: batch, Clock: ticking})
	defer h.Close()
	// submits n tasks and leases and completes m, in one operation (one
	// write to the WAL: CommitFirst stages the records).
	wave := func(n, m int) {
		t.Helper()
		err := h.Write(func(tx *store.Tx) error {
			for i := range n {
				d, err := tx.State.DecideSubmit(state.Submit{Payload: fmt.Sprint("p", i), Window: state.Duration(time.Hour), Policy: state.RetryPolicy{MaxAttempts: 2}}, tx.Now)
				if err == nil {
					err = tx.CommitFirst(d.Records)
				}
				if err != nil {
					return err
				}
			}
			for range m {
				d, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute}, tx.Now)
				if err == nil {
					err = tx.CommitFirst(d.Records)
				}
				if err == nil {
					var c state.Decision
					c, err = tx.State.DecideComplete(d.TaskID, d.LeaseID, "", tx.Now)
					if err == nil {
						err = tx.CommitFirst(c.Records)
					}
				}
				if err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		var runs, archived, cold, inMemory int
		if err := h.Read(func(tx *store.Tx) error {
			a, c := tx.State.Archives()
			runs, archived, cold, inMemory = len(a)+len(c), store.LenOf(a), store.LenOf(c), tx.State.InMemoryCount()
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if beside := len(store.Caches(path)) - 1; beside != runs {
			t.Fatalf("%s: %d runs beside the WAL (%v), the handle reads %d", when, beside, store.Caches(path), runs)
		}
		if count, ok := store.LoadCheckpoint(path); !ok || count == 0 {
			t.Fatalf("%s: the checkpoint does not load", when)
		}
		var want, got string
		full := store.Open(store.Options{Path: path, FullReplay: true, Clock: fixedClock(at)})
		defer full.Close()
		if err := full.Read(func(tx *store.Tx) error { want = answersOf(t, tx); return nil }); err != nil {
			t.Fatal(err)
		}
		loaded := store.Open(store.Options{Path: path, Clock: fixedClock(at)})
		defer loaded.Close()
		if err := loaded.Read(func(tx *store.Tx) error { got = answersOf(t, tx); return nil }); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("%s: a command loading the checkpoint of %d runs answers differently from a full replay:\n%.600s\nwant\n%.600s", when, runs, got, want)
		}
		t.Logf("%s: %d runs (%d archived, %d cold), %d tasks in memory", when, runs, archived, cold, inMemory)
		if inMemory >= 2*batch {
			t.Fatalf("%s: %d tasks in memory; a resident handle holds a batch", when, inMemory)
		}
	}
	for range 12 {
		wave(120, 0)
	}
	check("after 12 waves of new tasks")
	coldRuns := 0
	for _, path := range store.Caches(path) {
		if strings.Contains(path, store.ColdSuffix+"-") {
			coldRuns++
		}
	}
	if coldRuns < 2 {
		t.Fatalf("%d runs of the cold set after 12 waves of new tasks: the handle rewrote it whole", coldRuns)
	}
	for range 5 {
		wave(20, 60)
	}
	check("after 5 waves of work done")
	removeCaches(path)
	for range 3 {
		wave(120, 20)
	}
	check("after its caches were removed and 3 more waves")
}

// TestACrashDuringAWritersSpillsLeavesNothingWrong: the files a writer's
// replay leaves beside the WAL at any instant (its runs, written but named by
// no checkpoint yet, some merged away already) are what a crash there would
// leave. From each such image, the next writer answers as a full replay, and
// once it has written its checkpoint only the runs that checkpoint names are
// beside the WAL.
func TestACrashDuringAWritersSpillsLeavesNothingWrong(t *testing.T) {
	src := backlogWAL(t, t.TempDir(), 3000, 300)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	want := replayedAnswers(t, src, now)
	writer := copyOf(t, src)
	var images []string // directories holding what was beside the WAL at a record of the replay
	records := 0
	w := store.Open(store.Options{Path: writer, SpillAfter: 40, Clock: fixedClock(now), OnRecord: func(state.Record, *store.Tx) error {
		if records++; records%700 != 0 {
			return nil
		}
		image := t.TempDir()
		entries, _ := os.ReadDir(filepath.Dir(writer))
		for _, e := range entries {
			if err := os.WriteFile(filepath.Join(image, e.Name()), mustRead(t, filepath.Join(filepath.Dir(writer), e.Name())), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		images = append(images, filepath.Join(image, "q.wal"))
		return nil
	}})
	if err := w.Write(func(tx *store.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if len(images) < 3 || len(store.Caches(images[len(images)-1])) == 0 {
		t.Fatalf("%d images of the replay, the last with caches %v: the test sees no run left", len(images), store.Caches(images[len(images)-1]))
	}
	for _, image := range images {
		next := store.Open(store.Options{Path: image, SpillAfter: 40, Clock: fixedClock(now)})
		err := next.Write(func(tx *store.Tx) error {
			if got := answersOf(t, tx); got != want {
				t.Fatalf("%s: the writer after a crash answers differently from a full replay", image)
			}
			return nil
		})
		next.Close()
		if err != nil {
			t.Fatal(err)
		}
		var named int
		after := store.Open(store.Options{Path: image, Clock: fixedClock(now)})
		err = after.Read(func(tx *store.Tx) error {
			archive, cold := tx.State.Archives()
			named = len(archive) + len(cold)
			return nil
		})
		after.Close()
		if count, ok := store.LoadCheckpoint(image); err != nil || !ok || count == 0 {
			t.Fatalf("%s: the next writer's checkpoint does not load (%v)", image, err)
		}
		if caches := store.Caches(image); len(caches) != 1+named {
			t.Fatalf("%s: beside the WAL after the next writer: %v; want its checkpoint and the %d runs it names", image, caches, named)
		}
	}
}
