package service

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"leasewal/cluster"
	"leasewal/state"
	"leasewal/store"
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

// WALBackend is a single server's: one resident handle, shared by the
// batches and the status under mu.
type WALBackend struct {
	mu  sync.Mutex
	h   *store.Handle
	url string
}

// NewWALBackend decides on h; url is the server's, which its status names
// as the leader.
func NewWALBackend(h *store.Handle, url string) *WALBackend { return &WALBackend{h: h, url: url} }

func (b *WALBackend) Commit(fns []func(*store.Tx) error) ([]error, [][]state.Record, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.h.WriteBatch(fns)
}

func (b *WALBackend) Status() (Status, error) {
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
}

type pending struct {
	decide    func(tx *store.Tx) error
	committed []state.Record
	err       error
	done      chan struct{}
}

// NewBatcher starts a batcher of at most max requests a batch on back; Stop
// ends it.
func NewBatcher(back Backend, max int) *Batcher {
	b := &Batcher{back: back, queue: make(chan *pending, 4096), max: max, done: make(chan struct{})}
	go func() { b.loop(); close(b.done) }()
	return b
}

// Received is how many requests were ever handed to the batcher.
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
		return decide(tx)
	}, done: make(chan struct{})}
	b.mu.RLock()
	if b.stopped {
		b.mu.RUnlock()
		return nil, ErrStopping
	}
	b.queue <- p
	b.mu.RUnlock()
	b.received.Add(1)
	<-p.done
	return p.committed, p.err
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
// until the queue is closed.
func (b *Batcher) loop() {
	for first := range b.queue {
		batch := []*pending{first}
	gather:
		for len(batch) < b.max {
			select {
			case p, ok := <-b.queue:
				if !ok {
					break gather
				}
				batch = append(batch, p)
			default:
				break gather
			}
		}
		fns := make([]func(*store.Tx) error, len(batch))
		for i, p := range batch {
			fns[i] = p.decide
		}
		errs, committed, err := b.back.Commit(fns)
		for i, p := range batch {
			p.err, p.committed = errs[i], committed[i]
			if err != nil {
				p.err, p.committed = err, nil // nothing of the batch was written
			}
			close(p.done)
		}
	}
}
