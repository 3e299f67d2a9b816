package state

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
)

// Verifier replays records like any command does and, after every record,
// checks the invariants (docs/guarantees.md) against counts it keeps itself, so that a bug in
// Apply cannot hide behind Apply's own bookkeeping.
type Verifier struct {
	State   *State
	Records int
	shadows shadowTable // what the Verifier itself saw of each task, by task number: 2 bytes a task that holds no lease, kept for every task

	current map[string]string // current lease id -> task, as observed after each record
	lastNum int64

	// held is each domain's lease as first seen with its token, and
	// lastToken the highest token number seen: a token other than its
	// domain's current one must be above every token seen, so that none is
	// ever handed out twice, without keeping every token of the WAL.
	held      map[string]WorkLease
	lastToken int64
	backlog   []int64        // scratch space for checkDomain, reused
	terminals map[string]int // per domain, processed+failed as last seen
}

// shadow is the Verifier's own account of a task, kept apart from Apply's,
// small because it is kept for every task a WAL ever held (a task moved
// out of memory comes back as another *Task, so it is keyed by number).
type shadow struct {
	grants int32 // LeaseGranted records seen, less the LeaseReleased ones
	state  uint8 // the state after the last record about it: 1 + its index in taskStates; 0 for not seen yet
	held   int64 // the number of its current lease (L<n>), as last observed; 0 for none
}

var taskStates = []TaskState{Waiting, Leased, Completed, Failed, Dead}

// A shadowTable holds a shadow for each task number, in pages of 256
// numbers: the state numbers its tasks in order, so the shadows of a WAL's
// tasks cost a page entry each rather than a map entry each (about 35
// bytes), which is what a verify of millions holds. A page keeps each
// shadow's state and grants in a byte each; the lease numbers only while
// one of its tasks holds a lease, and grants outside a byte in a map: a
// task that waits or has ended costs two bytes. A WAL whose numbers skip
// (written by hand) costs a page a number at worst.
type shadowTable struct {
	pages map[int64]*shadowPage
	wide  map[int64]int32 // grants below 0 or above shadowNarrow, by task number
}

const (
	shadowPageSize = 256
	shadowNarrow   = 254 // grants above are kept in shadowTable.wide
)

type shadowPage struct {
	state  [shadowPageSize]uint8
	grants [shadowPageSize]uint8 // shadowNarrow+1: in the table's wide map
	held   *[shadowPageSize]int64
	holds  int // the non-zero entries of held (nil when none)
}

// get is the shadow of task number num (the zero shadow: not seen yet).
func (st *shadowTable) get(num int64) shadow {
	p := st.pages[num/shadowPageSize]
	if p == nil {
		return shadow{}
	}
	i := num % shadowPageSize
	sh := shadow{state: p.state[i], grants: int32(p.grants[i])}
	if p.grants[i] > shadowNarrow {
		sh.grants = st.wide[num]
	}
	if p.held != nil {
		sh.held = p.held[i]
	}
	return sh
}

func (st *shadowTable) set(num int64, sh shadow) {
	p := st.pages[num/shadowPageSize]
	if p == nil {
		if st.pages == nil {
			st.pages = map[int64]*shadowPage{}
		}
		p = &shadowPage{}
		st.pages[num/shadowPageSize] = p
	}
	i := num % shadowPageSize
	p.state[i] = sh.state
	if p.grants[i] > shadowNarrow {
		delete(st.wide, num)
	}
	if sh.grants >= 0 && sh.grants <= shadowNarrow {
		p.grants[i] = uint8(sh.grants)
	} else {
		if st.wide == nil {
			st.wide = map[int64]int32{}
		}
		p.grants[i], st.wide[num] = shadowNarrow+1, sh.grants
	}
	was := int64(0)
	if p.held != nil {
		was = p.held[i]
	}
	switch {
	case was == 0 && sh.held != 0:
		if p.held == nil {
			p.held = new([shadowPageSize]int64)
		}
		p.holds++
	case was != 0 && sh.held == 0:
		if p.holds--; p.holds == 0 {
			p.held = nil
			return
		}
	}
	if p.held != nil {
		p.held[i] = sh.held
	}
}

func (sh shadow) seen() bool { return sh.state != 0 }

func (sh shadow) taskState() TaskState { return taskStates[sh.state-1] }

// NewVerifier starts from an empty WAL.
func NewVerifier() *Verifier {
	return &Verifier{State: New(), current: map[string]string{},
		held: map[string]WorkLease{}, terminals: map[string]int{}}
}

// Step applies one record and checks every invariant it could have touched.
func (v *Verifier) Step(r Record) error {
	t, err := v.State.apply(r)
	if err != nil {
		return err
	}
	v.Records++
	if r.Type == BaseEnd {
		return v.adoptBase(r)
	}
	if r.Type == LeaseGranted {
		n, _ := idNumber(r.LeaseID, 'L')
		if n <= v.lastNum {
			return v.fail(r, InvSequence, "lease id %s does not increase on L%d", r.LeaseID, v.lastNum)
		}
		v.lastNum = n
	}
	if r.Domain != "" {
		return v.checkDomain(r, v.State.domains[r.Domain])
	}
	if t == nil {
		return nil
	}
	num, _ := idNumber(t.ID, 'T')
	sh := v.shadows.get(num)
	switch r.Type {
	case LeaseGranted:
		sh.grants++
	case LeaseReleased:
		sh.grants--
	}
	err = v.checkTask(r, t, &sh)
	v.shadows.set(num, sh)
	if err != nil {
		return err
	}
	// The same task as time alone leaves it at this record's time must obey
	// the invariants too: implicit transitions are rules like any other.
	if settled := t.At(r.At); settled != t {
		return v.checkShape(r, settled)
	}
	return nil
}

// checkToken checks a domain's lease against what the Verifier saw: while
// its token is the domain's, its offset and acquisition stay as first seen;
// a new token is above every token seen.
func (v *Verifier) checkToken(r Record, domain string, l WorkLease) error {
	if first, ok := v.held[domain]; ok && first.Token == l.Token {
		if first.Offset != l.Offset || first.AcquiredAt != l.AcquiredAt {
			return v.fail(r, WorkInvMonitor, "token %s first held offset %d acquired at %d, now %d acquired at %d",
				l.Token, first.Offset, first.AcquiredAt, l.Offset, l.AcquiredAt)
		}
		return nil
	}
	n, ok := idNumber(l.Token, 'K')
	if !ok || n <= v.lastToken {
		return v.fail(r, WorkInvMonitor, "token %s of domain %q was handed out before (tokens seen up to K%d)", l.Token, domain, v.lastToken)
	}
	v.held[domain], v.lastToken = l, n
	return nil
}

// adoptBase starts the Verifier's own accounts over from the state a base
// holds, checking every invariant of every task and domain in it: a base is
// trusted no more than a record.
func (v *Verifier) adoptBase(r Record) error {
	v.shadows = shadowTable{}
	clear(v.current)
	clear(v.held)
	clear(v.terminals)
	v.lastNum = v.State.lastLeaseNum
	// The tokens handed out before the base are not in it: those of its
	// domains' leases are taken as first seen, and any other must be newer
	// than the last token the base says was handed out.
	for _, d := range v.State.domainOrder {
		if d.Lease != nil {
			v.held[d.Name] = *d.Lease
		}
	}
	v.lastToken = v.State.lastTokenNum
	var failed error
	err := v.State.EachTaskInAnyOrder(false, func(t *Task) bool { // a base of millions may have been moved out of memory as it loaded
		num, _ := idNumber(t.ID, 'T')
		if num > v.State.lastTaskNum {
			failed = v.fail(r, InvSequence, "the base holds task %s beyond its last task id T%d", t.ID, v.State.lastTaskNum)
			return false
		}
		sh := shadow{grants: int32(countedAttempts(t))}
		failed = v.checkTask(r, t, &sh)
		v.shadows.set(num, sh)
		return failed == nil
	})
	if err = cmp.Or(failed, err); err != nil {
		return err
	}
	for _, d := range v.State.domainOrder {
		if err := v.checkDomain(r, d); err != nil {
			return err
		}
	}
	for _, q := range v.State.pausedQueueNames() {
		spans := v.State.pauses[q].spans
		for i, sp := range spans {
			if sp.To < sp.From || (i > 0 && sp.From < spans[i-1].To) || (sp.Open() && i != len(spans)-1) {
				return v.fail(r, "", "the base's pauses of queue %q overlap or run backwards at span %d", q, i+1)
			}
		}
	}
	return nil
}

// countedAttempts is how many of a task's attempts count toward its
// max_attempts: every one not released.
func countedAttempts(t *Task) int {
	n := 0
	for _, a := range t.Attempts {
		if a.End != EndReleased {
			n++
		}
	}
	return n
}

func (v *Verifier) checkTask(r Record, t *Task, sh *shadow) error {
	if sh.seen() && sh.taskState().Terminal() && t.State != sh.taskState() {
		return v.fail(r, InvTerminal, "%s went from %s to %s", t.ID, sh.taskState(), t.State)
	}
	sh.state = uint8(slices.Index(taskStates, t.State) + 1)
	if sh.held != 0 {
		if held := "L" + strconv.FormatInt(sh.held, 10); t.Lease == nil || t.Lease.ID != held {
			delete(v.current, held)
			sh.held = 0
		}
	}
	if t.Lease != nil {
		if owner, held := v.current[t.Lease.ID]; held && owner != t.ID {
			return v.fail(r, InvOneLease, "lease %s is current for both %s and %s", t.Lease.ID, owner, t.ID)
		}
		if owner, _ := v.State.leaseOwner(t.Lease.ID); owner != t.ID {
			return v.fail(r, InvOneLease, "%s's current lease %s was granted for %q", t.ID, t.Lease.ID, owner)
		}
		v.current[t.Lease.ID] = t.ID
		sh.held, _ = idNumber(t.Lease.ID, 'L')
	}
	if t.Attempt != int(sh.grants) {
		return v.fail(r, InvAttempts, "%s has attempt %d after %d LeaseGranted records not released", t.ID, t.Attempt, sh.grants)
	}
	return v.checkShape(r, t)
}

// checkShape checks the invariants that hold within one task.
func (v *Verifier) checkShape(r Record, t *Task) error {
	switch {
	case t.State == Leased && t.Lease == nil:
		return v.fail(r, InvLeaseByState, "%s is LEASED without a lease", t.ID)
	case t.State != Leased && t.Lease != nil:
		return v.fail(r, InvLeaseByState, "%s is %s but holds lease %s", t.ID, t.State, t.Lease.ID)
	case t.Attempt > t.Policy.MaxAttempts:
		return v.fail(r, InvAttempts, "%s has attempt %d over max_attempts %d", t.ID, t.Attempt, t.Policy.MaxAttempts)
	}
	return nil
}

func (v *Verifier) fail(r Record, invariant, format string, args ...any) error {
	return &RecordError{Seq: r.Seq, Type: r.Type, Invariant: invariant, Msg: fmt.Sprintf(format, args...)}
}

// checkDomain checks the work lease's invariants for the domain a record touched.
func (v *Verifier) checkDomain(r Record, d *Domain) error {
	queued := append(v.backlog[:0], d.Backlog...)
	slices.Sort(queued)
	v.backlog = queued
	for i, off := range queued {
		switch {
		case i > 0 && queued[i-1] == off:
			return v.fail(r, WorkInvDisjoint, "offset %d is twice in domain %q's backlog", off, d.Name)
		case d.terminal(off):
			return v.fail(r, WorkInvDisjoint, "offset %d is both queued and terminal in domain %q", off, d.Name)
		}
	}
	if l := d.Lease; l != nil {
		if _, isQueued := slices.BinarySearch(queued, l.Offset); isQueued || d.terminal(l.Offset) {
			return v.fail(r, WorkInvDisjoint, "in-flight offset %d of domain %q is also queued or terminal", l.Offset, d.Name)
		}
		if err := v.checkToken(r, d.Name, *l); err != nil {
			return err
		}
	}
	terminals := d.Processed.Len() + d.Failed.Len()
	if terminals < v.terminals[d.Name] {
		return v.fail(r, WorkInvIdempotence, "domain %q lost terminal offsets", d.Name)
	}
	v.terminals[d.Name] = terminals
	return nil
}
