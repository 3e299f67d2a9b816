package store_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// TestALeaderAppliesWhatItDecidedWithoutReplaying: a raft leader decides a
// batch (DecideBatch) and, once the cluster commits it, appends it
// (Replicate). The Replicate of exactly the records it decided goes on from
// the state it decided on and replays no record of the WAL; an entry with
// other records (a proposal lost, another leader's entry) is applied from
// the WAL as it stands. Either way the WAL, and every decision after, is
// what a writer that never decided ahead writes.
func TestALeaderAppliesWhatItDecidedWithoutReplaying(t *testing.T) {
	dir := t.TempDir()
	path := backlogWAL(t, dir, 3000, 1000)
	stateOf(t, path) // the index, built
	twin := copyOf(t, path)
	now := t0 + int64(400*24*time.Hour/time.Millisecond)
	var replayed int
	count := func(state.Record, *store.Tx) error { replayed++; return nil }
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Clock: fixedClock(now), Node: true, OnRecord: count})
	defer h.Close()
	plain := store.Open(store.Options{Path: twin, LockTimeout: time.Minute, Clock: fixedClock(now)})
	defer plain.Close()
	var leased, twinLeased []string
	batch := func(leased *[]string) []func(*store.Tx) error {
		return []func(*store.Tx) error{addOne, leaseOne(leased), addOne}
	}
	flat := func(committed [][]state.Record) (all []state.Record) {
		for _, recs := range committed {
			all = append(all, recs...)
		}
		return all
	}
	for i := range 300 { // past the index's tail: the index is written on the way
		_, committed, err := h.DecideBatch(batch(&leased))
		if err != nil {
			t.Fatal(err)
		}
		replayed = 0
		if _, err := h.Replicate(flat(committed)); err != nil {
			t.Fatal(err)
		}
		if replayed != 0 {
			t.Fatalf("cycle %d: the Replicate of what the handle decided replayed %d records of the WAL", i, replayed)
		}
		if _, _, err := plain.WriteBatch(batch(&twinLeased)); err != nil {
			t.Fatal(err)
		}
	}
	// Another leader's entry (decided by the plain writer, at the same
	// state) while this handle had decided something else.
	plainRecs := func(fns []func(*store.Tx) error) []state.Record {
		_, committed, err := plain.WriteBatch(fns)
		if err != nil {
			t.Fatal(err)
		}
		return flat(committed)
	}
	var otherLeased []string
	entry := plainRecs([]func(*store.Tx) error{addOne, addOne, leaseOne(&otherLeased)})
	if _, _, err := h.DecideBatch(batch(&leased)); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Replicate(entry); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		_, committed, err := h.DecideBatch(batch(&leased))
		if err == nil {
			_, err = h.Replicate(flat(committed))
		}
		if err != nil {
			t.Fatal(err)
		}
		plainRecs(batch(&twinLeased))
	}
	h.Close()
	plain.Close()
	if !bytes.Equal(mustRead(t, path), mustRead(t, twin)) {
		t.Fatal("the WAL a leader wrote from the states it decided on differs from a plain writer's")
	}
	if want := replayedAnswers(t, path, now); answersAt(t, path, now, false, store.Options{}) != want {
		t.Fatal("from the index the leader wrote, a new handle answers differently from a full replay")
	}
}
