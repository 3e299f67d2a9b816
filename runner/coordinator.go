package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"leasewal/api"
	"leasewal/client"
	"leasewal/state"
	"leasewal/store"
)

// Lease is a lease a runner took: what its child is told.
type Lease struct {
	TaskID, LeaseID string
	Attempt         int
	Payload         string
	Deadline        int64 // the task's, unix ms; 0: not known
	Expiry          int64 // the lease's, unix ms
}

// Coordinator is where a runner takes and settles its leases: the WAL
// itself (Local), or a server (Remote). Both decide with the same state
// rules; only the way there differs.
type Coordinator interface {
	// Lease takes one lease (nil when nothing is eligible) and says when
	// time alone next makes a task eligible (0: unknown or never).
	Lease(req state.LeaseRequest) (*Lease, int64, error)
	// Extend renews l for d, updating l.Expiry when EXTENDED.
	Extend(l *Lease, d time.Duration) (state.Outcome, error)
	Complete(l *Lease) (state.Outcome, error)
	// CompleteAndLease completes l and leases the next task for next in
	// one request and one fsync: the completion's outcome, the next lease
	// (nil when nothing is eligible) and when time alone next makes a task
	// eligible.
	CompleteAndLease(l *Lease, next state.LeaseRequest) (state.Outcome, *Lease, int64, error)
	Fail(l *Lease, reason string, permanent bool) (state.Outcome, error)
	// Heartbeat notes in the soft worker registry that the worker is alive.
	Heartbeat(worker string) error
	// Wakeups signals when a task may have become leasable, until quit closes.
	Wakeups(quit <-chan struct{}) (<-chan struct{}, error)
	Close()
}

// IsRefusal says whether err is the state rules saying no (the lease is not
// the authority, the task is not there): repeating the request cannot help.
func IsRefusal(err error) bool {
	var refusal *state.Error
	var remote *api.Error
	return errors.As(err, &refusal) || (errors.As(err, &remote) && (remote.Exit == api.ExitContract || remote.Exit == api.ExitNotFound))
}

// Local decides under the WAL's lock, in this process, on h (resident:
// the runner holds it for its life).
type Local struct {
	H   *store.Handle
	WAL string
}

func (c Local) Lease(req state.LeaseRequest) (*Lease, int64, error) {
	var l *Lease
	var next int64
	err := c.H.Write(func(tx *store.Tx) error {
		d, err := tx.State.DecideLease(req, tx.Now)
		if err != nil || d.Outcome != state.ResultLeased {
			next = tx.State.NextEventAt(tx.Now) // it reads every unfinished task: only when the runner will wait
			return err
		}
		if err := tx.Commit(d.Records); err != nil {
			return err
		}
		t, err := tx.State.Task(d.TaskID)
		if err != nil {
			return err
		}
		l = &Lease{TaskID: d.TaskID, LeaseID: d.LeaseID, Attempt: d.Attempt, Payload: d.Payload, Deadline: t.Deadline(), Expiry: d.Expiry}
		return nil
	})
	return l, next, err
}

func (c Local) Extend(l *Lease, d time.Duration) (state.Outcome, error) {
	var outcome state.Outcome
	err := c.H.Write(func(tx *store.Tx) error {
		dec, err := tx.State.DecideExtend(l.TaskID, l.LeaseID, d, tx.Now)
		if err != nil {
			return err
		}
		outcome = dec.Outcome
		if dec.Outcome == state.ResultExtended {
			l.Expiry = dec.Expiry
		}
		return tx.Commit(dec.Records)
	})
	return outcome, err
}

func (c Local) Complete(l *Lease) (state.Outcome, error) {
	return c.settle(func(tx *store.Tx) (state.Decision, error) {
		return tx.State.DecideComplete(l.TaskID, l.LeaseID, tx.Now)
	})
}

func (c Local) CompleteAndLease(l *Lease, next state.LeaseRequest) (state.Outcome, *Lease, int64, error) {
	var (
		outcome state.Outcome
		got     *Lease
		when    int64
	)
	err := c.H.Write(func(tx *store.Tx) error { // both records in one write, one fsync
		done, leased, err := tx.CompleteAndLease(l.TaskID, l.LeaseID, next)
		outcome = done.Outcome
		if err != nil || leased.Outcome != state.ResultLeased {
			when = tx.State.NextEventAt(tx.Now)
			return err
		}
		t, err := tx.State.Task(leased.TaskID)
		if err != nil {
			return err
		}
		got = &Lease{TaskID: leased.TaskID, LeaseID: leased.LeaseID, Attempt: leased.Attempt, Payload: leased.Payload, Deadline: t.Deadline(), Expiry: leased.Expiry}
		return nil
	})
	if err != nil {
		return "", nil, 0, err
	}
	return outcome, got, when, nil
}

func (c Local) Fail(l *Lease, reason string, permanent bool) (state.Outcome, error) {
	return c.settle(func(tx *store.Tx) (state.Decision, error) {
		d, err := tx.State.DecideFail(l.TaskID, l.LeaseID, reason, permanent, tx.Now)
		if err != nil || d.Outcome == state.ResultCancelled {
			return d, err
		}
		if err := tx.Commit(d.Records); err != nil {
			return d, err
		}
		d.Records = nil
		return tx.State.FailAnswer(l.TaskID, l.LeaseID)
	})
}

func (c Local) settle(decide func(tx *store.Tx) (state.Decision, error)) (state.Outcome, error) {
	var outcome state.Outcome
	err := c.H.Write(func(tx *store.Tx) error {
		d, err := decide(tx)
		if err != nil {
			return err
		}
		outcome = d.Outcome
		return tx.Commit(d.Records)
	})
	return outcome, err
}

// Wakeups turns changes of the WAL into wake-ups.
func (c Local) Wakeups(quit <-chan struct{}) (<-chan struct{}, error) {
	watcher, err := c.H.Watch()
	if err != nil {
		return nil, fmt.Errorf("watching %s for changes: %w", c.WAL, err)
	}
	woken := make(chan struct{}, 1)
	go func() {
		defer watcher.Close()
		for {
			select {
			case <-quit:
				return
			default:
			}
			if changed, _ := watcher.Wait(time.Now().Add(200 * time.Millisecond)); changed {
				select {
				case woken <- struct{}{}:
				default:
				}
			}
		}
	}()
	return woken, nil
}

func (c Local) Heartbeat(worker string) error {
	return c.H.Heartbeat(worker, time.Now().UnixMilli())
}

func (c Local) Close() { c.H.Close() }

// Remote sends each decision to a server through the Go client.
// Leases carry a request id that is repeated until a request gets a
// definite answer, so that a lease whose answer was lost is returned again
// instead of being taken twice.
type Remote struct {
	ctx       context.Context
	c         *client.Client
	actor     string
	nonce     string
	requests  int
	pendingID string
}

// NewRemote is a coordinator through c, its calls under ctx, recorded as
// actor's.
func NewRemote(ctx context.Context, c *client.Client, actor string) (*Remote, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return &Remote{ctx: ctx, c: c, actor: actor, nonce: hex.EncodeToString(b)}, nil
}

// cancelledOr is the outcome of a call under a lease: CANCELLED is an
// answer, not an error.
func cancelledOr(outcome state.Outcome, err error) (state.Outcome, error) {
	var cancelled *api.Cancelled
	if errors.As(err, &cancelled) {
		return state.ResultCancelled, nil
	}
	return outcome, err
}

func (c *Remote) Lease(req state.LeaseRequest) (*Lease, int64, error) {
	if c.pendingID == "" {
		c.requests++
		c.pendingID = fmt.Sprintf("%s-run-%s-%d", req.Worker, c.nonce, c.requests)
	}
	l, err := c.c.Lease(c.ctx, api.LeaseRequest{Worker: req.Worker, Duration: req.Duration.String(), RequestID: c.pendingID,
		Queue: api.List(strings.Join(req.Queues, ",")), Actor: c.actor})
	var unknown *client.UnknownOutcomeError
	if !errors.As(err, &unknown) {
		c.pendingID = "" // a definite answer: the next lease is a new request
	}
	var empty *api.Empty
	if errors.As(err, &empty) {
		next := ""
		if empty.NextEligibleAt != nil {
			next = *empty.NextEligibleAt
		}
		return nil, api.ParseTime(next), nil
	}
	if err != nil {
		return nil, 0, err
	}
	return c.leased(l), 0, nil
}

func (c *Remote) Extend(l *Lease, d time.Duration) (state.Outcome, error) {
	ext, err := c.c.Extend(c.ctx, api.ExtendRequest{Task: l.TaskID, Lease: l.LeaseID, Duration: d.String(), Actor: c.actor})
	if err == nil {
		l.Expiry = api.ParseTime(ext.Expiry)
	}
	return cancelledOr(ext.Result, err)
}

func (c *Remote) Heartbeat(worker string) error {
	_, err := c.c.Heartbeat(c.ctx, api.HeartbeatRequest{Worker: worker, Actor: c.actor})
	return err
}

func (c *Remote) Complete(l *Lease) (state.Outcome, error) {
	done, err := c.c.Complete(c.ctx, api.CompleteRequest{Task: l.TaskID, Lease: l.LeaseID, Actor: c.actor})
	return cancelledOr(done.Result, err)
}

func (c *Remote) CompleteAndLease(l *Lease, next state.LeaseRequest) (state.Outcome, *Lease, int64, error) {
	done, err := c.c.Complete(c.ctx, api.CompleteRequest{Task: l.TaskID, Lease: l.LeaseID, Actor: c.actor,
		Next: &api.NextLease{Worker: next.Worker, Duration: next.Duration.String(), Queue: api.List(strings.Join(next.Queues, ","))}})
	answer := done.Next
	var cancelled *api.Cancelled
	if errors.As(err, &cancelled) {
		done.Result, answer, err = state.ResultCancelled, cancelled.Next, nil
	}
	if err != nil {
		return "", nil, 0, err
	}
	if answer == nil || answer.Lease == nil {
		var when int64
		if answer != nil && answer.NextEligibleAt != nil {
			when = api.ParseTime(*answer.NextEligibleAt)
		}
		return done.Result, nil, when, nil
	}
	return done.Result, c.leased(*answer.Lease), 0, nil
}

// leased is a lease a server granted.
func (c *Remote) leased(l api.Lease) *Lease {
	return &Lease{TaskID: l.TaskID, LeaseID: l.LeaseID, Payload: l.Payload, Attempt: l.Attempt,
		Expiry: api.ParseTime(l.Expiry), Deadline: api.ParseTime(l.Deadline)}
}

func (c *Remote) Fail(l *Lease, reason string, permanent bool) (state.Outcome, error) {
	failed, err := c.c.Fail(c.ctx, api.FailRequest{Task: l.TaskID, Lease: l.LeaseID, Reason: reason, Permanent: permanent, Actor: c.actor})
	return cancelledOr(failed.Result, err)
}

func (c *Remote) Wakeups(quit <-chan struct{}) (<-chan struct{}, error) {
	woken := make(chan struct{}, 1)
	go func() {
		tick := time.NewTicker(client.PollEvery)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				select {
				case woken <- struct{}{}:
				default:
				}
			}
		}
	}()
	return woken, nil
}

func (c *Remote) Close() {}
