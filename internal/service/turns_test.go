package service

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
)

// waitingLeases starts n leases of queue q that wait in l until they lease
// a task, and returns once all of them watch; each answer, a task's id or
// an error, comes on the channel.
func waitingLeases(t *testing.T, l *Local, n int) <-chan string {
	t.Helper()
	before := store.Waiting()
	got := make(chan string, n)
	for i := range n {
		go func() {
			lease, err := l.Lease(context.Background(), api.LeaseRequest{Worker: fmt.Sprint("w", i), Queue: "q", Wait: "10m"})
			switch {
			case err != nil:
				got <- err.Error()
			default:
				got <- lease.TaskID
			}
		}()
	}
	testwait.Until(t, "the leases to watch", func() bool { return store.Waiting() == before+n }, func() string {
		return fmt.Sprintf("%d watching", store.Waiting()-before)
	})
	return got
}

// waitingLine is a server whose idle pipe keeps the WAL's lock for
// linger, with a first task in queue other, and n leases that wait on
// queue q (waitingLeases), once each has looked.
func waitingLine(t *testing.T, linger time.Duration, n int) (*Local, *Batcher, <-chan string) {
	w, b := piped(t, linger)
	apart(b, b.wakes.queues[:], "q", "other")
	l := New(Options{WAL: w, Batch: b})
	if _, err := l.Submit(context.Background(), api.SubmitRequest{Payload: "the WAL's first", Queue: "other"}); err != nil {
		t.Fatal(err)
	}
	got := waitingLeases(t, l, n)
	testwait.Until(t, "every lease's first look", func() bool { return b.Received() == int64(n)+1 }, func() string { return fmt.Sprint(b.Received(), " decisions") })
	return l, b, got
}

// decidedExactly fails t unless b comes to want decisions and decides no
// more in a moment (a lease woken by the last write would decide then).
func decidedExactly(t *testing.T, b *Batcher, want int64, what string) {
	t.Helper()
	testwait.Until(t, what, func() bool { return b.Received() >= want }, func() string { return fmt.Sprint(b.Received(), " decisions") })
	time.Sleep(5 * time.Millisecond)
	if n := b.Received(); n != want {
		t.Fatalf("%d decisions, want %d: %s", n, want, what)
	}
}

// TestAWriteWakesOneWaitingLeaseATask: twenty leases wait on queue q in a
// server. Each submit there is looked at by the first of them, which takes
// its task, and by the next, whose turn it becomes: three decisions a task,
// where every waiter used to decide again. Of five tasks submitted in one
// batch, the first waiter takes one and gives the next four a turn, and
// the sixth looks once they are gone. A schedule, which may free a task
// anywhere, has the first look, and no other.
func TestAWriteWakesOneWaitingLeaseATask(t *testing.T) {
	l, b, got := waitingLine(t, time.Hour, 20) // the pipe stays open
	ctx := context.Background()
	decided := int64(21)
	leased := map[string]bool{}
	take := func(ids ...string) {
		t.Helper()
		for range ids {
			select {
			case id := <-got:
				leased[id] = true
			case <-time.After(testwait.HangGuard):
				t.Fatalf("no waiting lease took a task in %s", testwait.HangGuard)
			}
		}
		for _, id := range ids {
			if !leased[id] {
				t.Fatalf("the waiting leases took %v, not %s", leased, id)
			}
		}
	}
	for i := range 5 {
		ack, err := l.Submit(ctx, api.SubmitRequest{Payload: fmt.Sprint(i), Queue: "q"})
		if err != nil {
			t.Fatal(err)
		}
		take(ack.TaskID)
		decided += 3
		decidedExactly(t, b, decided, fmt.Sprintf("submit %d, the first waiter's lease of it, the next waiter's turn", i+1))
	}
	reqs := make([]api.SubmitRequest, 5)
	for i := range reqs {
		reqs[i] = api.SubmitRequest{Payload: fmt.Sprint("burst ", i), Queue: "q"}
	}
	acks, err := l.SubmitBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, a := range acks {
		ids = append(ids, a.TaskID)
	}
	take(ids...)
	decided += 1 + 1 + 4 + 1
	decidedExactly(t, b, decided, "a batch of 5, the first waiter's lease, four waiters' turns, the next waiter's turn")
	if left := store.Waiting(); left != 10 {
		t.Errorf("%d leases watch, want the 10 that took nothing", left)
	}
	// A schedule may free a task anywhere: the first looks, finds none
	// in q, and wakes none of the others, who ask for the same tasks.
	if _, err := l.ScheduleAdd(ctx, api.ScheduleAddRequest{Name: "hourly", Every: "1h", Task: api.SubmitRequest{Payload: "report", Queue: "other"}}); err != nil {
		t.Fatal(err)
	}
	decided += 2
	decidedExactly(t, b, decided, "a schedule added, the first waiter's look")
}

// TestAQuietServerWakesOneWaitingLeaseATask: a server lets the WAL's lock
// go between submits that come apart, after which another process may
// write; ten leases wait on queue q. Each submit is still taken by the
// first and looked at by the next alone: a lock let go wakes the first,
// not the line.
func TestAQuietServerWakesOneWaitingLeaseATask(t *testing.T) {
	l, b, got := waitingLine(t, time.Millisecond, 10)
	ctx := context.Background()
	decided := int64(11)
	piped := func() bool {
		b.lead.Lock()
		defer b.lead.Unlock()
		return b.pipe != nil
	}
	for i := range 5 {
		testwait.Until(t, "every look, and the lock let go", func() bool { return b.Received() == decided && !piped() }, func() string {
			return fmt.Sprintf("%d decisions, want %d; piped %v", b.Received(), decided, piped())
		})
		ack, err := l.Submit(ctx, api.SubmitRequest{Payload: fmt.Sprint(i), Queue: "q"})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case id := <-got:
			if id != ack.TaskID {
				t.Fatalf("a waiting lease took %s, not %s", id, ack.TaskID)
			}
		case <-time.After(testwait.HangGuard):
			t.Fatalf("no waiting lease took %s in %s", ack.TaskID, testwait.HangGuard)
		}
		decided += 3
		decidedExactly(t, b, decided, fmt.Sprintf("submit %d, the first waiter's lease of it, the next waiter's turn", i+1))
	}
}

// TestAResumeGivesEveryWaiterATurn: ten leases wait on a paused queue that
// holds five tasks; its resume may free all of them at once, and every
// waiter looks, where a submit wakes one.
func TestAResumeGivesEveryWaiterATurn(t *testing.T) {
	w, b := piped(t, time.Hour)
	l := New(Options{WAL: w, Batch: b})
	ctx := context.Background()
	if _, err := l.Pause(ctx, api.PauseRequest{Queue: "q", Reason: "test"}); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := l.Submit(ctx, api.SubmitRequest{Payload: fmt.Sprint(i), Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	got := waitingLeases(t, l, 10)
	testwait.Until(t, "every lease's first look", func() bool { return b.Received() == 16 }, func() string { return fmt.Sprint(b.Received(), " decisions") })
	if _, err := l.Resume(ctx, api.ResumeRequest{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		select {
		case id := <-got:
			if !strings.HasPrefix(id, "T") {
				t.Fatalf("a waiting lease: %s", id)
			}
		case <-time.After(testwait.HangGuard):
			t.Fatalf("the waiting leases did not take the five tasks in %s", testwait.HangGuard)
		}
	}
	testwait.Until(t, "a look of each of the ten waiters after the resume", func() bool { return b.Received() >= 16+1+10 }, func() string {
		return fmt.Sprintf("%d decisions after the resume, the resume's among them", b.Received()-16)
	})
}

// TestNoTaskWaitsWhileALeaseWaitsForIt: leases of three lines (queue q,
// queues q and r, every queue) wait in a server, some of them only a
// moment and some until their client goes, while tasks are submitted to
// q and r one at a time and in batches, and leases that do not wait take
// some of them. Whenever it all comes to rest, either no task is
// WAITING or no lease waits for one: a waiter left asleep beside a task
// it could take hangs the test.
func TestNoTaskWaitsWhileALeaseWaitsForIt(t *testing.T) {
	w, b := piped(t, time.Hour)
	l := New(Options{WAL: w, Batch: b})
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	if _, err := l.Submit(ctx, api.SubmitRequest{Payload: "the WAL's first", Queue: "other"}); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 45))
	seed := rng.Uint64()
	rng = rand.New(rand.NewPCG(seed, 45))
	var (
		wg      sync.WaitGroup
		waiting [3]atomic.Int64 // leases of each line between their start and their answer
		taken   atomic.Int64
	)
	lines := []api.List{"q", "q,r", ""}
	startLease := func(line int, wait string, gone time.Duration) {
		waiting[line].Add(1)
		lctx, cancel := context.WithCancel(ctx)
		if gone > 0 {
			time.AfterFunc(gone, cancel)
		}
		wg.Go(func() {
			defer cancel()
			defer waiting[line].Add(-1)
			lease, err := l.Lease(lctx, api.LeaseRequest{Worker: "w", Queue: lines[line], Wait: wait})
			var empty *api.Empty
			switch {
			case err == nil && lease.TaskID != "":
				taken.Add(1)
			case errors.Is(err, ErrClientGone), errors.As(err, &empty):
			default:
				t.Errorf("a waiting lease of %q: %+v, %v", lines[line], lease, err)
			}
		})
	}
	eligible := func() (q, r int) {
		s, err := l.Stats(context.Background(), api.StatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, qs := range s.Queues {
			switch qs.Queue {
			case "q":
				q = qs.Eligible
			case "r":
				r = qs.Eligible
			}
		}
		return q, r
	}
	atRest := func() bool {
		q, r := eligible()
		ofQ, ofR := waiting[0].Load()+waiting[1].Load()+waiting[2].Load(), waiting[1].Load()+waiting[2].Load()
		return (q == 0 || ofQ == 0) && (r == 0 || ofR == 0)
	}
	for round := range 200 {
		for range rng.IntN(6) {
			switch rng.IntN(4) {
			case 0:
				startLease(rng.IntN(3), "20ms", 0)
			case 1:
				startLease(rng.IntN(3), "10m", time.Duration(rng.IntN(20))*time.Millisecond)
			default:
				startLease(rng.IntN(3), "10m", 0)
			}
		}
		var reqs []api.SubmitRequest
		for range rng.IntN(4) {
			reqs = append(reqs, api.SubmitRequest{Payload: "t", Queue: []string{"q", "r"}[rng.IntN(2)]})
		}
		switch {
		case len(reqs) > 1:
			if _, err := l.SubmitBatch(ctx, reqs); err != nil {
				t.Fatal(err)
			}
		case len(reqs) == 1:
			if _, err := l.Submit(ctx, reqs[0]); err != nil {
				t.Fatal(err)
			}
		}
		if rng.IntN(3) == 0 {
			if _, err := l.Lease(ctx, api.LeaseRequest{Worker: "thief", Queue: "q,r"}); err != nil && !errors.As(err, new(*api.Empty)) {
				t.Fatal(err)
			}
		}
		if round%5 == 4 {
			testwait.Until(t, "no task eligible beside a lease that waits for it (seed "+fmt.Sprint(seed)+")", atRest, func() string {
				q, r := eligible()
				return fmt.Sprintf("eligible in q %d, in r %d; leases waiting on q %d, on q,r %d, on any %d; %d taken", q, r, waiting[0].Load(), waiting[1].Load(), waiting[2].Load(), taken.Load())
			})
		}
	}
	stop()
	wg.Wait()
}

// TestATurnGoesToTheNextInLine: of six leases waiting in one line, a first
// woken by three records that may free a task gives a turn to the next
// two, one woken by a record that may free tasks anywhere to every one;
// the first's leaving gives the next a turn, another's leaving none.
func TestATurnGoesToTheNextInLine(t *testing.T) {
	h := store.Open(store.Options{Path: filepath.Join(t.TempDir(), "q.wal"), LockTimeout: time.Second})
	defer h.Close()
	var line []*store.Watcher
	var ts turns
	key := lineOf("", []string{"q"})
	for range 6 {
		w, err := h.Watch()
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close()
		line = append(line, w)
		ts.join(key, w)
	}
	turned := func() (got []int) { // which have a turn, taking it
		for i, w := range line {
			if _, err := w.Wait(time.Now().Add(time.Millisecond)); errors.Is(err, store.ErrInterrupted) {
				got = append(got, i)
			}
		}
		return got
	}
	wakes := newWakes(true)
	tx := &store.Tx{}
	m := wakes.mark(tx, []string{"q"})
	for range 3 {
		wakes.slot(wakes.queues[:], "q").Add(1)
	}
	wakes.unseen.Add(1) // a pipe let go: another process may write
	if !m.only()() {
		t.Fatal("a waiter that noted these counters is not woken by three records of its queue and a pipe let go")
	}
	n, all := m.freed()
	if n != 3 || all {
		t.Fatalf("freed %d (all %v), want 3 of queue q: what another process may write is not counted", n, all)
	}
	ts.give(key, n-1, all)
	if got := turned(); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("turns given for three records went to %v, want the two after the first", got)
	}
	wakes.anywhere.Add(1)
	n, all = m.freed()
	ts.give(key, n, all)
	if got := turned(); !slices.Equal(got, []int{1, 2, 3, 4, 5}) {
		t.Errorf("turns given for a record of anywhere went to %v, want every one after the first", got)
	}
	if !ts.first(key, line[0]) || ts.first(key, line[1]) {
		t.Fatal("the first of the line is not the one that came first")
	}
	ts.leave(key, line[3])
	if got := turned(); len(got) != 0 {
		t.Errorf("one leaving from the middle gave turns to %v, want none", got)
	}
	ts.leave(key, line[0])
	if got := turned(); !slices.Equal(got, []int{1}) || !ts.first(key, line[1]) {
		t.Errorf("the first leaving gave turns to %v, want the next, first now", got)
	}
}
