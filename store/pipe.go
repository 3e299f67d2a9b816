package store

import (
	"errors"
	"fmt"
	"sync"

	"leasewal/state"
	"leasewal/wal"
)

// ErrPipeBroken is a batch written after one whose fsync failed: its
// records were cut off with the failed one's and it was never answered, so
// it may be decided again (on a pipe of its own).
var ErrPipeBroken = errors.New("an earlier batch's fsync failed: this batch was not kept, and may be decided again")

// Pipe holds the WAL's exclusive lock across a run of batches (a resident
// server's group commit, pipelined): each batch is decided on the state that
// includes every batch before it, written at once, and made durable by a
// background fsync while the next is decided. A batch's Flight says when its
// records are durable; nothing decided in a pipe may be answered before.
// Local writers wait for the lock as for any writer: Close releases it.
type Pipe struct {
	h  *Handle
	tx *Tx
	// flights queue the batches written, in order, to the syncer; done is
	// closed when it has answered the last.
	flights chan *Flight
	done    chan struct{}

	mu      sync.Mutex
	durable wal.Position // what a Sync made durable
	broken  error        // why the pipe broke: every later batch is refused
	// syncFailed says the pipe broke at an fsync, whose first batch is
	// answered with the failure; unanswered are the flights written but not
	// made durable when it broke: Close answers them, once it has cut the
	// file back.
	syncFailed bool
	unanswered []*Flight
	// counted is how many tasks memory held when Due last counted them.
	counted int
}

// Flight is a batch in the pipe, written and waiting for its fsync.
type Flight struct {
	end     wal.Position // the WAL up to the batch's last record
	err     error
	done    chan struct{}
	settled chan struct{} // closed once the batch is durable, or the pipe broke before it was
}

// Settled is closed once the batch is durable, or the pipe broke before it
// was (then Close answers it).
func (f *Flight) Settled() <-chan struct{} { return f.settled }

// Wait returns once the batch is durable (nil), or known not to be: the
// fsync's error for the batch whose fsync failed, ErrPipeBroken for one
// after it.
func (f *Flight) Wait() error {
	<-f.done
	return f.err
}

// Pipe takes the WAL's exclusive lock for a run of batches and catches up
// with it; Close releases it.
func (h *Handle) Pipe() (*Pipe, error) {
	if h.closed {
		return nil, ErrNotOpen
	}
	for range maxStartOvers {
		tx, err := h.begin(wal.Write)
		if errors.Is(err, wal.ErrReplaced) {
			h.forget()
			continue
		}
		if err != nil {
			h.forget()
			return nil, err
		}
		p := &Pipe{h: h, tx: tx, flights: make(chan *Flight, 1024), done: make(chan struct{})}
		if tx.log != nil {
			p.durable = tx.log.Position
		}
		go p.sync()
		return p, nil
	}
	return nil, fmt.Errorf("the WAL %s kept being replaced while the server waited for it; retry", h.opts.Path)
}

// Batch decides fns in order, each on the state that includes the ones
// before it and every earlier batch, writes their records in one write and
// queues their fsync. errs[i] and committed[i] are fns[i]'s; the batch's
// own error (a failed write, a pipe broken by an earlier fsync) means none
// of it was kept, and the pipe must be closed.
func (p *Pipe) Batch(fns []func(*Tx) error) (errs []error, committed [][]state.Record, f *Flight, err error) {
	if p.failed() != nil {
		return nil, nil, nil, ErrPipeBroken
	}
	tx := p.tx
	errs, committed = make([]error, len(fns)), make([][]state.Record, len(fns))
	tx.staging = true
	err = tx.decideEach(fns, errs, committed)
	tx.staging = false
	staged, version := tx.staged, tx.version
	tx.staged = nil
	if err != nil {
		p.breaks(err)
		return nil, nil, nil, err
	}
	f = &Flight{done: make(chan struct{}), settled: make(chan struct{})}
	switch {
	case len(staged) == 0: // nothing to write: durable once what is before it is
	case tx.log == nil: // a new WAL, created durably (its directory fsynced) at once
		if err := tx.append(staged, version); err != nil {
			p.breaks(err)
			return nil, nil, nil, err
		}
		p.mu.Lock()
		p.durable = tx.log.Position
		p.mu.Unlock()
	default:
		cut, err := tx.log.Write(staged, version)
		if cut != nil {
			p.h.warn("cut %d bytes of an unfinished append at offset %d (never acknowledged); they are kept in %s", cut.Length, cut.Offset, cut.SavedAs)
		}
		if err != nil {
			p.breaks(err)
			return nil, nil, nil, err
		}
	}
	if tx.log != nil {
		f.end = tx.log.Position
	}
	p.flights <- f
	return errs, committed, f, nil
}

// Due reports whether Close would write a checkpoint that moves tasks out
// of memory (refreshCheckpoint, movesDue), or one that many bytes of
// records follow: a server under steady load closes the pipe then, since
// it would otherwise never close it, and hold every task it decided and
// every payload. It counts the tasks in memory at most once per 256 more
// (it reads them all). Only the goroutine that calls Batch may call it.
func (p *Pipe) Due() bool {
	h, st, log := p.h, p.tx.State, p.tx.log
	if log == nil || !h.checkpointDueAt(st, log.Position) {
		return false
	}
	if log.End-h.checkpointedEnd >= h.spillBytes() {
		return true
	}
	n := st.InMemoryCount()
	if n < p.counted+archiveBatch {
		return false
	}
	p.counted = n
	archive, cold := h.movesDue(st, log.Position)
	return archive != state.Stay || cold != state.Stay
}

// failed is the error that broke the pipe, nil while it holds.
func (p *Pipe) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.broken
}

// breaks marks the pipe broken by err: its state ran ahead of the file.
func (p *Pipe) breaks(err error) {
	p.mu.Lock()
	if p.broken == nil {
		p.broken = err
	}
	p.mu.Unlock()
}

// sync answers the flights in order: one fsync for every flight queued by
// the time it starts (the later ones' records lie after the earlier ones'),
// none for a flight already durable. Once the pipe is broken, the flights
// wait for Close.
func (p *Pipe) sync() {
	defer close(p.done)
	for f := range p.flights {
		run := []*Flight{f}
	gather:
		for {
			select {
			case g, ok := <-p.flights:
				if !ok {
					break gather
				}
				run = append(run, g)
			default:
				break gather
			}
		}
		end := run[len(run)-1].end
		p.mu.Lock()
		broken, durable := p.broken, p.durable
		p.mu.Unlock()
		if broken == nil && end.Count > durable.Count {
			err := p.tx.log.Sync()
			p.mu.Lock()
			if err != nil && p.broken == nil {
				p.broken, p.syncFailed = err, true
			} else if err == nil {
				p.durable = end
			}
			broken = p.broken
			p.mu.Unlock()
		}
		if broken != nil {
			p.mu.Lock()
			p.unanswered = append(p.unanswered, run...)
			p.mu.Unlock()
		}
		for _, g := range run {
			close(g.settled)
			if broken == nil {
				close(g.done)
			}
		}
	}
}

// Close waits for the flights, and releases the lock. After every batch
// was made durable, the handle keeps the state and refreshes the
// checkpoint. After a failure, the file is cut back to what was durable,
// the handle forgets its state (which ran ahead of the file), the batch
// whose fsync failed is answered with the failure, and the ones after it
// with ErrPipeBroken: they may be decided again.
func (p *Pipe) Close() {
	close(p.flights)
	<-p.done
	defer p.tx.end()
	broken := p.failed()
	if broken == nil {
		if p.tx.log != nil {
			p.h.pos = p.tx.log.Position
			p.h.refreshCheckpoint(p.tx)
		}
		return
	}
	failure := broken
	if p.tx.log != nil && p.tx.log.Position != p.durable {
		failure = p.tx.log.Abandon(p.durable, broken)
	}
	p.h.forget()
	for i, f := range p.unanswered {
		f.err = ErrPipeBroken
		if i == 0 && p.syncFailed {
			f.err = failure
		}
		close(f.done)
	}
}

// LastSeq is the last record made durable through the pipe.
func (p *Pipe) LastSeq() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int64(p.durable.Count)
}
