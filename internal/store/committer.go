package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasewal/leasewal/internal/index"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// A committer writes the index of a server's pipe off the request path,
// as etcd's backend commits its applied state beside the raft log. It keeps
// a state of its own, read from the index, and follows the WAL: every
// commitEvery, or once commitRecords more records are durable, it applies
// the records the pipe made durable since (read from the file: they never
// change), writes the tasks they touched into the index with the position
// after them, in one transaction, and prepares a state that reads from the
// index there. The pipe, between two batches, takes that state: it applies
// the records it wrote since (a few: those of the commit's own time) and
// decides on it from then on, its memory bounded by what it decided since
// the last commit.
//
// The pipe holds the index open for writing for its life (the WAL's
// exclusive lock keeps every other process from needing it), one database
// shared by the committer's transactions and the pipe's reads. A commit
// never needs a sync (the WAL is the truth): see commitIndex.
type committer struct {
	db      *index.DB
	log     *wal.Log
	st      *state.State
	r       *index.Reader // st's Source
	pos     wal.Position  // what the index holds: st's position
	durable func() (wal.Position, int)
	sync    bool // the next commit syncs (it says the index is unsynced)
	warn    func(format string, args ...any)

	wake chan struct{}
	stop chan struct{}
	done chan struct{}

	written atomic.Int64 // the records the index holds, for nudge

	mu    sync.Mutex
	ready *rebase
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
	meta, head, err := db.Meta()
	pos := meta.Position
	if err != nil || pos.Generation != h.indexed.Generation || pos.Count < h.indexed.Count || pos.Count > h.pos.Count {
		_ = db.Close()
		return p.readsAgain()
	}
	c := &committer{db: db, log: p.tx.log, pos: pos, durable: p.durableEnd, warn: h.warn,
		sync: bootID() == "" || meta.Synced, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	mine, err1 := db.Read()
	cs, err2 := db.Read()
	if err := errors.Join(err1, err2); err != nil {
		closeReaders(mine, cs)
		_ = db.Close()
		return p.readsAgain()
	}
	if c.st, err = state.LoadHead(head, cs); err != nil {
		closeReaders(mine, cs)
		_ = db.Close()
		return p.readsAgain()
	}
	c.r = cs
	c.st.SpillTo(spillInto(c.db, &c.r), h.spillAfter())
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

func closeReaders(rs ...*index.Reader) {
	for _, r := range rs {
		if r != nil {
			r.Close()
		}
	}
}

func (c *committer) run() {
	defer close(c.done)
	tick := time.NewTicker(commitEvery)
	defer tick.Stop()
	for first := true; ; first = false {
		if !first { // the first commit at once: a pipe may be shorter than commitEvery
			select {
			case <-c.stop:
				return
			case <-tick.C:
			case <-c.wake:
			}
		}
		to, version := c.durable()
		if to.Count <= c.pos.Count {
			continue
		}
		if err := c.commit(to, version); err != nil {
			c.warn("could not write the index (%v); the server writes it when it next lets other writers in", err)
			return
		}
	}
}

// commit applies the records up to to and writes what they touched into
// the index, then prepares the pipe's state there.
func (c *committer) commit(to wal.Position, version int) error {
	if err := applyFrames(c.st, c.log, c.pos, to, version); err != nil {
		return err
	}
	c.r.Close()
	if rb := c.take(); rb != nil { // not taken: its read would keep the pages this commit frees from being used again
		rb.r.Close()
	}
	head := c.st.Head()
	meta := index.Meta{Position: to, Seq: c.st.LastSeq(), At: c.st.LastAt(), Boot: bootID(), Synced: bootID() == ""}
	if err := c.db.Write(c.st.Hot(), head, meta, c.sync); err != nil {
		return err
	}
	c.sync = bootID() == ""
	mine, err1 := c.db.Read()
	next, err2 := c.db.Read()
	if err := errors.Join(err1, err2); err != nil {
		closeReaders(mine, next)
		return err
	}
	c.r, c.pos = mine, to
	c.st.Flushed(mine)
	st, err := state.LoadHead(head, next)
	if err != nil {
		next.Close()
		return err
	}
	c.mu.Lock()
	if c.ready != nil {
		c.ready.r.Close()
	}
	c.ready = &rebase{st: st, r: next, pos: to}
	c.mu.Unlock()
	c.written.Store(int64(to.Count))
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

// nudge wakes the committer once records are many since it last wrote.
func (c *committer) nudge(durable wal.Position) {
	if int64(durable.Count)-c.written.Load() >= commitRecords {
		c.wakeUp()
	}
}

// wakeUp has the committer commit now rather than at its next tick.
func (c *committer) wakeUp() {
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
	c.r.Close()
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
