// Package service is leasewal's local implementation of api.Service: each
// operation decided on a WAL through a store handle of its own, or, inside
// a resident server, in its group committer's next batch (Batcher). The
// command line, the HTTP server and the runner call it; the Go client
// (leasewal/client) is the same interface over HTTP.
package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/limits"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// WAL says where a local service finds the WAL and how it works on it.
type WAL struct {
	Path        string
	LockTimeout time.Duration
	Actor       string // stamped into every record, for audit only
	// Clock resolves an operation's time from the last record's (nil: the
	// wall clock, never before the last record).
	Clock func(lastAt int64) (int64, error)
	Fault *Fault       // a failpoint for the crash tests (LEASEWAL_FAILPOINT)
	Warn  func(string) // hears each warning (a torn tail cut …); nil drops them
	// Progress hears how far a long read has come: bytes done of total.
	Progress func(done, total int64)
}

// Fault is a failure injected into appends, for the crash tests.
type Fault = store.Fault

// ParseFault reads a LEASEWAL_FAILPOINT specification.
func ParseFault(spec string) (*Fault, error) { return store.ParseFault(spec) }

// store is the store's options for w.
func (w WAL) store() store.Options {
	return store.Options{Path: w.Path, LockTimeout: w.LockTimeout, Actor: w.Actor, Clock: store.Clock(w.Clock), Fault: w.Fault,
		Warn: w.Warn, Progress: w.Progress}
}

// Options configure a Local service; they are read once, by New.
type Options struct {
	WAL WAL
	// Batch, inside a resident server, is the group committer every
	// decision joins (nil: each operation opens a handle of its own).
	Batch *Batcher
	// Resident has the service hold one handle for its life (the runner's,
	// until Close): operations decide on it, reading only what was
	// appended since the last, instead of opening one each.
	Resident bool
	// Stopping is done once the server this runs in stops: its waits end
	// at once and answer what they have (nil: never).
	Stopping context.Context
	// WaitCap is the most one wait lasts (0: as long as it asks).
	WaitCap time.Duration
	// MaxRetries is worklease fail's limit when a request gives none.
	MaxRetries int
	// Compact, if set, is how the server this runs in compacts its WAL
	// (beside its batches; a cluster's proposal): a compact request asks it.
	Compact func(CompactOptions) (Compaction, error)
	// Committed, if set, is told of the records each write appended,
	// before its answer is returned: a caller that cannot deliver the
	// answer says which records were written (exit 8).
	Committed func([]state.Record)
}

// Local is api.Service on a WAL of this machine.
type Local struct {
	o     Options
	store store.Options
	held  *store.Handle // Options.Resident's
	// rateHolds counts, by queue, the leases the queue's rate answered
	// EMPTY since a server or a runner started (nil for a one-shot, which
	// has no such since).
	rateHolds *rateHolds
}

type rateHolds struct {
	mu sync.Mutex
	n  map[string]int64
}

// count counts one EMPTY answer that each of queues' rates held back.
func (h *rateHolds) count(queues []string) {
	if h == nil || len(queues) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, q := range queues {
		h.n[q]++
	}
}

// of is how many leases queue's rate held back (nil: not counted).
func (h *rateHolds) of(queue string) *int64 {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	n := h.n[queue]
	return &n
}

var _ api.Service = (*Local)(nil)

// New is the service o describes; Close releases what it holds.
func New(o Options) *Local {
	l := &Local{o: o, store: o.WAL.store()}
	if o.Resident {
		opts := l.store
		opts.Resident = true
		l.held = store.Open(opts)
	}
	if o.Resident || o.Batch != nil { // a runner's or a server's: it has a since
		l.rateHolds = &rateHolds{n: map[string]int64{}}
	}
	return l
}

// Close releases the handle a resident service holds.
func (l *Local) Close() {
	if l.held != nil {
		l.held.Close()
	}
}

// write decides one writing operation: in the server's next batch, or on
// a handle of its own. actor, if set, is stamped into its records.
func (l *Local) write(ctx context.Context, actor string, decide func(tx *store.Tx) (any, error)) (any, error) {
	return l.operate(ctx, l.store, true, actor, decide)
}

// read decides an operation that writes nothing.
func (l *Local) read(ctx context.Context, decide func(tx *store.Tx) (any, error)) (any, error) {
	return l.operate(ctx, l.store, false, "", decide)
}

// operate runs decide once: inside a server in its next batch (unless
// opts reads the records itself, which a handle of its own does), else on
// a handle for opts.
func (l *Local) operate(ctx context.Context, opts store.Options, writing bool, actor string, decide func(tx *store.Tx) (any, error)) (any, error) {
	if writing {
		decide = firingFirst(decide)
	}
	if l.o.Batch != nil && opts.OnRecord == nil && !opts.FullReplay {
		if err := l.checkActor(writing, actor); err != nil {
			return nil, err
		}
		var answer any
		committed, err := l.o.Batch.Run(ctx, func(tx *store.Tx) error {
			tx.Actor = actor
			var err error
			answer, err = decide(tx)
			return err
		})
		return answer, l.told(committed, err)
	}
	h, done := l.handle(opts)
	defer done()
	return l.on(h, writing, actor, decide)
}

// firingFirst has a writing operation write the schedules' firings due at
// its time ahead of its own records, so that it decides on their tasks (a
// lease takes one at once); a refused operation writes neither.
func firingFirst(decide func(tx *store.Tx) (any, error)) func(tx *store.Tx) (any, error) {
	return func(tx *store.Tx) (any, error) {
		if err := tx.CommitFirst(tx.State.DueFirings(Zones, tx.Now)); err != nil {
			return nil, err
		}
		return decide(tx)
	}
}

// Zones resolves the time zone of a schedule's cron: the system's zone
// data, else the copy embedded in the binary (time/tzdata, imported by main).
func Zones(name string) (*time.Location, error) { return time.LoadLocation(name) }

// on runs decide once on h.
func (l *Local) on(h *store.Handle, writing bool, actor string, decide func(tx *store.Tx) (any, error)) (any, error) {
	if err := l.checkActor(writing, actor); err != nil {
		return nil, err
	}
	var (
		answer    any
		committed []state.Record
	)
	run := func(tx *store.Tx) error {
		tx.Actor = actor
		var err error
		answer, err = decide(tx)
		committed = tx.Committed
		return err
	}
	err := h.Run(writing, run)
	return answer, l.told(committed, err)
}

// told tells Options.Committed of what a write appended, and passes its
// error on.
func (l *Local) told(committed []state.Record, err error) error {
	if err == nil && len(committed) > 0 && l.o.Committed != nil {
		l.o.Committed(committed)
	}
	return err
}

// handle is the handle an operation on opts decides on: the service's own,
// or one opened for it; done releases it.
func (l *Local) handle(opts store.Options) (h *store.Handle, done func()) {
	if l.held != nil && opts.OnRecord == nil && !opts.FullReplay && opts.Actor == l.store.Actor {
		return l.held, func() {}
	}
	h = store.Open(opts)
	return h, h.Close
}

// as is an operation's answer as its type: every operation hands back one
// type of answer (its refusals are errors).
func as[A any](v any, err error) (A, error) {
	a, _ := v.(A)
	return a, err
}

// committer commits in tx the records of the decision it is given, or
// passes its refusal on: committer(tx)(tx.State.DecideX(…)).
func committer(tx *store.Tx) func(state.Decision, error) (state.Decision, error) {
	return func(d state.Decision, err error) (state.Decision, error) {
		if err != nil {
			return d, err
		}
		return d, tx.Commit(d.Records)
	}
}

// required refuses a request without one of its required fields (name,
// value pairs), or with it empty, naming it as a flag and as JSON.
func required(op string, fields ...string) error {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i+1] == "" {
			return api.Usage("--%s is empty or missing: give one (%q in a request's JSON); see 'leasewal %s --help'",
				strings.ReplaceAll(fields[i], "_", "-"), fields[i], op)
		}
	}
	return nil
}

// cancelledErr is a CANCELLED decision as the error the interface returns.
func cancelledErr(d state.Decision) *api.Cancelled {
	return &api.Cancelled{Result: api.ResultCancelled, TaskID: d.TaskID, LeaseID: d.LeaseID, Reason: d.Reason}
}

// stopped says whether the server this runs in is stopping.
func (l *Local) stopped() bool { return l.o.Stopping != nil && l.o.Stopping.Err() != nil }

// capWait is how long a wait of d may last here.
func (l *Local) capWait(d time.Duration) time.Duration {
	if l.o.WaitCap > 0 && d > l.o.WaitCap {
		return l.o.WaitCap
	}
	return d
}

// waitFor reads a wait's duration: "" waits as long as the service lets
// it (for ever on the command line, WaitCap in a server).
func (l *Local) waitFor(flag, text string) (time.Duration, bool, error) {
	if text == "" {
		return l.o.WaitCap, l.o.WaitCap == 0, nil
	}
	d, err := api.ParseDuration(flag, text)
	if err != nil {
		return 0, false, err
	}
	if d < 0 {
		return 0, false, api.Usage("--%s %s is negative: give a duration of 0 or more", flag, text)
	}
	return l.capWait(d), false, nil
}

// watching is what a waiting operation waits with: the WAL's watcher,
// whose waits end early when ctx is done or the server stops.
type watching struct {
	w       *store.Watcher
	ctx     context.Context
	release func()
}

func (l *Local) watch(ctx context.Context, h *store.Handle) (*watching, error) {
	w, err := h.Watch()
	if err != nil {
		return nil, fmt.Errorf("watching %s for changes: %w", l.store.Path, err)
	}
	stopCtx := context.AfterFunc(ctx, w.Interrupt)
	stopServer := func() bool { return false }
	if l.o.Stopping != nil {
		stopServer = context.AfterFunc(l.o.Stopping, w.Interrupt)
	}
	return &watching{w: w, ctx: ctx, release: func() { stopCtx(); stopServer(); w.Close() }}, nil
}

// until blocks until the WAL may have changed or until is reached (zero:
// no deadline); ErrClientGone once ctx is done.
func (x *watching) until(until time.Time) error {
	if _, err := x.w.Wait(until); err != nil && !errors.Is(err, store.ErrInterrupted) {
		return err
	}
	if x.ctx.Err() != nil {
		return ErrClientGone
	}
	return nil
}

// waitUntil is when a waiter next looks again: at the next time-based event
// (next, unix ms; 0 for none) or at its deadline, whichever comes first. A
// zero deadline is no deadline.
func waitUntil(next int64, deadline time.Time) time.Time {
	if next == 0 {
		return deadline
	}
	at := time.UnixMilli(next)
	if deadline.IsZero() || at.Before(deadline) {
		return at
	}
	return deadline
}

// actorOf is the actor a request names, else the service's.
func (l *Local) actorOf(given string) string { return cmp.Or(given, l.store.Actor) }

// checkActor refuses a writing operation's actor, given or the service's
// own, that the table of limits does not allow: it is stamped into every
// record the operation writes.
func (l *Local) checkActor(writing bool, given string) error {
	if !writing {
		return nil
	}
	return limitsActor(l.actorOf(given))
}

// limitsActor refuses an actor the table of limits does not allow.
func limitsActor(actor string) error {
	if err := limits.Actor.Text(actor); err != nil {
		return api.Usage("the %v; give --actor (or LEASEWAL_ACTOR) a name of %s without control characters", err, limits.Actor.Range())
	}
	return nil
}
