// Package refmodel is a reference model of the task coordinator, written
// from SPEC §2 (revision 2) and nothing else: it shares no code and no types
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
	"slices"
)

// Policy is a task's retry policy, in ms.
type Policy struct {
	MaxAttempts         int
	Backoff, BackoffMax int64
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
	Written   []string
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
}

type lease struct {
	task, worker, req string
	attempt           int
	expiry            int64
	end               string // "", completed, retry, failed, expired
	notBefore         int64  // after retry or expired
}

type task struct {
	id, payload, req string
	created, window  int64
	policy           Policy

	state     string // WAITING LEASED COMPLETED FAILED DEAD, as settled
	attempt   int
	lease     string // current lease, as settled
	notBefore int64

	recordedLease string // the lease no record has ended yet
	recordedOpen  bool   // no record has made the task terminal
}

// Model is the coordinator's state.
type Model struct {
	tasks     []*task
	byID      map[string]*task
	submits   map[string]*task
	leases    map[string]*lease
	leaseReqs map[string]string // lease request id -> lease id
	lastTask  int
	lastLease int
}

// New is an empty coordinator.
func New() *Model {
	return &Model{byID: map[string]*task{}, submits: map[string]*task{}, leases: map[string]*lease{}, leaseReqs: map[string]string{}}
}

// Clone is a deep copy, for checkers that keep every state they visit.
func (m *Model) Clone() *Model {
	c := &Model{byID: map[string]*task{}, submits: map[string]*task{}, leases: map[string]*lease{},
		leaseReqs: maps.Clone(m.leaseReqs), lastTask: m.lastTask, lastLease: m.lastLease}
	for _, t := range m.tasks {
		ct := *t
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
	s := fmt.Sprint(m.lastTask, m.lastLease, m.leaseReqs)
	for _, t := range m.tasks {
		s += fmt.Sprintf("|%+v", *t)
	}
	for _, id := range slices.Sorted(maps.Keys(m.leases)) {
		s += fmt.Sprintf("|%s%+v", id, *m.leases[id])
	}
	return s
}

func (t *task) deadline() int64 { return t.created + t.window }

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
			if t.attempt >= t.policy.MaxAttempts || l.expiry >= t.deadline() {
				t.state = "DEAD"
			} else {
				t.state = "WAITING"
				t.notBefore = l.expiry + t.policy.backoff(t.attempt)
				l.notBefore = t.notBefore
			}
		}
	}
	if !terminal(t.state) && now >= t.deadline() {
		t.state = "DEAD"
	}
}

func (m *Model) holds(t *task, leaseID string, now int64) bool {
	return t.state == "LEASED" && t.lease == leaseID && now < m.leases[leaseID].expiry
}

func refused(kind string) Answer { return Answer{Result: "ERROR", Error: kind} }

// Submit creates a task (or repeats the answer for a known request id).
func (m *Model) Submit(now int64, payload string, window int64, p Policy, req string) Answer {
	if payload == "" || window <= 0 || p.MaxAttempts < 1 || p.Backoff < 0 || p.BackoffMax < p.Backoff {
		return refused("InvalidInput")
	}
	if t, ok := m.submits[req]; ok && req != "" {
		if t.payload != payload || t.window != window || t.policy != p {
			return refused("RequestConflict")
		}
		return Answer{Result: "ACK", Task: t.id, Duplicate: true}
	}
	m.lastTask++
	n := m.lastTask
	for k := n; req == ""; k++ {
		if _, taken := m.submits[fmt.Sprintf("R%d", k)]; !taken {
			req = fmt.Sprintf("R%d", k)
		}
	}
	t := &task{id: fmt.Sprintf("T%d", n), payload: payload, req: req, created: now, window: window, policy: p,
		state: "WAITING", notBefore: now, recordedOpen: true}
	m.tasks = append(m.tasks, t)
	m.byID[t.id], m.submits[req] = t, t
	return Answer{Result: "ACK", Task: t.id, Written: []string{"TaskCreated"}}
}

// Lease grants the oldest eligible task (or taskID) to worker for d ms.
func (m *Model) Lease(now int64, worker string, d int64, taskID, req string) Answer {
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
	eligible := func(t *task) bool {
		m.settle(t, now)
		return t.state == "WAITING" && now >= t.notBefore && now < t.deadline()
	}
	var pick *task
	if taskID != "" {
		t, ok := m.byID[taskID]
		if !ok {
			return refused("NotFound")
		}
		if eligible(t) {
			pick = t
		}
	} else {
		for _, t := range m.tasks {
			if eligible(t) {
				pick = t
				break
			}
		}
	}
	if pick == nil {
		return Answer{Result: "EMPTY", Task: taskID}
	}
	m.lastLease++
	id := fmt.Sprintf("L%d", m.lastLease)
	pick.attempt++
	l := &lease{task: pick.id, worker: worker, req: req, attempt: pick.attempt, expiry: min(now+d, pick.deadline())}
	m.leases[id] = l
	pick.state, pick.lease, pick.recordedLease = "LEASED", id, id
	if req != "" {
		m.leaseReqs[req] = id
	}
	return Answer{Result: "LEASED", Task: pick.id, Lease: id, Attempt: l.attempt, Expiry: l.expiry, Written: []string{"LeaseGranted"}}
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
	l.expiry = min(now+d, t.deadline())
	return Answer{Result: "EXTENDED", Task: taskID, Lease: leaseID, Expiry: l.expiry, Written: []string{"LeaseExtended"}}
}

// Complete commits the task under its current lease.
func (m *Model) Complete(now int64, taskID, leaseID string) Answer {
	t, l, ok := m.grantedFor(taskID, leaseID)
	if !ok {
		return refused("NotFound")
	}
	if l.end == "completed" {
		return Answer{Result: "COMMITTED", Task: taskID, Lease: leaseID, Duplicate: true}
	}
	m.settle(t, now)
	if !m.holds(t, leaseID, now) {
		return Answer{Result: "CANCELLED", Task: taskID, Lease: leaseID, Written: []string{"TaskCancelled"}}
	}
	l.end = "completed"
	t.state, t.lease, t.recordedLease, t.recordedOpen = "COMPLETED", "", "", false
	return Answer{Result: "COMMITTED", Task: taskID, Lease: leaseID, Written: []string{"TaskCompleted"}}
}

// Fail reports a failed attempt under the current lease.
func (m *Model) Fail(now int64, taskID, leaseID string, permanent bool) Answer {
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
		t.state, t.recordedOpen = "FAILED", false
		return Answer{Result: "FAILED", Task: taskID, Lease: leaseID, Attempt: l.attempt, State: "FAILED", Written: []string{"TaskFailed"}}
	}
	l.end = "retry"
	t.state, t.notBefore = "WAITING", now+t.policy.backoff(t.attempt)
	l.notBefore = t.notBefore
	return Answer{Result: "RETRY", Task: taskID, Lease: leaseID, Attempt: l.attempt, State: "WAITING", NotBefore: t.notBefore, Written: []string{"TaskFailed"}}
}

// Expire writes down what time has revoked, in creation order: a
// LeaseExpired for every lease no record has ended whose expiry has passed,
// and a TaskDead for every task no record has ended whose window has closed,
// unless its lease's lapse ended it.
func (m *Model) Expire(now int64) Answer {
	a := Answer{Result: "OK"}
	for _, t := range m.tasks {
		if !t.recordedOpen {
			continue
		}
		m.settle(t, now)
		if id := t.recordedLease; id != "" {
			l := m.leases[id]
			if l.expiry > now {
				continue
			}
			a.Written = append(a.Written, "LeaseExpired")
			t.recordedLease = ""
			if l.attempt >= t.policy.MaxAttempts || l.expiry >= t.deadline() {
				t.recordedOpen = false
				continue
			}
		}
		if now >= t.deadline() {
			a.Written = append(a.Written, "TaskDead")
			t.recordedOpen = false
		}
	}
	return a
}

// Views is every task as it stands at now, in creation order.
func (m *Model) Views(now int64) []View {
	out := make([]View, 0, len(m.tasks))
	for _, t := range m.tasks {
		m.settle(t, now)
		v := View{ID: t.id, State: t.state, Attempt: t.attempt, Deadline: t.deadline()}
		if t.state == "LEASED" {
			l := m.leases[t.lease]
			v.Lease, v.Worker, v.Expiry = t.lease, l.worker, l.expiry
		}
		if t.state == "WAITING" {
			v.NotBefore = t.notBefore
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
