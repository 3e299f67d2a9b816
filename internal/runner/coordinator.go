package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/state"
)

// Lease is a lease a runner took: what its child is told.
type Lease struct {
	TaskID, LeaseID string
	Attempt         int
	Payload         string
	Deadline        int64 // the task's, unix ms; 0: it has none
	Expiry          int64 // the lease's, unix ms
}

// Coordinator is where a runner takes and settles its leases: the
// service, on a WAL of this machine or a server alike. Leases carry a
// request id that is repeated until a request gets a definite answer, so
// that a lease whose answer was lost is returned again instead of being
// taken twice.
type Coordinator struct {
	ctx       context.Context
	s         api.Service
	actor     string
	nonce     string
	requests  int
	pendingID string
}

// NewCoordinator is a coordinator through s, its calls under ctx,
// recorded as actor's.
func NewCoordinator(ctx context.Context, s api.Service, actor string) (*Coordinator, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	return &Coordinator{ctx: ctx, s: s, actor: actor, nonce: hex.EncodeToString(b)}, nil
}

// IsRefusal says whether err is the state rules saying no (the lease is not
// the authority, the task is not there): repeating the request cannot help.
func IsRefusal(err error) bool {
	var refusal *state.Error
	var remote *api.Error
	return errors.As(err, &refusal) || (errors.As(err, &remote) && (remote.Exit == api.ExitContract || remote.Exit == api.ExitNotFound))
}

// cancelledOr is the outcome of a call under a lease: CANCELLED is an
// answer, not an error.
func cancelledOr(outcome api.Outcome, err error) (api.Outcome, error) {
	var cancelled *api.Cancelled
	if errors.As(err, &cancelled) {
		return api.ResultCancelled, nil
	}
	return outcome, err
}

func (c *Coordinator) Lease(req state.LeaseRequest) (*Lease, int64, error) {
	if c.pendingID == "" {
		c.requests++
		c.pendingID = fmt.Sprintf("%s-run-%s-%d", req.Worker, c.nonce, c.requests)
	}
	l, err := c.s.Lease(c.ctx, api.LeaseRequest{Worker: req.Worker, Duration: req.Duration.String(), RequestID: c.pendingID,
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

func (c *Coordinator) Extend(l *Lease, d time.Duration) (api.Outcome, error) {
	ext, err := c.s.Extend(c.ctx, api.ExtendRequest{Task: l.TaskID, Lease: l.LeaseID, Duration: d.String(), Actor: c.actor})
	if err == nil {
		l.Expiry = api.ParseTime(ext.Expiry)
	}
	return cancelledOr(ext.Result, err)
}

func (c *Coordinator) Heartbeat(worker string) error {
	_, err := c.s.Heartbeat(c.ctx, api.HeartbeatRequest{Worker: worker, Actor: c.actor})
	return err
}

func (c *Coordinator) Complete(l *Lease, result string) (api.Outcome, error) {
	done, err := c.s.Complete(c.ctx, api.CompleteRequest{Task: l.TaskID, Lease: l.LeaseID, Result: result, Actor: c.actor})
	return cancelledOr(done.Result, err)
}

func (c *Coordinator) CompleteAndLease(l *Lease, result string, next state.LeaseRequest) (api.Outcome, *Lease, int64, error) {
	done, err := c.s.Complete(c.ctx, api.CompleteRequest{Task: l.TaskID, Lease: l.LeaseID, Result: result, Actor: c.actor,
		Next: &api.NextLease{Worker: next.Worker, Duration: next.Duration.String(), Queue: api.List(strings.Join(next.Queues, ","))}})
	answer := done.Next
	var cancelled *api.Cancelled
	if errors.As(err, &cancelled) {
		done.Result, answer, err = api.ResultCancelled, cancelled.Next, nil
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
func (c *Coordinator) leased(l api.Lease) *Lease {
	v := &Lease{TaskID: l.TaskID, LeaseID: l.LeaseID, Payload: l.Payload, Attempt: l.Attempt, Expiry: api.ParseTime(l.Expiry)}
	if l.Deadline != nil {
		v.Deadline = api.ParseTime(*l.Deadline)
	}
	return v
}

func (c *Coordinator) Fail(l *Lease, reason string, permanent bool) (api.Outcome, error) {
	failed, err := c.s.Fail(c.ctx, api.FailRequest{Task: l.TaskID, Lease: l.LeaseID, Reason: reason, Permanent: permanent, Actor: c.actor})
	return cancelledOr(failed.Result, err)
}

// Release gives a lease back without using its attempt: a stopped runner's
// unfinished work goes to another worker at once.
func (c *Coordinator) Release(l *Lease) (api.Outcome, error) {
	released, err := c.s.Release(c.ctx, api.ReleaseRequest{Task: l.TaskID, Lease: l.LeaseID, Actor: c.actor})
	return cancelledOr(released.Result, err)
}

// Wakeups signals when a task may have become leasable (the WAL changed,
// or a poll of a server is due), until quit closes.
func (c *Coordinator) Wakeups(quit <-chan struct{}) (<-chan struct{}, error) {
	ctx, cancel := context.WithCancel(c.ctx)
	changes, err := c.s.Changes(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	go func() {
		defer cancel()
		select {
		case <-quit:
		case <-ctx.Done():
		}
	}()
	return changes, nil
}
