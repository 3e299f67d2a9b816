package store_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/wal"
)

// copyFile copies a WAL to a new path.
func copyFile(t *testing.T, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// keepAll is a retention longer than any history here.
var keepAll = store.CompactOptions{KeepFinished: 100_000 * 24 * time.Hour, KeepHistory: 100_000 * 24 * time.Hour}

// handle opens a store on path whose clock is the last record's time.
func handle(path string, fault *wal.Fault) *store.Handle {
	return store.Open(store.Options{Path: path, LockTimeout: time.Minute, Fault: fault,
		Clock: func(lastAt int64) (int64, error) { return lastAt, nil }})
}

// TestCompactedWALAnswersAsTheOriginal runs the same random commands on a
// WAL and on a copy compacted at random points (keeping every task), and
// requires the same exit code and the same answer from both, every time; at
// the end the listings are equal, the compacted WAL verifies, and so does its
// history, each base checked against the records before it. The compactions
// move the tasks out of memory as they replay, every few hundred tasks.
func TestCompactedWALAnswersAsTheOriginal(t *testing.T) {
	dir := t.TempDir()
	a := backlogWAL(t, dir, 3000, 40)
	b := filepath.Join(dir, "b.wal")
	copyFile(t, a, b)
	rng := rand.New(rand.NewPCG(7, 11))
	var leases [][2]string // task, lease
	compactions := 0
	for step := range 150 {
		if step%25 == 3 || rng.IntN(20) == 0 {
			spilling := store.Open(store.Options{Path: b, LockTimeout: time.Minute, SpillAfter: 1 + rng.IntN(300), // its base built from tasks moved out of memory
				Clock: func(lastAt int64) (int64, error) { return lastAt, nil }})
			switch _, err := spilling.Compact(keepAll); {
			case errors.Is(err, store.ErrNothingToCompact): // nothing was written since the last one
			case err != nil:
				t.Fatalf("step %d: compact: %v", step, err)
			default:
				compactions++
			}
		}
		var args []string
		switch op := rng.IntN(6); {
		case op == 0 && rng.IntN(3) == 0 && len(leases) > 0: // what it waits for is kept by the base
			args = []string{"submit", "--payload", fmt.Sprint("p", step), "--after", leases[rng.IntN(len(leases))][0]}
		case op == 0:
			args = []string{"submit", "--payload", fmt.Sprint("p", step), "--request-id", fmt.Sprint("r", rng.IntN(20))}
		case op == 1 && len(leases) > 0:
			l := leases[rng.IntN(len(leases))]
			args = []string{"complete", "--task", l[0], "--lease", l[1]}
		case op == 2 && len(leases) > 0:
			l := leases[rng.IntN(len(leases))]
			args = []string{"fail", "--task", l[0], "--lease", l[1], "--reason", "r"}
		case op == 3:
			args = []string{"expire"}
		case op == 4 && len(leases) > 0 && rng.IntN(2) == 0:
			l := leases[rng.IntN(len(leases))]
			args = []string{"release", "--task", l[0], "--lease", l[1], "--delay", "3s"}
		case op == 4 && rng.IntN(2) == 0:
			args = []string{"pause", "default", "--for", "20s"}
		case op == 4:
			args = []string{"resume", "default"}
		case op == 5 && rng.IntN(3) == 0:
			args = []string{"schedule", "add", "tick", "--every", "20s", "--", "--payload", "tick"}
		case op == 5 && rng.IntN(2) == 0: // a rate's grants since it was set are in the base
			args = [][]string{{"queue", "rate", "default", "3/m"}, {"queue", "rate", "default", "2/m", "--burst", "3"}, {"queue", "rate", "default", "none"}}[rng.IntN(3)]
		default:
			args = []string{"lease", "--worker", "W", "--duration", "20s"}
		}
		args = append([]string{"--now", "+7s", "-o", "json"}, args...)
		codeA, outA, errA := cli(append([]string{"--wal", a}, args...)...)
		codeB, outB, errB := cli(append([]string{"--wal", b}, args...)...)
		if codeA != codeB || outA != outB || strings.ReplaceAll(errB, b, a) != errA {
			t.Fatalf("step %d %v:\noriginal  exit %d %s %s\ncompacted exit %d %s %s", step, args, codeA, outA, errA, codeB, outB, errB)
		}
		if args[4] == "lease" && codeA == 0 {
			var task, lease string
			fmt.Sscanf(outA[strings.Index(outA, `"task_id":"`)+len(`"task_id":"`):], "%s", &task)
			fmt.Sscanf(outA[strings.Index(outA, `"lease_id":"`)+len(`"lease_id":"`):], "%s", &lease)
			leases = append(leases, [2]string{strings.Split(task, `"`)[0], strings.Split(lease, `"`)[0]})
		}
	}
	if got, want := stateOf(t, b), stateOf(t, a); got != want {
		t.Fatalf("the listings differ:\ncompacted %s\noriginal  %s", got, want)
	}
	// The records the compactions sealed are read through their segments.
	reads := [][]string{{"log"}, {"log", "--from", "100", "--to", "2990"}, {"log", "--task", leases[0][0]}, {"log", "--type", "LeaseExpired", "--since", "+1h"},
		{"inspect", leases[0][0]}, {"inspect", leases[len(leases)-1][0]}, {"inspect", "--until", "1"}, {"inspect", "--until", "2999"}}
	for _, args := range reads {
		args = append([]string{"--now", "+0s", "-o", "json"}, args...)
		codeA, outA, errA := cli(append([]string{"--wal", a}, args...)...)
		codeB, outB, errB := cli(append([]string{"--wal", b}, args...)...)
		if codeA != 0 || codeA != codeB || outA != outB || errA != errB {
			t.Fatalf("%v:\noriginal  exit %d %.300s %s\ncompacted exit %d %.300s %s", args, codeA, outA, errA, codeB, outB, errB)
		}
	}
	if code, out, errOut := cli("--wal", b, "verify", "--history", "-o", "json"); code != 0 || !strings.Contains(out, fmt.Sprintf("%d bases checked", compactions)) {
		t.Fatalf("verify --history: exit %d %s %s", code, out, errOut)
	}
	if head, _ := os.ReadFile(b); !bytes.HasPrefix(head, wal.HeaderLine(4)) {
		t.Errorf("the compacted WAL of a queue rate starts %.16q, not as a version 4", head)
	}
	if len(leases) == 0 || compactions < 3 {
		t.Fatalf("%d leases and %d compactions: the test needs more", len(leases), compactions)
	}
	// Without its segments, the WAL says where the records went.
	if err := os.RemoveAll(b + store.HistorySuffix); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("--wal", b, "log", "--from", "5", "--to", "6")
	if code != 0 || out != "no records match\n" || !strings.Contains(errOut, "records up to seq") || !strings.Contains(errOut, "were compacted on") {
		t.Fatalf("log of records compacted away: exit %d %q %q", code, out, errOut)
	}
	code, _, errOut = cli("--wal", b, "inspect", "--until", "5")
	if code != 4 || !strings.Contains(errOut, "compacted on") {
		t.Fatalf("inspect --until a record compacted away: exit %d %q", code, errOut)
	}
}

// TestCompactionTakesTheRecordsWrittenDuringIt: a writer is not kept
// waiting while the compaction reads and copies the history and writes the
// base; what it wrote then follows the base in the compacted WAL.
func TestCompactionTakesTheRecordsWrittenDuringIt(t *testing.T) {
	path := historyWAL(t, t.TempDir(), 2000)
	p, err := handle(path, nil).PrepareCompaction(keepAll)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errOut := cli("--wal", path, "--now", "+1s", "--lock-timeout", "0s", "submit", "--payload", "during", "--request-id", "during", "-o", "json")
	if code != 0 {
		t.Fatalf("a writer during the compaction's first step: exit %d %s %s", code, out, errOut)
	}
	c, err := p.Finish()
	if err != nil {
		t.Fatal(err)
	}
	code, again, _ := cli("--wal", path, "--now", "+1s", "submit", "--payload", "during", "--request-id", "during", "-o", "json")
	if code != 0 || !strings.Contains(again, `"duplicate":true`) || !strings.Contains(again, strings.Split(strings.Split(out, `"task_id":"`)[1], `"`)[0]) {
		t.Fatalf("the retry after the compaction: exit %d %s", code, again)
	}
	segs := store.Segments(path + store.HistorySuffix)
	if len(segs) != 1 || segs[0].Path != c.Segment || segs[0].Last != c.Seq {
		t.Fatalf("segments %+v, compaction %+v", segs, c)
	}
	// The base stands where the first step read to; the writer's record
	// follows it in the compacted WAL, its frame as it was written, and
	// log --from finds it.
	code, rec, _ := cli("--wal", path, "log", "--from", fmt.Sprint(c.Seq+1), "-o", "json")
	if code != 0 || !strings.Contains(rec, `"payload":"during"`) {
		t.Fatalf("the record written during the compaction, after its base at seq %d: exit %d %s", c.Seq, code, rec)
	}
	if code, out, errOut := cli("--wal", path, "verify", "--history"); code != 0 {
		t.Fatalf("verify --history: exit %d %s %s", code, out, errOut)
	}
}

// TestCompactedMeanwhile: two compactions of one WAL; the one that read it
// first and finishes second changes nothing and says so.
func TestCompactedMeanwhile(t *testing.T) {
	path := historyWAL(t, t.TempDir(), 500)
	p, err := handle(path, nil).PrepareCompaction(keepAll)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handle(path, nil).Compact(keepAll); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)
	if _, err := p.Finish(); !errors.Is(err, store.ErrCompactedMeanwhile) {
		t.Fatalf("the late compaction: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("the late compaction changed the WAL")
	}
	if segs := store.Segments(path + store.HistorySuffix); len(segs) != 1 {
		t.Fatalf("segments %+v, want the first compaction's only", segs)
	}
	if leftovers, _ := filepath.Glob(path + store.HistorySuffix + "/sealing-*"); len(leftovers) != 0 {
		t.Fatalf("leftovers %v", leftovers)
	}
	if _, err := handle(path, nil).Compact(keepAll); !errors.Is(err, store.ErrNothingToCompact) {
		t.Fatalf("a compaction with nothing after the base: %v", err)
	}
}

// TestCompactionOnAFullDisk: the new WAL cannot be written; the WAL stays
// byte for byte as it was, nothing is left beside it, commands go on, and
// the next compaction succeeds with a history that verifies.
func TestCompactionOnAFullDisk(t *testing.T) {
	path := historyWAL(t, t.TempDir(), 800)
	want := stateOf(t, path)
	before, _ := os.ReadFile(path)
	_, err := handle(path, &wal.Fault{Action: "enospc"}).Compact(keepAll)
	if err == nil || !strings.Contains(err.Error(), "the WAL is unchanged") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("compaction on a full disk: %v", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Fatal("the failed compaction changed the WAL")
	}
	if leftovers, _ := filepath.Glob(path + ".compacting-*"); len(leftovers) != 0 {
		t.Fatalf("leftovers %v", leftovers)
	}
	if got := stateOf(t, path); got != want {
		t.Fatal("the state changed")
	}
	if _, err := handle(path, nil).Compact(keepAll); err != nil {
		t.Fatal(err)
	}
	if segs := store.Segments(path + store.HistorySuffix); len(segs) != 1 {
		t.Fatalf("segments %+v: the one the failed compaction sealed must be replaced", segs)
	}
	if code, out, errOut := cli("--wal", path, "verify", "--history"); code != 0 {
		t.Fatalf("verify --history: exit %d %s %s", code, out, errOut)
	}
	if got := stateOf(t, path); got != want {
		t.Fatal("the compacted WAL answers differently")
	}
}

// TestDamagedSegment: a flipped byte in a sealed segment fails verify
// --history with the segment's name; the WAL itself goes on working.
func TestDamagedSegment(t *testing.T) {
	path := historyWAL(t, t.TempDir(), 800)
	c, err := handle(path, nil).Compact(keepAll)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(c.Segment)
	data[len(data)/2] ^= 0x20
	if err := os.WriteFile(c.Segment, data, 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := cli("--wal", path, "verify", "--history")
	if code != 5 || !strings.Contains(errOut, filepath.Base(c.Segment)) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Fatalf("verify --history of a damaged segment: exit %d %q", code, errOut)
	}
	for _, args := range [][]string{{"verify"}, {"--now", "+1s", "submit", "--payload", "p"}, {"inspect"}} {
		if code, out, errOut := cli(append([]string{"--wal", path}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d %s %s", args, code, out, errOut)
		}
	}
}

// TestRetention: a compaction drops the tasks that ended before
// --keep-finished and says so when one is asked for; segments older than
// --keep-history are deleted.
func TestRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	step := func(now string, args ...string) string {
		t.Helper()
		code, out, errOut := cli(append([]string{"--wal", path, "--now", now, "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s %s", args, code, out, errOut)
		}
		return out
	}
	step("2026-01-01T00:00:00Z", "submit", "--payload", "old", "--request-id", "old")
	step("2026-01-01T00:00:00Z", "lease", "--worker", "W")
	step("2026-01-01T00:00:01Z", "complete", "--task", "T1", "--lease", "L1")
	step("2026-01-05T00:00:00Z", "submit", "--payload", "new", "--request-id", "new")
	step("2026-01-05T00:00:00Z", "lease", "--worker", "W")
	step("2026-01-05T00:00:01Z", "complete", "--task", "T2", "--lease", "L2")
	step("2026-01-06T00:00:00Z", "submit", "--payload", "waiting")
	out := step("2026-01-07T00:00:00Z", "compact", "--keep-finished", "3d", "--keep-history", "30d")
	if !strings.Contains(out, `"tasks_kept":2,"tasks_dropped":1`) {
		t.Fatalf("compact: %s", out)
	}
	code, _, errOut := cli("--wal", path, "requeue", "T1")
	if code != 4 || !strings.Contains(errOut, "compacted on 2026-01-07") {
		t.Fatalf("requeue of a dropped task: exit %d %s", code, errOut)
	}
	if again := step("2026-01-07T00:00:00Z", "submit", "--payload", "new", "--request-id", "new"); !strings.Contains(again, `"task_id":"T2"`) || !strings.Contains(again, `"duplicate":true`) {
		t.Fatalf("a retry within the retention: %s", again)
	}
	if fresh := step("2026-01-07T00:00:00Z", "submit", "--payload", "old", "--request-id", "old"); !strings.Contains(fresh, `"task_id":"T4"`) {
		t.Fatalf("a request id older than the retention starts a new task, numbered after every task ever: %s", fresh)
	}
	step("2026-02-28T00:00:00Z", "submit", "--payload", "recent")
	out = step("2026-03-01T00:00:00Z", "compact", "--keep-finished", "3d", "--keep-history", "30d")
	if segs := store.Segments(path + store.HistorySuffix); len(segs) != 1 || !strings.Contains(out, `"expired":["`) {
		t.Fatalf("after a compaction 60 days later, segments %+v: %s", segs, out)
	}
	if code, out, errOut := cli("--wal", path, "verify", "--history", "-o", "json"); code != 0 || !strings.Contains(out, "no longer kept") {
		t.Fatalf("verify --history after the oldest segment expired: exit %d %s %s", code, out, errOut)
	}
}

// TestACompactedWALHasItsIndex: a compaction leaves beside the new WAL its
// index, built from the base it wrote (the finished tasks it dropped are
// not in it), at the base's last record: the record a writer appended
// during the compaction is the index's tail. Commands answer from it as a
// full replay of the new WAL does, before and after a writer writes it on.
func TestACompactedWALHasItsIndex(t *testing.T) {
	path := backlogWAL(t, t.TempDir(), 3000, 1000)
	p, err := handle(path, nil).PrepareCompaction(store.CompactOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli("--wal", path, "--now", cpNow, "--lock-timeout", "0s", "submit", "--payload", "during", "-o", "json"); code != 0 {
		t.Fatalf("a writer during the compaction: exit %d %s %s", code, out, errOut)
	}
	c, err := p.Finish()
	if err != nil || c.TasksDropped == 0 {
		t.Fatalf("the compaction dropped %d tasks: %v", c.TasksDropped, err)
	}
	count, ok := store.IndexOf(path)
	if frames := strings.Count(string(mustRead(t, path)), "\n") - 1; !ok || count != frames-1 {
		t.Fatalf("after the compaction: an index of %d of the WAL's %d records (%v), not the base's", count, frames, ok)
	}
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	if answersAt(t, path, now, false, store.Options{}) != replayedAnswers(t, path, now) {
		t.Fatal("from its index, the compacted WAL answers differently from a full replay of it")
	}
	if code, out, errOut := cli("--wal", path, "--now", cpNow, "expire", "-o", "json"); code != 0 {
		t.Fatalf("expire: exit %d %s %s", code, out, errOut)
	}
	if answersAt(t, path, now, true, store.Options{}) != replayedAnswers(t, path, now) {
		t.Fatal("written on, the compacted WAL answers differently from a full replay of it")
	}
}

// TestVerifyHistoryFindsABaseThatIsNotItsSegmentsState: a segment swapped
// for another valid history of the same length (one payload differs) still
// verifies alone, but the WAL's base is not the state it leads to, and
// VerifyHistory says so, naming the WAL; untouched, the history verifies,
// while both replays move their tasks out of memory every few tasks.
func TestVerifyHistoryFindsABaseThatIsNotItsSegmentsState(t *testing.T) {
	dir := t.TempDir()
	path := historyWAL(t, dir, 600)
	other := filepath.Join(dir, "other.wal")
	copyFile(t, path, other)
	for wal, payload := range map[string]string{path: "this", other: "that"} {
		if code, out, errOut := cli("--wal", wal, "--now", "+1s", "submit", "--payload", payload); code != 0 {
			t.Fatalf("submit: exit %d %s %s", code, out, errOut)
		}
	}
	c, err := handle(path, nil).Compact(keepAll)
	if err != nil {
		t.Fatal(err)
	}
	spilling := store.Open(store.Options{Path: path, LockTimeout: time.Minute, SpillAfter: 10})
	defer spilling.Close()
	if check, err := spilling.VerifyHistory(); err != nil || check.Derived != 1 || check.Segments != 1 {
		t.Fatalf("the history as compacted: %+v, %v", check, err)
	}
	copyFile(t, other, c.Segment)
	_, err = spilling.VerifyHistory()
	var bad *store.HistoryError
	if !errors.As(err, &bad) || bad.Path != path || !strings.Contains(err.Error(), "is not the state") {
		t.Fatalf("a segment swapped for another history: %v", err)
	}
}

// TestCompactThrough: a compaction through a given seq (as a raft node
// makes the cluster's, whatever it has applied since) puts the base there
// and keeps the records after it as they were; the WAL answers as before and
// its history verifies. Through a seq the base already covers, it does
// nothing.
func TestCompactThrough(t *testing.T) {
	path := historyWAL(t, t.TempDir(), 600)
	want := stateOf(t, path)
	before, _ := os.ReadFile(path)
	opts := keepAll
	opts.Through = 300
	c, err := handle(path, nil).Compact(opts)
	if err != nil || c.Seq != 300 {
		t.Fatalf("compact through 300: %+v %v", c, err)
	}
	after, _ := os.ReadFile(path)
	tail := before[bytes.Index(before, []byte(`{"seq":301,`))-9:] // the frames after seq 300, checksums and all
	if !bytes.HasSuffix(after, tail) || !bytes.HasPrefix(after, []byte("leasewal-wal v3\n")) {
		t.Fatal("the records after seq 300 are not kept as they were, after the base")
	}
	if got := stateOf(t, path); got != want {
		t.Fatal("the WAL compacted through seq 300 answers differently")
	}
	if code, out, errOut := cli("--wal", path, "verify", "--history"); code != 0 {
		t.Fatalf("verify --history: exit %d %s %s", code, out, errOut)
	}
	opts.Through = 200
	if _, err := handle(path, nil).Compact(opts); !errors.Is(err, store.ErrNothingToCompact) {
		t.Fatalf("a compaction through a seq the base covers: %v", err)
	}
}

// TestABaseOfManyTasksIsReadInBoundedMemory: a replay moves a base's tasks
// into its index as the base's parts come, not only once it has ended, and
// answers as a replay holding every task.
func TestABaseOfManyTasksIsReadInBoundedMemory(t *testing.T) {
	path := backlogWAL(t, t.TempDir(), 6000, 2000)
	if _, err := handle(path, nil).Compact(keepAll); err != nil {
		t.Fatal(err)
	}
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	want := replayedAnswers(t, path, now)
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, FullReplay: true, SpillAfter: 100, Clock: fixedClock(now)})
	defer h.Close()
	var got string
	tasks := 0
	if err := h.Read(func(tx *store.Tx) error {
		got = answersOf(t, tx)
		all, err := tx.State.Tasks()
		tasks = len(all)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatal("a replay moving a base's tasks out of memory answers differently from one holding every task")
	}
	parts := strings.Count(string(mustRead(t, path)), `"type":"BasePart"`)
	if peak := h.PeakHot(); parts < 2 || peak >= tasks {
		t.Fatalf("memory held %d tasks at once while reading a base of %d in %d parts: the base was read whole", peak, tasks, parts)
	}
}
