package state

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

// deps builds tasks and decisions for the dependency tests.
type depFixture struct {
	t *testing.T
	s *State
}

func (f depFixture) submit(at int64, c Submit) string {
	f.t.Helper()
	c.Payload, c.Policy = "p", RetryPolicy{MaxAttempts: 1}
	if c.Window == 0 {
		c.Window = NoWindow
	}
	return run(f.t, f.s, at, func() (Decision, error) { return f.s.DecideSubmit(c, at) }).TaskID
}

func (f depFixture) lease(at int64, task string) Decision {
	f.t.Helper()
	return run(f.t, f.s, at, func() (Decision, error) {
		return f.s.DecideLease(LeaseRequest{Worker: "w", Duration: time.Hour, TaskID: task}, at)
	})
}

func (f depFixture) state(at int64, task string) TaskState {
	f.t.Helper()
	t, err := f.s.Task(task)
	if err != nil {
		f.t.Fatal(err)
	}
	return t.At(at).State
}

func TestDependencyRules(t *testing.T) {
	f := depFixture{t, New()}
	convert := f.submit(t0, Submit{})
	upload := f.submit(t0, Submit{After: []string{convert}, Delay: 5 * time.Second, Window: Duration(time.Minute)})
	notify := f.submit(t0, Submit{After: []string{upload}})
	cleanup := f.submit(t0, Submit{AfterEnded: []string{convert, upload}})

	// Nothing that waits is leased, nor has a deadline yet.
	if d := f.lease(t0, upload); d.Outcome != ResultEmpty || d.NextEligibleAt != 0 {
		t.Fatalf("a lease of a task that waits: %+v", d)
	}
	if u, _ := f.s.Task(upload); u.Deadline() != NoDeadline || !u.Blocked() {
		t.Fatalf("%s's window opened before what it waits for was met: %d", upload, u.Deadline())
	}
	if w, _ := f.s.Explain(notify, t0); w.Because != BecauseBlocked || len(w.Waits) != 1 || w.Waits[0].Task.ID != upload || len(w.Waits[0].Waits) != 1 {
		t.Fatalf("why %s: %+v", notify, w)
	}
	if w, _ := f.s.Explain(convert, t0); !slices.Equal(w.Dependents, []string{upload, cleanup}) {
		t.Fatalf("what waits for %s: %v", convert, w.Dependents)
	}
	// convert completes at 10s: upload's delay (5s) and window (1m) count from then.
	l := f.lease(sec(1), convert)
	run(t, f.s, sec(10), func() (Decision, error) { return f.s.DecideComplete(convert, l.LeaseID, "", sec(10)) })
	u, _ := f.s.Task(upload)
	if u.AvailableAt != sec(15) || u.Deadline() != sec(75) || u.Blocked() {
		t.Fatalf("%s after %s completed: available %d, deadline %d", upload, convert, u.AvailableAt-t0, u.Deadline()-t0)
	}
	if d := f.lease(sec(12), upload); d.Outcome != ResultEmpty || d.NextEligibleAt != sec(15) {
		t.Fatalf("%s before its delay: %+v", upload, d)
	}
	// upload fails: notify is DEAD from then, derived, until expire records
	// it; cleanup, which waits for any end, may run.
	l = f.lease(sec(20), upload)
	run(t, f.s, sec(21), func() (Decision, error) { return f.s.DecideFail(upload, l.LeaseID, "broken", true, sec(21)) })
	if got := f.state(sec(21), notify); got != Dead {
		t.Fatalf("%s after %s failed: %s", notify, upload, got)
	}
	if n, _ := f.s.Task(notify); n.At(sec(21)).EndReason != "dependency "+upload+" ended FAILED" {
		t.Fatalf("its reason: %q", n.At(sec(21)).EndReason)
	}
	if d := f.lease(sec(22), ""); d.TaskID != cleanup {
		t.Fatalf("the lease after the failure: %+v", d)
	}
	d := run(t, f.s, sec(30), func() (Decision, error) { return f.s.DecideExpire(sec(30)) })
	if len(d.Records) != 1 || d.Records[0].Dependency != upload || d.Records[0].TaskID != notify {
		t.Fatalf("expire: %+v", d.Records)
	}
	if again, _ := f.s.DecideExpire(sec(31)); len(again.Records) != 0 {
		t.Fatalf("a second expire: %+v", again.Records)
	}
}

func TestDependenciesAtTheirCreation(t *testing.T) {
	f := depFixture{t, New()}
	done, failed := f.submit(t0, Submit{}), f.submit(t0, Submit{})
	l := f.lease(t0, done)
	run(t, f.s, t0, func() (Decision, error) { return f.s.DecideComplete(done, l.LeaseID, "", t0) })
	run(t, f.s, t0, func() (Decision, error) { return f.s.DecideAbort(failed, "no", t0) })
	met := f.submit(sec(1), Submit{After: []string{done}})
	dead := f.submit(sec(1), Submit{After: []string{done, failed}})
	ended := f.submit(sec(1), Submit{AfterEnded: []string{failed}})
	if f.state(sec(1), met) != Waiting || f.state(sec(1), ended) != Waiting || f.state(sec(1), dead) != Dead {
		t.Fatalf("met at once, DEAD at once, met by any end: %s %s %s", f.state(sec(1), met), f.state(sec(1), dead), f.state(sec(1), ended))
	}
	for name, c := range map[string]struct {
		sub  Submit
		kind Kind
	}{
		"an unknown task":    {Submit{After: []string{"T99"}}, NotFound},
		"a task named twice": {Submit{After: []string{done}, AfterEnded: []string{done}}, InvalidInput},
		"itself":             {Submit{RequestID: "me", After: []string{"me"}}, InvalidInput},
		"with a not-before":  {Submit{After: []string{done}, NotBefore: sec(9)}, InvalidInput},
		"too many":           {Submit{After: slices.Repeat([]string{done}, 10_001)}, InvalidInput},
		"not a name":         {Submit{After: []string{"T1\n"}}, InvalidInput},
		"an empty name":      {Submit{After: []string{""}}, InvalidInput},
		"no name":            {Submit{After: []string{}}, InvalidInput},
		"no name to end":     {Submit{AfterEnded: []string{}}, InvalidInput},
	} {
		c.sub.Payload, c.sub.Policy, c.sub.Window = "p", RetryPolicy{MaxAttempts: 1}, NoWindow
		if _, err := f.s.DecideSubmit(c.sub, sec(2)); refusalKind(err) != c.kind {
			t.Errorf("%s: %v, want %s", name, err, c.kind)
		}
	}
	for field, sub := range map[string]Submit{"after": {After: []string{}}, "after_ended": {AfterEnded: []string{}}} {
		sub.Payload, sub.Policy, sub.Window = "p", RetryPolicy{MaxAttempts: 1}, NoWindow
		var refusal *Error
		if _, err := f.s.DecideSubmit(sub, sec(2)); !errors.As(err, &refusal) || refusal.Subject != field || !strings.Contains(refusal.Msg, "names no task") {
			t.Errorf("%s naming no task: %v; want a refusal of %s that says it names none", field, err, field)
		}
	}
	if _, err := f.s.DecideScheduleAdd(ScheduleSpec{Name: "s", Every: Duration(time.Minute), CatchUp: CatchUpLast,
		Template: Submit{Payload: "p", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 1}, Queue: DefaultQueue, After: []string{done}}}, nil, sec(2)); refusalKind(err) != InvalidInput {
		t.Errorf("a schedule whose task waits: %v", err)
	}
}

// TestABatchIsAGraph: a batch's lines name earlier lines by request id; the
// same batch again answers with the same tasks; a fan-in at the limit.
func TestABatchIsAGraph(t *testing.T) {
	s := New()
	root := Submit{Payload: "root", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 1}, RequestID: "root"}
	batch := []Submit{root}
	var leaves []string
	for i := range 9_999 {
		leaf := Submit{Payload: "leaf", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 1}, RequestID: fmt.Sprint("leaf-", i), After: []string{"root"}}
		batch, leaves = append(batch, leaf), append(leaves, leaf.RequestID)
	}
	batch = append(batch, Submit{Payload: "sum", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 1}, RequestID: "sum", After: leaves, AfterEnded: []string{"root"}})
	for round := range 2 {
		ds, _, err := s.DecideSubmits(batch, t0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Duplicate != (round == 1) {
				t.Fatalf("round %d: %+v", round, d)
			}
			for _, r := range d.Records {
				r.Seq, r.At = s.LastSeq()+1, t0
				if err := s.Apply(r); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	sum, _ := s.Task("T10001")
	if len(sum.Deps) != 10_000 || sum.Deps[0].ID != "T2" || !sum.Deps[9_999].Ended || sum.Deps[9_999].ID != "T1" {
		t.Fatalf("the fan-in waits for %d tasks", len(sum.Deps))
	}
	if dependents, _ := s.dependentsOf("T1"); len(dependents) != 10_000 {
		t.Fatalf("%d tasks wait for the root", len(dependents))
	}
	// A line that waits for a task of a part sent before, by request id.
	next := []Submit{{Payload: "x", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 1}, After: []string{"sum"}}, root}
	ds, _, err := s.DecideSubmits(next, t0)
	if err != nil || ds[0].Records[0].After[0] != "T10001" {
		t.Fatalf("a later part: %v %+v", err, ds)
	}
}

// TestRequeueWithDependents: a requeue of a failed task runs again, in the
// same write, the tasks its failure ended (and theirs), each waiting for
// the new task of what it waited for; the others it waited for stay named.
func TestRequeueWithDependents(t *testing.T) {
	f := depFixture{t, New()}
	up, done := f.submit(t0, Submit{}), f.submit(t0, Submit{})
	l := f.lease(t0, done)
	run(t, f.s, t0, func() (Decision, error) { return f.s.DecideComplete(done, l.LeaseID, "", t0) })
	mid := f.submit(t0, Submit{After: []string{up, done}, Delay: time.Second})
	last := f.submit(t0, Submit{After: []string{mid}})
	other := f.submit(t0, Submit{AfterEnded: []string{up}})
	l = f.lease(t0, up)
	run(t, f.s, sec(1), func() (Decision, error) { return f.s.DecideFail(up, l.LeaseID, "no", true, sec(1)) })
	if dead, _ := f.s.DeadDependents(up, sec(2)); !slices.Equal(dead, []string{mid, last}) {
		t.Fatalf("a plain requeue leaves DEAD %v", dead)
	}
	d := run(t, f.s, sec(2), func() (Decision, error) { return f.s.DecideRequeueWithDependents(up, "again", sec(2)) })
	// mid's death and last's, which follows, recorded first, as expire
	// would; then the three tasks again.
	types := make([]RecordType, len(d.Records))
	for i, r := range d.Records {
		types[i] = r.Type
	}
	if !slices.Equal(types, []RecordType{TaskDead, TaskDead, TaskCreated, TaskCreated, TaskCreated}) || d.Records[0].TaskID != mid || d.Records[1].TaskID != last {
		t.Fatalf("the requeue writes %v", types)
	}
	r := d.Records[2:]
	if r[0].TaskID != d.TaskID || r[1].RequeuedFrom != mid || !slices.Equal(r[1].After, []string{d.TaskID, done}) ||
		r[2].RequeuedFrom != last || !slices.Equal(r[2].After, []string{r[1].TaskID}) || *r[1].NotBefore != sec(3) {
		t.Fatalf("the requeue: %+v", r)
	}
	if again, _ := f.s.DecideRequeueWithDependents(up, "again", sec(3)); !again.Duplicate || len(again.Records) != 0 {
		t.Fatalf("a repeat: %+v", again)
	}
	if f.state(sec(3), other) != Waiting {
		t.Fatalf("%s, which waited for any end, is %s", other, f.state(sec(3), other))
	}
}

// TestAnEndSpillsItsDependentsAChunkAtATime: the dependents an end settles
// that only the Source holds go to the spill a chunk at a time, in
// creation order, and memory holds none of them; those memory holds stay
// there; a chunk the spill cannot write, and every one after it, is taken
// into memory; an error of the spill is the state's damage. Every way, the
// state answers as one that holds every task.
func TestAnEndSpillsItsDependentsAChunkAtATime(t *testing.T) {
	for _, c := range []struct {
		name    string
		fail    bool // the upstream fails for good: its dependents end DEAD, those after_ended are met
		refuse  int  // the spill call (1-based) that cannot write; 0: none
		broken  bool // the spill fails
		written []int
	}{
		{name: "completed", written: []int{3, 3, 2}},
		{name: "failed", fail: true, written: []int{3, 3, 2}},
		{name: "the second chunk refused", refuse: 2, written: []int{3}},
		{name: "the spill fails", broken: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			full, s, src := New(), New(), newMemSource()
			var written []int
			calls := 0
			s.SpillTo(func(tasks []*Task, seq, at int64) (Source, bool, error) {
				calls++
				if seq != s.LastSeq() || at != s.LastAt() {
					t.Errorf("a spill of record %d at %d; the record applied is %d at %d", seq, at, s.LastSeq(), s.LastAt())
				}
				switch {
				case c.broken:
					return nil, false, errors.New("a disk error")
				case calls >= c.refuse && c.refuse != 0:
					return src, false, nil
				}
				for i, task := range tasks {
					if i > 0 && Number(task.ID) <= Number(tasks[i-1].ID) {
						t.Errorf("a chunk out of creation order: %s after %s", task.ID, tasks[i-1].ID)
					}
					src.tasks[Number(task.ID)] = AppendTask(nil, task)
				}
				written = append(written, len(tasks))
				return src, true, nil
			}, 3)
			apply := func(at int64) func(Decision, error) Decision { // a decision of full, applied to both
				return func(d Decision, err error) Decision {
					t.Helper()
					if err != nil {
						t.Fatal(err)
					}
					for _, r := range d.Records {
						r.Seq, r.At = full.LastSeq()+1, at
						if err := full.Apply(r); err != nil {
							t.Fatal(err)
						}
						if err := s.Apply(r); err != nil && !c.broken {
							t.Fatal(err)
						}
					}
					return d
				}
			}
			submit := func(c Submit) string {
				c.Payload, c.Policy, c.Window = "p", RetryPolicy{MaxAttempts: 1}, NoWindow
				return apply(t0)(full.DecideSubmit(c, t0)).TaskID
			}
			up := submit(Submit{})
			other := submit(Submit{})
			for i := range 8 {
				switch i % 3 {
				case 0:
					submit(Submit{After: []string{up}, Delay: time.Duration(i) * time.Second})
				case 1:
					submit(Submit{After: []string{up, other}})
				default:
					submit(Submit{AfterEnded: []string{up}})
				}
			}
			src.write(s)
			submit(Submit{After: []string{up}}) // two that memory holds
			submit(Submit{AfterEnded: []string{up}})
			l := apply(t0 + 1)(full.DecideLease(LeaseRequest{Worker: "w", Duration: time.Hour, TaskID: up}, t0+1))
			if c.fail {
				apply(t0 + 2)(full.DecideFail(up, l.LeaseID, "no", true, t0+2))
			} else {
				apply(t0 + 2)(full.DecideComplete(up, l.LeaseID, "", t0+2))
			}
			if c.broken {
				if !errors.Is(s.Damage(), ErrSource) {
					t.Fatalf("a spill that failed left the state undamaged: %v", s.Damage())
				}
				return
			}
			if !slices.Equal(written, c.written) {
				t.Fatalf("chunks written %v, want %v", written, c.written)
			}
			if hot, want := s.HotCount(), 3+8-sum(c.written); hot != want {
				t.Fatalf("memory holds %d tasks, want %d (the upstream, the two new tasks, and those no chunk took)", hot, want)
			}
			names := namesIn(full)
			for _, at := range []int64{t0 + 2, t0 + 3_000, t0 + 10_000} {
				if got, want := answers(s, names, at), answers(full, names, at); got != want {
					t.Fatalf("at %d the state that spilled answers differently:\n%s", at, firstDiff(got, want))
				}
			}
		})
	}
}

func sum(ns []int) (n int) {
	for _, x := range ns {
		n += x
	}
	return n
}
