package store

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasewal/leasewal/internal/index"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// A committer writes the index of a server's pipe off the request path,
// as etcd's backend commits its applied state beside the raft log. The
// pipe, between two batches, once a commit is due (commitEvery since the
// last, commitRecords records, or half the tasks memory may hold), hands it
// a copy of the tasks it holds in memory and of its head, with the WAL's
// position after its last batch (capture). The committer waits until that
// position is durable, writes the tasks into the index with the position, in
// one transaction, and prepares a state that reads from the index there. The
// pipe, between two batches, takes that state: it applies the records it
// wrote since the copy (a few: those of the commit's own time) and decides
// on it from then on, its memory bounded by what it decided since the last
// copy. The committer applies no record.
//
// The pipe holds the index open for writing for its life (the WAL's
// exclusive lock keeps every other process from needing it), one database
// shared by the committer's transactions and the pipe's reads. A commit
// never needs a sync (the WAL is the truth): see commitIndex.
type committer struct {
	db      *index.DB
	durable func() (wal.Position, int)
	sync    bool // the next commit syncs (it says the index is unsynced)
	warn    func(format string, args ...any)

	jobs chan capture  // at most one: the pipe copies again only once the last is taken
	wake chan struct{} // a fsync made more durable
	stop chan struct{}
	done chan struct{}

	written atomic.Int64 // the records the index holds

	mu    sync.Mutex
	ready *rebase
	// busy: a copy is handed over and its state not taken yet (the pipe's
	// own, read and written on its goroutine only).
	busy bool
	last time.Time // when the pipe last copied (the pipe's own too)
}

// capture is what the pipe held at a position: a copy of its tasks in
// memory and its head, which the index is to hold with meta.
type capture struct {
	tasks []*state.Task
	head  []byte
	meta  index.Meta
}

// rebase is a state that reads from the index at pos, for the pipe.
type rebase struct {
	st  *state.State
	r   *index.Reader
	pos wal.Position
}

const (
	commitEvery   = time.Second
	commitRecords = 10_000
)

// startCommitter opens the index for writing for the pipe's life, gives
// the pipe's state a read of it, and starts the committer; false when the
// index cannot be opened so (then the pipe writes it at Close, as a one-shot
// writer does), with the state reading the index as before.
func (p *Pipe) startCommitter() bool {
	h := p.h
	if !h.opts.Resident || h.idx == nil || !h.cache.HasSource() || p.tx.log == nil {
		return false
	}
	h.idx.close()
	h.idx = nil
	db, err := index.OpenHeld(h.indexPath(), writeLockWait)
	if err != nil {
		h.unwritable(err)
		return p.readsAgain()
	}
	meta, _, err := db.Meta()
	pos := meta.Position
	if err != nil || pos.Generation != h.indexed.Generation || pos.Count < h.indexed.Count || pos.Count > h.pos.Count {
		_ = db.Close()
		return p.readsAgain()
	}
	mine, err := db.Read()
	if err != nil {
		_ = db.Close()
		return p.readsAgain()
	}
	c := &committer{db: db, durable: p.durableEnd, warn: h.warn, sync: bootID() == "" || meta.Synced,
		jobs: make(chan capture, 1), wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	h.cache.Reattach(mine)
	h.idx = &openIndex{db: db, r: mine}
	p.spillsInto(h.cache, db, &h.idx.r)
	h.unsynced = h.unsynced || bootID() != ""
	c.written.Store(int64(pos.Count))
	p.commit = c
	go c.run()
	return true
}

// readsAgain gives the pipe's state a read of the index again, opened
// read-only as before, when the committer could not start: false.
func (p *Pipe) readsAgain() bool {
	p.h.reopenIndex()
	return false
}

func (c *committer) run() {
	defer close(c.done)
	for {
		var job capture
		select {
		case <-c.stop:
			return
		case job = <-c.jobs:
		}
		for to, _ := c.durable(); to.Count < job.meta.Position.Count; to, _ = c.durable() {
			select {
			case <-c.stop: // a failed fsync stops the pipe: what it copied is never written
				return
			case <-c.wake:
			}
		}
		if err := c.commit(job); err != nil {
			c.warn("could not write the index (%v); the server writes it when it next lets other writers in", err)
			return
		}
	}
}

// commit writes what the pipe copied into the index, then prepares the
// pipe's state there.
func (c *committer) commit(job capture) error {
	if err := c.db.Write(job.tasks, job.head, job.meta, c.sync); err != nil {
		return err
	}
	c.sync = bootID() == ""
	r, err := c.db.Read()
	if err != nil {
		return err
	}
	st, err := state.LoadHead(job.head, r)
	if err != nil {
		r.Close()
		return err
	}
	c.mu.Lock()
	c.ready = &rebase{st: st, r: r, pos: job.meta.Position}
	c.mu.Unlock()
	c.written.Store(int64(job.meta.Position.Count))
	return nil
}

// take is the state the last commit prepared, if the pipe has not taken it.
func (c *committer) take() *rebase {
	c.mu.Lock()
	defer c.mu.Unlock()
	rb := c.ready
	c.ready = nil
	return rb
}

// nudge tells the committer a fsync made more durable: a copy may be
// waiting for it.
func (c *committer) nudge() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// end stops the committer once its commit in progress is written. The
// pipe's own read of the index ends first: a commit that grows the file
// waits for every read.
func (c *committer) end(h *Handle) {
	h.idx.closeReader()
	close(c.stop)
	<-c.done
}

// capture hands the committer a copy of what the pipe holds, at the WAL's
// position after its last batch, when a commit is due (or now, with now)
// and the committer has nothing of the pipe's that the pipe has not taken
// back; never a state the pipe stopped deciding on (a record it refused
// may have left it half changed) or one whose reads of the index failed.
// Only the goroutine that calls Batch may call it.
func (p *Pipe) capture(now bool) {
	c, st, log := p.commit, p.tx.State, p.tx.log
	if c == nil || c.busy || log == nil || int64(log.Count) <= c.written.Load() {
		return
	}
	if !now && time.Since(c.last) < commitEvery && int64(log.Count)-c.written.Load() < commitRecords && st.HotCount() < p.h.spillAfter()/2 {
		return
	}
	if p.Stopped() || st.Damage() != nil {
		return
	}
	c.busy, c.last = true, time.Now()
	c.jobs <- capture{tasks: st.HotCopy(), head: st.Head(), meta: index.Meta{Position: log.Position, Seq: st.LastSeq(), At: st.LastAt(), Boot: bootID(), Synced: bootID() == ""}}
}

// applyFrames applies the records between from and to of log onto st.
func applyFrames(st *state.State, log *wal.Log, from, to wal.Position, version int) error {
	err := log.Frames(from, to, version, func(f wal.Frame) error {
		r, err := decodeFrame(f)
		if err == nil {
			err = st.Apply(r)
		}
		if err != nil {
			return damageAt(f, err)
		}
		return nil
	})
	if err == nil {
		err = st.Damage()
	}
	if err != nil {
		return fmt.Errorf("following the WAL from record %d: %w", from.Count, err)
	}
	return nil
}

// rebase decides on the state the committer prepared, if it prepared one
// since: the records written since its position applied, it takes the
// place of the pipe's, and its read of the index that of the pipe's. The
// pipe's read is then at most one commit old: a read held longer would keep
// every page the commits since have freed from being used again, and the
// index file would grow with the pipe's life.
func (p *Pipe) rebase() {
	c := p.commit
	if c == nil {
		return
	}
	rb := c.take()
	if rb == nil {
		return
	}
	c.busy = false
	log := p.tx.log
	p.spillsInto(rb.st, c.db, &rb.r)
	if err := applyFrames(rb.st, log, rb.pos, log.Position, log.Version); err != nil {
		rb.r.Close()
		p.h.warn("could not read the index the server wrote (%v); it reads the one it had", err)
		return
	}
	h := p.h
	h.idx.closeReader()
	h.idx.r = rb.r
	p.tx.State, h.cache, h.indexed = rb.st, rb.st, rb.pos
	p.spillsInto(rb.st, c.db, &h.idx.r)
}

// spillsInto has st, the pipe's state, write what an end settles into the
// index, beside the committer's commits, a chunk at a time, and read it
// through *r: such a write marks the index partial until a commit holds
// the end's record (index.DB.WriteTasks), so that the index never says it
// holds a record it holds part of, nor one the WAL does not (the pipe
// decides a batch before the one before it is durable); the pipe's Close
// writes the index then, as a one-shot writer's end does.
func (p *Pipe) spillsInto(st *state.State, db *index.DB, r **index.Reader) {
	spill := spillInto(db, r)
	st.SpillTo(func(tasks []*state.Task, seq, at int64) (state.Source, bool, error) {
		src, written, err := spill(tasks, seq, at)
		p.h.spilled = p.h.spilled || written // Close writes the index, whatever the committer did
		return src, written, err
	}, p.h.spillAfter())
}
