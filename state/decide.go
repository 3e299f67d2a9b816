package state

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/leasewal/leasewal/internal/limits"
)

// Outcome is the answer a command gives (the JSON "result").
type Outcome string

// Outcomes of the task commands (docs/reference.md#commands).
const (
	ResultAck       Outcome = "ACK"
	ResultLeased    Outcome = "LEASED"
	ResultEmpty     Outcome = "EMPTY"
	ResultExtended  Outcome = "EXTENDED"
	ResultCancelled Outcome = "CANCELLED"
	ResultCommitted Outcome = "COMMITTED"
	ResultRetry     Outcome = "RETRY"
	ResultFailed    Outcome = "FAILED"
	ResultOK        Outcome = "OK"
	ResultReleased  Outcome = "RELEASED"
	// wait: the time ran out, or a task ended in a state not asked for.
	ResultTimeout     Outcome = "TIMEOUT"
	ResultUnreachable Outcome = "UNREACHABLE"
)

// Decision is what a command means at a given time: the records to append (none
// for an idempotent repeat or a refusal-free no-op) and the answer to give.
type Decision struct {
	Records   []Record // type-specific fields filled; seq, at and actor are the caller's
	Outcome   Outcome
	TaskID    string
	LeaseID   string
	Reason    string // why CANCELLED or EMPTY
	Duplicate bool   // the answer repeats an earlier one; nothing was written

	// The answer's facts, where the command has them.
	Worker    string
	Attempt   int
	Expiry    int64
	Deadline  int64 // a lease's task's: when its window closes
	Payload   Payload
	State     TaskState   // after a fail
	NotBefore int64       // after a fail that retries
	States    []TaskState // expire: each record's task's state after it

	// EMPTY: when the next task becomes eligible (0 for never, as things
	// stand), and how many tasks are not terminal, both within the request's
	// queues or task.
	NextEligibleAt int64
	Live           int
	// HeldBack is the queues whose rate held back a task EMPTY would
	// otherwise have leased.
	HeldBack []string

	More int // a bulk requeue: the tasks selected past its limit
}

func write(r Record, d Decision) Decision {
	d.Records = []Record{r}
	return d
}

// Submit is a request to create a task.
type Submit struct {
	Payload   string
	Window    Duration
	Policy    RetryPolicy
	RequestID string // empty: the coordinator assigns R<n>
	// When it becomes eligible: Delay after the submit, or at NotBefore
	// (unix ms; 0 for none), never before the submit itself.
	Delay     time.Duration
	NotBefore int64
	Queue     string // empty: DefaultQueue
	Priority  int
	// After names the tasks it waits to see COMPLETED, AfterEnded those it
	// waits to see end: task ids, or, in a batch, request ids of the
	// batch's earlier submits. Its delay counts from when they are met.
	After, AfterEnded []string
}

// DecideSubmit creates a task at now, or repeats the answer for a known
// request id. The queue and priority count as policy for a repeat (another
// queue is a conflict); the delay does not (a repeat keeps the first time).
func (s *State) DecideSubmit(c Submit, now int64) (Decision, error) {
	ds, _, err := s.DecideSubmits([]Submit{c}, now)
	var batch *BatchError
	if errors.As(err, &batch) {
		return Decision{}, batch.Err
	}
	if err != nil {
		return Decision{}, err
	}
	return ds[0], nil
}

// BatchError is a batch refused because of one of its items (Index, from
// 0): nothing of the batch is decided.
type BatchError struct {
	Index int
	Err   error
}

func (e *BatchError) Error() string { return fmt.Sprintf("item %d of the batch: %v", e.Index+1, e.Err) }
func (e *BatchError) Unwrap() error { return e.Err }

// DecideSubmits decides a batch of submits at now, all or nothing: each as
// DecideSubmit would after the ones before it (a request id the batch
// repeats answers with the task the batch created for it), or, when any one
// is refused, none. recs holds every decision's records, to be applied in
// order; each decision's Records are its part of recs (a batch's records
// are many, and large: they are made once).
func (s *State) DecideSubmits(cs []Submit, now int64) (ds []Decision, recs []Record, err error) {
	type created struct {
		id                string
		c                 Submit
		after, afterEnded []string
	}
	ds, recs = make([]Decision, 0, len(cs)), make([]Record, 0, len(cs)) // at most a record a submit: recs never moves
	// What a TaskCreated points to, made in one piece rather than three
	// allocations a task.
	type pointed struct {
		policy    RetryPolicy
		notBefore int64
		priority  int
	}
	fields := make([]pointed, 0, len(cs))
	var (
		batch   map[string]created  // request id → what the batch created for it
		next    = s.lastTaskNum + 1 // the number of the batch's next task
		autoReq int64               // where the search for a free R<n> goes on
	)
	for i, c := range cs {
		c, err := validSubmit(c)
		if err != nil {
			return nil, nil, &BatchError{Index: i, Err: err}
		}
		var inBatch func(string) string
		if len(cs) > 1 {
			inBatch = func(req string) string { return batch[req].id }
		}
		after, afterEnded, err := s.submitDeps(c, inBatch)
		if err != nil {
			return nil, nil, &BatchError{Index: i, Err: err}
		}
		if c.RequestID != "" {
			if earlier, ok := batch[c.RequestID]; ok {
				if !repeats(c, textPayload(earlier.c.Payload), earlier.c.Window, earlier.c.Policy, earlier.c.Queue, earlier.c.Priority, false) ||
					!slices.Equal(after, earlier.after) || !slices.Equal(afterEnded, earlier.afterEnded) {
					return nil, nil, &BatchError{Index: i, Err: refuse(RequestConflict, "request_id", "request id %q is given twice in the batch with a different payload, policy, queue, priority or dependencies", c.RequestID)}
				}
				ds = append(ds, Decision{Outcome: ResultAck, TaskID: earlier.id, Duplicate: true})
				continue
			}
			t, err := s.submitted(c.RequestID)
			if err != nil {
				return nil, nil, &BatchError{Index: i, Err: err}
			}
			if t != nil {
				payload := t.Payload
				if t.Redacted != "" { // its payload is gone: a repeat is known by the rest
					payload = textPayload(c.Payload)
				}
				if !repeats(c, payload, t.Window, t.Policy, t.Queue, t.Priority, t.RequeuedFrom != "") || !sameDeps(t.Deps, after, afterEnded) {
					return nil, nil, &BatchError{Index: i, Err: refuse(RequestConflict, "request_id", "request id %q already created %s with a different payload, policy, queue, priority or dependencies", c.RequestID, t.ID)}
				}
				ds = append(ds, Decision{Outcome: ResultAck, TaskID: t.ID, Duplicate: true})
				if len(cs) > 1 { // a later line may wait for it
					if batch == nil {
						batch = make(map[string]created, len(cs))
					}
					batch[c.RequestID] = created{id: t.ID, c: c, after: after, afterEnded: afterEnded}
				}
				continue
			}
		}
		id := "T" + strconv.FormatInt(next, 10)
		req := c.RequestID
		if req == "" {
			// R<n> as DecideSubmit after the batch's earlier tasks: the first
			// free from this task's number on.
			autoReq = max(autoReq, next)
			if req, err = s.freeRequestID(&autoReq, func(r string) bool { _, inBatch := batch[r]; return inBatch }); err != nil {
				return nil, nil, &BatchError{Index: i, Err: err}
			}
		}
		next++
		if len(cs) > 1 { // a single submit (every submit command) needs no memory of the batch
			if batch == nil {
				batch = make(map[string]created, len(cs))
			}
			batch[req] = created{id: id, c: c, after: after, afterEnded: afterEnded}
		}
		fields = append(fields, pointed{policy: c.Policy, notBefore: max(now, c.NotBefore, addTime(now, c.Delay.Milliseconds())), priority: c.Priority})
		f := &fields[len(fields)-1]
		recs = append(recs, Record{Type: TaskCreated, TaskID: id, Payload: c.Payload, Window: c.Window, RetryPolicy: &f.policy, RequestID: req,
			NotBefore: &f.notBefore, Queue: c.Queue, Priority: &f.priority, After: after, AfterEnded: afterEnded})
		ds = append(ds, Decision{Outcome: ResultAck, TaskID: id, Records: recs[len(recs)-1 : len(recs) : len(recs)]})
	}
	return ds, recs, nil
}

// validSubmit checks a submit's fields, and fills in the default queue.
func validSubmit(c Submit) (Submit, error) {
	if err := ValidatePayload(c.Payload); err != nil {
		return c, refuse(InvalidInput, "payload", "%v", err)
	}
	if err := ValidatePolicy(c.Window, c.Policy); err != nil {
		return c, err
	}
	if err := limits.MaxAttempts.Int(int64(c.Policy.MaxAttempts)); err != nil {
		return c, refuse(InvalidInput, "max_attempts", "%v", err)
	}
	if c.Queue == "" {
		c.Queue = DefaultQueue
	}
	if err := ValidateQueue(c.Queue); err != nil {
		return c, refuse(InvalidInput, "queue", "%v", err)
	}
	if err := ValidatePriority(c.Priority); err != nil {
		return c, refuse(InvalidInput, "priority", "%v", err)
	}
	switch {
	case c.Delay < 0:
		return c, refuse(InvalidInput, "delay", "a delay must not be negative, got %s", c.Delay)
	case c.Delay > 0 && c.NotBefore != 0:
		return c, refuse(InvalidInput, "delay", "give a delay or a not-before time, not both")
	case c.NotBefore > MaxTime:
		return c, refuse(InvalidInput, "delay", "a not-before time past the year 9999")
	}
	if c.RequestID != "" {
		if err := ValidateID("request id", c.RequestID); err != nil {
			return c, refuse(InvalidInput, "request_id", "%v", err)
		}
		if isSlotID(c.RequestID) {
			return c, refuse(InvalidInput, "request_id", "request id %q has the form NAME@TIME that schedules' firings take: choose another", c.RequestID)
		}
	}
	return c, nil
}

// repeats says whether c asks for what an earlier submit with its request
// id asked: the same payload, policy, queue and priority (the delay does not
// count: a repeat keeps the first time). A requeued task's request id is
// never repeated by a submit.
func repeats(c Submit, payload Payload, window Duration, policy RetryPolicy, queue string, priority int, requeued bool) bool {
	return payload.Is(c.Payload) && c.Window == window && c.Policy == policy && c.Queue == queue && c.Priority == priority && !requeued
}

// LeaseRequest asks for a lease on the eligible task of highest priority,
// oldest first within a priority, or on one task.
type LeaseRequest struct {
	Worker    string
	Duration  time.Duration
	TaskID    string   // optional
	RequestID string   // optional; a repeat returns the same lease while it is current
	Queues    []string // optional: only tasks of these queues
}

// ValidateLeaseRequest refuses a lease request that no state could grant:
// an invalid worker, request id or queue, a duration that is not positive.
func ValidateLeaseRequest(c LeaseRequest) error {
	if err := ValidateID("worker", c.Worker); err != nil {
		return refuse(InvalidInput, "worker", "%v", err)
	}
	if err := limits.LeaseDuration.Duration(c.Duration); err != nil {
		return refuse(InvalidInput, "duration", "the lease %v", err)
	}
	if c.RequestID != "" {
		if err := ValidateID("request id", c.RequestID); err != nil {
			return refuse(InvalidInput, "request_id", "%v", err)
		}
	}
	for _, q := range c.Queues {
		if err := ValidateQueue(q); err != nil {
			return refuse(InvalidInput, "queue", "%v", err)
		}
	}
	return nil
}

// DecideLease grants a lease on the eligible task of highest priority among
// the named queues (all by default), the oldest by creation within a
// priority, or on the named task. The expiry is capped at the task's
// deadline. EMPTY says when the next task becomes eligible and how many are
// still live, within the same queues or task.
func (s *State) DecideLease(c LeaseRequest, now int64) (Decision, error) {
	if err := ValidateLeaseRequest(c); err != nil {
		return Decision{}, err
	}
	if c.RequestID != "" {
		prev, err := s.leaseRequested(c.RequestID)
		if err != nil {
			return Decision{}, err
		}
		if prev.taskID != "" {
			return s.repeatLease(c, prev, now)
		}
	}
	var pick *Task
	why := "no task is WAITING and eligible"
	full := s.fullQueues(now)
	paused := s.pausedQueues(now)
	held := s.heldQueues(now)
	empty := Decision{Outcome: ResultEmpty, TaskID: c.TaskID}
	if c.TaskID != "" {
		t, err := s.Task(c.TaskID)
		if err != nil {
			return Decision{}, err
		}
		pause, isPaused := paused[t.Queue]
		switch settled := t.At(now); {
		case !inQueues(t, c.Queues):
			why = t.ID + " is in queue " + t.Queue
		case isPaused && !settled.State.Terminal():
			why, empty.Live, empty.NextEligibleAt = pauseMessage(t.Queue, pause), liveCount(settled), afterPause(settled, pause, now)
			if settled.State != Waiting {
				why = settled.whyNotLeasable(now) + "; " + why
			}
		case s.fullMessage(full, t.Queue) != "": // it waits for a completion, not for a time
			why, empty.Live = s.fullMessage(full, t.Queue), liveCount(settled)
		case settled.leasable(now) && held[t.Queue] != 0:
			why, empty.Live, empty.NextEligibleAt = s.rateMessage(t.Queue, held[t.Queue]), liveCount(settled), held[t.Queue]
			empty.HeldBack = []string{t.Queue}
		case settled.leasable(now):
			pick = t
		default:
			why = settled.whyNotLeasable(now)
			empty.NextEligibleAt, empty.Live = rateBound(settled.nextEligibleAt(now), held[t.Queue]), liveCount(settled)
		}
	} else {
		skip := map[string]bool{}
		for _, q := range slices.Sorted(maps.Keys(paused)) {
			skip[q] = true
			if len(c.Queues) == 0 || slices.Contains(c.Queues, q) {
				why += "; " + pauseMessage(q, paused[q])
			}
		}
		for _, q := range slices.Sorted(maps.Keys(full)) {
			if skip[q] {
				continue
			}
			skip[q] = true
			if len(c.Queues) == 0 || slices.Contains(c.Queues, q) {
				why += "; " + s.fullMessage(full, q)
			}
		}
		var rated map[string]int64
		for _, q := range slices.Sorted(maps.Keys(held)) {
			if skip[q] {
				continue
			}
			if rated == nil {
				rated = map[string]int64{}
			}
			skip[q], rated[q] = true, held[q]
			if len(c.Queues) == 0 || slices.Contains(c.Queues, q) {
				why += "; " + s.rateMessage(q, held[q])
			}
		}
		pick, empty.NextEligibleAt, empty.Live, empty.HeldBack = s.best(c.Queues, skip, paused, rated, now)
	}
	if pick == nil {
		empty.Reason = why
		return empty, nil
	}
	settled := pick.At(now)
	lease := "L" + strconv.FormatInt(s.lastLeaseNum+1, 10)
	r := Record{Type: LeaseGranted, TaskID: pick.ID, LeaseID: lease, WorkerID: c.Worker,
		Attempt: settled.Attempt + 1, Expiry: settled.capExpiry(now, c.Duration), RequestID: c.RequestID}
	return write(r, Decision{Outcome: ResultLeased, TaskID: pick.ID, LeaseID: lease, Worker: c.Worker,
		Attempt: r.Attempt, Expiry: r.Expiry, Deadline: pick.Deadline(), Payload: pick.Payload}), nil
}

func (s *State) repeatLease(c LeaseRequest, prev leaseRequest, now int64) (Decision, error) {
	if prev.worker != c.Worker {
		return Decision{}, refuse(RequestConflict, "request_id", "lease request id %q was used by worker %q", c.RequestID, prev.worker)
	}
	t, err := s.Task(prev.taskID)
	if err != nil {
		return Decision{}, err
	}
	if c := t.At(now); c.holds(prev.leaseID, now) {
		return Decision{Outcome: ResultLeased, TaskID: t.ID, LeaseID: prev.leaseID, Duplicate: true,
			Worker: c.Lease.Worker, Attempt: c.Attempt, Expiry: c.Lease.Expiry, Deadline: t.DeadlineAt(now), Payload: t.Payload}, nil
	}
	return Decision{Outcome: ResultCancelled, TaskID: t.ID, LeaseID: prev.leaseID, Duplicate: true,
		Reason: fmt.Sprintf("request %q was answered with %s", c.RequestID, s.whyNotCurrent(t, prev.leaseID, now))}, nil
}

// findLease returns the task and checks the lease was granted for it.
func (s *State) findLease(taskID, leaseID string) (*Task, error) {
	t, err := s.Task(taskID)
	if err != nil {
		return nil, err
	}
	if err := limits.LeaseID.Text(leaseID); err != nil {
		return nil, refuse(InvalidInput, "lease", "the %v", err)
	}
	if _, ok := idNumber(leaseID, 'L'); !ok {
		return nil, refuse(InvalidInput, "lease", "%q is not a lease id (L<n>)", leaseID)
	}
	owner, err := s.leaseOwner(leaseID)
	if err != nil {
		return nil, err
	}
	if owner != taskID {
		return nil, refuse(NotFound, "lease", "lease %s was never granted for %s", leaseID, taskID)
	}
	return t, nil
}

// whyNotCurrent explains, for a worker, why leaseID has no authority at now:
// "lease L1 is no longer current for T1: it expired at … and T1 was re-leased as L2 to W2".
func (s *State) whyNotCurrent(t *Task, leaseID string, now int64) string {
	c := t.At(now)
	a := c.AttemptOf(leaseID)
	why := fmt.Sprintf("lease %s is no longer current for %s: it ended (%s) at %s", leaseID, t.ID, a.End, stamp(a.EndedAt))
	switch a.End {
	case EndExpired:
		why = fmt.Sprintf("lease %s is no longer current for %s: it expired at %s", leaseID, t.ID, stamp(a.EndedAt))
	case EndAborted:
		return fmt.Sprintf("lease %s is no longer current for %s: the task was %s at %s", leaseID, t.ID, c.EndReason, stamp(a.EndedAt))
	}
	switch {
	case c.State == Leased:
		why += fmt.Sprintf(" and %s was re-leased as %s to %s", t.ID, c.Lease.ID, c.Lease.Worker)
	case c.State.Terminal():
		why += fmt.Sprintf(" and %s is now %s", t.ID, c.State)
	}
	return why
}

// stamp writes a time into a message, as RFC 3339 UTC.
func stamp(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z")
}

func cancel(t *Task, leaseID, reason string) Decision {
	return write(Record{Type: TaskCancelled, TaskID: t.ID, LeaseID: leaseID, Reason: reason},
		Decision{Outcome: ResultCancelled, TaskID: t.ID, LeaseID: leaseID, Reason: reason})
}

// DecideExtend moves a current lease's expiry to now+d, capped at the deadline.
// A lease without authority gets CANCELLED and nothing is written.
func (s *State) DecideExtend(taskID, leaseID string, d time.Duration, now int64) (Decision, error) {
	if err := limits.LeaseDuration.Duration(d); err != nil {
		return Decision{}, refuse(InvalidInput, "duration", "the lease %v", err)
	}
	t, err := s.findLease(taskID, leaseID)
	if err != nil {
		return Decision{}, err
	}
	if !t.At(now).holds(leaseID, now) {
		return Decision{Outcome: ResultCancelled, TaskID: taskID, LeaseID: leaseID, Reason: s.whyNotCurrent(t, leaseID, now)}, nil
	}
	expiry := t.capExpiry(now, d)
	return write(Record{Type: LeaseExtended, TaskID: taskID, LeaseID: leaseID, Expiry: expiry},
		Decision{Outcome: ResultExtended, TaskID: taskID, LeaseID: leaseID, Expiry: expiry}), nil
}

// DecideComplete commits a task under its current lease, or records that the
// caller's lease had no authority (docs/guarantees.md#task-semantics).
func (s *State) DecideComplete(taskID, leaseID, result string, now int64) (Decision, error) {
	if err := ValidateResult(result); err != nil {
		return Decision{}, refuse(InvalidInput, "result", "%v", err)
	}
	t, err := s.findLease(taskID, leaseID)
	if err != nil {
		return Decision{}, err
	}
	if a := t.AttemptOf(leaseID); a.End == EndCompleted {
		if t.Result != result {
			return Decision{}, refuse(RequestConflict, "result", "%s was completed under %s with another result; a repeat gives the same result (the task is COMPLETED either way)", taskID, leaseID)
		}
		return Decision{Outcome: ResultCommitted, TaskID: taskID, LeaseID: leaseID, Duplicate: true}, nil
	}
	if !t.At(now).holds(leaseID, now) {
		return cancel(t, leaseID, s.whyNotCurrent(t, leaseID, now)), nil
	}
	return write(Record{Type: TaskCompleted, TaskID: taskID, LeaseID: leaseID, Result: result},
		Decision{Outcome: ResultCommitted, TaskID: taskID, LeaseID: leaseID}), nil
}

// checkReason refuses an empty reason (saying missing) or one over the
// payload limit.
func checkReason(reason, missing string) error {
	if reason == "" {
		return refuse(InvalidInput, "reason", "%s", missing)
	}
	if err := limits.Reason.Text(reason); err != nil {
		return refuse(InvalidInput, "reason", "the %v", err)
	}
	return nil
}

// DecideFail records a failed attempt under the current lease; the task is
// retried after its backoff or, if permanent or out of attempts, FAILED.
// Repeated with the lease that already failed, it answers as it did then.
func (s *State) DecideFail(taskID, leaseID, reason string, permanent bool, now int64) (Decision, error) {
	if err := checkReason(reason, "a failure needs a reason"); err != nil {
		return Decision{}, err
	}
	t, err := s.findLease(taskID, leaseID)
	if err != nil {
		return Decision{}, err
	}
	if a := t.AttemptOf(leaseID); a.End == EndRetry || a.End == EndFailed {
		d, _ := s.FailAnswer(taskID, leaseID)
		d.Duplicate = true
		return d, nil
	}
	if !t.At(now).holds(leaseID, now) {
		return cancel(t, leaseID, s.whyNotCurrent(t, leaseID, now)), nil
	}
	outcome := ResultRetry
	if t.failureIsFinal(permanent) {
		outcome = ResultFailed
	}
	return write(Record{Type: TaskFailed, TaskID: taskID, LeaseID: leaseID, Reason: reason, Permanent: permanent},
		Decision{Outcome: outcome, TaskID: taskID, LeaseID: leaseID}), nil
}

// DecideRelease gives the current lease back: the task is WAITING again at
// now+delay and the attempt does not count toward max_attempts (beanstalkd's
// release, SQS's visibility timeout of zero). Repeated with the lease it
// released, it answers as it did then; a lease without authority any more
// gets CANCELLED and nothing is written, like an extend.
func (s *State) DecideRelease(taskID, leaseID string, delay time.Duration, now int64) (Decision, error) {
	if delay < 0 {
		return Decision{}, refuse(InvalidInput, "delay", "the delay must not be negative, got %s", delay)
	}
	t, err := s.findLease(taskID, leaseID)
	if err != nil {
		return Decision{}, err
	}
	if a := t.AttemptOf(leaseID); a.End == EndReleased {
		return Decision{Outcome: ResultReleased, TaskID: taskID, LeaseID: leaseID, State: Waiting, Attempt: a.Number - 1,
			NotBefore: a.NotBefore, Duplicate: true}, nil
	}
	c := t.At(now)
	if !c.holds(leaseID, now) {
		return Decision{Outcome: ResultCancelled, TaskID: taskID, LeaseID: leaseID, Reason: s.whyNotCurrent(t, leaseID, now)}, nil
	}
	notBefore := addTime(now, delay.Milliseconds())
	return write(Record{Type: LeaseReleased, TaskID: taskID, LeaseID: leaseID, NotBefore: &notBefore},
		Decision{Outcome: ResultReleased, TaskID: taskID, LeaseID: leaseID, State: Waiting, Attempt: c.Attempt - 1, NotBefore: notBefore}), nil
}

// FailAnswer is the answer a fail under leaseID got, as its attempt recorded
// it: RETRY with the attempt and its not_before, or FAILED. It is the answer
// after the TaskFailed is applied, and the answer to every repeat.
func (s *State) FailAnswer(taskID, leaseID string) (Decision, error) {
	t, err := s.findLease(taskID, leaseID)
	if err != nil {
		return Decision{}, err
	}
	a := t.AttemptOf(leaseID)
	d := Decision{TaskID: taskID, LeaseID: leaseID, Attempt: a.Number, Reason: a.Reason}
	switch a.End {
	case EndRetry:
		d.Outcome, d.State, d.NotBefore = ResultRetry, Waiting, a.NotBefore
	case EndFailed:
		d.Outcome, d.State = ResultFailed, Failed
	default:
		return Decision{}, refuse(NotAllowed, "lease", "lease %s of %s did not fail", leaseID, taskID)
	}
	return d, nil
}

// DecideExpire writes down what time has revoked by now, in creation order: a
// LeaseExpired for every current lease whose expiry has passed, and a TaskDead
// for every task whose window has closed, unless a lapse of its lease ended
// it first (a TaskDead follows a LeaseExpired only when the lapse left the
// task WAITING past its deadline), or that a dependency's end has ended;
// then a TaskDead for every dependent that those ends end, and theirs in
// turn (after.go).
func (s *State) DecideExpire(now int64) (Decision, error) {
	d := Decision{Outcome: ResultOK}
	lapsing := slices.Clone(s.live)
	if s.src != nil {
		lapsing = append(lapsing, s.srcLapsing(now)...)
	}
	slices.SortFunc(lapsing, ByCreation) // a task read from the index joins live out of order
	var ended []*Task
	for _, t := range lapsing {
		if t.State.Terminal() {
			continue
		}
		c := t
		if t.killedBy(now) {
			d.Records = append(d.Records, Record{Type: TaskDead, TaskID: t.ID, Reason: t.deathByDependency(), Dependency: t.DeadBy})
			d.States = append(d.States, Dead)
			ended = append(ended, t.At(now))
			continue
		}
		if t.leaseLapsedBy(now) {
			d.Records = append(d.Records, Record{Type: LeaseExpired, TaskID: t.ID, LeaseID: t.Lease.ID})
			c = t.At(t.Lease.Expiry)
			d.States = append(d.States, c.State)
		}
		if c.windowClosedBy(now) {
			d.Records = append(d.Records, Record{Type: TaskDead, TaskID: t.ID, Reason: "execution window closed"})
			d.States = append(d.States, Dead)
			c = t.At(now)
		}
		if c.State.Terminal() {
			ended = append(ended, c)
		}
	}
	return d, s.expireDependents(&d, ended)
}
