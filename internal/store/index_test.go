package store_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/cmd"
	"github.com/leasewal/leasewal/internal/histgen"
	"github.com/leasewal/leasewal/internal/index"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// cli runs leasewal in-process and returns its exit code, stdout and stderr.
func cli(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := cmd.Main(args, strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

const cpNow = "2026-11-01T00:00:00Z"

// historyWAL writes a realistic history of about n records to dir/q.wal.
func historyWAL(t *testing.T, dir string, n int) string {
	t.Helper()
	return backlogWAL(t, dir, n, 3)
}

// backlogWAL is historyWAL with waiting tasks left at its end.
func backlogWAL(t *testing.T, dir string, n, waiting int) string {
	t.Helper()
	path := filepath.Join(dir, "q.wal")
	if err := histgen.WriteFile(path, histgen.Options{Records: n, Waiting: waiting}); err != nil {
		t.Fatal(err)
	}
	return path
}

// stateOf is the whole state as inspect and worklease inspect print it.
func stateOf(t *testing.T, walPath string) string {
	t.Helper()
	_, tasks, e1 := cli("--wal", walPath, "--now", cpNow, "inspect", "-o", "json")
	_, domains, e2 := cli("--wal", walPath, "--now", cpNow, "worklease", "inspect", "-o", "json")
	if e1+e2 != "" && !strings.Contains(e1+e2, "warning") && !strings.Contains(e1+e2, "replaying") {
		t.Fatalf("inspect: %s %s", e1, e2)
	}
	return tasks + domains
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// answersOf is what a state answers about every task it names and a few it
// does not, its listing, its queues, and the decisions of a lease, a repeated
// submit and an expire at now, and every payload read back: JSON, to
// compare.
func answersOf(t *testing.T, tx *store.Tx) string {
	t.Helper()
	st, now := tx.State, tx.Now
	tasks, err := st.Tasks()
	if err != nil {
		return "" // damage the index revealed: the handle runs the operation again (Damage)
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
	add(st.DecideExpire(now))
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
	full := store.Open(store.Options{Path: copyOf(t, path), FullReplay: true, SpillAfter: 1 << 30, Clock: fixedClock(now)})
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

// answersAt is answersOf the WAL at path as a new handle with opts reads
// it (a writer, with writing set), at now.
func answersAt(t *testing.T, path string, now int64, writing bool, opts store.Options) string {
	t.Helper()
	opts.Path, opts.Clock = path, fixedClock(now)
	if opts.LockTimeout == 0 {
		opts.LockTimeout = time.Minute
	}
	h := store.Open(opts)
	defer h.Close()
	var answers string
	if err := h.Run(writing, func(tx *store.Tx) error { answers = answersOf(t, tx); return nil }); err != nil {
		t.Fatal(err)
	}
	return answers
}

// TestTheIndexIsBuiltAndUsed: the first command on a WAL of many records
// builds the index beside it, and answers as a full replay; the commands
// after read it and the tail after it; a writer writes the records it
// appended into it once they are indexTail, not before.
func TestTheIndexIsBuiltAndUsed(t *testing.T) {
	path := backlogWAL(t, t.TempDir(), 3000, 300)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	want := replayedAnswers(t, path, now)
	if got := answersAt(t, path, now, false, store.Options{}); got != want {
		t.Fatal("the reader that built the index answers differently from a full replay")
	}
	held, ok := store.IndexOf(path)
	if !ok || held == 0 {
		t.Fatalf("no index after the first command: %d records, %v", held, ok)
	}
	if got := answersAt(t, path, now, true, store.Options{}); got != want {
		t.Fatal("a writer over the index answers differently from a full replay")
	}
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(now)})
	defer h.Close()
	for i := range store.IndexTail + 1 {
		submit(t, h, fmt.Sprint("more ", i))
		if got, _ := store.IndexOf(path); i+1 < store.IndexTail && got != held {
			t.Fatalf("the index moved to %d records after %d submits, before the tail reached %d", got, i+1, store.IndexTail)
		}
	}
	if got, ok := store.IndexOf(path); !ok || got <= held {
		t.Fatalf("the index holds %d records after %d submits (it held %d)", got, store.IndexTail+1, held)
	}
	want = replayedAnswers(t, path, now)
	for _, writing := range []bool{false, true} {
		if got := answersAt(t, path, now, writing, store.Options{}); got != want {
			t.Fatalf("after the writer wrote the index, a command (writing %v) answers differently from a full replay", writing)
		}
	}
}

// TestABigWriteIsCommittedAChunkAtATime: a writer whose operation holds
// more tasks than one transaction takes (writeChunk, a few dozen here)
// writes them a chunk a transaction: a new WAL's first tasks, then new
// tasks beside tasks read from the index and leased, whose notes each
// chunk's commit leaves stale for the next. The index then holds the whole write, and answers as a full
// replay.
func TestABigWriteIsCommittedAChunkAtATime(t *testing.T) {
	defer store.SetWriteChunk(40)()
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(t0)})
	submits := func(tx *store.Tx, n int) error {
		subs := make([]state.Submit, n)
		for i := range subs {
			subs[i] = state.Submit{Payload: fmt.Sprint("big ", tx.State.LastSeq(), " ", i), Window: state.Duration(time.Hour), Policy: state.RetryPolicy{MaxAttempts: 2}}
		}
		_, recs, err := tx.State.DecideSubmits(subs, tx.Now)
		if err != nil {
			return err
		}
		return tx.Commit(recs)
	}
	if err := h.Write(func(tx *store.Tx) error { return submits(tx, store.IndexAfter+100) }); err != nil {
		t.Fatal(err)
	}
	err := h.Write(func(tx *store.Tx) error {
		for i := range 100 {
			d, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute}, tx.Now)
			if err != nil || d.Outcome != state.ResultLeased {
				return fmt.Errorf("lease %d: %v %v", i, d.Outcome, err)
			}
			if err := tx.Commit(d.Records); err != nil {
				return err
			}
		}
		return submits(tx, 200)
	})
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	if held, ok := store.IndexOf(path); !ok || held != store.IndexAfter+400 {
		t.Fatalf("the index holds %d records (loads: %v); the WAL has %d", held, ok, store.IndexAfter+400)
	}
	now := t0 + int64(30*time.Second/time.Millisecond)
	want := replayedAnswers(t, path, now)
	for _, writing := range []bool{false, true} {
		if got := answersAt(t, path, now, writing, store.Options{}); got != want {
			t.Fatalf("after writes of many tasks in chunks of 40, a command (writing %v) answers differently from a full replay", writing)
		}
	}
}

// TestAReplayBuildingTheIndexAnswersAsAFullReplay: a replay from the WAL's
// start that writes its tasks into the index every few dozen (so that it
// holds no more in memory) answers every lookup, listing and decision as a
// replay holding them all does, a reader's and a writer's alike, and the
// next command answers alike from the index it left; a replay of verify's
// kind (its own index, unlinked) leaves nothing beside the WAL.
func TestAReplayBuildingTheIndexAnswersAsAFullReplay(t *testing.T) {
	src := backlogWAL(t, t.TempDir(), 3000, 300)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	want := replayedAnswers(t, src, now)
	for _, writing := range []bool{false, true} {
		path := copyOf(t, src)
		held := 0
		opts := store.Options{SpillAfter: 40, OnRecord: func(_ state.Record, tx *store.Tx) error {
			held = max(held, tx.State.HotCount())
			return nil
		}}
		if got := answersAt(t, path, now, writing, opts); got != want {
			t.Fatalf("writing %v: the replay building the index answers differently from a full replay", writing)
		}
		if held > 40+8 {
			t.Fatalf("writing %v: the replay held %d tasks in memory at once, building every 40", writing, held)
		}
		if got := answersAt(t, path, now, writing, store.Options{}); got != want {
			t.Fatalf("writing %v: the command after the replay answers differently from a full replay", writing)
		}
	}
	path := copyOf(t, src)
	if got := answersAt(t, path, now, false, store.Options{FullReplay: true, SpillAfter: 40}); got != want {
		t.Fatal("a full replay with an index of its own answers differently from one holding every task")
	}
	if beside := store.Beside(path); len(beside) != 0 {
		t.Fatalf("a full replay left %v beside the WAL", beside)
	}
}

// TestBadIndexesAreBuiltAgain: an index that is damaged (bytes flipped,
// pages zeroed, cut short, empty, a directory in its place), of another
// WAL, ahead of the WAL (records cut after it was written, as repair cuts),
// from before a compaction, older than the WAL by many records, or written
// without sync in another boot: every command answers exactly as a full
// replay does, and the next writer leaves a good index.
func TestBadIndexesAreBuiltAgain(t *testing.T) {
	dir := t.TempDir()
	path := historyWAL(t, dir, 3000)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	want := replayedAnswers(t, path, now)
	older := copyOf(t, path)
	os.WriteFile(older, mustRead(t, path)[:len(mustRead(t, path))*3/5], 0o600)
	answersAt(t, older, now, true, store.Options{}) // an index of the WAL's first records
	answersAt(t, path, now, true, store.Options{})  // builds the index
	good := mustRead(t, path+store.IndexSuffix)
	other := historyWAL(t, t.TempDir(), 2000)
	answersAt(t, other, now, true, store.Options{})

	bad := map[string]func(walPath string){
		"flipped": func(p string) {
			b := bytes.Clone(good)
			for i := 4096; i < len(b); i += 4096 * 3 {
				b[i+100] ^= 0xff
			}
			os.WriteFile(p+store.IndexSuffix, b, 0o600)
		},
		"cut short":     func(p string) { os.WriteFile(p+store.IndexSuffix, good[:len(good)/2], 0o600) },
		"empty":         func(p string) { os.WriteFile(p+store.IndexSuffix, nil, 0o600) },
		"a directory":   func(p string) { os.Remove(p + store.IndexSuffix); os.Mkdir(p+store.IndexSuffix, 0o700) },
		"another WAL's": func(p string) { os.WriteFile(p+store.IndexSuffix, mustRead(t, other+store.IndexSuffix), 0o600) },
		"zeroed pages": func(p string) {
			b := bytes.Clone(good)
			for i := 4096; i < len(b); i += 4096 * 4 {
				clear(b[i:min(i+4096, len(b))])
			}
			os.WriteFile(p+store.IndexSuffix, b, 0o600)
		},
		"older than the WAL": func(p string) { os.WriteFile(p+store.IndexSuffix, mustRead(t, older+store.IndexSuffix), 0o600) },
		"from before a compaction": func(p string) {
			if _, err := handle(p, nil).Compact(store.CompactOptions{KeepFinished: 24 * time.Hour}); err != nil {
				t.Fatal(err)
			}
			os.WriteFile(p+store.IndexSuffix, good, 0o600)
		},
		"unsynced in another boot": func(p string) {
			if err := store.MarkIndexUnsynced(p, "another boot"); err != nil {
				t.Fatal(err)
			}
		},
		"ahead of the WAL": func(p string) {
			b := mustRead(t, p)
			os.WriteFile(p, b[:len(b)-len(b)/5], 0o600) // as if records were cut after the index was written
		},
	}
	for name, spoil := range bad {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "q.wal")
			os.WriteFile(p, mustRead(t, path), 0o600)
			os.WriteFile(p+store.IndexSuffix, good, 0o600)
			spoil(p)
			expected := want
			if name == "ahead of the WAL" || name == "from before a compaction" {
				expected = replayedAnswers(t, p, now)
			}
			for _, writing := range []bool{false, true, false} {
				if name == "a directory" && writing {
					continue // nothing takes its place: the index cannot be written, and every command replays
				}
				if got := answersAt(t, p, now, writing, store.Options{}); got != expected {
					t.Fatalf("writing %v: the command answers differently from a full replay", writing)
				}
			}
			if count, ok := store.IndexOf(p); name != "a directory" && (!ok || count == 0) {
				t.Fatalf("no good index after a writer: %d, %v", count, ok)
			}
		})
	}
}

// TestAFailedIndexKeepsTheTasksInMemory: where no index can be made (its
// name taken by a directory), every command replays, holding its tasks in
// memory, and answers as a full replay.
func TestAFailedIndexKeepsTheTasksInMemory(t *testing.T) {
	path := backlogWAL(t, t.TempDir(), 3000, 300)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	want := replayedAnswers(t, path, now)
	if err := os.Mkdir(path+store.IndexSuffix, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, writing := range []bool{false, true} {
		if got := answersAt(t, path, now, writing, store.Options{SpillAfter: 40}); got != want {
			t.Fatalf("writing %v: a command without an index answers differently from a full replay", writing)
		}
	}
}

// TestAVerifierOverAnIndexFindsWhatAFullOneFinds: verify's replay writes
// its tasks into an index of its own (the Verifier keeps its own account of
// every task by number). On a good history it answers as a replay holding
// every task in memory; on the same history with an early task's
// completion repeated at its end, it refuses the same record with the same
// words.
func TestAVerifierOverAnIndexFindsWhatAFullOneFinds(t *testing.T) {
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

	verify := func(path string, spillAfter int) (records int, listed string, err error) {
		v := state.NewVerifier()
		h := store.Open(store.Options{Path: copyOf(t, path), Verifier: v, SpillAfter: spillAfter, Clock: fixedClock(t0)})
		defer h.Close()
		err = h.Read(func(tx *store.Tx) error {
			if spillAfter == 40 && !tx.State.HasSource() {
				t.Fatal("the verifier's replay wrote no index")
			}
			var states []string
			return tx.State.EachTask(false, func(task *state.Task) bool {
				states = append(states, task.ID+" "+string(task.At(tx.Now).State))
				listed = strings.Join(states, ",")
				return true
			})
		})
		return v.Records, listed, err
	}
	wantRecords, wantListed, err := verify(good, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if records, listed, err := verify(good, 40); err != nil || records != wantRecords || listed != wantListed {
		t.Fatalf("over an index: %d records, %v; holding every task: %d records", records, err, wantRecords)
	}
	_, _, wantErr := verify(bad, 1<<30)
	_, _, gotErr := verify(bad, 40)
	t.Logf("refused: %v", gotErr)
	if wantErr == nil || gotErr == nil || gotErr.Error() != wantErr.Error() {
		t.Fatalf("a repeated completion: over an index says %v, holding every task says %v", gotErr, wantErr)
	}

	// Ends that 150 tasks wait for: the verifier's replay writes them into
	// its index in chunks.
	deps, leases := dependentsWAL(t, 150, 64)
	h := store.Open(store.Options{Path: deps, LockTimeout: time.Minute, Clock: fixedClock(t0 + 400*86_400_000)})
	for _, up := range []string{"ok", "bad"} {
		if err := h.Write(func(tx *store.Tx) error { return endOf(tx, up, leases[up]) }); err != nil {
			t.Fatal(err)
		}
	}
	h.Close()
	wantRecords, wantListed, err = verify(deps, 1<<30)
	if err != nil {
		t.Fatal(err)
	}
	if records, listed, err := verify(deps, 40); err != nil || records != wantRecords || listed != wantListed {
		t.Fatalf("ends whose dependents went to the index in chunks: %d records, %v; holding every task: %d records", records, err, wantRecords)
	}
}

// leasedThenLater is a WAL whose first tasks were leased long before they
// complete, after many others were submitted.
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

// TestBuildingByBytes: a replay of tasks with large payloads writes them
// into the index by the bytes it has read, long before their count would
// make it (here, never), and answers as a replay holding them all.
func TestBuildingByBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	var batch strings.Builder
	for i := range 600 {
		fmt.Fprintf(&batch, "{\"payload\":%q}\n", strings.Repeat(fmt.Sprint(i%10), 4000))
	}
	batchFile := filepath.Join(t.TempDir(), "batch.ndjson")
	if err := os.WriteFile(batchFile, []byte(batch.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli("--wal", path, "--now", "2026-01-01T00:00:00Z", "submit", "--batch-file", batchFile); code != 0 {
		t.Fatal(stderr)
	}
	now := t0 + 60_000
	want := replayedAnswers(t, path, now)
	held := 0
	got := answersAt(t, path, now, false, store.Options{FullReplay: true, SpillAfter: 1 << 30, SpillAfterBytes: 256 << 10, OnRecord: func(_ state.Record, tx *store.Tx) error {
		held = max(held, tx.State.HotCount())
		return nil
	}})
	if got != want {
		t.Fatal("a replay building its index by bytes answers differently from one holding every task")
	}
	if held >= 600 {
		t.Fatalf("the replay held %d tasks at once: it never wrote the index for their bytes", held)
	}
}

// TestAnIndexWrittenWithoutSyncIsTrustedInItsBootOnly: a resident handle
// (a server's) writes the index without sync. Killed (its files copied as
// it runs), it leaves an index the same boot trusts and answers from as a
// full replay does, and that another boot (a power loss may have left any
// of its writes half on disk) builds again, saying why. Closed, it syncs
// the index and says so: every boot trusts it.
func TestAnIndexWrittenWithoutSyncIsTrustedInItsBootOnly(t *testing.T) {
	if store.BootID() == "" {
		t.Skip("this system names no boot: every write of the index is synced")
	}
	path := backlogWAL(t, t.TempDir(), 3000, 1000)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	stateOf(t, path) // a one-shot command builds the index, synced
	server := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Resident: true, SpillAfter: 20, Clock: fixedClock(now)})
	for i := range 70 {
		if err := server.Write(func(tx *store.Tx) error {
			d, err := tx.State.DecideSubmit(state.Submit{Payload: fmt.Sprint("p", i), Window: state.NoWindow, Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
			if err == nil {
				err = tx.Commit(d.Records)
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	killed := copyOf(t, path)
	copyFile(t, path+store.IndexSuffix, killed+store.IndexSuffix)
	if synced, boot := store.IndexSynced(killed); synced || boot != store.BootID() {
		t.Fatalf("the index a server writes says synced %v, boot %q", synced, boot)
	}
	want := replayedAnswers(t, killed, now)
	otherBoot := copyOf(t, killed)
	copyFile(t, killed+store.IndexSuffix, otherBoot+store.IndexSuffix)

	if count, ok := store.IndexOf(killed); !ok || count < 3000 {
		t.Fatalf("in the boot that wrote it, the index is not trusted (%d records, %v)", count, ok)
	}
	if answersAt(t, killed, now, true, store.Options{}) != want {
		t.Fatal("from an index written without sync, in its boot, the answers differ from a full replay's")
	}

	restore := store.SetBootID("another boot")
	defer restore()
	if _, ok := store.IndexOf(otherBoot); ok {
		t.Fatal("after a restart of the machine, an index written without sync is trusted")
	}
	var warned []string
	if answersAt(t, otherBoot, now, true, store.Options{Warn: func(s string) { warned = append(warned, s) }}) != want {
		t.Fatal("after a restart, the answers differ from a full replay's")
	}
	if len(warned) == 0 || !strings.Contains(warned[0], "without sync") {
		t.Fatalf("the rebuild says %q", warned)
	}
	if synced, _ := store.IndexSynced(otherBoot); !synced {
		t.Fatal("the index built again is not synced")
	}

	restore()
	server.Close()
	defer store.SetBootID("another boot")()
	if synced, _ := store.IndexSynced(path); !synced {
		t.Fatal("a server closed cleanly leaves its index unsynced")
	}
	if _, ok := store.IndexOf(path); !ok {
		t.Fatal("after a clean stop and a restart of the machine, the index is not trusted")
	}
}

// TestReindexBuildsTheIndexFromTheWALAlone: reindex puts an index of every
// record in place of the one there, which it never reads (one that loads
// but holds a task changed behind the WAL's back would be believed by any
// other command), and the commands after it answer as a full replay.
func TestReindexBuildsTheIndexFromTheWALAlone(t *testing.T) {
	path := backlogWAL(t, t.TempDir(), 3000, 1000)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	want := replayedAnswers(t, path, now)
	stateOf(t, path)
	if err := store.TamperIndex(path, 5); err != nil {
		t.Fatal(err)
	}
	if answersAt(t, path, now, false, store.Options{}) == want {
		t.Fatal("the tampered index answers as the WAL does: the test proves nothing")
	}
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	r, err := h.Reindex()
	h.Close()
	if err != nil {
		t.Fatal(err)
	}
	count, ok := store.IndexOf(path)
	if frames := strings.Count(string(mustRead(t, path)), "\n") - 1; !ok || count != frames || r.Records != frames || r.Bytes == 0 {
		t.Fatalf("reindex built an index of %d of %d records (%v), and says %+v", count, frames, ok, r)
	}
	if answersAt(t, path, now, false, store.Options{}) != want {
		t.Fatal("after reindex, the answers differ from a full replay's")
	}
}

// TestDependentsAreFoundThroughTheIndex: the tasks that wait for another
// are found through the index's after bucket when that one ends, as a full
// replay finds them in memory: a completion lets all of them run, a failure
// ends them DEAD, and expire records it, with the same answers both ways.
func TestDependentsAreFoundThroughTheIndex(t *testing.T) {
	dir := t.TempDir()
	path := backlogWAL(t, dir, 3000, 0)
	run := func(p string, args ...string) string {
		t.Helper()
		code, out, errOut := cli(append([]string{"--wal", p, "--now", "+1s", "-o", "json"}, args...)...)
		if code != 0 && code != 4 {
			t.Fatalf("%v: exit %d %s %s", args, code, out, errOut)
		}
		return out
	}
	for _, up := range []string{"ok", "bad"} {
		run(path, "submit", "--payload", up, "--request-id", up, "--queue", "up")
	}
	var batch strings.Builder
	for i := range 300 {
		fmt.Fprintf(&batch, "{\"payload\":\"d%d\",\"request_id\":\"d%d\",\"after\":[\"%s\"],\"queue\":\"down\"}\n", i, i, []string{"ok", "bad"}[i%2])
	}
	batchFile := filepath.Join(dir, "deps.jsonl")
	if err := os.WriteFile(batchFile, []byte(batch.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	run(path, "submit", "--batch-file", batchFile)
	if code, _, errOut := cli("--wal", path, "reindex"); code != 0 {
		t.Fatalf("reindex: %s", errOut)
	}
	var out string
	for _, end := range [][]string{{"complete"}, {"fail", "--reason", "no", "--permanent"}} {
		var l struct {
			Task  string `json:"task_id"`
			Lease string `json:"lease_id"`
		}
		if err := json.Unmarshal([]byte(run(path, "lease", "--worker", "W", "--queue", "up")), &l); err != nil {
			t.Fatal(err)
		}
		out += run(path, append([]string{end[0], "--task", l.Task, "--lease", l.Lease}, end[1:]...)...)
	}
	for _, args := range [][]string{{"stats", "--queue", "down"}, {"expire"}, {"stats", "--queue", "down"}, {"lease", "--worker", "W", "--queue", "down"}} {
		out += run(path, args...)
	}
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	if got, want := answersAt(t, path, now, false, store.Options{}), replayedAnswers(t, path, now); got != want {
		t.Fatal("through the index, the tasks differ from a full replay's")
	}
	outs := [1]string{out}
	for _, want := range []string{`"waiting":150,"eligible":150,"blocked":0`, `"transitions":[{`, `"task_id":"T`} {
		if !strings.Contains(outs[0], want) {
			t.Fatalf("the answers lack %s:\n%s", want, outs[0])
		}
	}
	if n := strings.Count(outs[0], `"type":"TaskDead"`); n != 150 {
		t.Fatalf("expire recorded %d deaths by a dependency, not 150", n)
	}
}

// dependentsWAL writes a WAL with two tasks in queue up, "ok" and "bad",
// leased, each with each tasks of queue down waiting for it, and its index:
// what leases the two took, by request id.
func dependentsWAL(t *testing.T, each, chunk int) (path string, leases map[string]string) {
	t.Helper()
	dir := t.TempDir()
	path = backlogWAL(t, dir, 1000, 0)
	for _, up := range []string{"ok", "bad"} {
		if code, _, errOut := cli("--wal", path, "--now", "+1s", "submit", "--payload", up, "--request-id", up, "--queue", "up"); code != 0 {
			t.Fatal(errOut)
		}
	}
	var batch strings.Builder
	for i := range 2 * each {
		fmt.Fprintf(&batch, "{\"payload\":\"d%d\",\"request_id\":\"d%d\",\"after\":[\"%s\"],\"delay\":\"%ds\",\"queue\":\"down\"}\n", i, i, []string{"ok", "bad"}[i%2], i%7)
	}
	batchFile := filepath.Join(dir, "deps.jsonl")
	if err := os.WriteFile(batchFile, []byte(batch.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"submit", "--batch-file", batchFile}, {"reindex"}} {
		if code, _, errOut := cli(append([]string{"--wal", path, "--now", "+1s"}, args...)...); code != 0 {
			t.Fatalf("%v: %s", args, errOut)
		}
	}
	leases = map[string]string{}
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(t0 + 400*86_400_000), SpillAfter: chunk})
	defer h.Close()
	for _, up := range []string{"ok", "bad"} {
		err := h.Write(func(tx *store.Tx) error {
			d, err := tx.State.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute, Queues: []string{"up"}}, tx.Now)
			if err == nil {
				leases[up], err = d.LeaseID, tx.Commit(d.Records)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return path, leases
}

// endOf decides the end of the task of request id up ("ok" completes,
// "bad" fails for good) under lease and commits it.
func endOf(tx *store.Tx, up, lease string) error {
	var task string
	tasks, err := tx.State.Tasks()
	for _, t := range tasks {
		if t.RequestID == up {
			task = t.ID
		}
	}
	var d state.Decision
	if err == nil && up == "ok" {
		d, err = tx.State.DecideComplete(task, lease, "", tx.Now)
	} else if err == nil {
		d, err = tx.State.DecideFail(task, lease, "no", true, tx.Now)
	}
	if err == nil {
		err = tx.Commit(d.Records)
	}
	if ended, _ := tx.State.Task(task); err == nil && !ended.State.Terminal() {
		err = fmt.Errorf("%s is %s after its end", task, ended.State)
	}
	return err
}

// walRecords is how many records the WAL at path holds.
func walRecords(t *testing.T, path string) (n int) {
	t.Helper()
	r := store.Open(store.Options{Path: copyOf(t, path), FullReplay: true})
	defer r.Close()
	if err := r.Read(func(tx *store.Tx) error { n = tx.Records(); return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAnEndSettlesManyDependentsAChunkAtATime: an end that many tasks in
// the index wait for writes them into it a chunk at a time rather than
// taking them into memory, and answers as a full replay does; when its
// write then fails, the index it left partial is built again, and the
// answers are those of the WAL without it.
func TestAnEndSettlesManyDependentsAChunkAtATime(t *testing.T) {
	const each, chunk = 150, 64
	path, leases := dependentsWAL(t, each, chunk)
	end := func(h *store.Handle, up string) error {
		return h.Write(func(tx *store.Tx) error {
			err := endOf(tx, up, leases[up])
			if hot := tx.State.HotCount(); err == nil && hot >= chunk {
				t.Errorf("the end of %s holds %d tasks in memory: its %d dependents were not written a chunk at a time", up, hot, each)
			}
			return err
		})
	}
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(t0 + 400*86_400_000), SpillAfter: chunk})
	defer h.Close()
	now := t0 + 401*86_400_000
	if err := end(h, "ok"); err != nil {
		t.Fatal(err)
	}
	if got, want := answersAt(t, path, now, false, store.Options{}), replayedAnswers(t, path, now); got != want {
		t.Fatal("after a completion released its dependents a chunk at a time, the answers differ from a full replay's")
	}
	if n, ok := store.IndexOf(path); !ok || n != walRecords(t, path) {
		t.Fatalf("the index holds %d records (loads: %v), the WAL %d", n, ok, walRecords(t, path))
	}

	before := mustRead(t, path)
	var warnings []string
	failing := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(t0 + 400*86_400_000), FS: failingSyncFS{}, SpillAfter: chunk,
		Warn: func(s string) { warnings = append(warnings, s) }})
	defer failing.Close()
	if err := end(failing, "bad"); err == nil {
		t.Fatal("a failure whose fsync failed succeeded")
	}
	if !bytes.Equal(before, mustRead(t, path)) {
		t.Fatal("the failed end left the WAL changed")
	}
	if _, ok := store.IndexOf(path); ok {
		t.Fatal("the index the failed end wrote a part of loads as a good one")
	}
	if got, want := answersAt(t, path, now, false, store.Options{Warn: func(s string) { warnings = append(warnings, s) }}), replayedAnswers(t, path, now); got != want {
		t.Fatal("after an end whose write failed, the answers differ from a full replay's")
	}
	if !strings.Contains(strings.Join(warnings, "\n"), "holds part of a write that did not end") {
		t.Fatalf("no warning said why the index was built again: %q", warnings)
	}
	if err := end(h, "bad"); err != nil {
		t.Fatal(err)
	}
	if got, want := answersAt(t, path, now, true, store.Options{}), replayedAnswers(t, path, now); got != want {
		t.Fatal("after a failure killed its dependents a chunk at a time, the answers differ from a full replay's")
	}
}

// TestAnEndTakesItsDependentsIntoMemoryWhenTheIndexIsBusy: when a reader
// holds the index past the writer's short wait, the writer cannot write
// an end's dependents into it: memory takes them, the answers are a full
// replay's, and the index is left whole for the next writer.
func TestAnEndTakesItsDependentsIntoMemoryWhenTheIndexIsBusy(t *testing.T) {
	const each, chunk = 150, 64
	path, leases := dependentsWAL(t, each, chunk)
	reader, err := index.Open(path+store.IndexSuffix, false, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(t0 + 400*86_400_000), SpillAfter: chunk})
	defer h.Close()
	err = h.Write(func(tx *store.Tx) error {
		err := endOf(tx, "ok", leases["ok"])
		if hot := tx.State.HotCount(); err == nil && hot <= each {
			t.Errorf("memory holds %d tasks after an end that %d wait for, with the index busy", hot, each)
		}
		return err
	})
	reader.Close()
	if err != nil {
		t.Fatal(err)
	}
	now := t0 + 401*86_400_000
	if got, want := answersAt(t, path, now, true, store.Options{}), replayedAnswers(t, path, now); got != want {
		t.Fatal("after an end whose dependents memory took, the answers differ from a full replay's")
	}
	if _, ok := store.IndexOf(path); !ok {
		t.Fatal("the index is not whole after a writer could not write into it")
	}
}
