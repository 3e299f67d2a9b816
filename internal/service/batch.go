package service

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasewal/leasewal/internal/cluster"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// ErrClientGone is a request whose client went away (or, on the command
// line, whose wait a signal ended) before it was decided: nothing was
// decided.
var ErrClientGone = errors.New("the client went away before the request was decided: nothing was decided")

// ErrStopping is a request that reached a server after it began to stop:
// nothing was decided, and it may be sent again (to another node).
var ErrStopping = errors.New("the server is stopping: nothing was decided; send the request again (to another node of a cluster)")

// Backend is where a server's batches are decided and made durable: the WAL
// itself (a single server), or a raft cluster through this node.
type Backend interface {
	Commit(fns []func(*store.Tx) error) (errs []error, committed [][]state.Record, err error)
	Status() (Status, error)
}

// Status is GET /v1/status.
type Status struct {
	Role    string `json:"role"`
	Leader  string `json:"leader"`
	LastSeq int64  `json:"last_seq"`
}

// Piper is a backend whose batches may be pipelined: a WAL this process
// holds the lock of across a run of batches (see store.Pipe). A raft node
// is not one: its leader would need a speculative state apart from the
// applied one, so a cluster's batches go one after the other.
type Piper interface {
	// Pipe takes the WAL's lock for a run of batches; Unpipe ends it.
	Pipe() (*store.Pipe, error)
	Unpipe(*store.Pipe)
}

// Serial is a backend's batches one after the other, never pipelined
// (serve --pipeline=false).
type Serial struct{ Backend }

// WALBackend is a single server's: one resident handle, shared by the
// batches and the status under mu; while a pipe holds the WAL, the status
// is the pipe's.
type WALBackend struct {
	mu   sync.Mutex
	h    *store.Handle
	url  string
	pipe atomic.Pointer[store.Pipe]
}

// NewWALBackend decides on h; url is the server's, which its status names
// as the leader.
func NewWALBackend(h *store.Handle, url string) *WALBackend { return &WALBackend{h: h, url: url} }

// OpenWALBackend is a single server's backend on the WAL w names, with a
// resident handle of its own, which Close releases.
func OpenWALBackend(w WAL, url string) *WALBackend {
	opts := w.store()
	opts.Resident = true
	return NewWALBackend(store.Open(opts), url)
}

// Close releases the backend's handle: once nothing decides on it.
func (b *WALBackend) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.h.Close()
}

// StartNode starts a raft node on the WAL w names (cluster.Start).
func StartNode(cfg cluster.Config, w WAL) (*cluster.Node, error) {
	return cluster.Start(cfg, w.store())
}

func (b *WALBackend) Commit(fns []func(*store.Tx) error) ([]error, [][]state.Record, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.h.WriteBatch(fns)
}

// Syncs is how many fsyncs made the backend's writes durable so far.
func (b *WALBackend) Syncs() int64 { return b.h.Syncs() }

// Pipe takes the WAL's lock for a run of batches; the handle is the pipe's
// until Unpipe.
func (b *WALBackend) Pipe() (*store.Pipe, error) {
	b.mu.Lock()
	p, err := b.h.Pipe()
	if err != nil {
		b.mu.Unlock()
		return nil, err
	}
	b.pipe.Store(p)
	return p, nil
}

// Unpipe closes p and gives the handle back.
func (b *WALBackend) Unpipe(p *store.Pipe) {
	p.Close()
	b.pipe.Store(nil)
	b.mu.Unlock()
}

func (b *WALBackend) Status() (Status, error) {
	if p := b.pipe.Load(); p != nil { // the WAL is the pipe's: its durable end is the last record
		return Status{Role: "single", Leader: b.url, LastSeq: p.LastSeq()}, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	var last int64
	err := b.h.Read(func(tx *store.Tx) error { last = tx.State.LastSeq(); return nil })
	return Status{Role: "single", Leader: b.url, LastSeq: last}, err
}

// NodeBackend is a raft node's: the leader decides and proposes.
type NodeBackend struct{ Node *cluster.Node }

func (b NodeBackend) Commit(fns []func(*store.Tx) error) ([]error, [][]state.Record, error) {
	return b.Node.Commit(fns)
}

func (b NodeBackend) Status() (Status, error) {
	last, err := b.Node.LastSeq()
	return Status{Role: b.Node.Role(), Leader: b.Node.Leader(), LastSeq: last}, err
}

// Batcher decides operations in batches (group commit): the requests that
// arrive together are decided one after the other in arrival order, each
// against the state that includes the earlier ones, their records appended
// in one write with one fsync, and only then answered.
type Batcher struct {
	back  Backend
	queue chan *pending
	max   int
	done  chan struct{}
	// mu guards stopped: a request queues under the read lock, and Stop
	// closes the queue under the write lock, so that no request is ever
	// sent on the closed queue (a request still under way when a server
	// stops, past Shutdown's patience, is refused instead).
	mu      sync.RWMutex
	stopped bool
	// received counts the requests ever handed to the batcher.
	received atomic.Int64
	// again holds the requests of batches decided but not kept (an
	// earlier batch's fsync failed), to be decided again first.
	againMu sync.Mutex
	again   []*pending
	// wrote is signalled (without blocking) after each batch written
	// that look, if set, waits for.
	wrote chan struct{}
	look  atomic.Pointer[lookWhen]
	// observe, if set, hears each batch's size and how long it took from
	// its write to its records being durable.
	observe func(size int, durable time.Duration)
	// wakes counts the decisions a waiting lease may be waiting for, and
	// turns keeps the waiting leases in line.
	wakes *wakes
	turns turns

	// piper is back when its batches are pipelined. lead is held by
	// whoever decides in its pipe: the loop, or a request decided where it
	// came (decideHere); it guards pipe, last (the latest batch written in
	// the pipe), direct (how many requests were decided where they
	// came) and crowd (the batches' recent size, 16 for one request: see
	// crowded). inHand is set while the loop holds requests it took and has
	// not decided yet: they come before a request that would be decided
	// where it came. lingering is set while the loop waits for a request
	// with the pipe idle.
	piper     Piper
	linger    time.Duration
	lead      sync.Mutex
	pipe      *store.Pipe
	last      *store.Flight
	direct    int64
	crowd     int
	inHand    atomic.Bool
	lingering atomic.Bool
}

type pending struct {
	decide func(tx *store.Tx) error
	// exclusive, when set instead of decide, runs alone between two
	// batches, with nothing in flight and the WAL's lock let go (Exclusive).
	exclusive func() error
	committed []state.Record
	err       error
	done      chan struct{}
}

// NewBatcher starts a batcher of at most max requests a batch on back; Stop
// ends it. observe, if set, hears each batch's size and how long it took
// from its write to its records being durable.
func NewBatcher(back Backend, max int, observe func(size int, durable time.Duration)) *Batcher {
	return newBatcher(back, max, observe, linger)
}

// newBatcher is NewBatcher whose idle pipe keeps the lock for linger.
func newBatcher(back Backend, max int, observe func(size int, durable time.Duration), linger time.Duration) *Batcher {
	b := &Batcher{back: back, queue: make(chan *pending, 4096), max: max, done: make(chan struct{}), wrote: make(chan struct{}, 1), observe: observe, linger: linger}
	b.piper, _ = back.(Piper)
	b.wakes = newWakes(b.piper != nil)
	go func() { b.loop(); close(b.done) }()
	return b
}

// observed tells observe of a batch written at began and durable now.
func (b *Batcher) observed(size int, began time.Time) {
	if b.observe != nil {
		b.observe(size, time.Since(began))
	}
}

// lookWhen is what a compactor's policy waits for: a WAL larger than above
// bytes, or a batch decided at or after at (unix ms; 0: no time).
type lookWhen struct{ above, at int64 }

// lookFor has Wrote signalled only after a batch that w waits for (nil:
// after every batch).
func (b *Batcher) lookFor(w *lookWhen) { b.look.Store(w) }

// Wrote is signalled after a batch was written (a compactor looks then).
func (b *Batcher) Wrote() <-chan struct{} { return b.wrote }

// signalWrote signals Wrote after batch f was written (nil: a batch of a
// backend that is not piped), unless the compactor said it waits for
// neither the WAL's size f leaves nor f's time (lookFor).
func (b *Batcher) signalWrote(f *store.Flight) {
	if w := b.look.Load(); w != nil && f != nil && f.Size() <= w.above && (w.at == 0 || f.At() < w.at) {
		return
	}
	select {
	case b.wrote <- struct{}{}:
	default:
	}
}

// Received is how many requests were ever handed to the batcher: queued,
// or being decided where they came.
func (b *Batcher) Received() int64 { return b.received.Load() }

// Run queues decide for the next batch and waits until its batch is
// durable: the records it committed, or why nothing of it was. Nothing is
// decided for a request whose client has gone (ctx done): the check stands
// immediately before the decision, in the batch.
func (b *Batcher) Run(ctx context.Context, decide func(tx *store.Tx) error) ([]state.Record, error) {
	p := &pending{decide: func(tx *store.Tx) error {
		if ctx.Err() != nil {
			return ErrClientGone
		}
		err := decide(tx)
		b.wakes.decided(tx)
		return err
	}, done: make(chan struct{})}
	b.mu.RLock()
	if b.stopped {
		b.mu.RUnlock()
		return nil, ErrStopping
	}
	if !b.decideHere(p) {
		b.queue <- p
		b.received.Add(1)
	}
	b.mu.RUnlock()
	<-p.done
	return p.committed, p.err
}

// Exclusive runs fn between two batches, with nothing in flight and the
// WAL's lock let go, so that fn may take the lock itself: a compaction's
// last step. The requests that come meanwhile wait for it.
func (b *Batcher) Exclusive(fn func() error) error {
	p := &pending{exclusive: fn, done: make(chan struct{})}
	b.mu.RLock()
	if b.stopped {
		b.mu.RUnlock()
		return ErrStopping
	}
	b.queue <- p
	b.mu.RUnlock()
	<-p.done
	return p.err
}

// Stop refuses new requests, and returns once the batches under way are
// answered.
func (b *Batcher) Stop() {
	b.mu.Lock()
	if !b.stopped {
		b.stopped = true
		close(b.queue)
	}
	b.mu.Unlock()
	<-b.done
}

// loop takes what has queued, decides it as one batch, and answers it,
// until the queue is closed: pipelined on a backend that can be.
func (b *Batcher) loop() {
	if b.piper != nil {
		b.pipelined()
		return
	}
	for {
		batch, exclusive, open := b.next(true, b.max)
		switch {
		case !open:
			return
		case exclusive != nil:
			exclusive.err = exclusive.exclusive()
			close(exclusive.done)
			continue
		}
		fns := make([]func(*store.Tx) error, len(batch))
		for i, p := range batch {
			fns[i] = p.decide
		}
		began := time.Now()
		errs, committed, err := b.back.Commit(fns)
		b.observed(len(batch), began)
		b.answer(batch, errs, committed, err)
		b.signalWrote(nil)
	}
}

// pipelined is loop on a WAL of its own. A batch that holds every request
// that waited is fsynced here, once nothing else is in flight
// (store.Pipe.BatchAlone), and what comes meanwhile makes the next batch:
// no goroutine is woken to fsync it, and on two cores that costs less than
// deciding during the fsync. A full batch, with requests left behind it,
// goes to the pipe's syncer, and batch N+1 is decided (on the state that
// includes N) and written while N's fsync runs. Each batch is answered
// once it is durable, in order, by the goroutine that fsyncs it. The lock
// is held while requests keep coming, and given back once none has come
// for linger, or as soon as what is in flight is answered when another
// process waits for it, so that local writers and readers get their turn.
// While the pipe lingers, a request that finds nothing in flight and
// nothing waiting is decided on its own goroutine (decideHere). A batch is
// answered once, with what became of it (store.Pipe): a failed write or
// fsync answers the batches it took down with the failure, and the pipe is
// closed; the requests the pipe refused before deciding them are decided on
// a new one.
func (b *Batcher) pipelined() {
	idle := time.NewTimer(b.linger)
	defer idle.Stop()
	for {
		b.lead.Lock()
		piped := b.pipe != nil
		b.lead.Unlock()
		batch, exclusive, open := b.next(!piped, b.max)
		if !open {
			break
		}
		b.takeLead(batch)
		if exclusive != nil {
			b.closePipe()
			exclusive.err = exclusive.exclusive()
			close(exclusive.done)
			b.lead.Unlock()
			continue
		}
		stay := true
		if len(batch) == 0 && b.last != nil { // nothing waits yet: the next request may come while the last fsync runs
			settled := b.last.Settled()
			b.lead.Unlock()
			batch, stay = await(b, settled)
			b.takeLead(batch)
		}
		if len(batch) == 0 && stay && b.pipe != nil && !b.pipe.Wanted() { // nothing is in flight: the next request may come in a moment
			direct := b.direct
			idle.Reset(b.linger)
			b.lingering.Store(true)
			b.lead.Unlock()
			batch, _ = await(b, idle.C)
			b.takeLead(batch)
			b.lingering.Store(false)
			if len(batch) == 0 && b.direct != direct { // requests came, and were decided where they came: linger again
				b.lead.Unlock()
				continue
			}
		}
		if len(batch) == 0 { // nothing came, or another process waits: the lock goes back to local writers
			b.closePipe()
			b.lead.Unlock()
			continue
		}
		if b.pipe == nil {
			pipe, err := b.piper.Pipe()
			if err != nil {
				b.answer(batch, make([]error, len(batch)), make([][]state.Record, len(batch)), err)
				b.lead.Unlock()
				continue
			}
			b.pipe = pipe
		}
		b.write(b.fill(batch), b.nothingWaits())
		b.lead.Unlock()
	}
	b.lead.Lock()
	b.closePipe()
	b.lead.Unlock()
}

// takeLead takes lead back for the loop, the requests it took while it
// waited (batch) marked in hand until it has it: a request that would be
// decided where it came leaves them first.
func (b *Batcher) takeLead(batch []*pending) {
	b.inHand.Store(len(batch) > 0)
	b.lead.Lock()
	b.inHand.Store(false)
}

// decideHere decides p on the goroutine that brought it, when the pipe
// lingers with nothing in flight and nothing waiting: a lone client's
// request then costs no hand-off to the loop and back, each of which wakes
// a thread. It says whether it took p.
func (b *Batcher) decideHere(p *pending) bool {
	if b.piper == nil || !b.lead.TryLock() {
		return false
	}
	defer b.lead.Unlock()
	defer endOnPanic()
	if b.pipe == nil || b.crowd >= crowded || b.inHand.Load() || !b.nothingWaits() || (b.last != nil && !isSettled(b.last)) {
		return false
	}
	b.direct++
	b.received.Add(1)
	b.write([]*pending{p}, true)
	return true
}

// endOnPanic ends the process on a panic of a request decided where it
// came, as one on the batcher's goroutine does: net/http would recover it
// and serve on, with the pipe's state half decided. A restart reads the
// WAL, which holds only what was acknowledged.
func endOnPanic() {
	if p := recover(); p != nil {
		fmt.Fprintf(os.Stderr, "panic: %v\n\n%s", p, debug.Stack())
		os.Exit(2)
	}
}

// crowded is the batches' recent size (an average that weighs the last
// batch an eighth, 16 a request) from which no request is decided where
// it came: when requests come together, the batcher takes them together,
// where deciding the first alone would cost an fsync of its own.
const crowded = 20

// isSettled says whether f is durable or its fsync failed.
func isSettled(f *store.Flight) bool {
	select {
	case <-f.Settled():
		return true
	default:
		return false
	}
}

// write decides batch in the pipe and writes it; alone, its fsync runs
// here when nothing else is in flight (store.Pipe.BatchAlone). The caller
// holds lead.
func (b *Batcher) write(batch []*pending, alone bool) {
	fns := make([]func(*store.Tx) error, len(batch))
	for i, p := range batch {
		fns[i] = p.decide
	}
	write := b.pipe.Batch
	if alone {
		write = b.pipe.BatchAlone
	}
	b.crowd += 2*len(batch) - b.crowd/8
	written := time.Now()
	_, _, f, err := write(fns, func(errs []error, committed [][]state.Record, err error) {
		b.observed(len(batch), written)
		b.answer(batch, errs, committed, err)
	})
	switch {
	case errors.Is(err, store.ErrPipeStopped): // nothing of it was decided
		b.closePipe()
		b.takeFirst(batch)
	case err != nil: // its own write failed: nothing of it was written
		b.closePipe()
		b.answer(batch, make([]error, len(batch)), make([][]state.Record, len(batch)), err)
	default:
		b.last = f
		b.signalWrote(f)
		// A stopped pipe takes no more batches; under steady load nothing
		// but Due would close a pipe whose Close moves tasks out of memory,
		// and nothing but Wanted would let a waiting process in. A pipe on
		// a WAL that does not exist yet would not see another process
		// create it.
		if b.pipe.Stopped() || b.pipe.Due() || b.pipe.Wanted() || b.pipe.Missing() {
			b.closePipe()
		}
	}
}

// closePipe ends the pipe, once every batch of it is answered: what must
// be decided again is queued before anything new. The caller holds lead.
func (b *Batcher) closePipe() {
	if b.pipe != nil {
		b.wakes.unseen.Add(1) // before the lock is let go, and before a failed batch is cut back
		b.piper.Unpipe(b.pipe)
		b.pipe, b.last = nil, nil
	}
}

// linger is how long an idle pipe keeps the lock for the next request:
// a client that sends its next request once answered comes back well
// within it, and a pipe's start and end (the index opened for writing, its
// last commit) cost far more than a request. Another process that waits
// for the lock is let in at once (Pipe.Wanted), or after linger at most.
const linger = 2 * time.Millisecond

// await is the request that comes before wake fires, if one does. stay
// is false when the pipe should close at once: the queue is closed, or an
// exclusive request came (put back, to be taken alone).
func await[T any](b *Batcher, wake <-chan T) (batch []*pending, stay bool) {
	select {
	case p, ok := <-b.queue:
		switch {
		case !ok:
			return nil, false
		case p.exclusive != nil:
			b.takeFirst([]*pending{p})
			return nil, false
		}
		return []*pending{p}, true
	case <-wake:
		return nil, true
	}
}

// answer tells each request of a batch its outcome: err, the batch's, voids
// every answer of it. A request the batch never decided (store.ErrNotDecided)
// is decided again, before anything that arrived since.
func (b *Batcher) answer(batch []*pending, errs []error, committed [][]state.Record, err error) {
	var again []*pending
	for i, p := range batch {
		p.err, p.committed = errs[i], committed[i]
		switch {
		case err != nil:
			p.err, p.committed = err, nil // nothing of the batch was written
		case errors.Is(p.err, store.ErrNotDecided):
			again = append(again, p)
			continue
		}
		close(p.done)
	}
	b.takeFirst(again)
}

// next is take, cutting a batch before an exclusive request: that one
// comes alone, and what was taken after it is taken first next time.
func (b *Batcher) next(block bool, room int) (batch []*pending, exclusive *pending, open bool) {
	batch, open = b.take(block, room)
	for i, p := range batch {
		switch {
		case p.exclusive == nil:
			continue
		case i == 0:
			b.takeFirst(batch[1:])
			return nil, p, open
		}
		b.takeFirst(batch[i:])
		return batch[:i], nil, open
	}
	return batch, nil, open
}

// fill tops a batch up with what else waits by now, up to max: the
// requests that came while the batcher woke for the first, or while a
// request was decided where it came (decideHere).
func (b *Batcher) fill(batch []*pending) []*pending {
	more, exclusive, _ := b.next(false, b.max-len(batch))
	if exclusive != nil { // it comes alone, next
		b.takeFirst([]*pending{exclusive})
	}
	return append(batch, more...)
}

// nothingWaits says whether no request waits to be decided.
func (b *Batcher) nothingWaits() bool {
	b.againMu.Lock()
	defer b.againMu.Unlock()
	return len(b.again) == 0 && len(b.queue) == 0
}

// takeFirst puts requests back at the head of what take takes.
func (b *Batcher) takeFirst(ps []*pending) {
	if len(ps) == 0 {
		return
	}
	b.againMu.Lock()
	b.again = append(slices.Clone(ps), b.again...)
	b.againMu.Unlock()
}

// take is the next batch: what waits to be decided again first, then what
// queued, at most max. It waits for a first request when block is set;
// else an empty batch says nothing waits. open is false once the queue is
// closed and nothing is left.
func (b *Batcher) take(block bool, room int) (batch []*pending, open bool) {
	b.againMu.Lock()
	n := min(len(b.again), room)
	batch = append(batch, b.again[:n]...)
	b.again = b.again[n:]
	b.againMu.Unlock()
	if len(batch) == 0 && block {
		p, ok := <-b.queue
		if !ok {
			return nil, false
		}
		batch = append(batch, p)
	}
	for len(batch) < room {
		select {
		case p, ok := <-b.queue:
			if !ok {
				return batch, len(batch) > 0 || !block
			}
			batch = append(batch, p)
		default:
			return batch, true
		}
	}
	return batch, true
}
