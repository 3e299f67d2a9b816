// Package refmodel is a reference model of the task coordinator, written
// from docs/guarantees.md and nothing else: it shares no code and no types
// with package state, so that tests which compare the two (the property test
// of state, the linearizability check of concurrent processes) can catch a
// wrong rule in state, which comparing state with itself never could.
//
// It is deliberately naive: maps and loops, every lapse of time applied by
// settling each task at each call. Times are unix ms; the caller keeps them
// from running backwards.
package refmodel

import (
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"time"
)

// Policy is a task's retry policy, in ms.
type Policy struct {
	MaxAttempts         int
	Backoff, BackoffMax int64
}

// NoWindow is a Spec's Window for a task without one: it waits for a
// worker as long as it takes, and no time kills it.
const NoWindow int64 = -1

// never is the deadline of a task without a window: later than any time
// (the largest int64, as the state says it too).
const never int64 = math.MaxInt64

// Spec is a task as a submit describes it.
type Spec struct {
	Payload   string
	Window    int64 // ms, or NoWindow
	Policy    Policy
	Req       string
	Delay     int64 // ms after the submit
	NotBefore int64 // unix ms, 0 for none
	Queue     string
	Priority  int
	// After and AfterEnded are the ids of the tasks it waits for: to see
	// COMPLETED, and to see ended whatever the outcome.
	After, AfterEnded []string
}

// Answer is what a command answers, and the record types it writes.
type Answer struct {
	Result    string // ACK LEASED EMPTY EXTENDED CANCELLED COMMITTED RETRY FAILED OK, or ERROR
	Error     string // with ERROR: InvalidInput, RequestConflict, NotFound
	Task      string
	Lease     string
	Duplicate bool
	Attempt   int    // LEASED, RETRY, FAILED
	Expiry    int64  // LEASED, EXTENDED
	State     string // RETRY, FAILED: the task's state as the answer has it
	NotBefore int64  // RETRY
	// EMPTY: when the next task becomes eligible (0: never by time alone),
	// and how many tasks are not terminal, within the request's filter.
	NextEligibleAt int64
	Live           int
	Written        []string
}

// View is a task as it stands at some time.
type View struct {
	ID        string
	State     string
	Attempt   int
	Lease     string
	Worker    string
	Expiry    int64 // with a lease
	NotBefore int64 // when WAITING
	Deadline  int64
	Queue     string
	Priority  int
	Result    string // what the completing worker reported
	Waits     string // the tasks it still waits for, "T1 T3"
}

type lease struct {
	task, worker, req string
	attempt           int
	expiry            int64
	end               string // "", completed, retry, failed, expired, released
	notBefore         int64  // after retry, expired or released
}

type task struct {
	id, payload, req string
	created, window  int64
	available        int64 // when it first becomes eligible; the window counts from it
	policy           Policy
	queue            string
	priority         int
	requeuedFrom     string
	abortReason      string
	result           string // a completion's, as reported

	state     string // WAITING LEASED COMPLETED FAILED DEAD, as settled
	attempt   int
	lease     string // current lease, as settled
	notBefore int64

	recordedLease string // the lease no record has ended yet
	recordedOpen  bool   // no record has made the task terminal

	after   []dep // what it waits for
	delay   int64 // with after: its delay, counted from when the last is met
	deadBy  string
	deadEnd string // how deadBy ended
	deadAt  int64
}

// dep is a task another waits for: to complete, or (anyEnd) to end.
type dep struct {
	id     string
	anyEnd bool
	met    bool // its end was recorded
}

// waits is the ids of what t still waits for ("" when nothing).
func (t *task) waits() string {
	s := ""
	for _, d := range t.after {
		if !d.met && t.deadBy == "" {
			s += " " + d.id
		}
	}
	return s
}

// held says t's dependencies keep it from running: it waits for one, or
// one ended it.
func (t *task) held() bool { return t.deadBy != "" || t.waits() != "" }

// Model is the coordinator's state.
type Model struct {
	tasks     []*task
	byID      map[string]*task
	submits   map[string]*task
	leases    map[string]*lease
	leaseReqs map[string]string // lease request id -> lease id
	lastTask  int
	lastLease int
	limits    map[string]int     // queue -> most LEASED tasks at once
	rates     map[string]rate    // queue -> its rate and the grants since it was set
	pauses    map[string][]pause // queue -> every time it was paused, in order
	schedules map[string]schedule
}

// rate is a queue's rate: count grants per per ms, burst at once, and the
// times of the grants of the queue's tasks since it was set.
type rate struct {
	count, burst int
	per          int64
	grants       []int64
}

// schedule is a periodic task (every ms, from when it was added).
type schedule struct {
	every   int64
	catchUp string
	spec    Spec
	added   int64
	last    int64 // the last slot fired (0: none)
}

// New is an empty coordinator.
func New() *Model {
	return &Model{byID: map[string]*task{}, submits: map[string]*task{}, leases: map[string]*lease{}, leaseReqs: map[string]string{}}
}

// Clone is a deep copy, for checkers that keep every state they visit.
func (m *Model) Clone() *Model {
	c := &Model{byID: map[string]*task{}, submits: map[string]*task{}, leases: map[string]*lease{},
		leaseReqs: maps.Clone(m.leaseReqs), lastTask: m.lastTask, lastLease: m.lastLease, limits: maps.Clone(m.limits)}
	c.schedules = maps.Clone(m.schedules)
	for q, r := range m.rates {
		if c.rates == nil {
			c.rates = map[string]rate{}
		}
		r.grants = slices.Clone(r.grants)
		c.rates[q] = r
	}
	for q, ps := range m.pauses {
		if c.pauses == nil {
			c.pauses = map[string][]pause{}
		}
		c.pauses[q] = slices.Clone(ps)
	}
	for _, t := range m.tasks {
		ct := *t
		ct.after = slices.Clone(t.after)
		c.tasks = append(c.tasks, &ct)
		c.byID[ct.id] = &ct
		c.submits[ct.req] = &ct
	}
	for id, l := range m.leases {
		cl := *l
		c.leases[id] = &cl
	}
	return c
}

// Key is a canonical description of the state, equal for equal states.
func (m *Model) Key() string {
	s := fmt.Sprint(m.lastTask, m.lastLease, m.leaseReqs, m.limits, m.pauses, m.schedules, m.rates)
	for _, t := range m.tasks {
		s += fmt.Sprintf("|%+v", *t)
	}
	for _, id := range slices.Sorted(maps.Keys(m.leases)) {
		s += fmt.Sprintf("|%s%+v", id, *m.leases[id])
	}
	return s
}

// tentative runs a call and keeps what it did only if it wrote a record. A
// call decides at its own time, settling the tasks it looks at; when it
// writes nothing, that time is recorded nowhere, and a later call may
// decide at an earlier one (time never runs backwards in the WAL, only in
// records). The state is a pure function of the records and the time asked.
func (m *Model) tentative(call func() Answer) Answer {
	before := m.Clone()
	a := call()
	if len(a.Written) == 0 {
		*m = *before
	}
	return a
}

// forever is the last time there is (the year 9999): the deadline
// of a task whose queue is paused until a resume.
const forever int64 = 253402300799999

// pause is a time a queue was paused, from until to (forever: until a
// resume).
type pause struct{ from, to int64 }

// deadline is when t's window closes. The README: "while a queue is paused,
// its tasks' execution windows stand still (the deadline moves by the time
// paused)": the window counts only the time, after it opened, that its
// queue was not paused. Walk the gaps between the pauses until it is used.
func (m *Model) deadline(t *task) int64 {
	if t.window == NoWindow || t.held() { // the README: "its window counts from the moment its last dependency is met"
		return never
	}
	left, cur := t.window, t.available
	for _, p := range m.pauses[t.queue] {
		if p.to <= cur {
			continue
		}
		if p.from > cur {
			if p.from-cur >= left {
				return cur + left
			}
			left -= p.from - cur
		}
		if p.to == forever {
			return forever
		}
		cur = p.to
	}
	return cur + left
}

// pausedAt is the pause queue is in at now, if any.
func (m *Model) pausedAt(queue string, now int64) (pause, bool) {
	for _, p := range m.pauses[queue] {
		if p.from <= now && now < p.to {
			return p, true
		}
	}
	return pause{}, false
}

// afterPause is when t, in a queue paused by p, can be leased (0: not by
// time alone): "a paused queue leases nothing"; a pause --for ends by itself,
// then t is eligible as it would be anyway; a pause until a resume waits for
// the resume, not a time.
func (m *Model) afterPause(t *task, p pause, now int64) int64 {
	if p.to == forever || terminal(t.state) {
		return 0
	}
	if t.state == "WAITING" && now >= t.notBefore && now < m.deadline(t) && !t.held() {
		return p.to
	}
	if at := m.nextEligible(t, now); at != 0 {
		return max(at, p.to)
	}
	return 0
}

// Pause pauses queue from now for d ms (0: until a resume). The README:
// "Pausing twice is a duplicate".
func (m *Model) Pause(now int64, queue string, d int64) Answer {
	return m.tentative(func() Answer {
		if queue == "" || d < 0 {
			return refused("InvalidInput")
		}
		if _, paused := m.pausedAt(queue, now); paused {
			return Answer{Result: "OK", Duplicate: true}
		}
		to := forever
		if d > 0 {
			to = now + d
		}
		if m.pauses == nil {
			m.pauses = map[string][]pause{}
		}
		m.pauses[queue] = append(m.pauses[queue], pause{from: now, to: to})
		return Answer{Result: "OK", Written: []string{"QueuePaused"}}
	})
}

// Resume ends queue's pause at now. The README: "resuming an unpaused queue
// is a clear error".
func (m *Model) Resume(now int64, queue string) Answer {
	return m.tentative(func() Answer {
		ps := m.pauses[queue]
		for i := range ps {
			if ps[i].from <= now && now < ps[i].to {
				ps[i].to = now
				return Answer{Result: "OK", Written: []string{"QueueResumed"}}
			}
		}
		return refused("NotAllowed")
	})
}

func terminal(state string) bool { return state == "COMPLETED" || state == "FAILED" || state == "DEAD" }

// backoff after attempt n: min(backoff * 2^(n-1), backoff_max).
func (p Policy) backoff(n int) int64 {
	d := p.Backoff
	for i := 1; i < n && d < p.BackoffMax; i++ {
		d *= 2
	}
	return min(d, p.BackoffMax)
}

// settle applies what time alone does by now: a lease lapses at its expiry
// (WAITING after a backoff counted from the expiry, or DEAD on the last
// attempt or at the deadline), and the window closes at the deadline.
func (m *Model) settle(t *task, now int64) {
	if t.state == "LEASED" {
		l := m.leases[t.lease]
		if l.expiry <= now {
			l.end = "expired"
			t.lease = ""
			if t.attempt >= t.policy.MaxAttempts || l.expiry >= m.deadline(t) {
				t.state = "DEAD"
			} else {
				t.state = "WAITING"
				t.notBefore = l.expiry + t.policy.backoff(t.attempt)
				l.notBefore = t.notBefore
			}
		}
	}
	if !terminal(t.state) && now >= m.deadline(t) {
		t.state = "DEAD"
	}
	if !terminal(t.state) && t.deadBy != "" && now >= t.deadAt { // "the dependent ends DEAD"
		t.state = "DEAD"
	}
}

// recordEnd is t's end, recorded at now, as the tasks that wait for it see
// it. The README: "the new task waits until every task named has
// COMPLETED"; "if a task it waits for ends FAILED or DEAD, the dependent
// ends DEAD ... unless it was submitted with --after-ended, which waits for
// those tasks to end, whatever their outcome"; "a dependency is settled by
// the record of its end"; "a dependent's window and delay count from the
// moment its last dependency is met".
func (m *Model) recordEnd(t *task, now int64) {
	t.recordedOpen = false
	for _, x := range m.tasks {
		if !x.recordedOpen {
			continue
		}
		changed := false
		for i := range x.after {
			d := &x.after[i]
			if d.id != t.id || d.met {
				continue
			}
			d.met, changed = true, true
			if !d.anyEnd && t.state != "COMPLETED" && x.deadBy == "" {
				x.deadBy, x.deadEnd, x.deadAt = t.id, t.state, now
			}
		}
		if changed && !x.held() {
			x.available = now + x.delay
			x.notBefore = x.available
		}
	}
}

func (m *Model) holds(t *task, leaseID string, now int64) bool {
	return t.state == "LEASED" && t.lease == leaseID && now < m.leases[leaseID].expiry
}

func refused(kind string) Answer { return Answer{Result: "ERROR", Error: kind} }

// Submit creates a task (or repeats the answer for a known request id).
func (m *Model) Submit(now int64, s Spec) Answer {
	return m.tentative(func() Answer { return m.submit(now, s) })
}

func (m *Model) submit(now int64, s Spec) Answer {
	if s.Queue == "" {
		s.Queue = "default"
	}
	if s.Payload == "" || (s.Window <= 0 && s.Window != NoWindow) || s.Policy.MaxAttempts < 1 || s.Policy.Backoff < 0 || s.Policy.BackoffMax < s.Policy.Backoff ||
		s.Delay < 0 || (s.Delay > 0 && s.NotBefore != 0) || s.Priority < -1000 || s.Priority > 1000 {
		return refused("InvalidInput")
	}
	var after []dep // "only tasks in the WAL can be named", each once
	for i, id := range append(slices.Clone(s.After), s.AfterEnded...) {
		if slices.ContainsFunc(after, func(d dep) bool { return d.id == id }) {
			return refused("InvalidInput")
		}
		after = append(after, dep{id: id, anyEnd: i >= len(s.After)})
	}
	if len(after) > 0 && s.NotBefore != 0 {
		return refused("InvalidInput")
	}
	for _, d := range after {
		if _, ok := m.byID[d.id]; !ok {
			return refused("NotFound")
		}
	}
	if t, ok := m.submits[s.Req]; ok && s.Req != "" {
		if t.payload != s.Payload || t.window != s.Window || t.policy != s.Policy || t.queue != s.Queue || t.priority != s.Priority || t.requeuedFrom != "" ||
			!sameAfter(t.after, after) {
			return refused("RequestConflict")
		}
		return Answer{Result: "ACK", Task: t.id, Duplicate: true}
	}
	t := m.create(now, s)
	t.available = max(now, s.NotBefore, now+s.Delay)
	t.notBefore = t.available
	// "a dependency on a task that has already COMPLETED is met at once,
	// one that already FAILED or is DEAD makes the new task DEAD at once
	// (or, with --after-ended, met)"
	for i := range after {
		u := m.byID[after[i].id]
		m.settle(u, now)
		if terminal(u.state) {
			after[i].met = true
			if !after[i].anyEnd && u.state != "COMPLETED" && t.deadBy == "" {
				t.deadBy, t.deadEnd, t.deadAt = u.id, u.state, now
			}
		}
	}
	t.after, t.delay = after, t.available-now
	return Answer{Result: "ACK", Task: t.id, Written: []string{"TaskCreated"}}
}

func sameAfter(a, b []dep) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].id != b[i].id || a[i].anyEnd != b[i].anyEnd {
			return false
		}
	}
	return true
}

func (m *Model) create(now int64, s Spec) *task {
	m.lastTask++
	n := m.lastTask
	req := s.Req
	for k := n; req == ""; k++ {
		if _, taken := m.submits[fmt.Sprintf("R%d", k)]; !taken {
			req = fmt.Sprintf("R%d", k)
		}
	}
	t := &task{id: fmt.Sprintf("T%d", n), payload: s.Payload, req: req, created: now, available: now, window: s.Window, policy: s.Policy,
		queue: s.Queue, priority: s.Priority, state: "WAITING", notBefore: now, recordedOpen: true}
	m.tasks = append(m.tasks, t)
	m.byID[t.id], m.submits[req] = t, t
	return t
}

// eligible settles t at now and says whether a lease may take it.
func (m *Model) eligible(t *task, now int64) bool {
	m.settle(t, now)
	return t.state == "WAITING" && now >= t.notBefore && now < m.deadline(t) && !t.held()
}

// nextEligible is when t (settled at now, not eligible now) becomes eligible
// by time alone: the end of a delay or backoff, or after its lease lapses.
func (m *Model) nextEligible(t *task, now int64) int64 {
	notBefore := t.notBefore
	switch t.state {
	case "LEASED":
		l := m.leases[t.lease]
		if t.attempt >= t.policy.MaxAttempts || l.expiry >= m.deadline(t) {
			return 0
		}
		notBefore = l.expiry + t.policy.backoff(t.attempt)
	case "WAITING":
		if t.held() { // it waits for a record, not a time
			return 0
		}
	default:
		return 0
	}
	if notBefore <= now || notBefore >= m.deadline(t) {
		return 0
	}
	return notBefore
}

func inQueues(t *task, queues []string) bool {
	return len(queues) == 0 || slices.Contains(queues, t.queue)
}

// Lease grants the eligible task of highest priority, oldest first, among
// queues (all when none), or taskID, to worker for d ms.
func (m *Model) Lease(now int64, worker string, d int64, taskID, req string, queues []string) Answer {
	return m.tentative(func() Answer { return m.lease(now, worker, d, taskID, req, queues) })
}

func (m *Model) lease(now int64, worker string, d int64, taskID, req string, queues []string) Answer {
	if worker == "" || d <= 0 {
		return refused("InvalidInput")
	}
	if id, ok := m.leaseReqs[req]; ok && req != "" {
		l := m.leases[id]
		if l.worker != worker {
			return refused("RequestConflict")
		}
		t := m.byID[l.task]
		m.settle(t, now)
		if m.holds(t, id, now) {
			return Answer{Result: "LEASED", Task: t.id, Lease: id, Duplicate: true, Attempt: l.attempt, Expiry: l.expiry}
		}
		return Answer{Result: "CANCELLED", Task: t.id, Lease: id, Duplicate: true}
	}
	var pick *task
	empty := Answer{Result: "EMPTY", Task: taskID}
	full := m.full(now)
	consider := func(t *task) {
		if !inQueues(t, queues) {
			return
		}
		if p, paused := m.pausedAt(t.queue, now); paused {
			m.settle(t, now)
			if !terminal(t.state) {
				empty.Live++
			}
			if at := m.afterPause(t, p, now); at != 0 && (empty.NextEligibleAt == 0 || at < empty.NextEligibleAt) {
				empty.NextEligibleAt = at
			}
			return
		}
		if full[t.queue] { // the README: "at most N current leases in Q"; it waits for a completion, not a time
			m.settle(t, now)
			if !terminal(t.state) {
				empty.Live++
			}
			return
		}
		if until := m.rateAllows(t.queue, now); until > now {
			eligible := m.eligible(t, now)
			if !terminal(t.state) {
				empty.Live++
			}
			at := m.nextEligible(t, now)
			if eligible {
				at = until
			} else if at != 0 {
				at = max(at, until)
			}
			if at != 0 && (empty.NextEligibleAt == 0 || at < empty.NextEligibleAt) {
				empty.NextEligibleAt = at
			}
			return
		}
		if m.eligible(t, now) {
			if pick == nil || t.priority > pick.priority {
				pick = t
			}
			return
		}
		if !terminal(t.state) {
			empty.Live++
		}
		if at := m.nextEligible(t, now); at != 0 && (empty.NextEligibleAt == 0 || at < empty.NextEligibleAt) {
			empty.NextEligibleAt = at
		}
	}
	if taskID != "" {
		t, ok := m.byID[taskID]
		if !ok {
			return refused("NotFound")
		}
		consider(t)
	} else {
		for _, t := range m.tasks {
			consider(t)
		}
	}
	if pick == nil {
		return empty
	}
	m.lastLease++
	id := fmt.Sprintf("L%d", m.lastLease)
	pick.attempt++
	l := &lease{task: pick.id, worker: worker, req: req, attempt: pick.attempt, expiry: min(now+d, m.deadline(pick))}
	m.leases[id] = l
	if r, ok := m.rates[pick.queue]; ok {
		r.grants = append(r.grants, now)
		m.rates[pick.queue] = r
	}
	pick.state, pick.lease, pick.recordedLease = "LEASED", id, id
	if req != "" {
		m.leaseReqs[req] = id
	}
	return Answer{Result: "LEASED", Task: pick.id, Lease: id, Attempt: l.attempt, Expiry: l.expiry, Written: []string{"LeaseGranted"}}
}

// full is every queue with a limit whose tasks LEASED at now are as many.
func (m *Model) full(now int64) map[string]bool {
	held := map[string]int{}
	for _, t := range m.tasks {
		m.settle(t, now)
		if t.state == "LEASED" {
			held[t.queue]++
		}
	}
	out := map[string]bool{}
	for q, n := range m.limits {
		if held[q] >= n {
			out[q] = true
		}
	}
	return out
}

// Limit sets a queue's limit of current leases (0: none). The same again
// writes nothing.
func (m *Model) Limit(now int64, queue string, limit int) Answer {
	return m.tentative(func() Answer {
		if queue == "" || limit < 0 {
			return refused("InvalidInput")
		}
		if m.limits[queue] == limit {
			return Answer{Result: "OK", Duplicate: true}
		}
		if m.limits == nil {
			m.limits = map[string]int{}
		}
		if limit == 0 {
			delete(m.limits, queue)
		} else {
			m.limits[queue] = limit
		}
		return Answer{Result: "OK", Written: []string{"QueueLimited"}}
	})
}

// rateAllows is the first time at or after now at which a grant of queue
// keeps its rate. The README: "at most burst + rate × t grants of the
// queue's tasks in any interval of length t". A grant at a time a makes the
// grants from the i-th on one more; the interval from the i-th to a is a
// - g_i long; so a must be at least g_i + (grants from i, +1, - burst) ×
// per / count, for every i.
func (m *Model) rateAllows(queue string, now int64) int64 {
	r, ok := m.rates[queue]
	if !ok {
		return now
	}
	at := now
	for i, g := range r.grants {
		over := int64(len(r.grants)-i+1-r.burst) * r.per // ms × count the interval must last
		if over <= 0 {
			continue
		}
		earliest := g + over/int64(r.count)
		if over%int64(r.count) != 0 {
			earliest++
		}
		at = max(at, earliest)
	}
	return at
}

// Rate sets a queue's rate: count grants per per ms, burst at once (0:
// one second's worth, at least 1); count 0 lifts it. The same again
// writes nothing; another starts afresh, forgetting the grants before it.
func (m *Model) Rate(now int64, queue string, count int, per int64, burst int) Answer {
	return m.tentative(func() Answer {
		if queue == "" || count < 0 || burst < 0 {
			return refused("InvalidInput")
		}
		if burst == 0 {
			burst = max(1, int(int64(count)*1000/per))
		}
		old, rated := m.rates[queue]
		switch {
		case count == 0 && !rated, rated && old.count == count && old.per == per && old.burst == burst:
			return Answer{Result: "OK", Duplicate: true}
		case count == 0:
			delete(m.rates, queue)
		default:
			if m.rates == nil {
				m.rates = map[string]rate{}
			}
			m.rates[queue] = rate{count: count, per: per, burst: burst}
		}
		return Answer{Result: "OK", Written: []string{"QueueRated"}}
	})
}

// Abort ends a WAITING or LEASED task: DEAD, its lease (if any) fenced.
func (m *Model) Abort(now int64, taskID, reason string) Answer {
	return m.tentative(func() Answer { return m.abort(now, taskID, reason) })
}

func (m *Model) abort(now int64, taskID, reason string) Answer {
	if reason == "" {
		return refused("InvalidInput")
	}
	t, ok := m.byID[taskID]
	if !ok {
		return refused("NotFound")
	}
	m.settle(t, now)
	if terminal(t.state) {
		if t.abortReason == reason {
			return Answer{Result: "OK", Task: taskID, Lease: t.abortedLease(m), State: "DEAD", Duplicate: true}
		}
		return refused("NotAllowed")
	}
	fenced := t.lease
	if fenced != "" {
		m.leases[fenced].end = "aborted"
	}
	t.state, t.lease, t.abortReason = "DEAD", "", reason
	t.recordedLease = ""
	m.recordEnd(t, now)
	return Answer{Result: "OK", Task: taskID, Lease: fenced, State: "DEAD", Written: []string{"TaskAborted"}}
}

func (t *task) abortedLease(m *Model) string {
	for id, l := range m.leases {
		if l.task == t.id && l.end == "aborted" {
			return id
		}
	}
	return ""
}

// Requeue creates a new task from a FAILED or DEAD one, eligible at once.
func (m *Model) Requeue(now int64, taskID, req string) Answer {
	return m.tentative(func() Answer { return m.requeue(now, taskID, req) })
}

func (m *Model) requeue(now int64, taskID, req string) Answer {
	t, ok := m.byID[taskID]
	if !ok {
		return refused("NotFound")
	}
	if prev, ok := m.submits[req]; ok && req != "" {
		if prev.requeuedFrom != taskID {
			return refused("RequestConflict")
		}
		return Answer{Result: "ACK", Task: prev.id, Duplicate: true}
	}
	m.settle(t, now)
	if t.state != "FAILED" && t.state != "DEAD" {
		return refused("NotAllowed")
	}
	n := m.create(now, Spec{Payload: t.payload, Window: t.window, Policy: t.policy, Req: req, Queue: t.queue, Priority: t.priority})
	n.requeuedFrom = t.id
	return Answer{Result: "ACK", Task: n.id, Written: []string{"TaskCreated"}}
}

// RequeueWithDependents is Requeue, and, in the same write, a requeue of
// every task the old task's end ended DEAD (and theirs in turn), in the
// order they were created, each waiting for the new tasks of what it
// waited for (the README: "requeue T --with-dependents runs a failed
// upstream again together with the dependents its failure killed, each a
// new task waiting on the new upstream").
func (m *Model) RequeueWithDependents(now int64, taskID, req string) Answer {
	return m.tentative(func() Answer {
		if _, repeat := m.submits[req]; repeat && req != "" {
			return m.requeue(now, taskID, req)
		}
		deaths := m.chainDeaths(taskID, now)
		a := m.requeue(now, taskID, req)
		if a.Result != "ACK" {
			return a // and tentative forgets the deaths
		}
		a.Written = append(deaths, a.Written...)
		renamed := map[string]string{taskID: a.Task}
		ended := map[string]bool{taskID: true}
		for _, t := range slices.Clone(m.tasks) { // what waits comes after what it waits for
			m.settle(t, now)
			if t.deadBy == "" || !ended[t.deadBy] || t.state != "DEAD" {
				continue
			}
			ended[t.id] = true
			var after, afterEnded []string
			for _, d := range t.after {
				id := d.id
				if n, ok := renamed[id]; ok {
					id = n
				}
				if d.anyEnd {
					afterEnded = append(afterEnded, id)
				} else {
					after = append(after, id)
				}
			}
			n := m.submit(now, Spec{Payload: t.payload, Window: t.window, Policy: t.policy, Queue: t.queue, Priority: t.priority,
				Delay: t.delay, After: after, AfterEnded: afterEnded})
			m.byID[n.Task].requeuedFrom = t.id
			renamed[t.id] = n.Task
			a.Written = append(a.Written, "TaskCreated")
		}
		return a
	})
}

// chainDeaths records the deaths taskID's end causes down its chain that
// no record says yet, as expire records them: first, in creation order,
// the tasks its end (or theirs) has ended DEAD, then, as each of those
// ends, the tasks that waited for it to complete.
func (m *Model) chainDeaths(taskID string, now int64) []string {
	var written []string
	inChain := map[string]bool{taskID: true}
	var ended []*task
	for _, t := range m.tasks {
		m.settle(t, now)
		if t.deadBy != "" && inChain[t.deadBy] && t.state == "DEAD" {
			inChain[t.id] = true
			if t.recordedOpen {
				written = append(written, "TaskDead")
				ended = append(ended, t)
			}
		}
	}
	return append(written, m.recordEnds(ended, now)...)
}

// recordEnds records the ends of ended, in order, and the deaths those ends
// cause among the tasks that wait for them, and theirs in turn: a TaskDead
// each.
func (m *Model) recordEnds(ended []*task, now int64) []string {
	var written []string
	for len(ended) > 0 {
		u := ended[0]
		ended = ended[1:]
		before := map[*task]string{}
		for _, x := range m.tasks {
			before[x] = x.deadBy
		}
		m.recordEnd(u, now)
		for _, x := range m.tasks {
			if x.recordedOpen && before[x] == "" && x.deadBy == u.id {
				written = append(written, "TaskDead")
				x.state = "DEAD"
				ended = append(ended, x)
			}
		}
	}
	return written
}

// grantedFor finds the task and checks that leaseID was granted for it.
func (m *Model) grantedFor(taskID, leaseID string) (*task, *lease, bool) {
	t, ok := m.byID[taskID]
	if !ok {
		return nil, nil, false
	}
	l, ok := m.leases[leaseID]
	if !ok || l.task != taskID {
		return nil, nil, false
	}
	return t, l, true
}

// Extend moves a current lease's expiry to now+d, capped at the deadline.
func (m *Model) Extend(now int64, taskID, leaseID string, d int64) Answer {
	return m.tentative(func() Answer { return m.extend(now, taskID, leaseID, d) })
}

func (m *Model) extend(now int64, taskID, leaseID string, d int64) Answer {
	if d <= 0 {
		return refused("InvalidInput")
	}
	t, l, ok := m.grantedFor(taskID, leaseID)
	if !ok {
		return refused("NotFound")
	}
	m.settle(t, now)
	if !m.holds(t, leaseID, now) {
		return Answer{Result: "CANCELLED", Task: taskID, Lease: leaseID}
	}
	l.expiry = min(now+d, m.deadline(t))
	return Answer{Result: "EXTENDED", Task: taskID, Lease: leaseID, Expiry: l.expiry, Written: []string{"LeaseExtended"}}
}

// Complete commits the task under its current lease, with what the worker
// reports (the README: "a repeated complete with another result is a
// RequestConflict-like refusal, with the same one a duplicate").
func (m *Model) Complete(now int64, taskID, leaseID, result string) Answer {
	return m.tentative(func() Answer { return m.complete(now, taskID, leaseID, result) })
}

func (m *Model) complete(now int64, taskID, leaseID, result string) Answer {
	t, l, ok := m.grantedFor(taskID, leaseID)
	if !ok {
		return refused("NotFound")
	}
	if l.end == "completed" {
		if t.result != result {
			return refused("RequestConflict")
		}
		return Answer{Result: "COMMITTED", Task: taskID, Lease: leaseID, Duplicate: true}
	}
	m.settle(t, now)
	if !m.holds(t, leaseID, now) {
		return Answer{Result: "CANCELLED", Task: taskID, Lease: leaseID, Written: []string{"TaskCancelled"}}
	}
	l.end = "completed"
	t.state, t.lease, t.recordedLease, t.result = "COMPLETED", "", "", result
	m.recordEnd(t, now)
	return Answer{Result: "COMMITTED", Task: taskID, Lease: leaseID, Written: []string{"TaskCompleted"}}
}

// Fail reports a failed attempt under the current lease.
func (m *Model) Fail(now int64, taskID, leaseID string, permanent bool) Answer {
	return m.tentative(func() Answer { return m.fail(now, taskID, leaseID, permanent) })
}

func (m *Model) fail(now int64, taskID, leaseID string, permanent bool) Answer {
	t, l, ok := m.grantedFor(taskID, leaseID)
	if !ok {
		return refused("NotFound")
	}
	switch l.end {
	case "retry":
		return Answer{Result: "RETRY", Task: taskID, Lease: leaseID, Duplicate: true, Attempt: l.attempt, State: "WAITING", NotBefore: l.notBefore}
	case "failed":
		return Answer{Result: "FAILED", Task: taskID, Lease: leaseID, Duplicate: true, Attempt: l.attempt, State: "FAILED"}
	}
	m.settle(t, now)
	if !m.holds(t, leaseID, now) {
		return Answer{Result: "CANCELLED", Task: taskID, Lease: leaseID, Written: []string{"TaskCancelled"}}
	}
	t.lease, t.recordedLease = "", ""
	if permanent || t.attempt >= t.policy.MaxAttempts {
		l.end = "failed"
		t.state = "FAILED"
		m.recordEnd(t, now)
		return Answer{Result: "FAILED", Task: taskID, Lease: leaseID, Attempt: l.attempt, State: "FAILED", Written: []string{"TaskFailed"}}
	}
	l.end = "retry"
	t.state, t.notBefore = "WAITING", now+t.policy.backoff(t.attempt)
	l.notBefore = t.notBefore
	return Answer{Result: "RETRY", Task: taskID, Lease: leaseID, Attempt: l.attempt, State: "WAITING", NotBefore: t.notBefore, Written: []string{"TaskFailed"}}
}

// Release gives the current lease back (the README: "the task is WAITING
// again, eligible after --delay, and the attempt does not count toward
// max_attempts ... Repeating it with the same lease writes nothing and
// repeats the answer. A lease that is not current or has expired gets
// CANCELLED ... and nothing is written"). The answer's Attempt is how many
// attempts count after it.
func (m *Model) Release(now int64, taskID, leaseID string, delay int64) Answer {
	return m.tentative(func() Answer { return m.release(now, taskID, leaseID, delay) })
}

func (m *Model) release(now int64, taskID, leaseID string, delay int64) Answer {
	if delay < 0 {
		return refused("InvalidInput")
	}
	t, l, ok := m.grantedFor(taskID, leaseID)
	if !ok {
		return refused("NotFound")
	}
	if l.end == "released" {
		return Answer{Result: "RELEASED", Task: taskID, Lease: leaseID, Duplicate: true, Attempt: l.attempt - 1, State: "WAITING", NotBefore: l.notBefore}
	}
	m.settle(t, now)
	if !m.holds(t, leaseID, now) {
		return Answer{Result: "CANCELLED", Task: taskID, Lease: leaseID}
	}
	l.end = "released"
	t.lease, t.recordedLease = "", ""
	t.attempt--
	t.state, t.notBefore = "WAITING", now+delay
	l.notBefore = t.notBefore
	return Answer{Result: "RELEASED", Task: taskID, Lease: leaseID, Attempt: t.attempt, State: "WAITING", NotBefore: t.notBefore, Written: []string{"LeaseReleased"}}
}

// Expire writes down what time has revoked, in creation order: a
// LeaseExpired for every lease no record has ended whose expiry has passed,
// and a TaskDead for every task no record has ended whose window has closed,
// unless its lease's lapse ended it.
func (m *Model) Expire(now int64) Answer { return m.tentative(func() Answer { return m.expire(now) }) }

func (m *Model) expire(now int64) Answer {
	a := Answer{Result: "OK"}
	var ended []*task
	for _, t := range m.tasks {
		if !t.recordedOpen {
			continue
		}
		m.settle(t, now)
		if t.deadBy != "" { // "only expire records it"
			a.Written = append(a.Written, "TaskDead")
			ended = append(ended, t)
			continue
		}
		if id := t.recordedLease; id != "" {
			l := m.leases[id]
			if l.expiry > now {
				continue
			}
			a.Written = append(a.Written, "LeaseExpired")
			t.recordedLease = ""
			if l.attempt >= t.policy.MaxAttempts || l.expiry >= m.deadline(t) {
				ended = append(ended, t)
				continue
			}
		}
		if now >= m.deadline(t) {
			a.Written = append(a.Written, "TaskDead")
			ended = append(ended, t)
		}
	}
	// Then, in the order they end, the deaths those ends cause among the
	// tasks that wait for them, and theirs in turn.
	a.Written = append(a.Written, m.recordEnds(ended, now)...)
	return a
}

// Views is every task as it stands at now, in creation order. It changes
// nothing: looking is not deciding.
func (m *Model) Views(now int64) []View {
	m = m.Clone()
	out := make([]View, 0, len(m.tasks))
	for _, t := range m.tasks {
		m.settle(t, now)
		v := View{ID: t.id, State: t.state, Attempt: t.attempt, Deadline: m.deadline(t), Queue: t.queue, Priority: t.priority, Result: t.result}
		if t.state == "LEASED" {
			l := m.leases[t.lease]
			v.Lease, v.Worker, v.Expiry = t.lease, l.worker, l.expiry
		}
		if t.state == "WAITING" {
			v.NotBefore, v.Waits = t.notBefore, t.waits()
		}
		out = append(out, v)
	}
	return out
}

// Leases lists the ids of every lease granted for taskID, oldest first.
func (m *Model) Leases(taskID string) []string {
	var out []string
	for n := 1; n <= m.lastLease; n++ {
		if id := fmt.Sprintf("L%d", n); m.leases[id].task == taskID {
			out = append(out, id)
		}
	}
	return out
}

// ScheduleAdd adds a schedule firing spec every ms, its first slot after
// now. The README: "The same schedule again answers again (duplicate); the
// name with other options is refused".
func (m *Model) ScheduleAdd(now int64, name string, every int64, catchUp string, spec Spec) Answer {
	return m.tentative(func() Answer {
		if spec.Queue == "" {
			spec.Queue = "default"
		}
		if every <= 0 || spec.Payload == "" || (catchUp != "none" && catchUp != "last" && catchUp != "all") {
			return refused("InvalidInput")
		}
		if old, ok := m.schedules[name]; ok {
			if old.every != every || old.catchUp != catchUp || !reflect.DeepEqual(old.spec, spec) {
				return refused("RequestConflict")
			}
			return Answer{Result: "OK", Duplicate: true}
		}
		if m.schedules == nil {
			m.schedules = map[string]schedule{}
		}
		m.schedules[name] = schedule{every: every, catchUp: catchUp, spec: spec, added: now}
		return Answer{Result: "OK", Written: []string{"ScheduleAdded"}}
	})
}

// ScheduleRemove removes a schedule.
func (m *Model) ScheduleRemove(now int64, name string) Answer {
	return m.tentative(func() Answer {
		if _, ok := m.schedules[name]; !ok {
			return refused("NotFound")
		}
		delete(m.schedules, name)
		return Answer{Result: "OK", Written: []string{"ScheduleRemoved"}}
	})
}

// Fire writes the firings due at now, schedule by schedule in name order.
// The README: a schedule "submits a task at each of its slots: every D
// from when it was added ... request id NAME@SLOT, so a slot never fires
// twice"; "--catch-up: last (the latest slot due, however late), none (only
// a slot less than a minute late) or all (every slot due, the latest 100 at
// most)".
func (m *Model) Fire(now int64) Answer {
	return m.tentative(func() Answer {
		a := Answer{Result: "OK"}
		for _, name := range slices.Sorted(maps.Keys(m.schedules)) {
			sc := m.schedules[name]
			var due []int64
			for slot := sc.added + sc.every; slot <= now; slot += sc.every {
				if slot > sc.last {
					due = append(due, slot)
				}
			}
			switch {
			case len(due) == 0:
				continue
			case sc.catchUp == "all" && len(due) > 100:
				due = due[len(due)-100:]
			case sc.catchUp == "last":
				due = due[len(due)-1:]
			case sc.catchUp == "none":
				if now-due[len(due)-1] >= 60_000 { // a minute late is not less than a minute
					continue
				}
				due = due[len(due)-1:]
			}
			for _, slot := range due {
				spec := sc.spec
				spec.Req = name + "@" + time.UnixMilli(slot).UTC().Format("2006-01-02T15:04:05.000Z")
				m.create(now, spec)
				a.Written = append(a.Written, "TaskCreated")
			}
			sc.last = due[len(due)-1]
			m.schedules[name] = sc
		}
		return a
	})
}
