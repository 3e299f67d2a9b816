package state

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// answers renders everything a state answers about a set of names: every
// task in creation order, each name looked up as a task id, a request id, a
// lease id and a lease request id, and the decisions that depend on those
// lookups (submit with that request id, lease with it, complete with that
// lease). Two states that give the same answers cannot be told apart by a
// command.
func answers(s *State, names []string, now int64) string {
	return "tasks " + jsonOf(allTasks(s)) + "\neach " + jsonOf(eachTask(s, false)) + "\neach live " + idsOf(unfinished(eachTask(s, true))) +
		"\nin any order " + jsonOf(inAnyOrder(s, false)) + "\nlive in any order " + idsOf(unfinished(inAnyOrder(s, true))) +
		"\n" + lookups(s, names, now)
}

// leasedBy lists the tasks EachLeased hands out for worker, each with its
// recorded lease, in creation order.
func leasedBy(s *State, worker string) string {
	var out []*Task
	s.EachLeased(worker, func(t *Task) bool { out = append(out, t); return true })
	slices.SortFunc(out, ByCreation)
	var b strings.Builder
	for _, t := range out {
		fmt.Fprintf(&b, "%s:%s:%s ", t.ID, t.Lease.ID, t.Lease.Worker)
	}
	return b.String()
}

// inAnyOrder is what EachTaskInAnyOrder hands out, put in creation order
// (damage is the state's: Damage).
func inAnyOrder(s *State, live bool) []*Task {
	var out []*Task
	_ = s.EachTaskInAnyOrder(live, func(t *Task) bool { out = append(out, t); return true })
	slices.SortFunc(out, ByCreation)
	return out
}

// eachTask is what EachTask hands out (damage is the state's: Damage).
func eachTask(s *State, live bool) []*Task {
	var out []*Task
	_ = s.EachTask(live, func(t *Task) bool { out = append(out, t); return true })
	return out
}

// lookups is answers without the listing of every task; with the decisions
// that read every unfinished task (expire, the next event, leases by queue,
// the live tasks) at now and later.
func lookups(s *State, names []string, now int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "seq %d at %d\n", s.LastSeq(), s.LastAt())
	for _, at := range []int64{now, now + 60_000, now + 3_600_000} {
		fmt.Fprintf(&b, "at %d: expire %s; next event %d; live %s; stats %s\n", at, jsonOf(first(s.DecideExpire(at))), s.NextEventAt(at), idsOf(unfinished(s.Live())), jsonOf(s.QueueStats(at)))
		for _, queues := range [][]string{nil, {"default"}, {"mail", "img"}, {"img", "q1"}} {
			d, err := s.DecideLease(LeaseRequest{Worker: "W9", Duration: time.Second, Queues: queues}, at)
			fmt.Fprintf(&b, "  lease in %v: %s %v\n", queues, jsonOf(d), err)
		}
	}
	queues, err := s.QueuesWithTasks()
	fmt.Fprintf(&b, "queues with tasks %v %v\n", queues, err != nil)
	for _, d := range s.Domains() {
		fmt.Fprintf(&b, "domain %s %+v %v %v %v\n", d.Name, d.Lease, d.Backlog, d.Processed.Sorted(), d.Failed.Sorted())
	}
	for _, name := range names {
		fmt.Fprintf(&b, "%q leases %s\n", name, leasedBy(s, name))
		t, taskErr := s.lookupTask(name)
		ok := t != nil
		sub, subErr := s.submitted(name)
		owner, ownerErr := s.leaseOwner(name)
		lr, lrErr := s.leaseRequested(name)
		fmt.Fprintf(&b, "%s: task %v %s; submit %s; lease of %s; lease request %+v; damage %v\n", name, ok, idOf(t), idOf(sub), owner, lr,
			errors.Join(taskErr, subErr, ownerErr, lrErr) != nil)
		if ok {
			w, err := s.Explain(t.ID, now)
			fmt.Fprintf(&b, "  why %s %v\n", jsonOf(w), err)
		}
		d, err := s.DecideSubmit(Submit{Payload: "p0", Window: Duration(time.Minute), Policy: RetryPolicy{MaxAttempts: 1}, RequestID: name}, now)
		fmt.Fprintf(&b, "  submit %s %v\n", jsonOf(d), err)
		d, err = s.DecideLease(LeaseRequest{Worker: "W0", Duration: time.Second, RequestID: name}, now)
		fmt.Fprintf(&b, "  lease %s %v\n", jsonOf(d), err)
		if ok {
			for _, a := range t.Attempts {
				d, err = s.DecideComplete(t.ID, a.LeaseID, "", now)
				fmt.Fprintf(&b, "  complete %s %s %v\n", a.LeaseID, jsonOf(d), err)
			}
		}
	}
	return b.String()
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// unfinished is the tasks that are not terminal: Live may hold ended ones.
func unfinished(tasks []*Task) []*Task {
	var out []*Task
	for _, t := range tasks {
		if !t.State.Terminal() {
			out = append(out, t)
		}
	}
	return out
}

func idsOf(tasks []*Task) string {
	var ids []string
	for _, t := range tasks {
		ids = append(ids, t.ID)
	}
	return strings.Join(ids, " ")
}

func idOf(t *Task) string {
	if t == nil {
		return "-"
	}
	return t.ID
}

// namesIn lists every id a state knows, and some it does not.
func namesIn(s *State) []string { return namesOf(allTasks(s)) }

// namesOf lists the ids of tasks, and some ids no task has.
func namesOf(tasks []*Task) []string {
	names := []string{"T999", "L999", "R999", "nope", ""}
	for _, t := range tasks {
		names = append(names, t.ID, t.RequestID)
		for _, a := range t.Attempts {
			names = append(names, a.LeaseID, a.Worker)
			if a.RequestID != "" {
				names = append(names, a.RequestID)
			}
		}
	}
	return names
}

func replay(t *testing.T, s *State, recs []Record) {
	t.Helper()
	for _, r := range recs {
		if err := s.Apply(r); err != nil {
			t.Fatalf("record %d: %v", r.Seq, err)
		}
	}
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := range min(len(g), len(w)) {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d\n got  %s\n want %s", i, g[i], w[i])
		}
	}
	return fmt.Sprintf("%d lines, want %d", len(g), len(w))
}

// memSource is a Source that keeps each task as an index does (encoded,
// decoded afresh for each reader) and answers by plain loops over all of
// them: the test's account of what an index holds, apart from the bbolt one.
type memSource struct {
	tasks map[int64][]byte
	fail  func(op string) bool // a damaged index: fails the calls it says
}

func newMemSource() *memSource { return &memSource{tasks: map[int64][]byte{}} }

// write makes the source hold s's hot tasks too, and s read from it.
func (m *memSource) write(s *State) {
	for _, t := range s.Hot() {
		m.tasks[Number(t.ID)] = AppendTask(nil, t)
	}
	s.Flushed(m)
}

func (m *memSource) failing(op string) error {
	if m.fail != nil && m.fail(op) {
		return errors.New("a damaged page")
	}
	return nil
}

func (m *memSource) all() []*Task {
	var out []*Task
	for _, n := range slices.Sorted(maps.Keys(m.tasks)) {
		t, err := DecodeTask(m.tasks[n])
		if err != nil {
			panic(err)
		}
		out = append(out, t)
	}
	return out
}

func (m *memSource) Task(n int64) (*Task, error) {
	if err := m.failing("task"); err != nil {
		return nil, err
	}
	b, ok := m.tasks[n]
	if !ok {
		return nil, nil
	}
	return DecodeTask(b)
}

func (m *memSource) find(op, key string, match func(*Task) bool) (int64, error) {
	if err := m.failing(op); err != nil || key == "" { // no task has an empty id
		return 0, err
	}
	for _, t := range m.all() {
		if match(t) {
			return Number(t.ID), nil
		}
	}
	return 0, nil
}

func (m *memSource) Submitted(req string) (int64, error) {
	return m.find("submitted", req, func(t *Task) bool { return t.RequestID == req })
}

func (m *memSource) LeaseOwner(lease string) (int64, error) {
	return m.find("owner", lease, func(t *Task) bool { return t.AttemptOf(lease) != nil })
}

func (m *memSource) LeaseRequested(req string) (int64, error) {
	return m.find("leaseRequested", req, func(t *Task) bool {
		return slices.ContainsFunc(t.Attempts, func(a Attempt) bool { return a.RequestID == req })
	})
}

func (m *memSource) Each(unfinished bool, fn func(*Task) bool) error {
	if err := m.failing("each"); err != nil {
		return err
	}
	for _, t := range m.all() {
		if unfinished && t.State.Terminal() {
			continue
		}
		if !fn(t) {
			return nil
		}
	}
	return nil
}

func (m *memSource) Queues() ([]string, error) {
	if err := m.failing("queues"); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	for _, t := range m.all() {
		if !t.State.Terminal() {
			set[t.Queue] = true
		}
	}
	return slices.Sorted(maps.Keys(set)), nil
}

func (m *memSource) Queued(queue string, after OrderEntry, fn func(OrderEntry) bool) error {
	if err := m.failing("queued"); err != nil {
		return err
	}
	var order []OrderEntry
	for _, t := range m.all() {
		e := t.Order(Number(t.ID))
		if t.State.Terminal() || t.Pending() || t.Queue != queue || after.Num != 0 && (e.Priority > after.Priority || e.Priority == after.Priority && e.Num <= after.Num) {
			continue
		}
		order = append(order, e)
	}
	slices.SortFunc(order, func(a, b OrderEntry) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Num, b.Num))
	})
	for _, e := range order {
		if !fn(e) {
			return nil
		}
	}
	return nil
}

func (m *memSource) Unfinished(queues []string) (int, error) {
	if err := m.failing("unfinished"); err != nil {
		return 0, err
	}
	n := 0
	for _, t := range m.all() {
		if !t.State.Terminal() && inQueues(t, queues) {
			n++
		}
	}
	return n, nil
}

func (m *memSource) Dependents(num, after int64, fn func(int64) bool) error {
	if err := m.failing("dependents"); err != nil {
		return err
	}
	id := "T" + strconv.FormatInt(num, 10)
	for _, t := range m.all() {
		if Number(t.ID) > after && !t.State.Terminal() && slices.ContainsFunc(t.Deps, func(d Dep) bool { return d.ID == id && !d.Met }) && !fn(Number(t.ID)) {
			return nil
		}
	}
	return nil
}

func (m *memSource) Leased(worker string, fn func(int64) bool) error {
	if err := m.failing("leased"); err != nil {
		return err
	}
	for _, t := range m.all() {
		if t.State == Leased && (worker == "" || t.Lease.Worker == worker) && !fn(Number(t.ID)) {
			return nil
		}
	}
	return nil
}

func (m *memSource) Lapsing(until int64, fn func(int64) bool) error {
	if err := m.failing("lapsing"); err != nil {
		return err
	}
	type due struct{ at, n int64 }
	var dues []due
	for _, t := range m.all() {
		if at := t.LapseAt(); at != 0 && at <= until {
			dues = append(dues, due{at, Number(t.ID)})
		}
	}
	slices.SortFunc(dues, func(a, b due) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.n, b.n)) })
	for _, d := range dues {
		if !fn(d.n) {
			return nil
		}
	}
	return nil
}

func (m *memSource) Upcoming(after int64, fn func(at, n int64) bool) error {
	return m.times("upcoming", after, fn, (*Task).LapseAt, (*Task).WakeAt)
}

func (m *memSource) Wakes(after int64, fn func(at, n int64) bool) error {
	return m.times("wakes", after, fn, (*Task).WakeAt)
}

// times hands fn, by time, the times after after that times give.
func (m *memSource) times(what string, after int64, fn func(at, n int64) bool, times ...func(*Task) int64) error {
	if err := m.failing(what); err != nil {
		return err
	}
	type due struct{ at, n int64 }
	var dues []due
	for _, t := range m.all() {
		for _, timeOf := range times {
			at := timeOf(t)
			if at > after {
				dues = append(dues, due{at, Number(t.ID)})
			}
		}
	}
	slices.SortFunc(dues, func(a, b due) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.n, b.n)) })
	for _, d := range dues {
		if !fn(d.at, d.n) {
			return nil
		}
	}
	return nil
}

// TestSourcePlusTailEqualsReplay: for random histories, a state that writes
// its tasks into a source (an index) at random records and reads them from
// it, answers every lookup and decision exactly as a full replay does, at
// random points on the way and at the end; and so does a state loaded from
// its head and that source, then fed the records after. The state spills
// what an end settles a chunk of 1 or 2 tasks at a time, and one spill in
// three cannot write (then memory takes them); the short run meets few such
// ends, TestAnEndSpillsItsDependentsAChunkAtATime each way.
func TestSourcePlusTailEqualsReplay(t *testing.T) {
	histories := 300
	if testing.Short() {
		histories = 60
	}
	writes, spills, refused := 0, 0, 0
	for seed := range histories {
		recs := randomRecords(t, uint64(seed))
		rng := rand.New(rand.NewPCG(uint64(seed), 11))
		full, s, src := New(), New(), newMemSource()
		s.SpillTo(func(tasks []*Task, _, _ int64) (Source, bool, error) {
			if (spills+refused)%3 == 2 {
				refused++
				return nil, false, nil
			}
			for _, t := range tasks {
				src.tasks[Number(t.ID)] = AppendTask(nil, t)
			}
			spills++
			return src, true, nil
		}, 1+seed%2)
		var loaded *State // from a head and the source, then fed the records after
		every := 1 + rng.IntN(6)
		for i, r := range recs {
			for _, st := range []*State{full, s, loaded} {
				if st == nil {
					continue
				}
				if err := st.Apply(r); err != nil {
					t.Fatalf("seed %d record %d: %v", seed, r.Seq, err)
				}
			}
			if s.HotCount() < every {
				continue
			}
			check := func(when string) {
				now := full.LastAt() + int64(rng.IntN(120_000))
				names := namesIn(full)
				want := answers(full, names, now)
				if got := answers(s, names, now); got != want {
					t.Fatalf("seed %d, after record %d of %d, %s: the state over a source answers differently:\n%s", seed, i, len(recs), when, firstDiff(got, want))
				}
			}
			if rng.IntN(4) == 0 { // hot tasks over the source: what a pick learns of them must not outlive them
				check("before a write")
			}
			src.write(s)
			writes++
			if rng.IntN(4) == 0 {
				check("after a write")
				if loaded == nil {
					// A copy of the source as it stands: the state's source
					// goes on taking its writes.
					snapshot := &memSource{tasks: maps.Clone(src.tasks)}
					var err error
					if loaded, err = LoadHead(s.Head(), snapshot); err != nil {
						t.Fatalf("seed %d: %v", seed, err)
					}
				}
			}
		}
		now := full.LastAt() + 5_000
		names := namesIn(full)
		want := answers(full, names, now)
		for name, st := range map[string]*State{"over a source": s, "loaded from a head": loaded} {
			if st == nil {
				continue
			}
			if got := answers(st, names, now); got != want {
				t.Fatalf("seed %d: the state %s answers differently:\n%s", seed, name, firstDiff(got, want))
			}
			if err := st.Damage(); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
	}
	t.Logf("%d histories, %d writes to the source, %d chunks an end settled spilled, %d refused", histories, writes, spills, refused)
	if !testing.Short() && (spills == 0 || refused == 0) {
		t.Fatal("no end settled its dependents a chunk at a time, or no spill was refused: the histories do not test it")
	}
}

// TestDamagedSourceNeverAnswersWrong: a source that fails a call is damage
// the state reports (Damage, ErrSource), never an answer built on what the
// call would have said: every answer the state gives while it reports no
// damage is a full replay's.
func TestDamagedSourceNeverAnswersWrong(t *testing.T) {
	ops := []string{"task", "submitted", "owner", "leaseRequested", "each", "queues", "queued", "lapsing", "upcoming", "wakes", "unfinished", "leased"}
	for seed := range 40 {
		recs := randomRecords(t, uint64(seed))
		full, s, src := New(), New(), newMemSource()
		replay(t, full, recs)
		replay(t, s, recs[:len(recs)/2])
		src.write(s)
		replay(t, s, recs[len(recs)/2:])
		now := full.LastAt() + 5_000
		names := namesIn(full)
		want := answers(full, names, now)
		for _, op := range ops {
			src.fail = func(o string) bool { return o == op }
			s.srcErr = nil
			got := answers(s, names, now)
			if s.Damage() == nil && got != want {
				t.Fatalf("seed %d, %s failing: no damage reported, yet the answers differ:\n%s", seed, op, firstDiff(got, want))
			}
			if s.Damage() != nil && !errors.Is(s.Damage(), ErrSource) {
				t.Fatalf("seed %d, %s failing: damage %v is not ErrSource", seed, op, s.Damage())
			}
		}
	}
}

// first is a pair's first value.
func first[T any](v T, _ error) T { return v }

// countingSource counts the entries its lease orders hand out, the tasks
// its times do, the tasks read by number and the listings of every task.
type countingSource struct {
	*memSource
	handed, timed, read, listed int
}

func (c *countingSource) Task(n int64) (*Task, error) {
	c.read++
	return c.memSource.Task(n)
}

func (c *countingSource) Each(unfinished bool, fn func(*Task) bool) error {
	c.listed++
	return c.memSource.Each(unfinished, fn)
}

func (c *countingSource) Queued(queue string, after OrderEntry, fn func(OrderEntry) bool) error {
	return c.memSource.Queued(queue, after, func(e OrderEntry) bool { c.handed++; return fn(e) })
}

func (c *countingSource) Upcoming(now int64, fn func(at, num int64) bool) error {
	return c.memSource.Upcoming(now, func(at, num int64) bool { c.timed++; return fn(at, num) })
}

func (c *countingSource) Wakes(now int64, fn func(at, num int64) bool) error {
	return c.memSource.Wakes(now, func(at, num int64) bool { c.timed++; return fn(at, num) })
}

// TestALeaseOfAnEmptyQueueReadsNoOtherQueuesTimes: a lease of a queue that
// holds no task, beside a backlog elsewhere whose every task has a
// deadline, answers EMPTY with no next time and reads none of the
// backlog's times (a server's waiting workers ask it after every write that
// may give them a task).
func TestALeaseOfAnEmptyQueueReadsNoOtherQueuesTimes(t *testing.T) {
	s, src := New(), newMemSource()
	submit := Submit{Payload: "P", Window: Duration(2 * time.Hour), Policy: RetryPolicy{MaxAttempts: 3}}
	for range 300 {
		run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(submit, t0) })
	}
	counted := &countingSource{memSource: src}
	src.write(s)
	s.Flushed(counted)
	d, err := s.DecideLease(LeaseRequest{Worker: "idle", Duration: time.Minute, Queues: []string{"idle"}}, t0+1)
	if err != nil || d.Outcome != ResultEmpty || d.NextEligibleAt != 0 {
		t.Fatalf("a lease of queue idle: %+v %v; want EMPTY with no next time", d, err)
	}
	if counted.timed != 0 {
		t.Fatalf("a lease of an empty queue read %d times of the other queue's tasks", counted.timed)
	}
	if d, err := s.DecideLease(LeaseRequest{Worker: "busy", Duration: time.Minute}, t0+1); err != nil || d.Outcome != ResultLeased {
		t.Fatalf("a lease of any queue beside it: %+v %v", d, err)
	}
}

// TestALeaseBesideHeldLeasesReadsOneTime: 300 tasks of a queue are
// leased a millisecond apart, each to run again a second after its lease
// ends; a lease that finds nothing there answers when the first may run
// again, and reads that task alone (it read all 300, whose leases end
// within a second of the first's: the index kept a lease by its end).
func TestALeaseBesideHeldLeasesReadsOneTime(t *testing.T) {
	s, src := New(), newMemSource()
	submit := Submit{Payload: "P", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 3, Backoff: Duration(time.Second), BackoffMax: Duration(time.Minute)}}
	for i := range int64(300) {
		run(t, s, t0+i, func() (Decision, error) { return s.DecideSubmit(submit, t0+i) })
		run(t, s, t0+i, func() (Decision, error) {
			return s.DecideLease(LeaseRequest{Worker: "held", Duration: 30 * time.Second}, t0+i)
		})
	}
	counted := &countingSource{memSource: src}
	src.write(s)
	s.Flushed(counted)
	d, err := s.DecideLease(LeaseRequest{Worker: "idle", Duration: time.Minute}, t0+1000)
	if want := t0 + 30_000 + 1_000; err != nil || d.Outcome != ResultEmpty || d.NextEligibleAt != want {
		t.Fatalf("a lease beside 300 held: %+v %v; want EMPTY, next eligible at %d (the first lease's end and its backoff)", d, err, want)
	}
	if counted.timed > 2 {
		t.Errorf("a lease beside 300 held was handed %d tasks' times, want 2: the first's, and the next, which ends the walk", counted.timed)
	}
}

// TestPicksPassATaskLeasedBefore: a queue whose order in the Source is led
// by a task not yet due and a task leased before it was written (its worker
// still at it), then by the tasks leased and completed since: each pick
// reads the order on from where the last one stopped, not past every task
// taken since; once the first of them can be leased, a pick reads from the
// head again and takes it.
func TestPicksPassATaskLeasedBefore(t *testing.T) {
	s, src := New(), newMemSource()
	const tasks = 300
	submit := Submit{Payload: "P", Window: Duration(2 * time.Hour), Policy: RetryPolicy{MaxAttempts: 3}}
	due := t0 + (30 * time.Minute).Milliseconds()
	delayed := submit
	delayed.NotBefore = due
	later := run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(delayed, t0) })
	for range tasks {
		run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(submit, t0) })
	}
	lease := func(worker string, d time.Duration, now int64) Decision {
		return run(t, s, now, func() (Decision, error) { return s.DecideLease(LeaseRequest{Worker: worker, Duration: d}, now) })
	}
	slow := lease("slow", time.Hour, t0)
	counted := &countingSource{memSource: src}
	src.write(s)
	s.Flushed(counted)
	const picks = tasks - 2
	now := t0 + 1
	for i := range picks {
		l := lease("quick", time.Minute, now)
		if want := fmt.Sprintf("T%d", i+3); l.TaskID != want {
			t.Fatalf("pick %d took %q, want %s", i, l.TaskID, want)
		}
		run(t, s, now, func() (Decision, error) { return s.DecideComplete(l.TaskID, l.LeaseID, "", now) })
	}
	if counted.handed > 3*picks {
		t.Fatalf("%d picks read %d entries of the order: each read past the tasks taken before it", picks, counted.handed)
	}
	l := lease("quick", time.Minute, due)
	if l.TaskID != later.TaskID {
		t.Fatalf("once due, a pick took %q, want %s", l.TaskID, later.TaskID)
	}
	run(t, s, due, func() (Decision, error) { return s.DecideComplete(l.TaskID, l.LeaseID, "", due) })
	late := t0 + time.Hour.Milliseconds()
	if l := lease("quick", time.Minute, late); l.TaskID != slow.TaskID {
		t.Fatalf("after the slow lease ran out a pick took %q, want %s", l.TaskID, slow.TaskID)
	}
}

// TestAWorkersLeasesAreReadAlone: beside 300 waiting tasks held by the
// source, the leases of a worker (a heartbeat's answer) read that worker's
// tasks alone, and none of the backlog; a lease taken over in memory is
// its new holder's.
func TestAWorkersLeasesAreReadAlone(t *testing.T) {
	s, src := New(), newMemSource()
	submit := Submit{Payload: "P", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 3}}
	for range 300 {
		run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(submit, t0) })
	}
	for _, w := range []string{"W1", "W2", "W1"} {
		run(t, s, t0, func() (Decision, error) { return s.DecideLease(LeaseRequest{Worker: w, Duration: time.Minute}, t0) })
	}
	counted := &countingSource{memSource: src}
	src.write(s)
	s.Flushed(counted)
	if got := leasedBy(s, "W1"); got != "T1:L1:W1 T3:L3:W1 " || counted.read != 2 || counted.listed != 0 {
		t.Fatalf("the leases of W1: %q, reading %d tasks and listing every task %d times; want T1 and T3, two tasks read, no listing", got, counted.read, counted.listed)
	}
	later := t0 + 2*time.Minute.Milliseconds() // W1's leases have lapsed: T1 goes to W3
	run(t, s, later, func() (Decision, error) {
		return s.DecideLease(LeaseRequest{Worker: "W3", Duration: time.Minute}, later)
	})
	if w1, w3 := leasedBy(s, "W1"), leasedBy(s, "W3"); w1 != "T3:L3:W1 " || w3 != "T1:L4:W3 " || s.Damage() != nil {
		t.Fatalf("after T1 went to W3: W1 %q, W3 %q (%v); want T3 as recorded, and T1", w1, w3, s.Damage())
	}
}

// TestALeaseReadsNoBacklog: beside 300 waiting tasks the source holds, a
// lease reads none of them whole when another queue has a limit, nor when
// their queue is paused, full or at its rate: it answers from the leases
// held, the lease order's head, and the keys.
func TestALeaseReadsNoBacklog(t *testing.T) {
	one, rate := 1, Rate{Count: 1, Per: time.Hour.Milliseconds()}
	for _, setup := range []struct {
		name string
		set  func(s *State) (Decision, error)
		want Outcome
	}{
		{"a limit on another queue", func(s *State) (Decision, error) { return s.DecideQueueLimit("api", &one) }, ResultLeased},
		{"its queue paused", func(s *State) (Decision, error) { return s.DecidePause(DefaultQueue, "", 0, t0) }, ResultEmpty},
		{"its queue paused for an hour", func(s *State) (Decision, error) { return s.DecidePause(DefaultQueue, "", time.Hour, t0) }, ResultEmpty},
		{"its queue full", func(s *State) (Decision, error) { return s.DecideQueueLimit(DefaultQueue, &one) }, ResultEmpty},
		{"its queue at its rate", func(s *State) (Decision, error) {
			run(t, s, t0, func() (Decision, error) { return s.DecideQueueRate(DefaultQueue, &rate) })
			return s.DecideLease(LeaseRequest{Worker: "W", Duration: time.Minute}, t0) // the burst's one grant
		}, ResultEmpty},
	} {
		s, src := New(), newMemSource()
		submit := Submit{Payload: "P", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 3}}
		for range 300 {
			run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(submit, t0) })
		}
		run(t, s, t0, func() (Decision, error) { return s.DecideLease(LeaseRequest{Worker: "W", Duration: time.Minute}, t0) })
		run(t, s, t0, func() (Decision, error) { return setup.set(s) })
		counted := &countingSource{memSource: src}
		src.write(s)
		s.Flushed(counted)
		d, err := s.DecideLease(LeaseRequest{Worker: "W2", Duration: time.Minute}, t0+1)
		if err != nil || d.Outcome != setup.want || counted.listed != 0 || counted.read > 3 {
			t.Errorf("%s: a lease answered %s (%v), listing every task %d times and reading %d; want %s, no listing, at most 3 read", setup.name, d.Outcome, err, counted.listed, counted.read, setup.want)
		}
	}
}

// TestStatsReadNoBacklog: beside 300 waiting tasks the source holds, one
// leased, the queues' figures are counted from the lease order's entries
// and the keys: no listing of every task, and no task read but those time
// has changed (none here).
func TestStatsReadNoBacklog(t *testing.T) {
	s, src := New(), newMemSource()
	submit := Submit{Payload: "P", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 3}}
	for range 300 {
		run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(submit, t0) })
	}
	run(t, s, t0, func() (Decision, error) { return s.DecideLease(LeaseRequest{Worker: "W", Duration: time.Minute}, t0) })
	want := jsonOf(s.QueueStats(t0 + 1))
	counted := &countingSource{memSource: src}
	src.write(s)
	s.Flushed(counted)
	if got := jsonOf(s.QueueStats(t0 + 1)); got != want || counted.listed != 0 || counted.read != 0 {
		t.Fatalf("the figures over the source: %s, listing every task %d times and reading %d; want %s, no listing, none read", got, counted.listed, counted.read, want)
	}
}

// TestWhyCountsTheTasksAheadByTheirEntries: beside 300 tasks the source
// holds, all eligible from the moment asked (their not_before), why the
// last waits counts the 299 ahead of it from the lease order's entries,
// reading no task but its own.
func TestWhyCountsTheTasksAheadByTheirEntries(t *testing.T) {
	s, src := New(), newMemSource()
	submit := Submit{Payload: "P", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 3}}
	for range 300 {
		run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(submit, t0) })
	}
	counted := &countingSource{memSource: src}
	src.write(s)
	s.Flushed(counted)
	w, err := s.Explain("T300", t0)
	if err != nil || w.Ahead != 299 || counted.listed != 0 || counted.read != 1 {
		t.Fatalf("why T300: %d ahead (%v), listing every task %d times and reading %d; want 299, no listing, T300 alone read", w.Ahead, err, counted.listed, counted.read)
	}
}
