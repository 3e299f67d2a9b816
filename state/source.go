package state

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
)

// A Source holds the tasks a State does not hold in memory: those of the
// index of the records before the state's own (internal/index), read
// through one transaction. The State holds in memory only the tasks a
// record has touched since (hot: s.tasks, s.order, s.live, and their keys
// in s.submits, s.leaseTask, s.leaseRequests); a hot task shadows the
// Source's copy of it. Every lookup looks in memory, then in the Source;
// what must see every task (a listing, a base, expire, a lease's pick)
// merges the two. A State without a Source holds every task.
//
// A Source answers from the records before the state's own, so it never
// changes while the state uses it; a task it hands out is the caller's
// (decoded for it), which Apply may change and take into memory (adopt).
type Source interface {
	// Task is the task numbered num (T<num>); nil when it has none.
	Task(num int64) (*Task, error)
	// Submitted, LeaseOwner and LeaseRequested are the number of the task
	// a TaskCreated of request id req created, a lease was granted for, a
	// lease request id leased (0: none).
	Submitted(req string) (int64, error)
	LeaseOwner(lease string) (int64, error)
	LeaseRequested(req string) (int64, error)
	// Each hands fn every task in creation order (with unfinished, only
	// those unfinished as recorded), until fn returns false.
	Each(unfinished bool, fn func(*Task) bool) error
	// Queues is every queue holding an unfinished task, by name.
	Queues() ([]string, error)
	// Unfinished is how many tasks of queues (of every queue, for none)
	// are unfinished as recorded.
	Unfinished(queues []string) (int, error)
	// Queued hands fn a queue's unfinished tasks in lease order (higher
	// priority first, then older: Task.Order), but those a dependency keeps
	// from running (Task.Pending), those after after (all of them for a
	// zero after), until fn returns false.
	Queued(queue string, after OrderEntry, fn func(OrderEntry) bool) error
	// Lapsing hands fn, by time, the unfinished tasks whose lapse time
	// (Task.LapseAt) is at or before until, until fn returns false.
	Lapsing(until int64, fn func(num int64) bool) error
	// Dependents hands fn, in creation order, the number of every
	// unfinished task numbered after after that waits, as recorded, for
	// task num, until fn returns false.
	Dependents(num, after int64, fn func(num int64) bool) error
	// Upcoming hands fn, by time, the lapse and wake times (Task.LapseAt,
	// Task.WakeAt) after after, each with its task's number, until fn
	// returns false.
	Upcoming(after int64, fn func(at, num int64) bool) error
	// Wakes is Upcoming of the wake times alone.
	Wakes(after int64, fn func(at, num int64) bool) error
	// Leased hands fn the number of every task leased as recorded (its
	// State Leased) by worker, by any worker for "", until fn returns
	// false.
	Leased(worker string, fn func(num int64) bool) error
}

// OrderEntry is an unfinished task in its queue's lease order: enough to
// skip, without decoding it, a task that cannot be leased at a given time.
// The bounds are loose, never wrong: a lease still decides on the task.
type OrderEntry struct {
	Num      int64
	Priority int
	From     int64 // not leasable before: its not_before, or its lease's expiry
	To       int64 // nor from its window's end on, pauses not counted (a pause only moves it later); NoDeadline: none
	Leased   bool
}

// Order is t's entry in its queue's lease order (t unfinished).
func (t *Task) Order(num int64) OrderEntry {
	e := OrderEntry{Num: num, Priority: t.Priority, From: t.NotBefore, To: t.windowEnd()}
	if t.State == Leased {
		e.From, e.Leased = t.Lease.Expiry, true
	}
	return e
}

// LapseAt is when time alone next ends something of t as recorded: its
// death by a dependency, its lease's expiry, else its window's end (pauses
// not counted); 0 for a finished task, or one with none.
func (t *Task) LapseAt() int64 {
	switch {
	case t.State.Terminal():
		return 0
	case t.DeadBy != "":
		return t.DeadAt
	case t.State == Leased:
		return t.Lease.Expiry
	case t.HasDeadline():
		return t.windowEnd()
	}
	return 0
}

// WakeAt is when a task becomes eligible by time: a waiting one at its
// not_before, a leased one when its lease lapses and its backoff ends (if
// it is to run again then); 0 for one that will not, or waits for a
// dependency. It is the time itself, not a bound on it, so that a lease
// that finds nothing stops at the first task of its queues (srcEmpty),
// not a backoff later.
func (t *Task) WakeAt() int64 {
	c := t
	if t.State == Leased {
		c = t.At(t.Lease.Expiry)
	}
	if c.State != Waiting || c.Pending() {
		return 0
	}
	return c.NotBefore
}

// Number is the number of task id T<n> (0: not of that form).
func Number(id string) int64 {
	if len(id) < 2 || id[0] != 'T' {
		return 0
	}
	n, err := strconv.ParseInt(id[1:], 10, 64)
	if err != nil || n < 1 || strconv.FormatInt(n, 10) != id[1:] {
		return 0
	}
	return n
}

// LoadHead is the state a head (Head) describes, its tasks in src.
func LoadHead(head []byte, src Source) (*State, error) {
	s, err := LoadSnapshot(head)
	if err != nil {
		return nil, err
	}
	if len(s.order) > 0 {
		return nil, fmt.Errorf("%w: a head holds no task", ErrSnapshot)
	}
	s.src = src
	return s, nil
}

// Head is the state without its tasks: the counters, the base, the
// domains, redactions, limits, record counts, pauses and schedules, which an
// index keeps beside the tasks (LoadHead).
func (s *State) Head() []byte {
	version := s.snapshotVersion()
	e := &encoder{}
	s.encodeHead(e, version)
	e.length(0, false)
	e.liveList([]uint32{}, 0)
	s.encodeTail(e, version)
	return e.b
}

// HotTask is the task id names when memory holds it: a lookup that
// changes nothing (Task reads one from the index into memory), so that
// several goroutines may make it at once.
func (s *State) HotTask(id string) (*Task, bool) {
	t, ok := s.tasks[id]
	return t, ok
}

// Hot is the tasks a record touched since the state was loaded or last
// flushed, in creation order: what an index must take to hold the state.
func (s *State) Hot() []*Task {
	hot := slices.Clone(s.order)
	slices.SortFunc(hot, ByCreation)
	return hot
}

// HotCopy is Hot, each task a copy that shares nothing the state changes
// in place later (its lease, attempts, dependencies, its queue's pauses):
// what another goroutine may read while the state goes on.
func (s *State) HotCopy() []*Task {
	hot := s.Hot()
	pauses := map[*queuePauses]*queuePauses{}
	for i, t := range hot {
		c := *t
		c.Attempts = slices.Clone(t.Attempts)
		c.Seqs = slices.Clone(t.Seqs)
		c.Deps = slices.Clone(t.Deps)
		if t.Lease != nil {
			l := *t.Lease
			c.Lease = &l
		}
		if t.pauses != nil {
			if pauses[t.pauses] == nil {
				pauses[t.pauses] = &queuePauses{spans: slices.Clone(t.pauses.spans)}
			}
			c.pauses = pauses[t.pauses]
		}
		hot[i] = &c
	}
	return hot
}

// HotCount is how many tasks memory holds: cheap enough to ask after every
// record.
func (s *State) HotCount() int { return len(s.order) }

// Flushed says that an index now holds every task (the hot ones were
// written to it): the state drops them from memory and reads every task
// from src from now on.
func (s *State) Flushed(src Source) {
	s.keySubmits()
	s.keyLeases()
	clear(s.tasks)
	clear(s.submits)
	clear(s.leaseTask)
	clear(s.leaseRequests)
	s.order, s.live, s.ended, s.src, s.srcErr, s.skipped, s.dependents = nil, nil, 0, src, nil, nil, nil
}

// Reattach gives the state a new read of the same index (a read
// transaction ends with each operation): one that holds at least what the
// old did, and nothing of what the state replayed on top of it.
func (s *State) Reattach(src Source) { s.src, s.srcErr, s.skipped = src, nil, nil }

// HasSource reports whether the state reads tasks from a Source.
func (s *State) HasSource() bool { return s.src != nil }

// Loading reports whether a base is being read: the state is whole only
// once it ends.
func (s *State) Loading() bool { return s.loading != nil }

// Damage is the first error a Source gave: the answers given since may be
// wrong, and the state must be rebuilt from the WAL.
func (s *State) Damage() error { return s.srcErr }

// ErrSource wraps what a Source could not read.
var ErrSource = errors.New("the index could not be read")

// sourced notes a Source's error as the state's damage.
func (s *State) sourced(err error) error {
	if err != nil && s.srcErr == nil {
		s.srcErr = fmt.Errorf("%w: %w", ErrSource, err)
	}
	return s.srcErr
}

// fromSource is the task numbered num of the Source, unless memory holds
// it (then nil: the hot copy is the task).
func (s *State) fromSource(num int64) (*Task, error) {
	if s.src == nil || num == 0 {
		return nil, nil
	}
	t, err := s.src.Task(num)
	if err != nil {
		return nil, s.sourced(err)
	}
	if t == nil {
		return nil, nil
	}
	if _, hot := s.tasks[t.ID]; hot {
		return nil, nil
	}
	s.attach(t)
	t.srcUnfinished = !t.State.Terminal()
	return t, nil
}

// isHot reports whether memory holds task number num.
func (s *State) isHot(num int64) bool {
	if len(s.tasks) == 0 {
		return false
	}
	var id [20]byte
	_, hot := s.tasks[string(strconv.AppendInt(append(id[:0], 'T'), num, 10))]
	return hot
}

// orderSkip is a run at the head of a queue's lease order in the Source
// that holds no pick: after and every entry before it name hot tasks
// (memory decides on those), or tasks that cannot be leased before until
// (their not_before, or the expiry of the lease they are under; 0: none).
type orderSkip struct {
	after OrderEntry
	until int64
}

// skip notes a run at the head of queue's lease order that holds no pick:
// the next pick there, before its until, reads the Source after it. Under
// a steady run of leases the tasks taken since the index was written lead
// every queue, often behind a task leased before and not done yet; without
// it each pick would read past all of them again. It holds until the
// Source or the hot tasks change (Flushed, Reattach): until then a hot
// task stays hot, and the Source's order and bounds stay as they are.
func (s *State) skip(queue string, sk orderSkip) {
	if sk == s.skipped[queue] {
		return
	}
	if s.skipped == nil {
		s.skipped = map[string]orderSkip{}
	}
	s.skipped[queue] = sk
}

// adopt brings into memory a task a record changed that was read from the
// Source; its copy there is shadowed from now on.
func (s *State) adopt(t *Task) {
	if s.tasks[t.ID] == t {
		return
	}
	s.index(t)
	if !t.State.Terminal() {
		s.live = append(s.live, t)
	}
}

// EachTask hands fn every task (only those Live lists, with live set) in
// creation order, until fn returns false: memory's merged with the
// Source's, one task at a time.
func (s *State) EachTask(live bool, fn func(*Task) bool) error {
	hot := slices.Clone(s.order)
	if live {
		hot = slices.Clone(s.live)
	}
	slices.SortFunc(hot, ByCreation)
	more := true
	if s.src != nil {
		err := s.src.Each(live, func(t *Task) bool {
			for len(hot) > 0 && hot[0].Seqs[0] < t.Seqs[0] {
				if more = fn(hot[0]); !more {
					return false
				}
				hot = hot[1:]
			}
			if _, shadowed := s.tasks[t.ID]; shadowed {
				return true
			}
			s.attach(t)
			more = fn(t)
			return more
		})
		if err != nil {
			return s.sourced(err)
		}
	}
	for _, t := range hot {
		if !more || !fn(t) {
			break
		}
	}
	return s.srcErr
}

// EachTaskInAnyOrder hands fn the tasks EachTask does, in no particular
// order.
func (s *State) EachTaskInAnyOrder(live bool, fn func(*Task) bool) error {
	return s.EachTask(live, fn)
}

// srcPick is the Source's task a lease among queues takes at now (nil for
// none): of each queue, the first in lease order that can be leased.
func (s *State) srcPick(queues []string, full map[string]bool, now int64) (pick *Task) {
	if len(queues) == 0 {
		var err error
		if queues, err = s.src.Queues(); err != nil {
			s.sourced(err)
			return nil
		}
	}
	for _, q := range queues {
		if full[q] {
			continue
		}
		_, stretched := s.pauses[q] // a pause moved its deadlines past their entries' bound
		sk := s.skipped[q]
		if sk.until != 0 && now >= sk.until { // a task the run passed may be leasable now
			sk = orderSkip{}
		}
		passing := true // every entry so far is in the run
		err := s.src.Queued(q, sk.after, func(e OrderEntry) bool {
			if pick != nil && (e.Priority < pick.Priority || e.Priority == pick.Priority && e.Num > Number(pick.ID)) {
				return false // every task after it in this queue is behind the pick
			}
			if s.isHot(e.Num) {
				if passing {
					sk.after = e
				}
				return true
			}
			if now < e.From {
				if passing {
					sk.after = e
					if sk.until == 0 || e.From < sk.until {
						sk.until = e.From
					}
				}
				return true
			}
			passing = false
			if now >= e.To && !stretched {
				return true
			}
			t, err := s.fromSource(e.Num)
			if err != nil || t == nil {
				return err == nil
			}
			if t.State.Terminal() || t.Queue != q || t.Order(e.Num) != e {
				s.sourced(fmt.Errorf("the lease order of queue %s names %s, which it does not hold so", q, t.ID))
				return false
			}
			if t.At(now).leasable(now) {
				if pick == nil || ahead(t, pick) {
					pick = t
				}
				return false
			}
			return true
		})
		if s.sourced(err) != nil {
			return nil
		}
		s.skip(q, sk)
	}
	return pick
}

// srcLapsing is every Source task that time alone has changed by now (a
// lease lapsed, a window closed), in creation order.
func (s *State) srcLapsing(now int64) []*Task {
	var out []*Task
	seen := map[int64]bool{}
	err := s.src.Lapsing(now, func(num int64) bool {
		if s.isHot(num) {
			return true
		}
		t, err := s.fromSource(num)
		if err != nil {
			return false
		}
		if t == nil || seen[num] || t.LapseAt() == 0 || t.LapseAt() > now {
			s.sourced(fmt.Errorf("the index's times name task %d, which does not lapse so", num))
			return false
		}
		seen[num] = true
		if t.lapsesBy(now) {
			out = append(out, t)
		}
		return true
	})
	s.sourced(err)
	slices.SortFunc(out, ByCreation)
	return out
}

// srcNextAt is the Source's part of NextEventAt: the events of its tasks
// that time has changed by now (a lapse not yet recorded may leave a
// backoff to wait out), then of those whose recorded times come after now,
// in time order, until the next of those comes no earlier than the earliest
// event found: a recorded time is never later than its task's event (a
// pause only moves a deadline later).
func (s *State) srcNextAt(now int64, next *int64, note func(int64)) {
	exact := func(at, num int64) bool {
		if s.isHot(num) {
			return true
		}
		t, err := s.fromSource(num)
		if err != nil {
			return false
		}
		if t == nil || at != 0 && at != t.LapseAt() && at != t.WakeAt() {
			s.sourced(fmt.Errorf("the index's times name task %d, which has no such time", num))
			return false
		}
		t.noteEvents(now, note)
		return true
	}
	if s.sourced(s.src.Lapsing(now, func(num int64) bool { return exact(0, num) })) != nil {
		return
	}
	s.sourced(s.src.Upcoming(now, func(at, num int64) bool {
		return (*next == 0 || at < *next) && exact(at, num)
	}))
}

// srcTimed is the Source's task num, which a walk of the index's times
// named: nil when memory holds it (the walk goes on without it), false when
// the Source holds no such task (damage, noted: the walk stops).
func (s *State) srcTimed(num int64) (*Task, bool) {
	if s.isHot(num) {
		return nil, true
	}
	t, err := s.fromSource(num)
	if err != nil || t == nil {
		s.sourced(firstErr(err, fmt.Errorf("the index's times name task %d, which it does not hold", num)))
		return nil, false
	}
	return t, true
}

// srcChanged hands fn each of the Source's tasks memory does not hold that
// time has changed by now (Lapsing: a lease's end, a window's, a death by a
// dependency), read whole, and says which it handed; false when the walk
// met damage (the state's Damage).
func (s *State) srcChanged(now int64, fn func(*Task)) (map[int64]bool, bool) {
	changed := map[int64]bool{}
	err := s.src.Lapsing(now, func(num int64) bool {
		t, ok := s.srcTimed(num)
		if t != nil {
			changed[num] = true
			fn(t)
		}
		return ok
	})
	return changed, s.sourced(err) == nil && s.srcErr == nil
}

// shadowed counts, by queue, the Source's unfinished tasks memory holds:
// those its keys count that memory answers for.
func (s *State) shadowed() map[string]int {
	n := map[string]int{}
	for _, t := range s.order {
		if t.srcUnfinished {
			n[t.Queue]++
		}
	}
	return n
}

// srcEmpty is the Source's part of what a lease that finds nothing in
// queues (every queue, for none) says at now: when the next of their tasks
// the Source holds becomes eligible by time alone (0: none), and how many
// are unfinished. It counts the Source's unfinished tasks by key, less those
// memory shadows and those time has ended by now, and reads only the tasks
// time has changed by now and those whose wake times come, in time order,
// before the earliest found (next, memory's): a wake time is its task's
// eligibility (Task.WakeAt). For queues none of which is paused, full or
// held by its rate (those move a task's time as a whole).
func (s *State) srcEmpty(queues []string, next, now int64) (int64, int, error) {
	recorded, err := s.src.Unfinished(queues)
	if err != nil {
		return 0, 0, s.sourced(err)
	}
	live := recorded
	for _, t := range s.order {
		if t.srcUnfinished && inQueues(t, queues) {
			live--
		}
	}
	if recorded == 0 { // none of the Source's tasks is of queues: the times of other queues' are not read
		return next, live, nil
	}
	note := func(t *Task, lapsed bool) {
		if !inQueues(t, queues) {
			return
		}
		c := t.At(now)
		if lapsed && c.State.Terminal() {
			live--
		}
		if at := c.nextEligibleAt(now); at != 0 && (next == 0 || at < next) {
			next = at
		}
	}
	read := func(num int64, lapsed bool) bool {
		t, ok := s.srcTimed(num)
		if t != nil {
			note(t, lapsed)
		}
		return ok
	}
	if err := s.src.Lapsing(now, func(num int64) bool { return read(num, true) }); err != nil || s.srcErr != nil {
		return 0, 0, s.sourced(err)
	}
	err = s.src.Wakes(now, func(at, num int64) bool { return (next == 0 || at < next) && read(num, false) })
	if s.sourced(err) != nil {
		return 0, 0, s.srcErr
	}
	return next, live, nil
}

// ByCreation orders tasks as they were created (slices.SortFunc).
func ByCreation(a, b *Task) int { return cmp.Compare(a.Seqs[0], b.Seqs[0]) }
