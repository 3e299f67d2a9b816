package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/internal/limits"
	"github.com/leasewal/leasewal/internal/parallel"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// The defaults of a submit: no execution window (a task waits for a
// worker as long as it takes, as in SQS, asynq or River), and a backoff
// of 1s doubling after each failed attempt up to 5m.
const (
	DefaultBackoff    = time.Second
	DefaultBackoffMax = 5 * time.Minute
)

// SubmitOf is a submit request as state decides it: the one place its
// durations and times are read and its defaults filled in.
func SubmitOf(r api.SubmitRequest) (state.Submit, error) {
	var err error
	window := time.Duration(state.NoWindow)
	if r.Window != "" && r.Window != "none" {
		if window, err = api.ParseDuration("window", r.Window); err != nil {
			return state.Submit{}, err
		}
	}
	backoff := DefaultBackoff
	if r.Backoff != "" {
		if backoff, err = api.ParseDuration("backoff", r.Backoff); err != nil {
			return state.Submit{}, err
		}
	}
	backoffMax := max(DefaultBackoffMax, backoff)
	if r.BackoffMax != "" {
		if backoffMax, err = api.ParseDuration("backoff-max", r.BackoffMax); err != nil {
			return state.Submit{}, err
		}
	}
	maxAttempts := 3
	if r.MaxAttempts != nil {
		maxAttempts = *r.MaxAttempts
	}
	sub := state.Submit{
		Payload: r.Payload, Window: state.Duration(window), RequestID: r.RequestID,
		Policy: state.RetryPolicy{MaxAttempts: maxAttempts, Backoff: state.Duration(backoff), BackoffMax: state.Duration(backoffMax)},
		Queue:  cmp.Or(r.Queue, state.DefaultQueue), Priority: r.Priority, After: r.After, AfterEnded: r.AfterEnded,
	}
	if r.Delay != "" && r.NotBefore != "" {
		return state.Submit{}, api.Usage("give --delay or --not-before, not both")
	}
	if r.Delay != "" {
		if sub.Delay, err = api.ParseDuration("delay", r.Delay); err != nil {
			return state.Submit{}, err
		}
		if sub.Delay < 0 {
			return state.Submit{}, api.Usage("--delay %s is negative; give a duration of 0 or more", r.Delay)
		}
	}
	if r.NotBefore != "" {
		if strings.HasPrefix(r.NotBefore, "+") {
			return state.Submit{}, api.Usage("--not-before %q: give a time (RFC 3339 or unix ms); for a time after now use --delay", r.NotBefore)
		}
		if sub.NotBefore, err = api.ParseTimeFlag("--not-before", r.NotBefore, 0, 0); err != nil {
			return state.Submit{}, err
		}
	}
	return sub, nil
}

// ackOf is the answer of a submit or a requeue that created (or names) task
// t, at now.
func ackOf(d state.Decision, t *state.Task, now int64) api.Ack {
	v := api.Ack{Result: api.Outcome(d.Outcome), TaskID: t.ID, RequestID: t.RequestID, Duplicate: d.Duplicate, Queue: t.Queue, Priority: t.Priority,
		Deadline: answers.Deadline(t.DeadlineAt(now)), RequeuedFrom: t.RequeuedFrom,
		Window: state.WindowText(t.Window), MaxAttempts: t.Policy.MaxAttempts}
	if !t.Pending() {
		v.AvailableAt = answers.Null(api.FormatTime(t.AvailableAt))
	}
	for _, w := range t.Waits() {
		v.WaitingFor = append(v.WaitingFor, w.ID)
	}
	return v
}

// ack commits a decision that creates a task (submit, requeue) and answers
// ACK with the task.
func (l *Local) ack(ctx context.Context, actor string, decide func(st *state.State, now int64) (state.Decision, error)) (api.Ack, error) {
	return as[api.Ack](l.write(ctx, actor, func(tx *store.Tx) (any, error) {
		d, err := committer(tx)(decide(tx.State, tx.Now))
		if err != nil {
			return nil, err
		}
		t, err := tx.State.Task(d.TaskID)
		if err != nil {
			return nil, err
		}
		return ackOf(d, t, tx.Now), nil
	}))
}

func (l *Local) Submit(ctx context.Context, r api.SubmitRequest) (api.Ack, error) {
	sub, err := SubmitOf(r)
	if err != nil {
		return api.Ack{}, err
	}
	return l.ack(ctx, r.Actor, func(st *state.State, now int64) (state.Decision, error) { return st.DecideSubmit(sub, now) })
}

// SubmitBatch decides every task or none, in one write; a refusal is a
// *state.BatchError naming the request's index.
func (l *Local) SubmitBatch(ctx context.Context, reqs []api.SubmitRequest) ([]api.Ack, error) {
	if len(reqs) == 0 {
		return nil, api.Usage("the batch holds no task: give one JSON object per line")
	}
	subs := make([]state.Submit, len(reqs))
	for i, r := range reqs {
		var err error
		if subs[i], err = SubmitOf(r); err != nil {
			return nil, &state.BatchError{Index: i, Err: err}
		}
	}
	return as[[]api.Ack](l.write(ctx, reqs[0].Actor, func(tx *store.Tx) (any, error) {
		ds, recs, err := tx.State.DecideSubmits(subs, tx.Now)
		if err != nil {
			return nil, err
		}
		if err := tx.Commit(recs); err != nil {
			return nil, err
		}
		// The tasks the batch created are in memory, their acks made on
		// every processor; another (a duplicate's) may be read from the
		// index, after.
		acks, made := make([]api.Ack, len(ds)), make([]bool, len(ds))
		parallel.Ranges(len(ds), func(_, from, to int) {
			for i := from; i < to; i++ {
				if t, ok := tx.State.HotTask(ds[i].TaskID); ok {
					acks[i], made[i] = ackOf(ds[i], t, tx.Now), true
				}
			}
		})
		for i, d := range ds {
			if made[i] {
				continue
			}
			t, err := tx.State.Task(d.TaskID)
			if err != nil {
				return nil, err
			}
			acks[i] = ackOf(d, t, tx.Now)
		}
		return acks, nil
	}))
}

// Queues reads a queue list: names separated by commas, each a valid
// name (none: every queue).
func Queues(list api.List) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	queues := strings.Split(string(list), ",")
	for _, q := range queues {
		if err := state.ValidateQueue(q); err != nil {
			return nil, api.Usage("--queue %q: %v", list, err)
		}
	}
	return queues, nil
}

// Lease leases the next eligible task (or r.Task); *api.Empty when none
// is, after waiting up to r.Wait for one. A wait ended by ctx is
// ErrClientGone, nothing leased.
func (l *Local) Lease(ctx context.Context, r api.LeaseRequest) (api.Lease, error) {
	if err := required("lease", "worker", r.Worker); err != nil {
		return api.Lease{}, err
	}
	d, err := api.ParseDuration("duration", cmp.Or(r.Duration, "30s"))
	if err != nil {
		return api.Lease{}, err
	}
	queues, err := Queues(r.Queue)
	if err != nil {
		return api.Lease{}, err
	}
	if r.Task != "" && len(queues) > 0 {
		return api.Lease{}, api.Usage("give --task or --queue, not both")
	}
	var wait time.Duration
	if r.Wait != "" {
		if wait, _, err = l.waitFor("wait", r.Wait); err != nil {
			return api.Lease{}, err
		}
	}
	req := state.LeaseRequest{Worker: r.Worker, Duration: d, TaskID: r.Task, RequestID: r.RequestID, Queues: queues}
	var (
		next    int64          // when time alone next changes what is eligible
		watched *store.Watcher // a waiting lease's, told of the writes that may give it a task
		first   bool           // watched is the first of its line (turns), which watches for them
		marked  *marks         // what the first noted in its last decision
	)
	decide := func(tx *store.Tx) (any, error) {
		dec, err := tx.State.DecideLease(req, tx.Now)
		if err != nil {
			return nil, err
		}
		switch dec.Outcome {
		case state.ResultEmpty:
			l.rateHolds.count(dec.HeldBack)
			if wait > 0 {
				next = nextEvent(tx) // it reads every unfinished task: only when the lease will wait
				if l.o.Batch != nil && watched != nil {
					only := func() bool { return false } // it waits for a turn
					if first {
						marked = l.o.Batch.wakes.mark(tx, queues)
						only = marked.only() // in the batch: before its own write is seen
					}
					watched.Only(only)
				}
			}
			return &api.Empty{Result: api.Outcome(dec.Outcome), TaskID: dec.TaskID, Reason: dec.Reason, NextEligibleAt: answers.Null(answers.Stamp(dec.NextEligibleAt)), Live: dec.Live}, nil
		case state.ResultCancelled:
			return cancelledErr(dec), nil
		}
		lease, err := answers.Lease(dec, tx.Payload) // read before the lease is written: a worker gets the payload with it
		if err != nil {
			return nil, err
		}
		if err := tx.Commit(dec.Records); err != nil {
			return nil, err
		}
		return lease, nil
	}
	leased := func(v any, err error) (api.Lease, error) {
		switch a := v.(type) {
		case api.Lease:
			return a, err
		case *api.Empty:
			return api.Lease{}, cmp.Or(err, error(a))
		case *api.Cancelled:
			return api.Lease{}, cmp.Or(err, error(a))
		}
		return api.Lease{}, err
	}
	if wait == 0 {
		return leased(l.write(ctx, r.Actor, decide))
	}
	opts := l.store
	opts.Actor = l.actorOf(r.Actor)
	h, done := l.handle(opts)
	defer done()
	w, err := l.watch(ctx, h)
	if err != nil {
		return api.Lease{}, err
	}
	defer w.release()
	watched = w.w
	line, inLine := lineOf(r.Task, queues), l.o.Batch != nil
	if inLine {
		l.o.Batch.turns.join(line, w.w)
		defer l.o.Batch.turns.leave(line, w.w)
	}
	deadline := time.Now().Add(wait)
	watching := false // it last looked as the first of its line, and noted marked
	for {
		first = !inLine || l.o.Batch.turns.first(line, w.w)
		v, err := l.leaseOnce(ctx, h, r.Actor, decide)
		a, err := leased(v, err)
		if _, empty := v.(*api.Empty); !empty || !time.Now().Before(deadline) || l.stopped() {
			if watching && err == nil && a.TaskID != "" { // it took a task as the first: the records since its look may have freed more
				n, all := marked.freed()
				l.o.Batch.turns.give(line, max(n, 1)-1, all)
			}
			return a, err
		}
		watching = inLine && first
		if !first { // its turn comes from the line: time is the first's to watch
			next = 0
		}
		if err := w.until(waitUntil(next, deadline)); err != nil {
			return api.Lease{}, err
		}
	}
}

// leaseOnce decides one turn of a waiting lease: inside a server through
// its batches (a raft node's WAL takes no other writer), else on h.
func (l *Local) leaseOnce(ctx context.Context, h *store.Handle, actor string, decide func(tx *store.Tx) (any, error)) (any, error) {
	if l.o.Batch != nil {
		return l.write(ctx, actor, decide)
	}
	return l.on(h, true, actor, decide)
}

// settled answers a decision about a lease: its answer, or *api.Cancelled.
func settled[A any](v any, err error) (A, error) {
	var zero A
	if c, ok := v.(*api.Cancelled); ok {
		return zero, cmp.Or(err, error(c))
	}
	return as[A](v, err)
}

func (l *Local) Extend(ctx context.Context, r api.ExtendRequest) (api.Extended, error) {
	if err := required("extend", "task", r.Task, "lease", r.Lease); err != nil {
		return api.Extended{}, err
	}
	d, err := api.ParseDuration("duration", cmp.Or(r.Duration, "30s"))
	if err != nil {
		return api.Extended{}, err
	}
	return onLease(l, ctx, r.Actor, func(st *state.State, now int64) (state.Decision, error) {
		return st.DecideExtend(r.Task, r.Lease, d, now)
	},
		func(dec state.Decision) api.Extended {
			return api.Extended{Result: api.Outcome(dec.Outcome), TaskID: dec.TaskID, LeaseID: dec.LeaseID, Expiry: api.FormatTime(dec.Expiry)}
		})
}

// onLease writes what decide says of a lease the caller holds: a lease
// without authority any more is an *api.Cancelled, and nothing is written.
func onLease[A any](l *Local, ctx context.Context, actor string, decide func(*state.State, int64) (state.Decision, error), answer func(state.Decision) A) (A, error) {
	return settled[A](l.write(ctx, actor, func(tx *store.Tx) (any, error) {
		dec, err := decide(tx.State, tx.Now)
		if err != nil {
			return nil, err
		}
		if dec.Outcome == state.ResultCancelled {
			return cancelledErr(dec), nil
		}
		if err := tx.Commit(dec.Records); err != nil {
			return nil, err
		}
		return answer(dec), nil
	}))
}

// Complete commits a completion; with r.Next it also leases the next task
// in the same write. A completion under a lease that is not the authority
// is recorded as cancelled: *api.Cancelled (its Next too).
func (l *Local) Complete(ctx context.Context, r api.CompleteRequest) (api.Committed, error) {
	if err := required("complete", "task", r.Task, "lease", r.Lease); err != nil {
		return api.Committed{}, err
	}
	if r.Next == nil {
		return settled[api.Committed](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
			dec, err := committer(tx)(tx.State.DecideComplete(r.Task, r.Lease, r.Result, tx.Now))
			if err != nil {
				return nil, err
			}
			return completion(dec, nil), nil
		}))
	}
	d, err := api.ParseDuration("next-duration", cmp.Or(r.Next.Duration, "30s"))
	if err != nil {
		return api.Committed{}, err
	}
	queues, err := Queues(r.Next.Queue)
	if err != nil {
		return api.Committed{}, err
	}
	req := state.LeaseRequest{Worker: r.Next.Worker, Duration: d, Queues: queues}
	return settled[api.Committed](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		done, leased, err := tx.CompleteAndLease(r.Task, r.Lease, r.Result, req)
		if err != nil {
			return nil, err
		}
		l.rateHolds.count(leased.HeldBack)
		next := &api.Next{NextEligibleAt: answers.Null(answers.Stamp(leased.NextEligibleAt))}
		if leased.Outcome == state.ResultLeased {
			lease, err := answers.Lease(leased, tx.Payload)
			if err != nil {
				return nil, err
			}
			next.Lease, next.NextEligibleAt = &lease, nil
		}
		return completion(done, next), nil
	}))
}

// completion is a completion's answer, with the next lease if one was
// asked for.
func completion(dec state.Decision, next *api.Next) any {
	if dec.Outcome == state.ResultCancelled {
		c := cancelledErr(dec)
		c.Next = next
		return c
	}
	return api.Committed{Result: api.Outcome(dec.Outcome), TaskID: dec.TaskID, LeaseID: dec.LeaseID, Duplicate: dec.Duplicate, Next: next}
}

func (l *Local) Fail(ctx context.Context, r api.FailRequest) (api.Failed, error) {
	if err := required("fail", "task", r.Task, "lease", r.Lease, "reason", r.Reason); err != nil {
		return api.Failed{}, err
	}
	return settled[api.Failed](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		dec, err := committer(tx)(tx.State.DecideFail(r.Task, r.Lease, r.Reason, r.Permanent, tx.Now))
		if err != nil {
			return nil, err
		}
		if dec.Outcome == state.ResultCancelled {
			return cancelledErr(dec), nil
		}
		if !dec.Duplicate {
			if dec, err = tx.State.FailAnswer(r.Task, r.Lease); err != nil {
				return nil, err
			}
		}
		return api.Failed{Result: api.Outcome(dec.Outcome), TaskID: dec.TaskID, LeaseID: dec.LeaseID, State: string(dec.State), Attempt: dec.Attempt,
			NotBefore: answers.Stamp(dec.NotBefore), Duplicate: dec.Duplicate}, nil
	}))
}

// Release gives a current lease back without counting its attempt; a lease
// without authority any more is an *api.Cancelled and nothing is written.
func (l *Local) Release(ctx context.Context, r api.ReleaseRequest) (api.Released, error) {
	if err := required("release", "task", r.Task, "lease", r.Lease); err != nil {
		return api.Released{}, err
	}
	d, err := api.ParseDuration("delay", cmp.Or(r.Delay, "0s"))
	if err != nil {
		return api.Released{}, err
	}
	return onLease(l, ctx, r.Actor, func(st *state.State, now int64) (state.Decision, error) {
		return st.DecideRelease(r.Task, r.Lease, d, now)
	},
		func(dec state.Decision) api.Released {
			return api.Released{Result: api.Outcome(dec.Outcome), TaskID: dec.TaskID, LeaseID: dec.LeaseID, State: string(dec.State), Attempt: dec.Attempt,
				NotBefore: api.FormatTime(dec.NotBefore), Duplicate: dec.Duplicate}
		})
}

// Heartbeat notes the worker in the advisory registry (never in the WAL)
// and answers its current leases. A registry that cannot be written is a
// warning, not a failure: it is advisory.
func (l *Local) Heartbeat(ctx context.Context, r api.HeartbeatRequest) (api.Heartbeat, error) {
	if err := required("heartbeat", "worker", r.Worker); err != nil {
		return api.Heartbeat{}, err
	}
	if err := state.ValidateID("--worker", r.Worker); err != nil {
		return api.Heartbeat{}, api.Usage("%v", err)
	}
	h, done := l.handle(l.store)
	defer done()
	var v api.Heartbeat
	err := h.Read(func(tx *store.Tx) error {
		v = api.Heartbeat{Result: api.ResultOK, WorkerID: r.Worker, At: api.FormatTime(tx.Now), Leases: CurrentLeases(tx.State, r.Worker, tx.Now)[r.Worker]}
		if v.Leases == nil {
			v.Leases = []api.HeldLease{}
		}
		if err := h.Heartbeat(r.Worker, tx.Now); err != nil && l.store.Warn != nil {
			l.store.Warn(fmt.Sprintf("the worker registry was not updated (%v); it is advisory only", err))
		}
		return nil
	})
	return v, err
}

// CurrentLeases lists the leases of worker (of every worker, for "")
// current at now, by worker, each worker's in creation order.
func CurrentLeases(st *state.State, worker string, now int64) map[string][]api.HeldLease {
	var held []*state.Task
	st.EachLeased(worker, func(t *state.Task) bool {
		if t.At(now).State == state.Leased { // a lease past its expiry is no longer current
			held = append(held, t)
		}
		return true
	})
	slices.SortFunc(held, state.ByCreation)
	out := map[string][]api.HeldLease{}
	for _, t := range held {
		out[t.Lease.Worker] = append(out[t.Lease.Worker], api.HeldLease{TaskID: t.ID, LeaseID: t.Lease.ID, Expiry: api.FormatTime(t.Lease.Expiry)})
	}
	return out
}

// nextEvent is when time alone next changes what a waiter waits for: a
// lapse, a delay's or a pause's end, or a schedule's next slot (0: none).
func nextEvent(tx *store.Tx) int64 {
	next, fire := tx.State.NextEventAt(tx.Now), tx.State.NextFiringAt(Zones, tx.Now)
	if next == 0 || (fire != 0 && fire < next) {
		return fire
	}
	return next
}

func (l *Local) Expire(ctx context.Context, r api.ExpireRequest) (api.Expired, error) {
	return as[api.Expired](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		fired := len(tx.Committed) // the schedules' firings due, written first
		dec, err := tx.State.DecideExpire(tx.Now)
		if err != nil {
			return nil, err
		}
		if err := tx.Commit(dec.Records); err != nil {
			return nil, err
		}
		v := api.Expired{Result: api.Outcome(dec.Outcome), Transitions: []api.Transition{}}
		for i, r := range tx.Committed {
			st := state.Waiting
			if i >= fired {
				st = dec.States[i-fired]
			}
			v.Transitions = append(v.Transitions, api.Transition{Seq: r.Seq, Type: string(r.Type), TaskID: r.TaskID, LeaseID: r.LeaseID, State: string(st)})
		}
		return v, nil
	}))
}

func (l *Local) QueueLimit(ctx context.Context, r api.QueueLimitRequest) (api.QueueLimit, error) {
	if err := required("queue limit", "queue", r.Queue); err != nil {
		return api.QueueLimit{}, err
	}
	return as[api.QueueLimit](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		d, err := committer(tx)(tx.State.DecideQueueLimit(r.Queue, r.Limit))
		if err != nil {
			return nil, err
		}
		return api.QueueLimit{Result: api.Outcome(d.Outcome), Queue: r.Queue, Limit: r.Limit, Duplicate: d.Duplicate}, nil
	}))
}

func (l *Local) QueueRate(ctx context.Context, r api.QueueRateRequest) (api.QueueRate, error) {
	if err := required("queue rate", "queue", r.Queue); err != nil {
		return api.QueueRate{}, err
	}
	if err := required("queue rate", "rate", r.Rate); err != nil {
		return api.QueueRate{}, err
	}
	var rate *state.Rate
	if r.Rate != "none" {
		parsed, err := state.ParseRate(r.Rate)
		if err != nil {
			return api.QueueRate{}, api.Usage("%v", err)
		}
		if r.Burst != nil {
			if err := limits.Burst.Int(int64(*r.Burst)); err != nil {
				return api.QueueRate{}, api.Usage("%v (how many grants may come at once), or leave it out for one second's worth", err)
			}
			parsed.Burst = *r.Burst
		}
		rate = &parsed
	} else if r.Burst != nil {
		return api.QueueRate{}, api.Usage("a burst with no rate: give a rate with it (e.g. 10/s), or no burst with none")
	}
	return as[api.QueueRate](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		d, err := committer(tx)(tx.State.DecideQueueRate(r.Queue, rate))
		if err != nil {
			return nil, err
		}
		v := api.QueueRate{Result: api.Outcome(d.Outcome), Queue: r.Queue, Duplicate: d.Duplicate}
		for _, q := range tx.State.Rates() {
			if q.Queue == r.Queue {
				text := q.Rate.String()
				v.Rate, v.Burst = &text, q.Burst
			}
		}
		return v, nil
	}))
}

func (l *Local) Pause(ctx context.Context, r api.PauseRequest) (api.Paused, error) {
	if err := required("pause", "queue", r.Queue); err != nil {
		return api.Paused{}, err
	}
	var d time.Duration
	if r.For != "" {
		var err error
		if d, err = api.ParseDuration("for", r.For); err != nil {
			return api.Paused{}, err
		}
		if d <= 0 {
			return api.Paused{}, api.Usage("--for %s: give a positive duration, or leave --for out to pause until 'leasewal resume %s'", r.For, r.Queue)
		}
	}
	return as[api.Paused](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		dec, err := committer(tx)(tx.State.DecidePause(r.Queue, r.Reason, d, tx.Now))
		if err != nil {
			return nil, err
		}
		sp, _ := tx.State.PausedAt(r.Queue, tx.Now)
		return api.Paused{Result: api.Outcome(dec.Outcome), PausedQueue: answers.Pause(r.Queue, sp), Duplicate: dec.Duplicate}, nil
	}))
}

func (l *Local) Resume(ctx context.Context, r api.ResumeRequest) (api.Resumed, error) {
	if err := required("resume", "queue", r.Queue); err != nil {
		return api.Resumed{}, err
	}
	return as[api.Resumed](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		sp, _ := tx.State.PausedAt(r.Queue, tx.Now)
		if _, err := committer(tx)(tx.State.DecideResume(r.Queue, tx.Now)); err != nil {
			return nil, err
		}
		return api.Resumed{Result: api.ResultOK, PausedQueue: answers.Pause(r.Queue, sp), ResumedAt: api.FormatTime(tx.Now)}, nil
	}))
}

func (l *Local) Redact(ctx context.Context, r api.RedactRequest) (api.Redacted, error) {
	if err := required("redact", "task", r.Task, "reason", r.Reason); err != nil {
		return api.Redacted{}, err
	}
	return as[api.Redacted](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		d, err := committer(tx)(tx.State.DecideRedact(r.Task, r.Reason, tx.Now))
		if err != nil {
			return nil, err
		}
		return api.Redacted{Result: api.Outcome(d.Outcome), TaskID: d.TaskID, State: string(d.State), Reason: d.Reason, Duplicate: d.Duplicate}, nil
	}))
}

func (l *Local) Abort(ctx context.Context, r api.AbortRequest) (api.Aborted, error) {
	if err := required("abort", "task", r.Task, "reason", r.Reason); err != nil {
		return api.Aborted{}, err
	}
	return as[api.Aborted](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		d, err := committer(tx)(tx.State.DecideAbort(r.Task, r.Reason, tx.Now))
		if err != nil {
			return nil, err
		}
		return api.Aborted{Result: api.Outcome(d.Outcome), TaskID: d.TaskID, State: string(d.State), Reason: d.Reason, LeaseID: answers.Null(d.LeaseID), Duplicate: d.Duplicate}, nil
	}))
}

func (l *Local) Requeue(ctx context.Context, r api.RequeueRequest) (api.Ack, error) {
	if err := required("requeue", "task", r.Task); err != nil {
		return api.Ack{}, err
	}
	return as[api.Ack](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		decide := tx.State.DecideRequeue
		if r.WithDependents {
			decide = tx.State.DecideRequeueWithDependents
		}
		d, err := committer(tx)(decide(r.Task, r.RequestID, tx.Now))
		if err != nil {
			return nil, err
		}
		t, err := tx.State.Task(d.TaskID)
		if err != nil {
			return nil, err
		}
		v := ackOf(d, t, tx.Now)
		for _, rec := range d.Records {
			if rec.Type == state.TaskCreated && rec.TaskID != d.TaskID {
				v.Dependents = append(v.Dependents, api.RequeuedOne{TaskID: rec.TaskID, RequeuedFrom: rec.RequeuedFrom})
			}
		}
		if !r.WithDependents && !d.Duplicate {
			if v.DeadDependents, err = tx.State.DeadDependents(r.Task, tx.Now); err != nil {
				return nil, err
			}
		}
		return v, nil
	}))
}

// RequeueAll requeues every task r selects that was not requeued yet, at
// most limits.BatchLines in one write (the rest are More: a second requeue
// takes them).
func (l *Local) RequeueAll(ctx context.Context, r api.RequeueAllRequest) (api.RequeuedAll, error) {
	states, err := parseStates("state", r.State)
	if err != nil {
		return api.RequeuedAll{}, err
	}
	if len(states) == 0 || slices.ContainsFunc(states, func(st state.TaskState) bool { return st != state.Failed && st != state.Dead }) {
		return api.RequeuedAll{}, api.Usage("--state %q: a requeue runs FAILED or DEAD tasks again; give FAILED, DEAD or both", r.State)
	}
	if r.Queue != "" {
		if err := state.ValidateQueue(r.Queue); err != nil {
			return api.RequeuedAll{}, api.Usage("--queue %q: %v", r.Queue, err)
		}
	}
	most := int(limits.BatchLines.Max)
	if r.Limit < 0 || r.Limit > most {
		return api.RequeuedAll{}, api.Usage("--limit %d: give 1 to %d tasks a requeue (0: up to %d)", r.Limit, most, most)
	}
	sel := state.RequeueSelection{States: states, Queue: r.Queue, Limit: cmp.Or(r.Limit, most)}
	return as[api.RequeuedAll](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		d, err := tx.State.DecideRequeueAll(sel, tx.Now)
		if err != nil {
			return nil, err
		}
		if err := tx.Commit(d.Records); err != nil {
			return nil, err
		}
		v := api.RequeuedAll{Result: api.ResultOK, Tasks: []api.RequeuedOne{}, More: d.More}
		for _, rec := range d.Records {
			v.Tasks = append(v.Tasks, api.RequeuedOne{TaskID: rec.TaskID, RequeuedFrom: rec.RequeuedFrom})
		}
		return v, nil
	}))
}

func (l *Local) Why(ctx context.Context, r api.WhyRequest) (api.Why, error) {
	if err := required("why", "task", r.Task); err != nil {
		return api.Why{}, err
	}
	return as[api.Why](l.read(ctx, func(tx *store.Tx) (any, error) {
		w, err := tx.State.Explain(r.Task, tx.Now)
		if err != nil {
			return nil, err
		}
		t := w.Task
		v := api.Why{Result: api.ResultOK, TaskID: t.ID, State: string(t.State), Eligible: w.Eligible, Ahead: w.Ahead,
			Because: w.Because, Queue: t.Queue, Priority: t.Priority, Sentence: whySentence(w, tx.Now)}
		switch {
		case w.Eligible:
			v.EligibleAt = answers.Null(api.FormatTime(tx.Now))
		case w.EligibleAt != 0:
			v.EligibleAt = answers.Null(api.FormatTime(w.EligibleAt))
		}
		for _, d := range w.Waits {
			dep := api.Dependency{TaskID: d.Task.ID, State: string(d.Task.State), AfterEnded: d.Ended}
			for _, up := range d.Waits {
				dep.WaitingFor = append(dep.WaitingFor, up.ID)
			}
			v.WaitingFor = append(v.WaitingFor, dep)
		}
		v.Dependents = w.Dependents
		return v, nil
	}))
}

// DefaultWaitStates are what wait waits for unless told: the task ended.
const DefaultWaitStates = "COMPLETED,FAILED,DEAD"

// Wait waits until every task is in one of r.For's states (OK), one can
// no longer get there (UNREACHABLE) or r.Timeout has passed (TIMEOUT). A
// wait ended by ctx answers what it last saw with ErrClientGone.
func (l *Local) Wait(ctx context.Context, r api.WaitRequest) (api.Wait, error) {
	if len(r.Tasks) == 0 {
		return api.Wait{}, api.Usage("'leasewal wait' needs at least one task id, e.g. 'leasewal wait T1'")
	}
	want, err := parseStates("for", cmp.Or(r.For, DefaultWaitStates))
	if err != nil {
		return api.Wait{}, err
	}
	wait, forever, err := l.waitFor("timeout", r.Timeout)
	if err != nil {
		return api.Wait{}, err
	}
	var deadline time.Time
	if !forever {
		deadline = time.Now().Add(wait)
	}
	h, done := l.handle(l.store)
	defer done()
	var next int64
	look := func(tx *store.Tx) (api.Wait, error) {
		v := api.Wait{Result: api.ResultOK, At: api.FormatTime(tx.Now)}
		for _, id := range r.Tasks {
			t, err := tx.State.Task(id)
			if err != nil {
				return v, err
			}
			tv, err := answers.Task(t, tx.Now, tx.Payload)
			if err != nil {
				return v, err
			}
			v.Tasks = append(v.Tasks, tv)
			st := state.TaskState(tv.State)
			switch {
			case slices.Contains(want, st):
			case st.Terminal():
				v.Result = api.ResultUnreachable
			case v.Result == api.ResultOK:
				v.Result = api.ResultTimeout // not yet: the final answer only if time runs out
			}
		}
		next = nextEvent(tx)
		return v, nil
	}
	var w *watching
	for {
		v, err := l.waitOnce(ctx, h, w, r.Tasks, look)
		if err != nil {
			return api.Wait{}, err
		}
		if v.Result != api.ResultTimeout || (!deadline.IsZero() && !time.Now().Before(deadline)) || l.stopped() {
			return v, nil
		}
		if ctx.Err() != nil {
			return v, ErrClientGone
		}
		if w == nil {
			if w, err = l.watch(ctx, h); err != nil {
				return api.Wait{}, err
			}
			defer w.release()
			continue // look again now that changes are watched: none is missed in between
		}
		if err := w.until(waitUntil(next, deadline)); err != nil {
			return v, err
		}
	}
}

// waitOnce is one look of a wait at tasks: inside a server through its
// batches, where it has w (once watching) told only of the writes that
// may change those tasks, and takes no lock from the server; else on h.
func (l *Local) waitOnce(ctx context.Context, h *store.Handle, w *watching, tasks []string, look func(tx *store.Tx) (api.Wait, error)) (api.Wait, error) {
	if l.o.Batch == nil {
		var v api.Wait
		err := h.Read(func(tx *store.Tx) (err error) {
			v, err = look(tx)
			return err
		})
		return v, err
	}
	return as[api.Wait](l.read(ctx, func(tx *store.Tx) (any, error) {
		v, err := look(tx)
		if w != nil {
			w.w.Only(l.o.Batch.wakes.markTasks(tx, tasks).only()) // in the batch: before a write after it is seen
		}
		return v, err
	}))
}

// workView is a work-lease decision as its answer; for succeed and fail,
// offset is the hint and the finished offset is named processed or failed.
func workView(d state.WorkDecision) api.Work {
	v := api.Work{Result: api.Outcome(d.Outcome), Domain: d.Domain, Offset: &d.Offset, Token: d.Token}
	switch d.Outcome {
	case state.ResultNoBacklog, state.ResultNextHint:
		v.Processed, v.Offset = &d.Offset, d.Hint
	case state.ResultGiveUpNoBacklog, state.ResultGiveUpNextHint:
		v.Failed, v.Offset = &d.Offset, d.Hint
	case state.ResultRetryScheduled:
		v.RetryCount = d.Retries
	}
	return v
}

// work decides a work-lease call and commits its record if it has one.
func (l *Local) work(ctx context.Context, actor string, decide func(st *state.State) (state.WorkDecision, error)) (api.Work, error) {
	return as[api.Work](l.write(ctx, actor, func(tx *store.Tx) (any, error) {
		d, err := decide(tx.State)
		if err != nil {
			return nil, err
		}
		if d.Record != nil {
			if err := tx.Commit([]state.Record{*d.Record}); err != nil {
				return nil, err
			}
		}
		return workView(d), nil
	}))
}

func (l *Local) WorkAcquire(ctx context.Context, r api.WorkAcquireRequest) (api.Work, error) {
	if r.Offset == nil {
		return api.Work{}, api.Usage("--offset is missing: give one (\"offset\" in a request's JSON); see 'leasewal worklease acquire --help'")
	}
	return l.work(ctx, r.Actor, func(st *state.State) (state.WorkDecision, error) { return st.DecideAcquire(r.Domain, *r.Offset) })
}

func (l *Local) WorkSucceed(ctx context.Context, r api.WorkSucceedRequest) (api.Work, error) {
	return l.work(ctx, r.Actor, func(st *state.State) (state.WorkDecision, error) { return st.DecideSucceed(r.Domain, r.Token) })
}

func (l *Local) WorkFail(ctx context.Context, r api.WorkFailRequest) (api.Work, error) {
	limit := l.o.MaxRetries
	if r.MaxRetries != nil {
		limit = *r.MaxRetries
	}
	return l.work(ctx, r.Actor, func(st *state.State) (state.WorkDecision, error) { return st.DecideWorkFail(r.Domain, r.Token, limit) })
}

func (l *Local) WorkInspect(ctx context.Context, r api.WorkInspectRequest) (api.WorkInspect, error) {
	return as[api.WorkInspect](l.read(ctx, func(tx *store.Tx) (any, error) {
		v := api.WorkInspect{Result: api.ResultOK, Domains: []api.Domain{}}
		for _, d := range tx.State.Domains() {
			if r.Domain == "" || d.Name == r.Domain {
				v.Domains = append(v.Domains, answers.Domain(d))
			}
		}
		if r.Domain != "" && len(v.Domains) == 0 {
			return nil, &state.Error{Kind: state.NotFound, Msg: fmt.Sprintf("unknown domain %q; 'leasewal worklease inspect' lists the domains", r.Domain)}
		}
		return v, nil
	}))
}

func (l *Local) ScheduleAdd(ctx context.Context, r api.ScheduleAddRequest) (api.ScheduleAdded, error) {
	if err := required("schedule add", "name", r.Name); err != nil {
		return api.ScheduleAdded{}, err
	}
	spec := state.ScheduleSpec{Name: r.Name, Cron: r.Cron, TZ: r.TZ, CatchUp: r.CatchUp}
	switch {
	case (r.Every == "") == (r.Cron == ""):
		return api.ScheduleAdded{}, api.Usage("a schedule needs one of --every and --cron, e.g. --every 1h or --cron '0 3 * * *'")
	case r.TZ != "" && r.Cron == "":
		return api.ScheduleAdded{}, api.Usage("--tz goes with --cron: an interval (--every) counts from when the schedule is added")
	case strings.Contains(r.Cron, "TZ="):
		return api.ScheduleAdded{}, api.Usage("cron expression %q names a time zone: give it with --tz", r.Cron)
	case r.CatchUp != "" && r.CatchUp != state.CatchUpNone && r.CatchUp != state.CatchUpLast && r.CatchUp != state.CatchUpAll:
		return api.ScheduleAdded{}, api.Usage("--catch-up %q: give none, last or all", r.CatchUp)
	}
	if r.Every != "" {
		every, err := api.ParseDuration("every", r.Every)
		if err != nil {
			return api.ScheduleAdded{}, err
		}
		if every <= 0 {
			return api.ScheduleAdded{}, api.Usage("--every %s: give a positive duration", r.Every)
		}
		spec.Every = state.Duration(every)
	}
	if r.Task.RequestID != "" || r.Task.Delay != "" || r.Task.NotBefore != "" {
		return api.ScheduleAdded{}, api.Usage("a schedule's task takes no --request-id, --delay or --not-before: each firing is due at its slot")
	}
	tmpl, err := SubmitOf(r.Task)
	if err != nil {
		return api.ScheduleAdded{}, err
	}
	spec.Template = tmpl
	return as[api.ScheduleAdded](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		d, err := committer(tx)(tx.State.DecideScheduleAdd(spec, Zones, tx.Now))
		if err != nil {
			return nil, err
		}
		for _, sc := range tx.State.Schedules() {
			if sc.Name == r.Name {
				return api.ScheduleAdded{Result: api.Outcome(d.Outcome), Schedule: answers.Schedule(sc, tx.State.NextSlot(sc, Zones, tx.Now)), Duplicate: d.Duplicate}, nil
			}
		}
		return nil, fmt.Errorf("internal error: schedule %q was added but is not in the state", r.Name)
	}))
}

func (l *Local) ScheduleRemove(ctx context.Context, r api.ScheduleRemoveRequest) (api.ScheduleRemoved, error) {
	if err := required("schedule rm", "name", r.Name); err != nil {
		return api.ScheduleRemoved{}, err
	}
	return as[api.ScheduleRemoved](l.write(ctx, r.Actor, func(tx *store.Tx) (any, error) {
		d, err := committer(tx)(tx.State.DecideScheduleRemove(r.Name))
		if err != nil {
			return nil, err
		}
		return api.ScheduleRemoved{Result: api.Outcome(d.Outcome), Name: r.Name}, nil
	}))
}

func (l *Local) QueueList(ctx context.Context, _ api.QueueListRequest) (api.QueueList, error) {
	return as[api.QueueList](l.read(ctx, func(tx *store.Tx) (any, error) {
		queues, err := tx.State.QueuesWithTasks()
		if err != nil {
			return nil, err
		}
		return api.QueueList{Result: api.ResultOK, Queues: append([]string{}, queues...)}, nil // none: [], not null
	}))
}

func (l *Local) ScheduleList(ctx context.Context, _ api.ScheduleListRequest) (api.Schedules, error) {
	return as[api.Schedules](l.read(ctx, func(tx *store.Tx) (any, error) {
		v := api.Schedules{Result: api.ResultOK, At: api.FormatTime(tx.Now), Schedules: []api.Schedule{}}
		for _, sc := range tx.State.Schedules() {
			v.Schedules = append(v.Schedules, answers.Schedule(sc, tx.State.NextSlot(sc, Zones, tx.Now)))
		}
		return v, nil
	}))
}

// BatchRefusal names the line of a batch's refused task: lines[i] is the
// line of the batch's i-th task.
func BatchRefusal(err error, lines []int) error {
	var refused *state.BatchError
	if errors.As(err, &refused) && refused.Index < len(lines) {
		return fmt.Errorf("batch line %d: %w; nothing of the batch was written", lines[refused.Index], refused.Err)
	}
	return err
}
