package service

import (
	"hash/maphash"
	"sync/atomic"

	"github.com/leasewal/leasewal/internal/store"
)

// wakes counts what a batcher decided that may give a waiting lease a task
// (state.State.Frees), so that a lease that found nothing looks again
// only after a write that may change its answer, and not after every
// write of the server. anywhere counts the records that may free a task
// in any queue, and the pipe's closings: once the WAL's lock is let go,
// another process may write, and a batch that failed is cut back, neither
// seen here. inQueue counts every record that may free a task in one
// queue, and queues the same by a hash of their queue (a shared slot wakes
// a lease too often, never too rarely).
type wakes struct {
	seed      maphash.Seed
	anywhere  atomic.Uint64
	inQueue   atomic.Uint64
	queues    [64]atomic.Uint64
	unwatched bool // the backend is not piped: every write is looked at
}

func newWakes(piped bool) *wakes { return &wakes{seed: maphash.MakeSeed(), unwatched: !piped} }

func (w *wakes) slot(queue string) *atomic.Uint64 {
	return &w.queues[maphash.String(w.seed, queue)%uint64(len(w.queues))]
}

// decided counts the records a decision committed on tx. It runs where
// the decision ran, before its batch is written: a lease woken by that
// write finds them counted.
func (w *wakes) decided(tx *store.Tx) {
	if w.unwatched {
		return
	}
	for _, r := range tx.Committed {
		switch queue, frees := tx.State.Frees(r); {
		case !frees:
		case queue == "":
			w.anywhere.Add(1)
		default:
			w.inQueue.Add(1)
			w.slot(queue).Add(1)
		}
	}
}

// mark is called by a lease that found nothing in queues (none: any), in
// its decision on tx: the function it returns says whether anything
// decided since may free a task for it (nil: anything may). A WAL that
// does not exist yet has no lock to hold: another process may create it.
func (w *wakes) mark(tx *store.Tx, queues []string) (since func() bool) {
	if w.unwatched || tx.Missing {
		return nil
	}
	counters := []*atomic.Uint64{&w.anywhere}
	if len(queues) == 0 {
		counters = append(counters, &w.inQueue)
	}
	for _, q := range queues {
		counters = append(counters, w.slot(q))
	}
	seen := make([]uint64, len(counters))
	for i, c := range counters {
		seen[i] = c.Load()
	}
	return func() bool {
		for i, c := range counters {
			if c.Load() != seen[i] {
				return true
			}
		}
		return false
	}
}
