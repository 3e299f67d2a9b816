package state

import (
	"slices"
	"strconv"

	"github.com/leasewal/leasewal/internal/limits"
)

// Dependencies (format version 4): a task created with after waits until
// every task named there has COMPLETED, and with after_ended until every
// task named there has ended, whatever its outcome. A dependency is
// settled by the record of its end (a completion, a final failure, an
// abort, or the lapse or closed window expire records), never by a write
// of its own: when the last is met, the dependent's delay and window start
// counting; when one named in after ends otherwise, the dependent is DEAD
// from then on, as a lapse is, until expire records it (TaskDead with
// dependency), which settles the dependents after it in turn. A dependency
// that has already ended when the dependent is created is settled at once,
// as it stands then.

// createdDeps reads a TaskCreated's after and after_ended into t: each
// dependency must be a task that exists, named once; one that has ended by
// the record's time is settled now.
func (s *State) createdDeps(r Record, t *Task) error {
	if r.After == nil && r.AfterEnded == nil {
		return nil
	}
	n := len(r.After) + len(r.AfterEnded)
	if err := limits.After.Int(int64(n)); err != nil {
		return invalid("%v", err)
	}
	if *r.NotBefore < r.At {
		return invalid("a task that waits for others has a delay, not a not_before before its creation")
	}
	deps := make([]Dep, 0, n)
	named := make(map[string]bool, n)
	for i, id := range slices.Concat(r.After, r.AfterEnded) {
		if id == r.TaskID {
			return invalid("%s cannot wait for itself", id)
		}
		if named[id] {
			return invalid("%s is named twice among what %s waits for", id, r.TaskID)
		}
		named[id] = true
		u, err := s.lookupTask(id)
		if err != nil || u == nil {
			return firstErr(err, invalid("%s waits for an unknown task %q", r.TaskID, id))
		}
		d := Dep{ID: id, Ended: i >= len(r.After)}
		if c := u.At(r.At); c.State.Terminal() {
			d.Met = true
			if c.State != Completed && !d.Ended && t.DeadBy == "" {
				t.DeadBy, t.DeadEnd, t.DeadAt = id, c.State, r.At
			}
		}
		deps = append(deps, d)
	}
	t.Deps, t.Delay = deps, *r.NotBefore-r.At
	return nil
}

// submitDeps resolves a submit's after and after_ended to task ids. In a
// batch (inBatch not nil), a name inBatch knows (a request id of the
// batch's earlier submits) is the task it created, else a task's id, else
// the request id of a task in the WAL (a batch sent in parts); a single
// submit names task ids. A task cannot wait for itself, nor name a task
// twice; an unknown name is NotFound.
func (s *State) submitDeps(c Submit, inBatch func(req string) string) (after, afterEnded []string, err error) {
	if c.After == nil && c.AfterEnded == nil {
		return nil, nil, nil
	}
	n := len(c.After) + len(c.AfterEnded)
	if n == 0 {
		field := "after"
		if c.After == nil {
			field = "after_ended"
		}
		return nil, nil, refuse(InvalidInput, field, "it names no task to wait for: name one or more, or leave it out")
	}
	if limits.After.Int(int64(n)) != nil {
		return nil, nil, refuse(InvalidInput, "after", "a task waits for %d tasks: give %s", n, limits.After.Range())
	}
	if c.NotBefore != 0 {
		return nil, nil, refuse(InvalidInput, "not_before", "a task that waits for others starts its delay when they are met: give a delay, not a not-before time")
	}
	names := slices.Concat(c.After, c.AfterEnded)
	seen := make(map[string]bool, n)
	for _, name := range names {
		if err := ValidateID("task or request id", name); err != nil {
			return nil, nil, refuse(InvalidInput, "after", "%v", err)
		}
		if name == c.RequestID {
			return nil, nil, refuse(InvalidInput, "after", "a task cannot wait for itself (%s is its own request id)", name)
		}
		if seen[name] {
			return nil, nil, refuse(InvalidInput, "after", "it names %s twice among what it waits for", name)
		}
		seen[name] = true
	}
	clear(seen)
	for i, name := range names {
		id := ""
		if inBatch != nil {
			id = inBatch(name)
		}
		if id == "" {
			t, err := s.lookupTask(name)
			if err == nil && t == nil && inBatch != nil {
				t, err = s.submitted(name) // a line of a part of the batch sent before
			}
			if err != nil {
				return nil, nil, err
			}
			if t == nil {
				return nil, nil, refuse(NotFound, "after", "it waits for %q, which is no task (nor a request id of an earlier line of the batch); only a task in the WAL can be waited for", name)
			}
			id = t.ID
		}
		if seen[id] {
			return nil, nil, refuse(InvalidInput, "after", "it names %s twice among what it waits for", id)
		}
		seen[id] = true
		if i < len(c.After) {
			after = append(after, id)
		} else {
			afterEnded = append(afterEnded, id)
		}
	}
	return after, afterEnded, nil
}

// sameDeps reports whether deps are after and afterEnded, in order.
func sameDeps(deps []Dep, after, afterEnded []string) bool {
	if len(deps) != len(after)+len(afterEnded) {
		return false
	}
	for i, d := range deps {
		id := ""
		if i < len(after) {
			id = after[i]
		} else {
			id = afterEnded[i-len(after)]
		}
		if d.Ended != (i >= len(after)) || d.ID != id {
			return false
		}
	}
	return true
}

// noteDeps keeps, in memory, the tasks t still waits for, so that their
// ends find it (the Source keeps those of the tasks it holds).
func (s *State) noteDeps(t *Task) {
	if t.State.Terminal() {
		return
	}
	for _, d := range t.Deps {
		if !d.Met {
			if s.dependents == nil {
				s.dependents = map[string][]string{}
			}
			s.dependents[d.ID] = append(s.dependents[d.ID], t.ID)
		}
	}
}

// forgetDeps drops, from memory's dependents, t that has ended.
func (s *State) forgetDeps(t *Task) {
	for _, d := range t.Deps {
		if ids, ok := s.dependents[d.ID]; ok {
			if ids = slices.DeleteFunc(ids, func(id string) bool { return id == t.ID }); len(ids) == 0 {
				delete(s.dependents, d.ID)
			} else {
				s.dependents[d.ID] = ids
			}
		}
	}
	if len(s.dependents) == 0 {
		s.dependents = nil // as a snapshot loads it
	}
}

// dependentsOf is every unfinished task that named id and still waits for
// it as recorded, in creation order.
func (s *State) dependentsOf(id string) ([]*Task, error) {
	ids := slices.Clone(s.dependents[id])
	if s.src != nil {
		err := s.src.Dependents(Number(id), 0, func(num int64) bool {
			ids = append(ids, "T"+strconv.FormatInt(num, 10))
			return true
		})
		if err != nil {
			return nil, s.sourced(err)
		}
	}
	return s.stillWaiting(id, ids)
}

// stillWaiting is the tasks of ids that are unfinished and still wait for
// id as recorded, in creation order, each once.
func (s *State) stillWaiting(id string, ids []string) ([]*Task, error) {
	out := make([]*Task, 0, len(ids))
	for _, did := range ids {
		t, err := s.lookupTask(did)
		if err != nil {
			return nil, err
		}
		if t != nil && waitsFor(t, id) {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, ByCreation)
	return slices.Compact(out), nil // a task both memory and the Source name
}

// waitsFor reports whether t is unfinished and still waits for id as
// recorded.
func waitsFor(t *Task, id string) bool {
	return !t.State.Terminal() && slices.ContainsFunc(t.Deps, func(d Dep) bool { return d.ID == id && !d.Met })
}

// A Spill writes tasks the record of seq seq changed, which memory does not
// hold, into the index the state's Source reads, each as of at, and says so
// (written); src, when not nil, is the Source to read from then on (one
// that reads them as written, or, when they were not, the same index read
// again: then memory takes them).
type Spill func(tasks []*Task, seq, at int64) (src Source, written bool, err error)

// SpillTo has the state hand spill, chunk tasks at a time, the dependents
// its Source holds that an end settles, when they are chunk or more,
// rather than take them all into memory: what an end does to its
// dependents is the same whatever their number, and memory holds a chunk
// of them at a time.
func (s *State) SpillTo(spill Spill, chunk int) { s.spill, s.spillChunk = spill, max(chunk, 1) }

// settleDependents is the end of u, recorded at at, as its dependents see
// it: each one's dependency on u is met, or, named in after and u not
// COMPLETED, ends it; one whose last dependency is met starts its delay and
// window at at. With a spill, the dependents only the Source holds, once
// they are a chunk or more, are read, settled and written a chunk at a
// time, each chunk's read resuming after the last (their own keys there
// are gone once written), so that memory holds a chunk of them whatever
// their number; memory takes the others.
func (s *State) settleDependents(u *Task, at int64) error {
	ids := slices.Clone(s.dependents[u.ID])
	spill := s.spill
	for after, first := int64(0), true; s.src != nil; first = false {
		var stored []int64 // the dependents only the Source holds
		full := false
		err := s.src.Dependents(Number(u.ID), after, func(num int64) bool {
			after = num
			if s.isHot(num) {
				ids = append(ids, "T"+strconv.FormatInt(num, 10))
				return true
			}
			stored = append(stored, num)
			full = spill != nil && len(stored) == s.spillChunk
			return !full
		})
		if err != nil {
			return s.sourced(err)
		}
		if first && !full { // fewer than a chunk: all in memory, as without a spill
			for _, num := range stored {
				ids = append(ids, "T"+strconv.FormatInt(num, 10))
			}
			break
		}
		if spill, err = s.settleStored(u, at, stored, spill); err != nil {
			return err
		}
		if !full {
			break
		}
	}
	return s.settleInMemory(u, at, ids)
}

// settleInMemory settles the dependents of u named ids (those that still
// wait for it) in memory.
func (s *State) settleInMemory(u *Task, at int64, ids []string) error {
	deps, err := s.stillWaiting(u.ID, ids)
	if err != nil {
		return err
	}
	s.reserve(len(deps))
	for _, x := range deps {
		settle(x, u, at)
		s.adopt(x)
	}
	delete(s.dependents, u.ID)
	if len(s.dependents) == 0 {
		s.dependents = nil
	}
	return nil
}

// settleStored settles the dependents of u the Source holds, numbered
// stored, and has spill write them, reading from the Source it returns from
// then on; when it cannot (or there is no spill), memory takes them, and
// the spill returned is nil: memory takes every chunk after it too.
func (s *State) settleStored(u *Task, at int64, stored []int64, spill Spill) (Spill, error) {
	chunk := make([]*Task, 0, len(stored))
	for _, num := range stored {
		x, err := s.fromSource(num)
		if err != nil {
			return nil, err
		}
		if x != nil && waitsFor(x, u.ID) {
			settle(x, u, at)
			chunk = append(chunk, x)
		}
	}
	written := false
	if spill != nil && len(chunk) > 0 {
		src, ok, err := spill(chunk, s.lastSeq, at)
		if err != nil {
			return nil, s.sourced(err)
		}
		if src != nil {
			s.src, s.skipped = src, nil
		}
		written = ok
	}
	if written {
		return spill, nil
	}
	s.reserve(len(chunk))
	for _, x := range chunk {
		s.adopt(x)
	}
	if len(chunk) > 0 {
		spill = nil
	}
	return spill, nil
}

// settle is the end of u, recorded at at, as x, which waits for it, sees
// it.
func settle(x, u *Task, at int64) {
	for i := range x.Deps {
		d := &x.Deps[i]
		if d.ID != u.ID || d.Met {
			continue
		}
		d.Met = true
		if u.State != Completed && !d.Ended && x.DeadBy == "" {
			x.DeadBy, x.DeadEnd, x.DeadAt = u.ID, u.State, at
		}
	}
	if x.DeadBy == "" && !x.Blocked() {
		x.AvailableAt = addTime(at, x.Delay)
		x.NotBefore = x.AvailableAt
	}
}

// applyDeadByDependency is the TaskDead rule for a death by a dependency:
// the task is DEAD since its dependency's end was recorded.
func (s *State) applyDeadByDependency(r Record, t *Task) error {
	if t.State.Terminal() {
		return breaks(InvTerminal, "%s is already %s", t.ID, t.State)
	}
	if t.DeadBy != r.Dependency || r.At < t.DeadAt {
		return invalid("%s was not ended by %s by this record's time", t.ID, r.Dependency)
	}
	if r.Reason != t.deathByDependency() {
		return invalid("the reason of %s's death by dependency is %q", t.ID, t.deathByDependency())
	}
	commit(t, t.At(r.At), r.Seq)
	return nil
}

// expireDependents adds to d, after the records it holds, a TaskDead for
// every dependent that the ends d records kill, and for theirs in turn:
// one expire records every death a chain of them leads to.
func (s *State) expireDependents(d *Decision, ended []*Task) error {
	killed := map[string]bool{}
	for len(ended) > 0 {
		u := ended[0]
		ended = ended[1:]
		deps, err := s.dependentsOf(u.ID)
		if err != nil {
			return err
		}
		for _, x := range deps {
			if killed[x.ID] || x.DeadBy != "" || !slices.ContainsFunc(x.Deps, func(d Dep) bool { return d.ID == u.ID && !d.Ended }) {
				continue // already ended by another, or met by any end
			}
			killed[x.ID] = true
			dead := *x
			dead.DeadBy, dead.DeadEnd = u.ID, u.State
			d.Records = append(d.Records, Record{Type: TaskDead, TaskID: x.ID, Reason: dead.deathByDependency(), Dependency: u.ID})
			d.States = append(d.States, Dead)
			dead.State = Dead
			ended = append(ended, &dead)
		}
	}
	return nil
}

// WaitFor is a dependency as it stands at a time: its task, whether any
// end meets it, and what that task waits for in turn.
type WaitFor struct {
	Task  *Task
	Ended bool
	Waits []Dep
}

// waitsAt is what t waits for at now, each as it stands.
func (s *State) waitsAt(t *Task, now int64) ([]WaitFor, error) {
	var out []WaitFor
	for _, d := range t.Waits() {
		u, err := s.lookupTask(d.ID)
		if err != nil || u == nil {
			return nil, firstErr(err, refuse(NotFound, "task", "%s waits for %s, which is not in the WAL", t.ID, d.ID))
		}
		c := u.At(now)
		out = append(out, WaitFor{Task: c, Ended: d.Ended, Waits: c.Waits()})
	}
	return out, nil
}

// killedByDependencies is, for every task a dependency's end has ended (as recorded
// or derived at now), that dependency's id -> those tasks, in creation
// order: one pass over every task (a requeue is an operator's act).
func (s *State) killedByDependencies(now int64) (map[string][]*Task, error) {
	out := map[string][]*Task{}
	err := s.EachTask(false, func(t *Task) bool {
		if t.DeadBy != "" && t.At(now).State == Dead {
			out[t.DeadBy] = append(out[t.DeadBy], t)
		}
		return true
	})
	return out, err
}

// chainDeaths is what taskID's end does down its chain at now: the deaths
// no record says yet, as expire would record them (a TaskDead for each task
// its end, or theirs, has ended, in creation order, then for those that wait
// for them), and every task so ended, recorded or not, in creation order.
func (s *State) chainDeaths(taskID string, now int64) (Decision, []*Task, error) {
	d := Decision{Outcome: ResultOK}
	killed, err := s.killedByDependencies(now)
	if err != nil {
		return d, nil, err
	}
	var chain, fresh []*Task
	seen := map[*Task]bool{}
	for queue := []string{taskID}; len(queue) > 0; queue = queue[1:] {
		for _, t := range killed[queue[0]] {
			if !seen[t] {
				seen[t] = true
				chain = append(chain, t)
				queue = append(queue, t.ID)
			}
		}
	}
	slices.SortFunc(chain, ByCreation)
	for _, t := range chain {
		if !t.State.Terminal() {
			d.Records = append(d.Records, Record{Type: TaskDead, TaskID: t.ID, Reason: t.deathByDependency(), Dependency: t.DeadBy})
			d.States = append(d.States, Dead)
			fresh = append(fresh, t.At(now))
		}
	}
	n := len(d.Records)
	if err := s.expireDependents(&d, fresh); err != nil {
		return d, nil, err
	}
	for _, r := range d.Records[n:] {
		t, err := s.lookupTask(r.TaskID)
		if err != nil {
			return d, nil, err
		}
		chain = append(chain, t)
	}
	slices.SortFunc(chain, ByCreation)
	return d, chain, nil
}

// DeadDependents is the tasks that taskID's end ends down its chain: what a
// requeue of it alone leaves DEAD.
func (s *State) DeadDependents(taskID string, now int64) ([]string, error) {
	_, chain, err := s.chainDeaths(taskID, now)
	var out []string
	for _, t := range chain {
		out = append(out, t.ID)
	}
	return out, err
}

// DecideRequeueWithDependents is DecideRequeue of taskID, and, in the same
// write, the deaths its end causes down its chain that no record says yet
// (as expire records them), then a requeue of every task of that chain,
// in creation order, each waiting for the new task of what it waited for
// in it; its other dependencies stay as they were. A redacted task is not
// run again (what waits for it then waits for a DEAD task, and ends so). A
// request id names the new upstream: a repeat answers with it and writes
// nothing.
func (s *State) DecideRequeueWithDependents(taskID, requestID string, now int64) (Decision, error) {
	d, err := s.DecideRequeue(taskID, requestID, now)
	if err != nil || d.Duplicate {
		return d, err
	}
	deaths, chain, err := s.chainDeaths(taskID, now)
	if err != nil {
		return Decision{}, err
	}
	d.Records = append(deaths.Records, d.Records...)
	renamed := map[string]string{taskID: d.TaskID} // an old task -> its requeue
	next := s.lastTaskNum + 2
	given := d.Records[len(d.Records)-1].RequestID // the new upstream's
	autoReq := next
	for _, t := range chain {
		if t.Redacted != "" {
			continue
		}
		req, err := s.freeRequestID(&autoReq, func(r string) bool { return r == given })
		if err != nil {
			return Decision{}, err
		}
		id := "T" + strconv.FormatInt(next, 10)
		next++
		renamed[t.ID] = id
		var after, afterEnded []string
		for _, dep := range t.Deps {
			name := dep.ID
			if n, ok := renamed[name]; ok {
				name = n
			}
			if dep.Ended {
				afterEnded = append(afterEnded, name)
			} else {
				after = append(after, name)
			}
		}
		r := requeueRecord(t, id, req, addTime(now, t.Delay))
		r.After, r.AfterEnded = after, afterEnded
		d.Records = append(d.Records, r)
	}
	return d, nil
}
