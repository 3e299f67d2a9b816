package cmd

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"leasewal/api"
	"strings"
	"time"

	"leasewal/client"
	"leasewal/state"
	"leasewal/store"
)

// coordinator is where run takes and settles its leases: the WAL itself, or
// a server (--server). Both decide with the same state rules; only the way
// there differs.
type coordinator interface {
	// lease takes one lease (nil when nothing is eligible) and says when
	// time alone next makes a task eligible (0: unknown or never).
	lease(req state.LeaseRequest) (*job, int64, error)
	// extend renews j's lease for d, updating j.expiry when EXTENDED.
	extend(j *job, d time.Duration) (state.Outcome, error)
	complete(j *job) (state.Outcome, error)
	fail(j *job, reason string, permanent bool) (state.Outcome, error)
	// heartbeat notes in the soft worker registry that the worker is alive.
	heartbeat(worker string) error
	// wakeups signals when a task may have become leasable, until quit closes.
	wakeups(quit <-chan struct{}) (<-chan struct{}, error)
	close()
}

// isRefusal says whether err is the state rules saying no (the lease is not
// the authority, the task is not there): repeating the request cannot help.
func isRefusal(err error) bool {
	var refusal *state.Error
	var remote *api.Error
	return errors.As(err, &refusal) || (errors.As(err, &remote) && (remote.Exit == ExitContract || remote.Exit == ExitNotFound))
}

// localCoordinator decides under the WAL's lock, in this process.
type localCoordinator struct {
	h   *store.Handle
	wal string
}

func (c localCoordinator) lease(req state.LeaseRequest) (*job, int64, error) {
	var j *job
	var next int64
	err := c.h.Write(func(tx *store.Tx) error {
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
		j = &job{taskID: d.TaskID, leaseID: d.LeaseID, attempt: d.Attempt, payload: d.Payload, deadline: t.Deadline(), expiry: d.Expiry}
		return nil
	})
	return j, next, err
}

func (c localCoordinator) extend(j *job, d time.Duration) (state.Outcome, error) {
	var outcome state.Outcome
	err := c.h.Write(func(tx *store.Tx) error {
		dec, err := tx.State.DecideExtend(j.taskID, j.leaseID, d, tx.Now)
		if err != nil {
			return err
		}
		outcome = dec.Outcome
		if dec.Outcome == state.ResultExtended {
			j.expiry = dec.Expiry
		}
		return tx.Commit(dec.Records)
	})
	return outcome, err
}

func (c localCoordinator) complete(j *job) (state.Outcome, error) {
	return c.settle(func(tx *store.Tx) (state.Decision, error) {
		return tx.State.DecideComplete(j.taskID, j.leaseID, tx.Now)
	})
}

func (c localCoordinator) fail(j *job, reason string, permanent bool) (state.Outcome, error) {
	return c.settle(func(tx *store.Tx) (state.Decision, error) {
		d, err := tx.State.DecideFail(j.taskID, j.leaseID, reason, permanent, tx.Now)
		if err != nil || d.Outcome == state.ResultCancelled {
			return d, err
		}
		if err := tx.Commit(d.Records); err != nil {
			return d, err
		}
		d.Records = nil
		return tx.State.FailAnswer(j.taskID, j.leaseID)
	})
}

func (c localCoordinator) settle(decide func(tx *store.Tx) (state.Decision, error)) (state.Outcome, error) {
	var outcome state.Outcome
	err := c.h.Write(func(tx *store.Tx) error {
		d, err := decide(tx)
		if err != nil {
			return err
		}
		outcome = d.Outcome
		return tx.Commit(d.Records)
	})
	return outcome, err
}

// wakeups turns changes of the WAL into wake-ups.
func (c localCoordinator) wakeups(quit <-chan struct{}) (<-chan struct{}, error) {
	watcher, err := c.h.Watch()
	if err != nil {
		return nil, fmt.Errorf("watching %s for changes: %w", c.wal, err)
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

func (c localCoordinator) heartbeat(worker string) error {
	return c.h.Heartbeat(worker, time.Now().UnixMilli())
}

func (c localCoordinator) close() { c.h.Close() }

// remotePoll is how often run --server asks again while nothing is eligible:
// a server's WAL cannot be watched from here.
const remotePoll = 500 * time.Millisecond

// remoteCoordinator sends each decision to a server through the Go client.
// Leases carry a request id that is repeated until a request gets a
// definite answer, so that a lease whose answer was lost is returned again
// instead of being taken twice.
type remoteCoordinator struct {
	e         env
	c         *client.Client
	nonce     string
	requests  int
	pendingID string
}

func newRemoteCoordinator(e env) (*remoteCoordinator, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	c, err := e.client()
	if err != nil {
		return nil, err
	}
	return &remoteCoordinator{e: e, c: c, nonce: hex.EncodeToString(b)}, nil
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

func (c *remoteCoordinator) lease(req state.LeaseRequest) (*job, int64, error) {
	if c.pendingID == "" {
		c.requests++
		c.pendingID = fmt.Sprintf("%s-run-%s-%d", req.Worker, c.nonce, c.requests)
	}
	ctx := c.e.context()
	l, err := c.c.Lease(ctx, api.LeaseRequest{Worker: req.Worker, Duration: req.Duration.String(), RequestID: c.pendingID,
		Queue: api.List(strings.Join(req.Queues, ",")), Actor: c.e.Actor})
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
		return nil, stampOrZero(next), nil
	}
	if err != nil {
		return nil, 0, err
	}
	j := &job{taskID: l.TaskID, leaseID: l.LeaseID, payload: l.Payload, attempt: l.Attempt, expiry: stampOrZero(l.Expiry)}
	// The lease's answer has no deadline; the task's own view does. Without
	// it the child sees LEASEWAL_DEADLINE empty rather than a guess.
	if view, err := c.c.Inspect(ctx, api.InspectRequest{Tasks: []string{j.taskID}}); err == nil && len(view.Tasks) == 1 {
		j.deadline = stampOrZero(view.Tasks[0].Deadline)
	}
	return j, 0, nil
}

func (c *remoteCoordinator) extend(j *job, d time.Duration) (state.Outcome, error) {
	ext, err := c.c.Extend(c.e.context(), api.ExtendRequest{Task: j.taskID, Lease: j.leaseID, Duration: d.String(), Actor: c.e.Actor})
	if err == nil {
		j.expiry = stampOrZero(ext.Expiry)
	}
	return cancelledOr(ext.Result, err)
}

func (c *remoteCoordinator) heartbeat(worker string) error {
	_, err := c.c.Heartbeat(c.e.context(), api.HeartbeatRequest{Worker: worker, Actor: c.e.Actor})
	return err
}

func (c *remoteCoordinator) complete(j *job) (state.Outcome, error) {
	done, err := c.c.Complete(c.e.context(), api.CompleteRequest{Task: j.taskID, Lease: j.leaseID, Actor: c.e.Actor})
	return cancelledOr(done.Result, err)
}

func (c *remoteCoordinator) fail(j *job, reason string, permanent bool) (state.Outcome, error) {
	failed, err := c.c.Fail(c.e.context(), api.FailRequest{Task: j.taskID, Lease: j.leaseID, Reason: reason, Permanent: permanent, Actor: c.e.Actor})
	return cancelledOr(failed.Result, err)
}

func (c *remoteCoordinator) wakeups(quit <-chan struct{}) (<-chan struct{}, error) {
	woken := make(chan struct{}, 1)
	go func() {
		tick := time.NewTicker(remotePoll)
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

func (c *remoteCoordinator) close() {}

// stampOrZero reads a time as the commands print it; "" or anything else is 0.
func stampOrZero(text string) int64 {
	t, err := time.Parse("2006-01-02T15:04:05.000Z", text)
	if err != nil {
		return 0
	}
	return t.UnixMilli()
}
