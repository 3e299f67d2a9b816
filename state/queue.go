package state

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/leasewal/leasewal/internal/limits"
)

// The queue features of revision 2: priorities and named queues, delayed
// tasks, an operator's abort and requeue, and why a task is where it is.

func inQueues(t *Task, queues []string) bool {
	return len(queues) == 0 || slices.Contains(queues, t.Queue)
}

func liveCount(settled *Task) int {
	if settled.State.Terminal() {
		return 0
	}
	return 1
}

// ahead reports whether a goes before b in a lease of their queue: a higher
// priority first, then the older.
func ahead(a, b *Task) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Seqs[0] < b.Seqs[0]
}

// best is the task lease takes among queues at now (nil for none), skipping
// the queues that hold as many leases as their limit, the paused ones and
// those at their rate (skip); when there is none, also when the next one
// becomes eligible by time (0 for never: a task held back by a limit waits
// for a completion, one paused until a resume for the resume, not for a
// time; one held by its queue's rate until the rate allows a grant, in
// rated), how many are live, and which rated queues held an eligible task
// back.
func (s *State) best(queues []string, skip map[string]bool, paused map[string]PauseSpan, rated map[string]int64, now int64) (pick *Task, next int64, live int, heldBack []string) {
	full := skip
	for _, t := range s.live {
		if t.State.Terminal() || !inQueues(t, queues) || full[t.Queue] {
			continue
		}
		if t.At(now).leasable(now) && (pick == nil || ahead(t, pick)) {
			pick = t
		}
	}
	if s.src != nil {
		if c := s.srcPick(queues, full, now); c != nil && (pick == nil || ahead(c, pick)) {
			pick = c
		}
	}
	if pick != nil {
		return pick, 0, 0, nil
	}
	note := func(t *Task) bool { // what a lease that finds nothing says of t
		if t.State.Terminal() || !inQueues(t, queues) {
			return true
		}
		c := t.At(now)
		live += liveCount(c)
		at := c.nextEligibleAt(now)
		if sp, ok := paused[t.Queue]; ok {
			at = afterPause(c, sp, now)
		} else if until, ok := rated[t.Queue]; ok && c.leasable(now) {
			at = until
			if !slices.Contains(heldBack, t.Queue) {
				heldBack = append(heldBack, t.Queue)
			}
		} else if ok {
			at = rateBound(at, until)
		} else if full[t.Queue] {
			at = 0
		}
		if at != 0 && (next == 0 || at < next) {
			next = at
		}
		return true
	}
	if s.src == nil {
		s.EachLive(note)
		slices.Sort(heldBack)
		return nil, next, live, heldBack
	}
	for _, t := range s.live { // memory's tasks here, the Source's without reading each
		note(t)
	}
	asked := slices.Compact(slices.Sorted(slices.Values(queues)))
	if !anyOf(queues, full) {
		next, srcLive, _ := s.srcEmpty(asked, next, now) // an error is the state's Damage
		return nil, next, live + srcLive, nil
	}
	if len(asked) == 0 {
		var err error
		if asked, err = s.src.Queues(); s.sourced(err) != nil {
			return nil, 0, 0, nil
		}
	}
	var plain []string // the queues asked for that are not skipped
	for _, q := range asked {
		if !full[q] {
			plain = append(plain, q)
			continue
		}
		at, n, held := s.srcSkipped(q, paused, rated, now)
		live += n
		if at != 0 && (next == 0 || at < next) {
			next = at
		}
		if held && !slices.Contains(heldBack, q) {
			heldBack = append(heldBack, q)
		}
	}
	if len(plain) > 0 {
		var n int
		next, n, _ = s.srcEmpty(plain, next, now)
		live += n
	}
	slices.Sort(heldBack)
	return nil, next, live, heldBack
}

// srcSkipped is the Source's part of what a lease that finds nothing says
// at now of queue q, which it skipped (paused, full, or at its rate), as
// note says it of each task, without reading each: how many of its tasks
// are unfinished; when the first may be leased (0: not by time alone), the
// earliest one may by time (now, when one may now) moved past its pause's
// end or its rate's next grant, never for a queue full or paused until a
// resume; and whether its rate held back a task that may be leased now.
func (s *State) srcSkipped(q string, paused map[string]PauseSpan, rated map[string]int64, now int64) (at int64, live int, held bool) {
	earliest, live, err := s.srcEmpty([]string{q}, 0, now)
	sp, isPaused := paused[q]
	until, isRated := rated[q]
	if err != nil || isPaused && sp.Open() || !isPaused && !isRated {
		return 0, live, false
	}
	leasable := s.srcPick([]string{q}, nil, now) != nil
	if leasable {
		earliest = now
	}
	switch {
	case earliest == 0:
		return 0, live, false
	case isPaused:
		return max(earliest, sp.To), live, false
	}
	return max(earliest, until), live, leasable
}

// anyOf reports whether set holds a queue of queues (any, for none).
func anyOf(queues []string, set map[string]bool) bool {
	if len(queues) == 0 {
		return len(set) > 0
	}
	return slices.ContainsFunc(queues, func(q string) bool { return set[q] })
}

// nextEligibleAt is when the task, as it stands at now, next becomes
// eligible by time alone: the end of a delay or a backoff, or after its
// lease lapses; 0 when it is eligible now or never will be by itself (as
// one waiting for a dependency).
func (t *Task) nextEligibleAt(now int64) int64 {
	c := t
	if t.State == Leased {
		c = t.At(t.Lease.Expiry)
	}
	if c.State != Waiting || c.Pending() || c.NotBefore <= now || c.NotBefore >= c.Deadline() {
		return 0
	}
	return c.NotBefore
}

// noteEvents notes when time alone next changes t as it stands at now.
func (t *Task) noteEvents(now int64, note func(int64)) {
	if t.State.Terminal() {
		return
	}
	c := t.At(now)
	switch {
	case c.State == Leased:
		note(c.Lease.Expiry)
	case c.Pending(): // its dependencies' ends are records, not times
	case c.State == Waiting:
		note(c.NotBefore)
		note(c.Deadline())
	}
}

// NextEventAt is the earliest time after now at which time alone changes
// what a lease could take: a delay or backoff ending, a lease lapsing, a
// window closing (0 for none). A waiting worker sleeps until then.
func (s *State) NextEventAt(now int64) int64 {
	next := int64(0)
	note := func(at int64) {
		if at > now && at <= MaxTime && (next == 0 || at < next) { // NoDeadline is no event
			next = at
		}
	}
	for _, t := range s.live { // memory's; the Source's by its times (srcNextAt)
		t.noteEvents(now, note)
	}
	if s.src != nil {
		s.srcNextAt(now, &next, note)
	}
	for _, sp := range s.pausedQueues(now) {
		note(sp.To) // a pause --for ends by itself
	}
	for _, at := range s.heldQueues(now) {
		note(at) // a rate allows a grant again
	}
	return next
}

// Frees says whether r, once applied, may have made a task eligible for a
// lease that was not, or brought forward the time at which one becomes so:
// a waiting lease that found nothing must look again after it. queue names
// the only queue where it may ("": any). A grant and a work-lease record
// never do; a submit, and a queue's pause, limit or rate, may in their
// queue; a record of a task's lease or end may in the task's queue, and
// anywhere once tasks may wait for tasks (an end releases its dependents,
// whatever their queue); anything else (a schedule, a base) anywhere.
func (s *State) Frees(r Record) (queue string, frees bool) {
	switch r.Type {
	case LeaseGranted, WorkAcquired, WorkEnqueued, WorkSucceeded, WorkFailed:
		return "", false
	case TaskCreated, QueuePaused, QueueResumed, QueueLimited, QueueRated:
		return cmp.Or(r.Queue, DefaultQueue), true
	}
	if r.TaskID == "" || s.newest {
		return "", true
	}
	t, err := s.lookupTask(r.TaskID)
	if err != nil || t == nil {
		return "", true
	}
	return t.Queue, true
}

// DecideAbort ends a WAITING or LEASED task at an operator's word: DEAD with
// the reason, its lease (if any) no longer the authority. A repeat with the
// same reason answers again and writes nothing.
func (s *State) DecideAbort(taskID, reason string, now int64) (Decision, error) {
	if err := checkReason(reason, "an abort needs a reason"); err != nil {
		return Decision{}, err
	}
	t, err := s.Task(taskID)
	if err != nil {
		return Decision{}, err
	}
	c := t.At(now)
	d := Decision{Outcome: ResultOK, TaskID: t.ID, State: Dead, Reason: reason}
	if a := c.abortedLease(); a != nil {
		d.LeaseID = a.LeaseID
	}
	if c.State.Terminal() {
		if c.EndCause == BecauseAborted && c.EndReason == "aborted: "+reason {
			d.Duplicate = true
			return d, nil
		}
		ended := string(c.State)
		if c.EndReason != "" {
			ended += " (" + c.EndReason + ")"
		}
		return Decision{}, refuse(NotAllowed, "task", "%s is already %s; only a WAITING or LEASED task can be aborted", t.ID, ended)
	}
	if c.Lease != nil {
		d.LeaseID = c.Lease.ID
	}
	return write(Record{Type: TaskAborted, TaskID: t.ID, Reason: reason}, d), nil
}

// DecideRedact decides redact: the task's payload is no longer served (by
// any answer, listing or log), and the next compaction drops it from the
// WAL. A task redacted already answers Duplicate, whatever the reason.
func (s *State) DecideRedact(taskID, reason string, now int64) (Decision, error) {
	if err := checkReason(reason, "a redaction needs a reason: say why the payload must go"); err != nil {
		return Decision{}, err
	}
	t, err := s.Task(taskID)
	if err != nil {
		return Decision{}, err
	}
	d := Decision{Outcome: ResultOK, TaskID: t.ID, State: t.At(now).State, Reason: reason}
	if t.Redacted != "" {
		d.Duplicate, d.Reason = true, t.Redacted
		return d, nil
	}
	return write(Record{Type: TaskRedacted, TaskID: t.ID, Reason: reason}, d), nil
}

// abortedLease is the attempt an abort ended, if any.
func (t *Task) abortedLease() *Attempt {
	if len(t.Attempts) > 0 && t.current().End == EndAborted {
		return t.current()
	}
	return nil
}

// DecideRequeue creates a new task from a FAILED or DEAD one: its payload,
// window, retry policy, queue and priority, eligible at once, requeued_from
// it. The old task stays terminal. A request id names the new task: a repeat
// answers with it; one that named another task is a conflict.
func (s *State) DecideRequeue(taskID, requestID string, now int64) (Decision, error) {
	t, err := s.Task(taskID)
	if err != nil {
		return Decision{}, err
	}
	if requestID != "" {
		if err := ValidateID("request id", requestID); err != nil {
			return Decision{}, refuse(InvalidInput, "request_id", "%v", err)
		}
		prev, err := s.submitted(requestID)
		if err != nil {
			return Decision{}, err
		}
		if prev != nil {
			if prev.RequeuedFrom != t.ID {
				return Decision{}, refuse(RequestConflict, "request_id", "request id %q already created %s, which is not a requeue of %s", requestID, prev.ID, t.ID)
			}
			return Decision{Outcome: ResultAck, TaskID: prev.ID, Duplicate: true}, nil
		}
	}
	if c := t.At(now); c.State != Failed && c.State != Dead {
		return Decision{}, refuse(NotAllowed, "task", "%s is %s; only a FAILED or DEAD task can be requeued", t.ID, c.State)
	}
	if t.Redacted != "" {
		return Decision{}, refuse(NotAllowed, "task", "%s's payload was redacted (%q), so there is nothing to run again; submit the task anew with its payload", t.ID, t.Redacted)
	}
	id := "T" + strconv.FormatInt(s.lastTaskNum+1, 10)
	if requestID == "" {
		from := s.lastTaskNum + 1
		if requestID, err = s.freeRequestID(&from, nil); err != nil {
			return Decision{}, err
		}
	}
	return write(requeueRecord(t, id, requestID, now), Decision{Outcome: ResultAck, TaskID: id}), nil
}

// freeRequestID is the first R<n> from *from on that no TaskCreated took
// and taken (nil: none) does not hold; *from moves past it.
func (s *State) freeRequestID(from *int64, taken func(string) bool) (string, error) {
	for ; ; *from++ {
		candidate := "R" + strconv.FormatInt(*from, 10)
		prev, err := s.submitted(candidate)
		if err != nil {
			return "", err
		}
		if prev == nil && (taken == nil || !taken(candidate)) {
			*from++
			return candidate, nil
		}
	}
}

// requeueRecord is the TaskCreated that runs t again as task id under request
// id req, eligible from notBefore: its payload, window, retry policy, queue
// and priority, requeued_from it.
func requeueRecord(t *Task, id, req string, notBefore int64) Record {
	policy, priority := t.Policy, t.Priority
	return Record{Type: TaskCreated, TaskID: id, Payload: t.Payload.text, PayloadAt: t.Payload.ref, Window: t.Window, RetryPolicy: &policy,
		RequestID: req, NotBefore: &notBefore, Queue: t.Queue, Priority: &priority, RequeuedFrom: t.ID}
}

// RequeueSelection is the tasks a bulk requeue runs again: those in one
// of States (FAILED, DEAD), of Queue ("": any), at most Limit of them (the
// first created).
type RequeueSelection struct {
	States []TaskState
	Queue  string
	Limit  int
}

// DecideRequeueAll requeues, in one write and in creation order, every
// task sel names that no task was requeued from yet, as DecideRequeue does
// one (a new task eligible at once, its own R<n>); a redacted task is
// skipped, having nothing to run. A task requeued before is skipped, so
// that a bulk requeue run twice (its answer lost) runs each task again
// once.
func (s *State) DecideRequeueAll(sel RequeueSelection, now int64) (Decision, error) {
	if len(sel.States) == 0 || slices.ContainsFunc(sel.States, func(st TaskState) bool { return st != Failed && st != Dead }) {
		return Decision{}, invalid("a requeue runs FAILED or DEAD tasks again, not %v", sel.States)
	}
	if sel.Limit < 1 {
		return Decision{}, invalid("a requeue of %d tasks: give 1 or more", sel.Limit)
	}
	requeued := map[string]bool{} // tasks some task was requeued from
	if err := s.EachTask(false, func(t *Task) bool {
		if t.RequeuedFrom != "" {
			requeued[t.RequeuedFrom] = true
		}
		return true
	}); err != nil {
		return Decision{}, err
	}
	d := Decision{Outcome: ResultOK}
	next, autoReq := s.lastTaskNum+1, s.lastTaskNum+1
	var failed error
	err := s.EachTask(false, func(t *Task) bool {
		c := t.At(now)
		if !slices.Contains(sel.States, c.State) || (sel.Queue != "" && t.Queue != sel.Queue) || requeued[t.ID] || t.Redacted != "" {
			return true
		}
		if len(d.Records) == sel.Limit {
			d.More++
			return true
		}
		req, err := s.freeRequestID(&autoReq, nil)
		if err != nil {
			failed = err
			return false
		}
		d.Records = append(d.Records, requeueRecord(t, "T"+strconv.FormatInt(next, 10), req, now))
		next++
		return true
	})
	return d, cmp.Or(failed, err)
}

// Why a task is where it is (the "because" of why).
const (
	BecauseEligible          = "eligible"
	BecauseDelayed           = "delayed"
	BecauseBackoff           = "backoff"
	BecauseReleased          = "released"
	BecauseLeased            = "leased"
	BecauseCompleted         = "completed"
	BecauseFailed            = "failed"
	BecauseWindowClosed      = "window_closed"
	BecauseAttemptsExhausted = "attempts_exhausted"
	BecauseAborted           = "aborted"
	BecauseQueueFull         = "queue_full"
	BecausePaused            = "queue_paused"
	BecauseRated             = "queue_rated"
	BecauseBlocked           = "waiting_for_dependencies"
	BecauseDependency        = "dependency_failed"
)

// Why is the facts of why a task is where it is at now: a person reads a
// sentence built from them.
type Why struct {
	Task       *Task // as it stands at now
	Eligible   bool
	EligibleAt int64 // when it next becomes eligible (0: not by time alone)
	Ahead      int   // eligible tasks a lease of its queue takes before it
	Because    string
	Extensions int // of the current lease
	LastEnd    *Attempt
	Limit      string     // with BecauseQueueFull: "3 of 3 leases of queue api are held"
	Pause      *PauseSpan // with BecausePaused: the pause its queue is in
	Rate       string     // with BecauseRated: its queue's rate, "10/s (burst 10)"
	Waits      []WaitFor  // with BecauseBlocked: what it waits for, as each stands
	// Dependents is the unfinished tasks that wait for it.
	Dependents []string
}

// Explain says why taskID is where it is at now.
func (s *State) Explain(taskID string, now int64) (Why, error) {
	t, err := s.Task(taskID)
	if err != nil {
		return Why{}, err
	}
	c := t.At(now)
	w := Why{Task: c}
	if len(c.Attempts) > 0 {
		w.LastEnd = c.current()
	}
	w.Ahead = s.aheadOf(t, now)
	limit := s.fullMessage(s.fullQueues(now), c.Queue)
	pause, paused := s.PausedAt(c.Queue, now)
	held := s.heldQueues(now)
	deps, err := s.dependentsOf(t.ID)
	if err != nil {
		return Why{}, err
	}
	for _, d := range deps {
		w.Dependents = append(w.Dependents, d.ID)
	}
	switch {
	case c.State == Waiting && c.Blocked():
		w.Because = BecauseBlocked
		if w.Waits, err = s.waitsAt(c, now); err != nil {
			return Why{}, err
		}
	case c.State == Leased:
		w.Because, w.Extensions = BecauseLeased, len(c.current().Extended)
	case c.State == Waiting && paused && now < c.Deadline():
		w.Because, w.Pause, w.EligibleAt = BecausePaused, &pause, afterPause(c, pause, now)
	case c.leasable(now) && limit != "":
		w.Because, w.Limit = BecauseQueueFull, limit
	case c.leasable(now) && held[c.Queue] != 0:
		w.Because, w.EligibleAt, w.Rate = BecauseRated, held[c.Queue], s.rates[c.Queue].text()
	case c.leasable(now):
		w.Eligible, w.Because = true, BecauseEligible
	case c.State == Waiting && now < c.AvailableAt:
		w.Because, w.EligibleAt = BecauseDelayed, c.AvailableAt
	case c.State == Waiting && now < c.NotBefore && w.LastEnd.End == EndReleased:
		w.Because, w.EligibleAt = BecauseReleased, c.nextEligibleAt(now)
	case c.State == Waiting && now < c.NotBefore:
		w.Because, w.EligibleAt = BecauseBackoff, c.nextEligibleAt(now)
	case c.State.Terminal():
		w.Because = c.EndCause
	default: // WAITING, past its deadline: about to be DEAD by the window
		w.Because = BecauseWindowClosed
	}
	return w, nil
}

// aheadOf is how many tasks of t's queue a lease at now would take before
// t: those ahead of it in lease order that may be leased. Of the Source's,
// it reads only those time has changed by now (Lapsing); every other one
// stands at now as recorded, and its entry in the lease order says whether
// it may be leased (waiting, its not_before passed). It walks the order
// up to t's place, not every unfinished task.
func (s *State) aheadOf(t *Task, now int64) int {
	n := 0
	count := func(o *Task) bool {
		if o.ID != t.ID && !o.State.Terminal() && o.Queue == t.Queue && ahead(o, t) && o.At(now).leasable(now) {
			n++
		}
		return true
	}
	if s.src == nil {
		s.EachLive(count)
		return n
	}
	for _, o := range s.live {
		count(o)
	}
	changed, ok := s.srcChanged(now, func(o *Task) { count(o) })
	if !ok {
		return 0
	}
	num := Number(t.ID)
	s.sourced(s.src.Queued(t.Queue, OrderEntry{}, func(e OrderEntry) bool {
		if e.Priority < t.Priority || e.Priority == t.Priority && e.Num >= num {
			return false // t's place: every entry from here on is behind it
		}
		if !s.isHot(e.Num) && !changed[e.Num] && !e.Leased && e.From <= now {
			n++
		}
		return true
	}))
	return n
}

// fullQueues is every queue that holds as many current leases at now as its
// limit, with that count (nil when no queue has a limit).
func (s *State) fullQueues(now int64) map[string]int {
	if len(s.limits) == 0 {
		return nil
	}
	held := map[string]int{}
	s.EachLeased("", func(t *Task) bool { // a lease current at now is one as recorded: time only ends leases
		if _, limited := s.limits[t.Queue]; limited && t.At(now).State == Leased {
			held[t.Queue]++
		}
		return true
	})
	full := map[string]int{}
	for q, limit := range s.limits {
		if held[q] >= limit {
			full[q] = held[q]
		}
	}
	return full
}

// fullMessage says why a lease of a full queue waits: "3 of 3 leases of
// queue api are held" ("" when full does not hold queue).
func (s *State) fullMessage(full map[string]int, queue string) string {
	held, ok := full[queue]
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d of %d leases of queue %s are held", held, s.limits[queue], queue)
}

// DecideQueueLimit sets, or with limit nil lifts, the most current leases
// of queue. The same limit again answers Duplicate and writes nothing.
func (s *State) DecideQueueLimit(queue string, limit *int) (Decision, error) {
	if err := ValidateQueue(queue); err != nil {
		return Decision{}, refuse(InvalidInput, "queue", "%v", err)
	}
	if limit != nil && limits.QueueLimit.Int(int64(*limit)) != nil {
		return Decision{}, refuse(InvalidInput, "limit", "a limit of %d leases: give %s, or none to lift it", *limit, limits.QueueLimit.Range())
	}
	d := Decision{Outcome: ResultOK}
	current, limited := s.limits[queue]
	if (limit == nil && !limited) || (limit != nil && limited && current == *limit) {
		d.Duplicate = true
		return d, nil
	}
	return write(Record{Type: QueueLimited, Queue: queue, Limit: limit}, d), nil
}

// QueueStat is one queue's unfinished tasks at a time.
type QueueStat struct {
	Queue                     string
	Waiting, Eligible, Leased int
	Blocked                   int // waiting for a dependency (among Waiting)
	// EligibleSince is when the task eligible longest became eligible (0:
	// none is eligible).
	EligibleSince int64
}

func (q *QueueStat) eligible(since int64) {
	q.Waiting++
	q.Eligible++
	if q.EligibleSince == 0 || since < q.EligibleSince {
		q.EligibleSince = since
	}
}

// srcQueueStats counts the Source's unfinished tasks memory does not hold
// as QueueStats does, reading only the tasks time has changed by now
// (Lapsing: a lease's end, a window's, a death by a dependency), which
// count reads whole; every other one stands at now as recorded, and its
// entry in its queue's lease order says how: leased; waiting and eligible
// from its not_before on (From, no earlier than its available_at), unless
// its queue is paused; a task that is in no lease order waits for another.
func (s *State) srcQueueStats(now int64, count func(*Task) bool, stat func(string) *QueueStat) {
	names, err := s.src.Queues()
	if s.sourced(err) != nil {
		return
	}
	pendingChanged := map[string]int{}
	changed, ok := s.srcChanged(now, func(t *Task) {
		if t.Pending() {
			pendingChanged[t.Queue]++
		}
		count(t)
	})
	if !ok {
		return
	}
	shadowed := s.shadowed()
	for _, queue := range names {
		_, paused := s.PausedAt(queue, now)
		ordered := 0
		err := s.src.Queued(queue, OrderEntry{}, func(e OrderEntry) bool {
			if s.isHot(e.Num) {
				return true
			}
			ordered++
			switch {
			case changed[e.Num]:
			case e.Leased:
				stat(queue).Leased++
			case e.From <= now && !paused:
				stat(queue).eligible(e.From)
			default:
				stat(queue).Waiting++
			}
			return true
		})
		if s.sourced(err) != nil {
			return
		}
		recorded, err := s.src.Unfinished([]string{queue})
		if s.sourced(err) != nil {
			return
		}
		if blocked := recorded - shadowed[queue] - ordered - pendingChanged[queue]; blocked > 0 {
			q := stat(queue)
			q.Waiting += blocked
			q.Blocked += blocked
		}
	}
}

// QueuesWithTasks is every queue that holds a task not ended as recorded,
// by name: from the names the Source keeps, without reading its tasks.
func (s *State) QueuesWithTasks() ([]string, error) {
	with := map[string]bool{}
	for _, t := range s.order {
		if !t.State.Terminal() {
			with[t.Queue] = true
		}
	}
	shadowed := s.shadowed()
	if s.src != nil {
		names, err := s.src.Queues()
		if err != nil {
			return nil, s.sourced(err)
		}
		for _, q := range names {
			if with[q] {
				continue
			}
			if shadowed[q] == 0 { // the Source holds one of its tasks unfinished, and memory none
				with[q] = true
				continue
			}
			recorded, err := s.src.Unfinished([]string{q})
			if err != nil {
				return nil, s.sourced(err)
			}
			if recorded > shadowed[q] {
				with[q] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(with)), nil
}

// QueueStats counts the unfinished tasks of every queue as they stand at
// now (time's lapses applied), in queue name order.
func (s *State) QueueStats(now int64) []QueueStat {
	byQueue := map[string]*QueueStat{}
	stat := func(queue string) *QueueStat {
		q := byQueue[queue]
		if q == nil {
			q = &QueueStat{Queue: queue}
			byQueue[queue] = q
		}
		return q
	}
	count := func(t *Task) bool {
		c := t.At(now)
		if c.State.Terminal() {
			return true
		}
		q := stat(c.Queue)
		_, paused := s.PausedAt(c.Queue, now)
		switch {
		case c.State == Leased:
			q.Leased++
		case c.Blocked():
			q.Waiting++
			q.Blocked++
		case c.leasable(now) && !paused:
			q.eligible(max(c.AvailableAt, c.NotBefore))
		default:
			q.Waiting++
		}
		return true
	}
	if s.src == nil {
		s.EachLive(count)
	} else {
		for _, t := range s.live {
			count(t)
		}
		s.srcQueueStats(now, count, stat)
	}
	out := make([]QueueStat, 0, len(byQueue))
	for _, name := range slices.Sorted(maps.Keys(byQueue)) {
		out = append(out, *byQueue[name])
	}
	return out
}
