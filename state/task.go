package state

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// TaskState is one of the five states of a task (docs/guarantees.md#task-semantics).
type TaskState string

// The task states. COMPLETED, FAILED and DEAD are terminal.
const (
	Waiting   TaskState = "WAITING"
	Leased    TaskState = "LEASED"
	Completed TaskState = "COMPLETED"
	Failed    TaskState = "FAILED"
	Dead      TaskState = "DEAD"
)

// Terminal reports whether the state can never change again.
func (s TaskState) Terminal() bool { return s == Completed || s == Failed || s == Dead }

// ParseTaskState accepts a state name in any case.
func ParseTaskState(s string) (TaskState, bool) {
	st := TaskState(strings.ToUpper(s))
	switch st {
	case Waiting, Leased, Completed, Failed, Dead:
		return st, true
	}
	return "", false
}

// Lease is the task's current lease.
type Lease struct {
	ID     string
	Worker string
	Expiry int64
}

// How an attempt ended; empty while it is current.
const (
	EndCompleted = "completed"
	EndRetry     = "failed, retry"
	EndFailed    = "failed"
	EndExpired   = "expired"
	EndDead      = "dead"
	EndAborted   = "aborted"
	EndReleased  = "released" // given back: the attempt did not count
)

// Attempt is one lease's story on its task, kept so that repeated calls can
// get their original answer and so that inspect can show history.
type Attempt struct {
	Number    int
	LeaseID   string
	Worker    string
	RequestID string // the lease request id, if the worker gave one
	GrantedAt int64
	Expiry    int64
	Extended  []int64 // times of LeaseExtended records
	End       string
	EndedAt   int64
	Reason    string // the worker's reason, for a failure
	NotBefore int64  // after a retryable failure or an expiry
}

// Task is one task as the records left it.
type Task struct {
	ID        string
	Payload   Payload
	CreatedAt int64
	Window    Duration
	Policy    RetryPolicy
	RequestID string
	// AvailableAt is when the task first becomes eligible (a delayed task's
	// time; its creation otherwise): the window counts from it.
	AvailableAt  int64
	Queue        string
	Priority     int
	RequeuedFrom string

	State     TaskState
	Attempt   int
	Lease     *Lease // non-nil exactly when State is LEASED
	NotBefore int64
	EndReason string // why the task became FAILED or DEAD, for a person
	EndCause  string // why it became terminal: one of the Because… words
	Ended     int64  // the time of the record that left it terminal (0: not terminal)
	Redacted  string // why its payload was redacted ("": it was not)
	Result    string // what the completing worker reported

	Attempts []Attempt
	Seqs     []int64 // every record about this task, in order

	// Deps is what the task waits for (nil: nothing); Delay, with deps, is
	// how long after the last is met it becomes eligible (its AvailableAt
	// and NotBefore are set then). DeadBy is the dependency whose end (not
	// COMPLETED) ends the task, as it ended (DeadEnd), DeadAt when: as a
	// lapse does, from then on the task is DEAD, and expire records it.
	Deps    []Dep
	Delay   int64
	DeadBy  string
	DeadEnd TaskState
	DeadAt  int64

	// Stored is what the Source that gave the task noted of its copy there
	// (nil: none gave it): the Source's own business, which it reads when
	// the task is written back to it.
	Stored any `json:"-"`

	counted bool         // its end has been counted toward compacting State.live
	pauses  *queuePauses // its queue's pauses (nil: never paused)
	// srcUnfinished: a Source gave the task, unfinished there (counted by
	// its Unfinished, which memory's copy shadows).
	srcUnfinished bool
}

// Dep is one task a task waits for.
type Dep struct {
	ID string
	// Ended: any end meets it (after_ended); else only COMPLETED does, and
	// any other end kills the dependent.
	Ended bool
	// Met: its end was recorded (and met it, unless it killed the
	// dependent).
	Met bool
}

// Blocked reports whether the task still waits for a dependency.
func (t *Task) Blocked() bool {
	if t.DeadBy != "" {
		return false
	}
	for _, d := range t.Deps {
		if !d.Met {
			return true
		}
	}
	return false
}

// Pending reports whether the task's dependencies keep it from running: it
// waits for one, or one ended it.
func (t *Task) Pending() bool { return t.DeadBy != "" || t.Blocked() }

// Waits is the dependencies the task still waits for.
func (t *Task) Waits() []Dep {
	var out []Dep
	for _, d := range t.Deps {
		if !d.Met && t.DeadBy == "" {
			out = append(out, d)
		}
	}
	return out
}

// deathByDependency is the reason of a death by a dependency's end.
func (t *Task) deathByDependency() string {
	return "dependency " + t.DeadBy + " ended " + string(t.DeadEnd)
}

// deadEndOf is the end of its dependency a death's reason names (what
// deathByDependency wrote).
func deadEndOf(reason, dependency string) TaskState {
	end, _ := strings.CutPrefix(reason, "dependency "+dependency+" ended ")
	return TaskState(end)
}

// depIDs lists dependencies' ids: "T3, T4".
func depIDs(deps []Dep) string {
	ids := make([]string, len(deps))
	for i, d := range deps {
		ids[i] = d.ID
	}
	return strings.Join(ids, ", ")
}

// Deadline is the end of the task's execution window: the window's length
// after it opened, not counting the time its queue was paused (MaxTime
// while a pause lasts until a resume); NoDeadline for a task without a
// window.
func (t *Task) Deadline() int64 { return t.DeadlineAt(MaxTime) }

// DeadlineAt is the deadline as it stands at now, for a person: a pause
// until a resume counts as if it ended now.
func (t *Task) DeadlineAt(now int64) int64 {
	d := t.windowEnd()
	if t.pauses != nil && d != NoDeadline {
		d = t.pauses.stretch(t.AvailableAt, d, now)
	}
	return d
}

// HasDeadline says whether the task has an execution window at all.
func (t *Task) HasDeadline() bool { return t.Window != NoWindow }

// windowEnd is the end of the window as submitted, no pause counted: a
// lower bound of the deadline.
func (t *Task) windowEnd() int64 {
	if !t.HasDeadline() || t.Pending() { // a window opens once the dependencies are met
		return NoDeadline
	}
	return addTime(t.AvailableAt, t.Window.Millis())
}

// backoff is the wait after attempt n: min(backoff·2^(n-1), backoff_max).
func (p RetryPolicy) backoff(n int) int64 {
	d, limit := p.Backoff.Millis(), p.BackoffMax.Millis()
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// capExpiry is a lease's expiry for a duration d from now: never past the
// task's deadline, never past the year 9999.
func (t *Task) capExpiry(now int64, d time.Duration) int64 {
	return min(addTime(now, d.Milliseconds()), t.Deadline())
}

// holds reports whether leaseID is the task's current lease and still valid at at.
func (t *Task) holds(leaseID string, at int64) bool {
	return t.State == Leased && t.Lease.ID == leaseID && at < t.Lease.Expiry
}

// AttemptOf finds the attempt a lease was granted for.
func (t *Task) AttemptOf(leaseID string) *Attempt {
	for i := range t.Attempts {
		if t.Attempts[i].LeaseID == leaseID {
			return &t.Attempts[i]
		}
	}
	return nil
}

func (t *Task) current() *Attempt { return &t.Attempts[len(t.Attempts)-1] }

// endLease ends the current attempt and clears the lease.
func (t *Task) endLease(end string, at int64) *Attempt {
	a := t.current()
	a.End, a.EndedAt = end, at
	t.Lease = nil
	return a
}

// failureIsFinal is the TaskFailed rule's choice: a permanent failure, or one
// on the last allowed attempt, ends the task as FAILED.
func (t *Task) failureIsFinal(permanent bool) bool {
	return permanent || t.Attempt >= t.Policy.MaxAttempts
}

// scheduleRetry puts the task back to WAITING after attempt a, backing off.
func (t *Task) scheduleRetry(a *Attempt, at int64) {
	t.State = Waiting
	t.NotBefore = addTime(at, t.Policy.backoff(t.Attempt))
	a.NotBefore = t.NotBefore
}

// expireLease is the LeaseExpired rule: the current lease lapses at time at.
func (t *Task) expireLease(at int64) {
	a := t.endLease(EndExpired, at)
	switch {
	case t.Attempt >= t.Policy.MaxAttempts:
		t.State, t.EndReason, t.EndCause = Dead, "attempts exhausted: lease "+a.LeaseID+" expired", BecauseAttemptsExhausted
	case at >= t.Deadline():
		t.State, t.EndReason, t.EndCause = Dead, "execution window closed", BecauseWindowClosed
	default:
		t.scheduleRetry(a, at)
	}
}

// closeWindow is the TaskDead rule.
func (t *Task) closeWindow(at int64) {
	if t.Lease != nil {
		t.endLease(EndDead, at)
	}
	t.State, t.EndReason, t.EndCause = Dead, "execution window closed", BecauseWindowClosed
}

// leaseLapsedBy and windowClosedBy are the one place that says what time
// revokes by at: the current lease, once its expiry has come, and the
// execution window, at the deadline.
func (t *Task) leaseLapsedBy(at int64) bool  { return t.State == Leased && t.Lease.Expiry <= at }
func (t *Task) windowClosedBy(at int64) bool { return !t.State.Terminal() && at >= t.Deadline() }

// lapsesBy reports whether time alone changes the task by at.
func (t *Task) lapsesBy(at int64) bool {
	return t.leaseLapsedBy(at) || t.windowClosedBy(at) || t.killedBy(at)
}

// killedBy reports whether a dependency's end has ended the task by at.
func (t *Task) killedBy(at int64) bool {
	return t.DeadBy != "" && !t.State.Terminal() && at >= t.DeadAt
}

// lapse applies what the passage of time does without any record: a lease
// expires at its expiry, and a window closes at the deadline. These
// are the LeaseExpired and TaskDead rules, applied at the moment they happened.
func (t *Task) lapse(at int64) {
	if t.leaseLapsedBy(at) {
		t.expireLease(t.Lease.Expiry)
	}
	if t.windowClosedBy(at) {
		t.closeWindow(t.Deadline())
	}
	if t.killedBy(at) {
		t.State, t.EndReason, t.EndCause = Dead, t.deathByDependency(), BecauseDependency
	}
}

// At returns the task as it stands at time at: the task itself if time changed
// nothing, otherwise a changed copy (the receiver is never modified).
func (t *Task) At(at int64) *Task {
	if !t.lapsesBy(at) {
		return t
	}
	c := *t
	c.Attempts = slices.Clone(t.Attempts)
	if t.Lease != nil {
		l := *t.Lease
		c.Lease = &l
	}
	c.lapse(at)
	return &c
}

// leasable says whether a lease may be granted on the task as it stands at at.
func (t *Task) leasable(at int64) bool {
	return t.State == Waiting && at >= t.NotBefore && at < t.Deadline() && !t.Pending()
}

// whyNotLeasable explains a false leasable, for messages only.
func (t *Task) whyNotLeasable(at int64) string {
	switch {
	case t.State != Waiting:
		return t.ID + " is " + string(t.State)
	case t.Blocked():
		return t.ID + " waits for " + depIDs(t.Waits())
	case at < t.NotBefore:
		return t.ID + " is backing off until its not_before time"
	}
	return t.ID + "'s execution window has closed"
}

// idNumber parses ids of the form <prefix><positive integer>.
func idNumber(id string, prefix byte) (int64, bool) {
	if len(id) < 2 || id[0] != prefix || id[1] == '0' {
		return 0, false
	}
	n, err := strconv.ParseInt(id[1:], 10, 64)
	return n, err == nil && n > 0
}
