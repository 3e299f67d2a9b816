package store

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// ErrPipeStopped refuses a batch before anything of it is decided: an
// earlier batch's write or fsync failed, or its decisions left the state
// unusable. The pipe must be closed; the batch may be decided on a new one.
var ErrPipeStopped = errors.New("the pipe stopped at an earlier batch: nothing of this batch was decided")

// Pipe holds the WAL's exclusive lock across a run of batches (a resident
// server's group commit, pipelined): each batch is decided on the state that
// includes every batch before it, written at once, and made durable by a
// background fsync while the next is decided (or, when its caller has
// nothing else to decide, by the caller: BatchAlone). A batch's Flight says when its
// records are durable; nothing decided in a pipe may be answered before.
// Local writers wait for the lock as for any writer: Close releases it.
//
// A batch is answered once, with what became of it: durable (nil), or not
// written (its write failed and was rolled back; or the fsync that covered
// it failed, and the file was cut back to what an earlier fsync made
// durable). A batch that is durable is never answered as failed, and none
// is ever decided twice. If the cut itself fails, the batches it should have
// removed are answered with an unknown outcome and the handle writes
// nothing more (Poisoned).
type Pipe struct {
	h  *Handle
	tx *Tx
	// flights queue the batches written, in order, to the syncer; done is
	// closed when it has answered the last. queued counts those it has
	// not settled yet.
	flights chan *Flight
	done    chan struct{}
	queued  atomic.Int64

	mu      sync.Mutex
	durable wal.Position // what a Sync made durable
	// version is the WAL's format version at durable's end.
	version int
	// commit writes the index while the pipe runs (nil: Close writes it).
	commit *committer
	// stopped is why no batch may be decided any more (a write that
	// failed, a state that diverged): the flights before it stand.
	stopped error
	// syncFailed is the failed fsync: its flights and every later one are
	// unanswered until Close has cut the file back to durable.
	syncFailed error
	unanswered []*Flight
	// turn shows whether another process waits for the lock (nil: it
	// could not be opened, and only an idle pipe lets them in).
	turn *wal.Turnstile
}

// Flight is a batch in the pipe, written and waiting for its fsync.
type Flight struct {
	end     wal.Position // the WAL up to the batch's last record
	version int          // the WAL's format version after it
	at      int64        // the clock's time the batch was decided at
	err     error
	done    chan struct{}
	settled chan struct{} // closed once the batch is durable, or its fsync failed (then Close answers it)
	// then hears the batch's decisions and outcome once it is known, on
	// the goroutine that learns it: no other goroutine need wake to pass
	// it on.
	then      Then
	errs      []error
	committed [][]state.Record
}

// Then hears a batch's decisions (Batch's errs and committed) and its
// outcome (Flight.Wait's).
type Then func(errs []error, committed [][]state.Record, err error)

// answer settles f with err.
func (f *Flight) answer(err error) {
	f.err = err
	close(f.done)
	if f.then != nil {
		f.then(f.errs, f.committed, err)
	}
}

// Size is the WAL's size in bytes once the batch is written.
func (f *Flight) Size() int64 { return f.end.End }

// At is the clock's time the batch was decided at.
func (f *Flight) At() int64 { return f.at }

// Settled is closed once the batch is durable, or its fsync failed (then
// Close answers it).
func (f *Flight) Settled() <-chan struct{} { return f.settled }

// Wait returns once the batch is durable (nil), or known not to be: the
// failure (a *wal.AppendError, rolled back or not).
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
	if h.poisoned != nil {
		return nil, &PoisonedError{Cause: h.poisoned}
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
			p.durable, p.version = tx.log.Position, tx.log.Version
		}
		if !p.startCommitter() && h.idx == nil && tx.State.HasSource() { // it lost its read of the index
			tx.end()
			h.forget()
			continue
		}
		if p.turn, err = wal.OpenTurnstile(h.opts.Path); err != nil {
			p.turn = nil // a read-only directory: the lock still goes back once the pipe is idle
		}
		go p.sync()
		return p, nil
	}
	return nil, fmt.Errorf("the WAL %s kept being replaced while the server waited for it; retry", h.opts.Path)
}

// Batch decides fns in order, each on the state that includes the ones
// before it and every earlier batch, writes their records in one write and
// queues their fsync. errs[i] and committed[i] are fns[i]'s. then, if not
// nil, hears them and the batch's outcome (Flight.Wait's) once it is known:
// from the goroutine that fsyncs, or from Close. Each batch is decided at
// the clock's time when it begins. The batch's own error is ErrPipeStopped
// (nothing of it was decided: the pipe must be closed), or the clock's or
// its write's failure (nothing of it was written: the pipe stops). A batch
// whose decisions left the state unusable is written up to them (its later
// fns answer ErrNotDecided) and stops the pipe: Stopped.
func (p *Pipe) Batch(fns []func(*Tx) error, then Then) (errs []error, committed [][]state.Record, f *Flight, err error) {
	return p.batch(fns, then, false)
}

// BatchAlone is Batch for a caller with nothing else to decide meanwhile:
// when no earlier batch waits for its fsync, this one's fsync runs here,
// and the batch is settled (answered, or left to Close after a failed
// fsync) before BatchAlone returns, its then heard on this goroutine;
// else its fsync is queued behind theirs, as Batch's. No goroutine is
// woken to fsync it, and what comes meanwhile is decided together next.
func (p *Pipe) BatchAlone(fns []func(*Tx) error, then Then) (errs []error, committed [][]state.Record, f *Flight, err error) {
	return p.batch(fns, then, true)
}

func (p *Pipe) batch(fns []func(*Tx) error, then Then, alone bool) (errs []error, committed [][]state.Record, f *Flight, err error) {
	if p.Stopped() {
		return nil, nil, nil, ErrPipeStopped
	}
	tx := p.tx
	now, err := p.h.opts.Clock(tx.State.LastAt()) // a pipe may live long: each batch is decided at its own time
	if err != nil {
		p.stop(err)
		return nil, nil, nil, err
	}
	tx.Now = now
	errs, committed = make([]error, len(fns)), make([][]state.Record, len(fns))
	tx.staging = true
	err = tx.decideEach(fns, errs, committed)
	tx.staging = false
	staged, version := tx.staged, tx.version
	tx.staged = nil
	if err != nil {
		p.stop(err)
		return nil, nil, nil, err
	}
	if tx.diverged != nil {
		p.stop(tx.diverged)
	}
	f = &Flight{done: make(chan struct{}), settled: make(chan struct{}), then: then, errs: errs, committed: committed, at: now}
	switch {
	case len(staged) == 0: // nothing to write: durable once what is before it is
	case tx.log == nil: // a new WAL, created durably (its directory fsynced) at once
		if err := tx.append(staged, version); err != nil {
			p.stop(err)
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
			p.h.poisonOn(err)
			p.stop(err)
			return nil, nil, nil, err
		}
	}
	if tx.log != nil {
		f.end, f.version = tx.log.Position, tx.log.Version
	}
	if alone && p.queued.Load() == 0 { // the syncer has settled every flight it was handed, and waits
		p.settle([]*Flight{f})
	} else {
		p.queued.Add(1)
		p.flights <- f
	}
	p.rebase()
	p.capture(false)
	return errs, committed, f, nil
}

// Due reports whether Close would write the index (indexDue): a server
// under steady load closes the pipe then, since it would otherwise never
// close it, and hold every task it decided. Only the goroutine that calls
// Batch may call it.
func (p *Pipe) Due() bool {
	log := p.tx.log
	if p.commit != nil { // it writes the index; memory grows only if it cannot
		return p.tx.State.HotCount() >= p.h.spillAfter()
	}
	return log != nil && p.h.indexDue(p.tx.State, log.Position)
}

// Missing reports whether the WAL does not exist yet: the pipe holds no
// lock on it, and another process may create it meanwhile, which the
// pipe's state would not see. Only the goroutine that calls Batch may ask.
func (p *Pipe) Missing() bool { return p.tx.Missing }

// Wanted reports whether another writer or reader waits for the WAL's
// lock: the pipe should be closed to let it in, once what is in flight
// is answered.
func (p *Pipe) Wanted() bool {
	return p.turn != nil && p.turn.Waiting()
}

// durableEnd is what a Sync made durable, and the format version there.
func (p *Pipe) durableEnd() (wal.Position, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.durable, p.version
}

// Stopped says whether the pipe takes no more batches: it must be closed.
func (p *Pipe) Stopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped != nil || p.syncFailed != nil
}

// stop takes no more batches, for err; the flights before stand.
func (p *Pipe) stop(err error) {
	p.mu.Lock()
	if p.stopped == nil {
		p.stopped = err
	}
	p.mu.Unlock()
}

// sync settles the flights in order, every flight queued by the time an
// fsync starts in one run (the later ones' records lie after the earlier
// ones').
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
		p.settle(run)
		p.queued.Add(-int64(len(run)))
	}
}

// settle makes a run of flights durable with one fsync (none for a run
// already durable) and answers them. Once an fsync has failed, its
// flights and every later one wait for Close, which cuts the file back.
// One goroutine at a time: the syncer, or BatchAlone's caller while the
// syncer has nothing.
func (p *Pipe) settle(run []*Flight) {
	end := run[len(run)-1].end
	p.mu.Lock()
	failed, durable := p.syncFailed, p.durable
	p.mu.Unlock()
	if failed == nil && end.Count > durable.Count {
		err := p.tx.log.Sync()
		p.h.syncs.Add(1)
		p.mu.Lock()
		if err != nil {
			p.syncFailed = err
		} else {
			p.durable, p.version = end, run[len(run)-1].version
		}
		failed = p.syncFailed
		p.mu.Unlock()
		if p.commit != nil && err == nil {
			p.commit.nudge()
		}
	}
	if failed != nil {
		p.mu.Lock()
		p.unanswered = append(p.unanswered, run...)
		p.mu.Unlock()
	}
	for _, g := range run {
		close(g.settled)
		if failed == nil {
			g.answer(nil)
		}
	}
}

// Close waits for the flights, and releases the lock. After every batch
// was made durable, the handle keeps the state and writes the index when
// due, unless the pipe stopped (then the state, which ran ahead of
// the file or is unusable, is forgotten). After a failed fsync, the file is
// cut back to what was durable, the handle forgets its state, and the
// batches that fsync covered and every later one are answered with the
// failure: rolled back, or, when the cut failed too, an unknown outcome,
// and the handle refuses to write until the process starts again.
func (p *Pipe) Close() {
	close(p.flights)
	<-p.done
	defer p.tx.end()
	if p.turn != nil {
		_ = p.turn.Close()
	}
	p.mu.Lock()
	stopped, failed := p.stopped, p.syncFailed
	p.mu.Unlock()
	if c := p.commit; c != nil {
		c.end(p.h)
		if failed == nil && stopped == nil {
			p.rebase()
		}
		if rb := c.take(); rb != nil {
			rb.r.Close()
		}
		p.commit = nil
	}
	switch {
	case failed == nil && stopped == nil:
		if p.tx.log != nil {
			p.h.pos = p.tx.log.Position
			p.h.commitIndex(p.tx.State, p.tx.log.Position)
		}
		return
	case failed == nil:
		p.h.forget()
		return
	}
	cut := p.tx.log.Abandon(p.durable, failed)
	p.h.poisonOn(cut)
	p.h.forget()
	for _, f := range p.unanswered {
		f.answer(cut)
	}
}

// LastSeq is the last record made durable through the pipe.
func (p *Pipe) LastSeq() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return int64(p.durable.Count)
}
