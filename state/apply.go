package state

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/leasewal/leasewal/internal/limits"
)

// Limits on what a record may carry (the table is internal/limits).
const (
	MaxPayloadBytes = limits.TextBytes
	MaxIDBytes      = limits.NameBytes
	MinPriority     = limits.MinPriority
	MaxPriority     = limits.MaxPriority
	// DefaultQueue is the queue of a task submitted without one (and of
	// every task of a revision-1 WAL).
	DefaultQueue = "default"
)

type leaseRequest struct {
	taskID, leaseID, worker string
}

// State is everything the records say, as of the last record applied.
type State struct {
	tasks         map[string]*Task
	order         []*Task // creation order
	live          []*Task // the tasks not yet terminal when last compacted, in creation order: lease's FIFO
	ended         int     // tasks in live that have become terminal since
	submits       map[string]*Task
	leaseRequests map[string]leaseRequest
	leaseTask     map[string]string // every lease ever granted -> its task
	// src holds the tasks memory does not (source.go); nil when memory
	// holds them all. srcErr is the first error it gave (Damage).
	src    Source
	srcErr error
	// skipped is, by queue, how far the head of the Source's lease order
	// is known to hold no pick (skip).
	skipped map[string]orderSkip
	// touched is the task the record being applied is about, set while
	// apply runs (subject, applyCreated) and cleared before it returns.
	touched *Task
	// unkeyed holds tasks loaded from a snapshot whose request ids are not
	// yet in submits, and unleased those whose attempts are not yet in
	// leaseTask and leaseRequests: a command that never looks a key up
	// never pays for those maps (see keys).
	unkeyed, unleased []*Task

	domains     map[string]*Domain
	domainOrder []*Domain

	// limits holds the queues' most current leases (QueueLimited).
	limits map[string]int
	// rates holds the rated queues' rules (QueueRated, rate.go).
	rates map[string]queueRate
	// dependents holds, by task id, the tasks in memory that still wait
	// for it (after.go); the Source keeps those of its tasks.
	dependents map[string][]string
	// spill writes what an end settles, spillChunk tasks at a time
	// (SpillTo).
	spill      Spill
	spillChunk int
	// newest says a record of the newest format version (4) was applied:
	// a snapshot of the state is of the newest version too.
	newest bool
	// pauses holds every queue ever paused, with its spans (pause.go).
	pauses map[string]*queuePauses
	// schedules holds the periodic tasks, by name (schedule.go).
	schedules map[string]*Schedule

	// records counts the records applied by type, bases' included (a base
	// carries the counts of the records it replaced): what metrics report.
	records map[RecordType]int64

	// redacted lists the tasks whose payload was redacted, in order: a
	// reader of records masks theirs without a look at every task.
	redacted []string

	// base is the base the WAL starts with (nil: never compacted), and
	// loading a base being replayed.
	base    *Base
	loading *baseLoad

	lastSeq      int64
	lastAt       int64
	lastLeaseNum int64
	lastTaskNum  int64
	lastTokenNum int64

	// inline is the longest payload held in memory (InlinePayloadBytes; a
	// test makes it shorter).
	inline int
}

// New returns the state of an empty WAL.
func New() *State {
	return &State{
		tasks:         map[string]*Task{},
		submits:       map[string]*Task{},
		leaseRequests: map[string]leaseRequest{},
		leaseTask:     map[string]string{},
		domains:       map[string]*Domain{},
		inline:        InlinePayloadBytes,
	}
}

// LastSeq is the seq of the last record applied (0 for none).
func (s *State) LastSeq() int64 { return s.lastSeq }

// LastAt is the time of the last record applied (0 for none).
func (s *State) LastAt() int64 { return s.lastAt }

// LastTaskNumber is the highest number of a task created (T<n>): no task
// has a higher one.
func (s *State) LastTaskNumber() int64 { return s.lastTaskNum }

// The lookups below answer from memory, then from the Source. (nil, nil)
// means there is no such thing; an error is damage the Source revealed,
// and no answer may be built on the lookup.

// Task returns the task as the records left it, or a NotFound error.
func (s *State) Task(id string) (*Task, error) {
	if err := limits.TaskID.Text(id); err != nil {
		return nil, refuse(InvalidInput, "task", "the %v", err)
	}
	t, err := s.lookupTask(id)
	if err == nil && t == nil {
		err = refuse(NotFound, "task", "unknown task %q", id)
		if s.base != nil {
			err = refuse(NotFound, "task", "unknown task %q; %s", id, s.base.Compacted())
		}
	}
	return t, err
}

func (s *State) lookupTask(id string) (*Task, error) {
	if t, ok := s.tasks[id]; ok {
		return t, nil
	}
	return s.fromSource(Number(id))
}

// submitted returns the task a TaskCreated with request id req created.
func (s *State) submitted(req string) (*Task, error) {
	s.keySubmits()
	if t, ok := s.submits[req]; ok {
		return t, nil
	}
	if s.src == nil {
		return nil, nil
	}
	num, err := s.src.Submitted(req)
	if err != nil {
		return nil, s.sourced(err)
	}
	return s.fromSource(num)
}

// leaseOwner returns the id of the task a lease was granted for ("" for none).
func (s *State) leaseOwner(leaseID string) (string, error) {
	s.keyLeases()
	if id, ok := s.leaseTask[leaseID]; ok {
		return id, nil
	}
	if s.src == nil {
		return "", nil
	}
	num, err := s.src.LeaseOwner(leaseID)
	if err != nil || num == 0 {
		return "", s.sourced(err)
	}
	return "T" + strconv.FormatInt(num, 10), nil
}

// leaseRequested returns the lease a lease request id was answered with
// (a zero leaseRequest for none).
func (s *State) leaseRequested(req string) (leaseRequest, error) {
	s.keyLeases()
	if l, ok := s.leaseRequests[req]; ok {
		return l, nil
	}
	if s.src == nil {
		return leaseRequest{}, nil
	}
	num, err := s.src.LeaseRequested(req)
	if err != nil {
		return leaseRequest{}, s.sourced(err)
	}
	t, err := s.fromSource(num)
	if err != nil || t == nil {
		return leaseRequest{}, err
	}
	for _, a := range t.Attempts {
		if a.RequestID == req {
			return leaseRequest{taskID: t.ID, leaseID: a.LeaseID, worker: a.Worker}, nil
		}
	}
	return leaseRequest{}, nil
}

// Tasks returns every task in creation order, as the records left them.
func (s *State) Tasks() ([]*Task, error) {
	if s.src == nil {
		return s.order, nil
	}
	var all []*Task
	err := s.EachTask(false, func(t *Task) bool { all = append(all, t); return true })
	return all, err
}

// Apply validates r against the state and, if it is allowed, applies it. It is
// the only place where a record changes the state: live commands and replay
// both come here, so they cannot drift. On error the state is unchanged.
func (s *State) Apply(r Record) error {
	_, err := s.apply(r)
	return err
}

// apply is Apply, returning also the task the record applied to (nil for a
// work-lease record), so that the Verifier need not look it up again.
func (s *State) apply(r Record) (*Task, error) {
	if r.Type.IsBase() || s.loading != nil {
		if err := s.applyBase(r); err != nil {
			return nil, recordError(r, err)
		}
		return nil, nil // a base's records stand for the ones it replaced: lastSeq and lastAt are theirs
	}
	err := s.checkSequence(r)
	if err == nil && r.ChainFrom != "" {
		err = invalid("only a BaseEnd may carry chain_from")
	}
	if err == nil && r.Cut {
		err = invalid("only a BaseBegin may carry cut")
	}
	if err == nil {
		err = s.applyTyped(r)
	}
	t := s.touched
	s.touched = nil
	if errors.Is(err, ErrSource) {
		return nil, err // not this record's fault: the index a lookup read is damaged
	}
	if err != nil {
		return nil, recordError(r, err)
	}
	s.lastSeq, s.lastAt = r.Seq, r.At
	if s.records == nil {
		s.records = map[RecordType]int64{}
	}
	s.records[r.Type]++
	if !s.newest && r.FormatVersion() >= 4 {
		s.newest = true
	}
	if t != nil {
		ended := t.State.Terminal() && t.Ended == 0
		if ended {
			t.Ended = r.At
		}
		s.adopt(t)
		if ended && s.newest { // only a WAL with records of version 4 has dependencies
			s.forgetDeps(t)
			if err := s.settleDependents(t, r.At); err != nil {
				return nil, err
			}
		}
	}
	s.noteEnded(t)
	return t, nil
}

// recordError is a refused record's error, naming the invariant it breaks.
func recordError(r Record, err error) error {
	re := &RecordError{Seq: r.Seq, Type: r.Type, Msg: err.Error()}
	var v *violation
	if errors.As(err, &v) {
		re.Invariant = v.invariant
	}
	return re
}

// noteEnded keeps live short: once half of it has ended, it is compacted, so
// that lease and expire cost what the unfinished tasks cost, not the history.
func (s *State) noteEnded(t *Task) {
	if t == nil || !t.State.Terminal() || t.counted {
		return
	}
	t.counted = true
	if s.ended++; s.ended*2 < len(s.live) {
		return
	}
	kept := s.live[:0]
	for _, t := range s.live {
		if !t.State.Terminal() {
			kept = append(kept, t)
		}
	}
	clear(s.live[len(kept):])
	s.live, s.ended = kept, 0
}

// Live returns the tasks that were not terminal when the records left them
// (and possibly some that since ended), in creation order.
//
// EachLive is the same tasks one at a time, in no order: what counts or
// looks for something among them holds one cold task in memory at a time,
// not the backlog.
func (s *State) Live() []*Task {
	if s.src == nil {
		return s.live
	}
	var all []*Task
	s.EachLive(func(t *Task) bool { all = append(all, t); return true })
	slices.SortFunc(all, ByCreation)
	return all
}

// EachLeased hands fn each task leased as recorded by worker (by any
// worker for ""), in no particular order (those in memory first), until fn
// returns false: the few tasks a heartbeat or the workers' listing needs,
// without reading every unfinished one. Whether its lease is current at a
// time is the caller's to ask (Task.At).
func (s *State) EachLeased(worker string, fn func(*Task) bool) {
	for _, t := range s.live {
		if t.State == Leased && (worker == "" || t.Lease.Worker == worker) && !fn(t) {
			return
		}
	}
	if s.src == nil {
		return
	}
	err := s.src.Leased(worker, func(num int64) bool {
		t, err := s.fromSource(num)
		switch {
		case err != nil:
			return false // fromSource noted it as damage
		case t == nil: // memory holds it: handed above if it still is leased so
			return true
		}
		return fn(t)
	})
	s.sourced(err)
}

// EachLive hands fn each task Live lists, in no particular order (those in
// memory first), until fn returns false.
func (s *State) EachLive(fn func(*Task) bool) {
	for _, t := range s.live {
		if !fn(t) {
			return
		}
	}
	if s.src == nil {
		return
	}
	err := s.src.Each(true, func(t *Task) bool {
		if _, shadowed := s.tasks[t.ID]; shadowed {
			return true
		}
		s.attach(t)
		return fn(t)
	})
	s.sourced(err)
}

func (s *State) checkSequence(r Record) error {
	if r.Seq != s.lastSeq+1 {
		return breaks(InvSequence, "seq %d follows seq %d; expected %d", r.Seq, s.lastSeq, s.lastSeq+1)
	}
	if r.At < s.lastAt {
		return breaks(InvSequence, "time %d ms is before the previous record's %d ms", r.At, s.lastAt)
	}
	if r.At < MinTime || r.At > MaxTime {
		return invalid("time %d ms is outside the years 0001 to 9999", r.At)
	}
	return nil
}

func (s *State) applyTyped(r Record) error {
	switch r.Type {
	case TaskCreated:
		return s.applyCreated(r)
	case LeaseGranted:
		return s.applyGranted(r)
	case LeaseExtended:
		return s.applyExtended(r)
	case LeaseExpired:
		return s.applyExpired(r)
	case TaskCompleted:
		return s.applyCompleted(r)
	case TaskCancelled:
		return s.applyCancelled(r)
	case TaskFailed:
		return s.applyFailed(r)
	case TaskDead:
		return s.applyDead(r)
	case TaskAborted:
		return s.applyAborted(r)
	case TaskRedacted:
		return s.applyRedacted(r)
	case LeaseReleased:
		return s.applyReleased(r)
	case QueueLimited:
		return s.applyLimited(r)
	case QueueRated:
		return s.applyRated(r)
	case QueuePaused:
		return s.applyPaused(r)
	case QueueResumed:
		return s.applyResumed(r)
	case ScheduleAdded:
		return s.applyScheduleAdded(r)
	case ScheduleRemoved:
		return s.applyScheduleRemoved(r)
	case WorkAcquired:
		return s.applyWorkAcquired(r)
	case WorkEnqueued:
		return s.applyWorkEnqueued(r)
	case WorkSucceeded:
		return s.applyWorkSucceeded(r)
	case WorkFailed:
		return s.applyWorkFailed(r)
	}
	return invalid("unknown record type %q", r.Type)
}

// ValidatePolicy checks a task's window and retry policy; a refusal (an
// *Error) names the field at fault as its subject.
func ValidatePolicy(window Duration, p RetryPolicy) error {
	switch {
	case window.Millis() <= 0:
		return refuse(InvalidInput, "window", "window must be at least 1ms, got %s", window.String())
	case p.MaxAttempts < 1:
		return refuse(InvalidInput, "max_attempts", "max_attempts must be at least 1, got %d", p.MaxAttempts)
	case p.Backoff < 0:
		return refuse(InvalidInput, "backoff", "backoff must not be negative, got %s", p.Backoff.String())
	case p.BackoffMax < p.Backoff:
		return refuse(InvalidInput, "backoff_max", "backoff_max (%s) must not be below backoff (%s)", p.BackoffMax.String(), p.Backoff.String())
	}
	return nil
}

// ValidatePayload checks a task payload.
func ValidatePayload(p string) error {
	switch {
	case p == "":
		return errors.New("the payload is empty")
	case len(p) > MaxPayloadBytes:
		return fmt.Errorf("the payload is %d bytes, over the limit of %d bytes (64 KiB); store large data elsewhere and submit a reference to it", len(p), MaxPayloadBytes)
	case !utf8.ValidString(p):
		return errors.New("the payload is not UTF-8 text; encode binary data (e.g. base64) before submitting it")
	}
	return nil
}

// MaxResultBytes bounds a completion's result, as MaxPayloadBytes bounds a
// payload.
const MaxResultBytes = MaxPayloadBytes

// ValidateResult checks a completion's result: UTF-8 text of at most
// MaxResultBytes (empty: none).
func ValidateResult(r string) error {
	switch {
	case len(r) > MaxResultBytes:
		return fmt.Errorf("the result is %d bytes, over the limit of %d bytes (64 KiB); store large output elsewhere and report a reference to it", len(r), MaxResultBytes)
	case !utf8.ValidString(r):
		return errors.New("the result is not UTF-8 text; encode binary output (e.g. base64) first")
	}
	return nil
}

// ValidateID checks a caller-chosen identifier (worker, request id, queue,
// …) by the table's rule for names; what names it in the error.
func ValidateID(what, id string) error {
	rule := limits.Worker
	rule.Field = what
	return rule.Text(id)
}

func (s *State) applyCreated(r Record) error {
	n, ok := idNumber(r.TaskID, 'T')
	if !ok {
		return invalid("task id %q is not of the form T<n>", r.TaskID)
	}
	if n <= s.lastTaskNum { // a number above every task's is no task's: no lookup
		if t, err := s.lookupTask(r.TaskID); err != nil || t != nil {
			return firstErr(err, invalid("task %s already exists", r.TaskID))
		}
	}
	if err := ValidatePayload(r.Payload); err != nil {
		return invalid("%v", err)
	}
	if r.RetryPolicy == nil {
		return invalid("retry_policy is missing")
	}
	if err := ValidatePolicy(r.Window, *r.RetryPolicy); err != nil {
		return invalid("%v", err)
	}
	if err := ValidateID("request_id", r.RequestID); err != nil {
		return invalid("%v", err)
	}
	if t, err := s.submitted(r.RequestID); err != nil || t != nil {
		return firstErr(err, invalid("request id %q was already used by another TaskCreated", r.RequestID))
	}
	t := &Task{
		ID: r.TaskID, Payload: referTo(r.Payload, PayloadRef{Frame: r.Frame, Skip: -1}, s.inline), CreatedAt: r.At, Window: r.Window,
		Policy: *r.RetryPolicy, RequestID: r.RequestID, State: Waiting,
		AvailableAt: r.At, Queue: DefaultQueue, RequeuedFrom: r.RequeuedFrom,
		Seqs: []int64{r.Seq},
	}
	if err := s.queueFields(r, t); err != nil {
		return err
	}
	if err := s.createdDeps(r, t); err != nil {
		return err
	}
	if r.Schedule != "" || r.Slot != nil {
		sched, err := s.firing(r)
		if err != nil {
			return err
		}
		sched.LastSlot = *r.Slot // nothing below refuses the record
	}
	s.attach(t)
	t.NotBefore = t.AvailableAt
	s.tasks[t.ID] = t
	s.order = append(s.order, t)
	s.live = append(s.live, t)
	s.touched = t
	s.submits[r.RequestID] = t
	s.lastTaskNum = max(s.lastTaskNum, n)
	s.noteDeps(t)
	return nil
}

// subject finds the record's task.
func (s *State) subject(r Record) (*Task, error) {
	t, err := s.lookupTask(r.TaskID)
	if err != nil || t == nil {
		return nil, firstErr(err, invalid("unknown task %q", r.TaskID))
	}
	s.touched = t
	return t, nil
}

// leaseSubject finds the record's task and checks that the record's lease
// was granted for it.
func (s *State) leaseSubject(r Record) (*Task, error) {
	t, err := s.subject(r)
	if err != nil {
		return nil, err
	}
	owner, err := s.leaseOwner(r.LeaseID)
	if err != nil || owner == "" {
		return nil, firstErr(err, breaks(InvOneLease, "lease %q was never granted", r.LeaseID))
	}
	if owner != r.TaskID {
		return nil, breaks(InvOneLease, "lease %s belongs to %s, not %s", r.LeaseID, owner, r.TaskID)
	}
	return t, nil
}

// requireAuthority is the precondition of a worker's verdict (TaskCompleted,
// TaskFailed): the record's lease is the task's current, unexpired lease.
func requireAuthority(t *Task, r Record) error {
	if t.State.Terminal() {
		return breaks(InvTerminal, "%s is already %s", t.ID, t.State)
	}
	if !t.holds(r.LeaseID, r.At) {
		return invalid("lease %s is not the current valid lease of %s; a verdict under it must be TaskCancelled", r.LeaseID, t.ID)
	}
	return nil
}

// commit makes the settled view of a task the task itself, then records seq.
func commit(t, settled *Task, seq int64) {
	if settled != t {
		*t = *settled
	}
	t.Seqs = append(t.Seqs, seq)
}

func (s *State) applyGranted(r Record) error {
	t, err := s.subject(r)
	if err != nil {
		return err
	}
	n, ok := idNumber(r.LeaseID, 'L')
	if !ok {
		return invalid("lease id %q is not of the form L<n>", r.LeaseID)
	}
	if n <= s.lastLeaseNum {
		return breaks(InvSequence, "lease id %s does not increase on the last lease L%d", r.LeaseID, s.lastLeaseNum)
	}
	if err := ValidateID("worker_id", r.WorkerID); err != nil {
		return invalid("%v", err)
	}
	if r.RequestID != "" {
		if prev, err := s.leaseRequested(r.RequestID); err != nil || prev.taskID != "" {
			return firstErr(err, invalid("lease request id %q was already used", r.RequestID))
		}
	}
	c := t.At(r.At)
	if c.State == Leased {
		return breaks(InvOneLease, "%s still holds lease %s until %d", t.ID, c.Lease.ID, c.Lease.Expiry)
	}
	if c.State.Terminal() {
		return breaks(InvTerminal, "%s is %s", t.ID, c.State)
	}
	if !c.leasable(r.At) {
		return invalid("%s", c.whyNotLeasable(r.At))
	}
	if r.Attempt != c.Attempt+1 || r.Attempt > c.Policy.MaxAttempts {
		return breaks(InvAttempts, "attempt %d after %d with max_attempts %d", r.Attempt, c.Attempt, c.Policy.MaxAttempts)
	}
	if r.Expiry <= r.At || r.Expiry > c.Deadline() {
		return invalid("expiry %d must be after the grant (%d) and no later than the deadline (%d)", r.Expiry, r.At, c.Deadline())
	}
	commit(t, c, r.Seq)
	t.State, t.Attempt = Leased, r.Attempt
	t.Lease = &Lease{ID: r.LeaseID, Worker: r.WorkerID, Expiry: r.Expiry}
	t.Attempts = append(t.Attempts, Attempt{Number: r.Attempt, LeaseID: r.LeaseID, Worker: r.WorkerID, RequestID: r.RequestID, GrantedAt: r.At, Expiry: r.Expiry})
	s.leaseTask[r.LeaseID] = t.ID
	if q, rated := s.rates[t.Queue]; rated {
		q.granted(r.At)
		s.rates[t.Queue] = q
	}
	s.lastLeaseNum = n
	if r.RequestID != "" {
		s.leaseRequests[r.RequestID] = leaseRequest{taskID: t.ID, leaseID: r.LeaseID, worker: r.WorkerID}
	}
	return nil
}

func (s *State) applyExtended(r Record) error {
	t, err := s.leaseSubject(r)
	if err != nil {
		return err
	}
	if !t.holds(r.LeaseID, r.At) {
		return invalid("lease %s is not the current valid lease of %s", r.LeaseID, t.ID)
	}
	if r.Expiry <= r.At || r.Expiry > t.Deadline() {
		return invalid("new expiry %d must be after now (%d) and no later than the deadline (%d)", r.Expiry, r.At, t.Deadline())
	}
	commit(t, t, r.Seq)
	t.Lease.Expiry = r.Expiry
	a := t.current()
	a.Expiry = r.Expiry
	a.Extended = append(a.Extended, r.At)
	return nil
}

func (s *State) applyExpired(r Record) error {
	t, err := s.leaseSubject(r)
	if err != nil {
		return err
	}
	if t.State != Leased || t.Lease.ID != r.LeaseID {
		return invalid("lease %s is not the current lease of %s", r.LeaseID, t.ID)
	}
	if t.Lease.Expiry > r.At {
		return invalid("lease %s expires at %d, after this record's time %d", r.LeaseID, t.Lease.Expiry, r.At)
	}
	commit(t, t, r.Seq)
	// The record writes down a lapse that happened at the lease's expiry: its
	// effect is exactly the implicit lapse's, whenever it was written.
	t.expireLease(t.Lease.Expiry)
	return nil
}

func (s *State) applyCompleted(r Record) error {
	t, err := s.leaseSubject(r)
	if err != nil {
		return err
	}
	if err := requireAuthority(t, r); err != nil {
		return err
	}
	if r.Result != "" {
		if err := ValidateResult(r.Result); err != nil {
			return invalid("%v", err)
		}
	}
	commit(t, t, r.Seq)
	t.endLease(EndCompleted, r.At)
	t.State, t.EndCause, t.Result = Completed, BecauseCompleted, r.Result
	return nil
}

func (s *State) applyCancelled(r Record) error {
	t, err := s.leaseSubject(r)
	if err != nil {
		return err
	}
	if t.holds(r.LeaseID, r.At) {
		return invalid("lease %s is the current valid lease of %s, so nothing was cancelled", r.LeaseID, t.ID)
	}
	commit(t, t, r.Seq)
	return nil
}

func (s *State) applyFailed(r Record) error {
	t, err := s.leaseSubject(r)
	if err != nil {
		return err
	}
	if err := requireAuthority(t, r); err != nil {
		return err
	}
	if r.Reason == "" {
		return invalid("a failure needs a reason")
	}
	commit(t, t, r.Seq)
	final := t.failureIsFinal(r.Permanent)
	a := t.endLease(EndFailed, r.At)
	a.Reason = r.Reason
	switch {
	case r.Permanent:
		t.State, t.EndReason, t.EndCause = Failed, "permanent failure: "+r.Reason, BecauseFailed
	case final:
		t.State, t.EndReason, t.EndCause = Failed, "attempts exhausted: "+r.Reason, BecauseFailed
	default:
		a.End = EndRetry
		t.scheduleRetry(a, r.At)
	}
	return nil
}

// applyReleased is the LeaseReleased rule: the current lease ends without
// counting as an attempt, and the task waits until not_before.
func (s *State) applyReleased(r Record) error {
	t, err := s.leaseSubject(r)
	if err != nil {
		return err
	}
	if !t.holds(r.LeaseID, r.At) {
		return invalid("lease %s is not the current valid lease of %s", r.LeaseID, t.ID)
	}
	if r.NotBefore == nil || *r.NotBefore < r.At {
		return invalid("a LeaseReleased needs a not_before no earlier than its time")
	}
	commit(t, t, r.Seq)
	a := t.endLease(EndReleased, r.At)
	a.NotBefore = *r.NotBefore
	t.State, t.NotBefore = Waiting, *r.NotBefore
	t.Attempt--
	return nil
}

func (s *State) applyDead(r Record) error {
	t, err := s.subject(r)
	if err != nil {
		return err
	}
	if r.Dependency != "" {
		return s.applyDeadByDependency(r, t)
	}
	if r.At < t.Deadline() {
		return invalid("%s's window closes at %d, after this record's time %d", t.ID, t.Deadline(), r.At)
	}
	// The task as it stood just before its window closed: a lease that ran
	// out earlier has expired by then, and may have ended the task already.
	// A lease still current then expires exactly at the deadline, and that
	// lapse (a LeaseExpired) is what ends the task, not the window.
	c := t.At(t.Deadline() - 1)
	if c.State.Terminal() {
		return breaks(InvTerminal, "%s is already %s", t.ID, c.State)
	}
	if c.State == Leased {
		return invalid("%s's lease %s expires at its deadline: that lapse ends it, as LeaseExpired", t.ID, c.Lease.ID)
	}
	commit(t, c, r.Seq)
	t.closeWindow(t.Deadline())
	return nil
}

// ValidateQueue checks a queue name.
func ValidateQueue(name string) error { return ValidateID("queue name", name) }

// ValidatePriority checks a priority.
func ValidatePriority(p int) error {
	if p < MinPriority || p > MaxPriority {
		return fmt.Errorf("priority %d is outside %d to %d", p, MinPriority, MaxPriority)
	}
	return nil
}

// queueFields reads a TaskCreated's revision-2 fields into t: all three or
// none (a revision-1 record: available at once, the default queue, priority 0).
func (s *State) queueFields(r Record, t *Task) error {
	given := 0
	for _, set := range []bool{r.NotBefore != nil, r.Queue != "", r.Priority != nil} {
		if set {
			given++
		}
	}
	switch given {
	case 0:
		if r.RequeuedFrom != "" {
			return invalid("requeued_from needs not_before, queue and priority")
		}
		return nil
	case 3:
	default:
		return invalid("not_before, queue and priority go together")
	}
	if *r.NotBefore < r.At || *r.NotBefore > MaxTime {
		return invalid("not_before %d is before the record's time %d or past the year 9999", *r.NotBefore, r.At)
	}
	if err := ValidateQueue(r.Queue); err != nil {
		return invalid("%v", err)
	}
	if err := ValidatePriority(*r.Priority); err != nil {
		return invalid("%v", err)
	}
	if r.RequeuedFrom != "" {
		from, err := s.lookupTask(r.RequeuedFrom)
		if err != nil || from == nil {
			return firstErr(err, invalid("requeued_from names an unknown task %q", r.RequeuedFrom))
		}
		if c := from.At(r.At); c.State != Failed && c.State != Dead {
			return breaks(InvTerminal, "requeued_from %s is %s, not FAILED or DEAD", from.ID, c.State)
		}
	}
	t.AvailableAt, t.Queue, t.Priority = *r.NotBefore, r.Queue, *r.Priority
	return nil
}

// applyLimited is the QueueLimited rule: at most Limit tasks of the queue
// are LEASED at once (no limit when it is absent).
func (s *State) applyLimited(r Record) error {
	if err := ValidateQueue(r.Queue); err != nil {
		return invalid("%v", err)
	}
	if r.TaskID != "" {
		return invalid("a QueueLimited names a queue, not a task")
	}
	if r.Limit == nil {
		delete(s.limits, r.Queue)
		if len(s.limits) == 0 {
			s.limits = nil // as a snapshot loads it
		}
		return nil
	}
	if s.limits == nil {
		s.limits = map[string]int{}
	}
	s.limits[r.Queue] = *r.Limit
	return nil
}

// Limits is every queue's limit of current leases.
func (s *State) Limits() map[string]int { return maps.Clone(s.limits) }

// applyRedacted is the TaskRedacted rule: the task's payload is no longer
// served, and no base holds it; nothing else of the task changes.
func (s *State) applyRedacted(r Record) error {
	t, err := s.subject(r)
	if err != nil {
		return err
	}
	if r.Reason == "" {
		return invalid("a redaction needs a reason")
	}
	if t.Redacted != "" {
		return invalid("%s is already redacted", t.ID)
	}
	commit(t, t.At(r.At), r.Seq)
	t.Payload, t.Redacted = Payload{}, r.Reason
	s.redacted = append(s.redacted, t.ID)
	return nil
}

// RecordCounts is how many records of each type the WAL's history holds
// (compacted ones included).
func (s *State) RecordCounts() map[RecordType]int64 { return maps.Clone(s.records) }

// Redacted lists the tasks whose payloads were redacted.
func (s *State) Redacted() []string { return s.redacted }

// ForgetPayloads blanks the payloads of the tasks named (with why), in a
// state replayed up to a record of the past: the tasks redacted since show
// no payload there either. It is for a reader's own replay, never for a
// state that goes on to decide.
func (s *State) ForgetPayloads(reasons map[string]string) {
	for id, reason := range reasons {
		if t, _ := s.lookupTask(id); t != nil {
			t.Payload, t.Redacted = Payload{}, reason
		}
	}
}

func (s *State) applyAborted(r Record) error {
	t, err := s.subject(r)
	if err != nil {
		return err
	}
	if r.Reason == "" {
		return invalid("an abort needs a reason")
	}
	c := t.At(r.At)
	if c.State.Terminal() {
		return breaks(InvTerminal, "%s is already %s", t.ID, c.State)
	}
	commit(t, c, r.Seq)
	if t.Lease != nil {
		t.endLease(EndAborted, r.At)
	}
	t.State, t.EndReason, t.EndCause = Dead, "aborted: "+r.Reason, BecauseAborted
	return nil
}

// TaskOf is the task its own records leave behind (every record about one
// task, in order), replayed as if the task were alone in a WAL: what a
// reader that has only a task's records (inspect's timeline, drawn by a
// client) needs of its history. The records' seqs are renumbered for the
// replay; the task's Seqs are the records' own.
//
// What the task's records name beyond it is not among them: a requeued
// task's first run (its requeued_from is kept, not checked), a firing's
// schedule, a payload redacted since (a reader of records is served it
// empty: the task is replayed with a stand-in, and holds none), and what it
// waited for: their ends are other tasks' records, so it is replayed as if
// it waited for nothing (a death by a dependency is taken as its record
// says it), and its Deps name them, each met once the task ran or ended.
func TaskOf(recs []Record) (*Task, error) {
	if len(recs) == 0 {
		return nil, invalid("no records to replay a task from")
	}
	s := New()
	requeuedFrom, masked := "", false
	var deps []Dep
	for i, r := range recs {
		r.Seq, r.Frame = int64(i+1), 0 // its records are at hand: the task holds their payloads
		r.Schedule, r.Slot = "", nil   // a firing alone: its schedule is not among the records
		if r.Type == TaskCreated {
			requeuedFrom, r.RequeuedFrom = r.RequeuedFrom, ""
			if r.Payload == "" {
				masked, r.Payload = true, "(redacted)"
			}
			for i, id := range slices.Concat(r.After, r.AfterEnded) {
				deps = append(deps, Dep{ID: id, Ended: i >= len(r.After)})
			}
			r.After, r.AfterEnded = nil, nil
		}
		if t := s.tasks[r.TaskID]; r.Type == TaskDead && r.Dependency != "" && t != nil {
			t.DeadBy, t.DeadEnd, t.DeadAt = r.Dependency, deadEndOf(r.Reason, r.Dependency), r.At
		}
		if err := s.Apply(r); err != nil {
			return nil, err
		}
	}
	t, err := s.Task(recs[0].TaskID)
	if err != nil {
		return nil, err
	}
	for i := range deps {
		deps[i].Met = len(t.Attempts) > 0 || t.State.Terminal()
	}
	t.Deps = deps
	for i, seq := range t.Seqs { // back from the replay's numbering to the records' own
		t.Seqs[i] = recs[seq-1].Seq
	}
	t.RequeuedFrom = requeuedFrom
	if masked {
		t.Payload = Payload{}
	}
	return t, nil
}
