package service

import (
	"context"
	"fmt"
	"hash/maphash"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
)

// waitingLease starts a lease of queue idle that waits in l, whose batcher
// b has had decided requests before it, and returns once it waits. took
// returns once it has leased a task, which what names.
func waitingLease(t *testing.T, l *Local, b *Batcher, decided int64) (took func(what string)) {
	got := make(chan error, 1)
	go func() {
		lease, err := l.Lease(context.Background(), api.LeaseRequest{Worker: "idle", Queue: "idle", Wait: "10m"})
		if err == nil && lease.TaskID == "" {
			err = fmt.Errorf("leased nothing: %+v", lease)
		}
		got <- err
	}()
	testwait.Until(t, "the lease to wait", func() bool { return b.Received() == decided+1 && store.Waiting() == 1 }, func() string {
		return fmt.Sprintf("%d decisions, %d watching", b.Received(), store.Waiting())
	})
	return func(what string) {
		t.Helper()
		select {
		case err := <-got:
			if err != nil {
				t.Fatalf("the waiting lease: %v", err)
			}
		case <-time.After(testwait.HangGuard):
			t.Fatalf("the waiting lease of idle did not lease %s in %s", what, testwait.HangGuard)
		}
	}
}

// apart seeds b's counting so that watched shares a slot of slots with
// none of others: a shared slot wakes a waiter for the other's records too,
// and the tests count what wakes it. b has decided nothing yet.
func apart(b *Batcher, slots []atomic.Uint64, watched string, others ...string) {
	for shared := true; shared; {
		b.wakes.seed = maphash.MakeSeed()
		shared = slices.ContainsFunc(others, func(o string) bool { return b.wakes.slot(slots, o) == b.wakes.slot(slots, watched) })
	}
}

// piped is a server's WAL and batcher, whose idle pipe keeps the WAL's lock
// for linger; both end with the test.
func piped(t *testing.T, linger time.Duration) (WAL, *Batcher) {
	w := WAL{Path: filepath.Join(t.TempDir(), "q.wal"), LockTimeout: time.Minute}
	back := OpenWALBackend(w, "http://test")
	b := newBatcher(back, 64, nil, linger)
	t.Cleanup(func() { b.Stop(); back.Close() })
	return w, b
}

// busyQueue submits, leases and completes n tasks of queue busy in l, one
// after the other, and returns their ids. It pauses a moment after each:
// a waiter woken by their writes would look again meanwhile, and the tests
// count the looks.
func busyQueue(t *testing.T, l *Local, n int) (ids []string) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		if _, err := l.Submit(ctx, api.SubmitRequest{Payload: fmt.Sprint(i), Queue: "busy"}); err != nil {
			t.Fatal(err)
		}
		lease, err := l.Lease(ctx, api.LeaseRequest{Worker: "busy", Queue: "busy"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Complete(ctx, api.CompleteRequest{Task: lease.TaskID, Lease: lease.LeaseID}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, lease.TaskID)
		time.Sleep(time.Millisecond)
	}
	return ids
}

// TestAWaitingLeaseSleepsThroughWritesThatCannotGiveItATask: in a server, a
// lease that waits on queue idle decides again only after a write that may
// give it a task. Twenty submits to another queue, twenty grants and
// twenty completions there are decided without it; a submit to idle wakes
// it, and it leases that task. Every write used to wake it.
func TestAWaitingLeaseSleepsThroughWritesThatCannotGiveItATask(t *testing.T) {
	w, b := piped(t, time.Hour) // the pipe stays open: it closes only when a test says
	apart(b, b.wakes.queues[:], "idle", "busy")
	l := New(Options{WAL: w, Batch: b})
	ctx := context.Background()
	if _, err := l.Submit(ctx, api.SubmitRequest{Payload: "the WAL's first", Queue: "busy"}); err != nil {
		t.Fatal(err)
	}
	took := waitingLease(t, l, b, 1)
	busyQueue(t, l, 20)
	if _, err := l.Submit(ctx, api.SubmitRequest{Payload: "for idle", Queue: "idle"}); err != nil {
		t.Fatal(err)
	}
	took("the task submitted there")
	if n := b.Received(); n != 64 {
		t.Errorf("%d decisions, want 64: the WAL's first submit, the waiting lease's first decision, 60 for queue busy, the submit to idle and the lease of it", n)
	}
}

// TestAWaitingLeaseSeesAnotherProcesssWrite: a server lets the WAL's lock go
// when idle, and a one-shot command submits to the queue a lease waits on:
// the server never decided that record, and the lease still takes it.
func TestAWaitingLeaseSeesAnotherProcesssWrite(t *testing.T) {
	w, b := piped(t, linger)
	l := New(Options{WAL: w, Batch: b})
	took := waitingLease(t, l, b, 0)
	if _, err := New(Options{WAL: w}).Submit(context.Background(), api.SubmitRequest{Payload: "from a shell", Queue: "idle"}); err != nil {
		t.Fatal(err)
	}
	took("the task another process submitted there")
}

// TestAWaitOnATaskSleepsThroughWritesOfOthers: in a server, a wait for a
// task's state looks in the server's batches, and again only after a
// write of that task: sixty records of other tasks are decided without
// it, the task's lease wakes it, and it answers OK.
func TestAWaitOnATaskSleepsThroughWritesOfOthers(t *testing.T) {
	w, b := piped(t, time.Hour) // the pipe stays open: it closes only when a test says
	var busy []string
	for n := 2; n <= 21; n++ {
		busy = append(busy, fmt.Sprint("T", n))
	}
	apart(b, b.wakes.tasks[:], "T1", busy...)
	l := New(Options{WAL: w, Batch: b})
	ctx := context.Background()
	watched, err := l.Submit(ctx, api.SubmitRequest{Payload: "watched", Queue: "watched"})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		v, err := l.Wait(ctx, api.WaitRequest{Tasks: []string{watched.TaskID}, For: "LEASED", Timeout: "10m"})
		if err == nil && v.Result != api.ResultOK {
			err = fmt.Errorf("answered %+v", v)
		}
		got <- err
	}()
	testwait.Until(t, "the wait to watch", func() bool { return b.Received() == 3 && store.Waiting() == 1 }, func() string {
		return fmt.Sprintf("%d decisions, %d watching", b.Received(), store.Waiting())
	})
	if done := busyQueue(t, l, 20); !slices.Equal(done, busy) {
		t.Fatalf("the busy queue's tasks were %v, want %v", done, busy)
	}
	if _, err := l.Lease(ctx, api.LeaseRequest{Worker: "w", Task: watched.TaskID}); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("the wait: %v", err)
		}
	case <-time.After(testwait.HangGuard):
		t.Fatalf("the wait for %s LEASED did not answer in %s", watched.TaskID, testwait.HangGuard)
	}
	if n := b.Received(); n != 65 {
		t.Errorf("%d decisions, want 65: the submit, the wait's two looks, 60 of queue busy, the lease and the look that saw it", n)
	}
}
