package service

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// wakes counts what a batcher decided that may give a waiting lease a task
// (state.State.Frees), so that a lease that found nothing looks again
// only after a write that may change its answer, and not after every
// write of the server. anywhere counts the records that may free a task
// in any queue; unseen the pipe's closings: once the WAL's lock is let
// go, another process may write, and a batch that failed is cut back,
// neither seen here. inQueue counts every record that may free a task in
// one queue, and queues the same by a hash of their queue (a shared slot
// wakes a lease too often, never too rarely). tasks counts every record
// of a task by a hash of its id, for a wait on tasks' states.
type wakes struct {
	seed      maphash.Seed
	anywhere  atomic.Uint64
	unseen    atomic.Uint64
	inQueue   atomic.Uint64
	queues    [64]atomic.Uint64
	tasks     [1024]atomic.Uint64 // more than queues: a backlog has many tasks, few queues
	unwatched bool                // the backend is not piped: every write is looked at
}

func newWakes(piped bool) *wakes { return &wakes{seed: maphash.MakeSeed(), unwatched: !piped} }

func (w *wakes) slot(slots []atomic.Uint64, name string) *atomic.Uint64 {
	return &slots[maphash.String(w.seed, name)%uint64(len(slots))]
}

// decided counts the records a decision committed on tx. It runs where
// the decision ran, before its batch is written: a lease woken by that
// write finds them counted.
func (w *wakes) decided(tx *store.Tx) {
	if w.unwatched {
		return
	}
	for _, r := range tx.Committed {
		if r.TaskID != "" {
			w.slot(w.tasks[:], r.TaskID).Add(1)
		}
		switch queue, frees := tx.State.Frees(r); {
		case !frees:
		case queue == "":
			w.anywhere.Add(1)
		default:
			n := uint64(1)
			if r.Type == state.QueueResumed || r.Type == state.QueueLimited || r.Type == state.QueueRated {
				n = everyWaiter // it may free every task of its queue at once
			}
			w.inQueue.Add(n)
			w.slot(w.queues[:], queue).Add(n)
		}
	}
}

// everyWaiter is what a record that may free every task of its queue adds
// to the queue's counters: more than any line of waiters, each of which a
// first woken by it gives a turn (turns).
const everyWaiter = 1 << 32

// mark is called by a lease that found nothing in queues (none: any), in
// its decision on tx: the counters it notes say whether anything decided
// since may free a task for it, and how many records may have (nil:
// anything may; see note).
func (w *wakes) mark(tx *store.Tx, queues []string) *marks {
	counters := []*atomic.Uint64{&w.anywhere, &w.unseen}
	if len(queues) == 0 {
		counters = append(counters, &w.inQueue)
	}
	for _, q := range queues {
		counters = append(counters, w.slot(w.queues[:], q))
	}
	return w.note(tx, counters)
}

// markTasks is mark for a wait on the states of tasks, in its look on tx:
// a task's state changes by a record of its own, by time, or, once tasks
// may wait for tasks, by an end of another, which counts anywhere
// (State.Frees).
func (w *wakes) markTasks(tx *store.Tx, tasks []string) *marks {
	counters := []*atomic.Uint64{&w.anywhere, &w.unseen}
	for _, id := range tasks {
		counters = append(counters, w.slot(w.tasks[:], id))
	}
	return w.note(tx, counters)
}

// note notes counters, anywhere and unseen first, now, in a decision on
// tx (nil: anything may change unseen, unwatched, or on a WAL that does
// not exist yet, which has no lock to hold: another process may create it).
func (w *wakes) note(tx *store.Tx, counters []*atomic.Uint64) *marks {
	if w.unwatched || tx.Missing {
		return nil
	}
	m := &marks{counters: counters, seen: make([]uint64, len(counters))}
	for i, c := range counters {
		m.seen[i] = c.Load()
	}
	return m
}

// marks are the counters a waiter noted, anywhere's and unseen's first,
// and what they were then.
type marks struct {
	counters []*atomic.Uint64
	seen     []uint64
}

// only is what a watcher asks at each change (store.Watcher.Only): whether
// a counter has moved since (nil marks: every change counts).
func (m *marks) only() func() bool {
	if m == nil {
		return nil
	}
	return func() bool {
		for i, c := range m.counters {
			if c.Load() != m.seen[i] {
				return true
			}
		}
		return false
	}
}

// freed is how many records decided since may have freed a task for the
// waiter; all when one may have freed tasks anywhere, or m is nil. What
// another process may have written (unseen) is not counted: a waiter that
// takes a task hands its place to the next, which looks (turns).
func (m *marks) freed() (n uint64, all bool) {
	if m == nil || m.counters[0].Load() != m.seen[0] {
		return 0, true
	}
	for i, c := range m.counters[2:] {
		n += c.Load() - m.seen[i+2]
	}
	return n, false
}
