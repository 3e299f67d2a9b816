package store_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"leasewal/state"
	"leasewal/store"
)

// answersOf is what a state answers about every task it names and a few it
// does not, its listing, its queues, and the decisions of a lease, a repeated
// submit and an expire at now: JSON, to compare.
func answersOf(t *testing.T, st *state.State, now int64) string {
	t.Helper()
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
		add(st.Task(task.ID))
		add(st.DecideSubmit(state.Submit{Payload: task.Payload, RequestID: task.RequestID, Window: task.Window, Policy: task.Policy, Queue: task.Queue, Priority: task.Priority}, now))
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
// decision as a replay holding them all in memory does; a writer that
// spilled writes a checkpoint whose files are beside the WAL (never the
// spills), which the next command uses and answers alike from; no file is
// left behind.
func TestSpilledReplayAnswersAsAFullReplay(t *testing.T) {
	src := backlogWAL(t, t.TempDir(), 3000, 300)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	var want string
	full := store.Open(store.Options{Path: copyOf(t, src), FullReplay: true, Clock: fixedClock(now)})
	defer full.Close()
	if err := full.Read(func(tx *store.Tx) error { want = answersOf(t, tx.State, tx.Now); return nil }); err != nil {
		t.Fatal(err)
	}

	reader := copyOf(t, src)
	h := store.Open(store.Options{Path: reader, SpillAfter: 40, Clock: fixedClock(now)})
	err := h.Read(func(tx *store.Tx) error {
		if archive, cold := tx.State.Archives(); archive == nil || cold == nil {
			t.Fatal("a replay of 3,000 records spilling every 40 tasks spilled no archive or no cold set")
		}
		if inMemory := tx.State.InMemoryCount(); inMemory > 200 {
			t.Fatalf("%d tasks in memory after a replay spilling every 40", inMemory)
		}
		if got := answersOf(t, tx.State, tx.Now); got != want {
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
	next := store.Open(store.Options{Path: writer, Clock: fixedClock(now)})
	defer next.Close()
	err = next.Read(func(tx *store.Tx) error {
		if count, ok := store.LoadCheckpoint(writer); !ok || count != int(tx.State.LastSeq()) {
			t.Fatalf("the writer's checkpoint: %d records, ok %v", count, ok)
		}
		got := answersOf(t, tx.State, tx.Now)
		if got == want || !strings.Contains(got, "after the spills") {
			t.Fatal("the command after the writer does not see its submit")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	entries, _ := os.ReadDir(filepath.Dir(writer))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "q.wal q.wal.archive q.wal.checkpoint q.wal.cold" {
		t.Fatalf("beside the WAL after a writer spilled: %v", names)
	}
}

// spillFailingFS refuses every spill, as a full or read-only directory would.
type spillFailingFS struct{ store.OS }

func (spillFailingFS) Spill(string) (*os.File, error) { return nil, errors.New("injected: no space") }

// TestSpillFailureKeepsTheTasksInMemory: when the replay cannot spill, it
// warns once and goes on with every task in memory, answering as ever.
func TestSpillFailureKeepsTheTasksInMemory(t *testing.T) {
	src := backlogWAL(t, t.TempDir(), 1000, 100)
	var want string
	full := store.Open(store.Options{Path: copyOf(t, src), FullReplay: true, Clock: fixedClock(t0)})
	defer full.Close()
	if err := full.Read(func(tx *store.Tx) error { want = answersOf(t, tx.State, tx.Now); return nil }); err != nil {
		t.Fatal(err)
	}
	var warnings []string
	h := store.Open(store.Options{Path: copyOf(t, src), SpillAfter: 40, Clock: fixedClock(t0), FS: spillFailingFS{},
		Warn: func(s string) { warnings = append(warnings, s) }})
	defer h.Close()
	err := h.Read(func(tx *store.Tx) error {
		if got := answersOf(t, tx.State, tx.Now); got != want {
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
