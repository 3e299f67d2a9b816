package state

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/refmodel"
)

// TestRandomHistories runs thousands of random command sequences (several
// workers, random time steps, stale and repeated calls) through Decide and
// Apply and, side by side, through refmodel, a reference model written from
// the rules of docs/guarantees.md alone. After every command the answers must agree (outcome, ids,
// attempt, expiry, not_before, the record types written) and so must every
// task as it stands at that time; after every record every invariant is
// checked; and replaying the records from scratch must give exactly the state
// live application built.
//
// Revision 2's queue features are in the mix: delayed tasks, queues and
// priorities, lease --queue, abort and requeue.
//
// Mutations it catches (each tried by hand, each failing within the first
// few dozen histories): a lease's lapse backing off from the LeaseExpired
// record's time instead of the lease's expiry (the revision-1 rule); the
// backoff not doubling (d*2 dropped in RetryPolicy.backoff); lease picking the
// newest eligible task instead of the oldest; an extension not capped at the
// deadline; a repeated fail answering with the task's current attempt; the
// window counted from the submit instead of the delayed task's time; a lower
// priority leased first; an abort that leaves the lease current.
func TestRandomHistories(t *testing.T) {
	histories, steps := 1000, 80
	switch {
	case soaking():
		histories = 3000
	case testing.Short():
		histories = 300
	}
	total := 0
	outcomes := map[string]int{}
	for seed := range histories {
		total += runHistory(t, uint64(seed), steps, outcomes)
	}
	t.Logf("%d histories, %d records: every answer and every task equal to the reference model's, every invariant checked after every record", histories, total)
	t.Logf("calls by outcome: %v", outcomes)
	for _, must := range []string{"abort OK", "abort ERROR", "requeue ACK", "requeue ERROR", "lease EMPTY", "submit ACK", "fail RETRY", "complete CANCELLED", "limit OK", "release RELEASED", "release CANCELLED", "pause OK", "resume OK", "resume ERROR", "schedule OK", "schedule ERROR", "unschedule OK", "unschedule ERROR", "fire OK", "rate OK", "TaskDead by a dependency", "requeue with dependents"} {
		if outcomes[must] == 0 {
			t.Errorf("no call ended %q: the generator does not reach it", must)
		}
	}
}

func runHistory(t *testing.T, seed uint64, steps int, outcomes map[string]int) int {
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
	live, v, model := New(), NewVerifier(), refmodel.New()
	var recs []Record
	now := t0
	completions := map[string]int{}
	for step := range steps {
		now += rng.Int64N(15_000)
		c := randomCall(rng, model, now)
		d, err := c.decide(live, now)
		want := c.model(model, now)
		var refusal *Error
		if err != nil && !errors.As(err, &refusal) {
			t.Fatalf("seed %d step %d %s: a refusal must be a *Error, got %v", seed, step, c, err)
		}
		for _, r := range d.Records {
			r.Seq, r.At, r.Actor = live.LastSeq()+1, now, "w"+strconv.Itoa(rng.IntN(3))
			if err := live.Apply(r); err != nil {
				t.Fatalf("seed %d step %d %s: decided record refused: %v", seed, step, c, err)
			}
			if err := v.Step(r); err != nil {
				t.Fatalf("seed %d step %d %s: %v", seed, step, c, err)
			}
			if r.Dependency != "" {
				outcomes["TaskDead by a dependency"]++
			}
			if r.Type == TaskCompleted {
				if completions[r.TaskID]++; completions[r.TaskID] > 1 {
					t.Fatalf("seed %d: %s completed twice", seed, r.TaskID)
				}
			}
			recs = append(recs, r)
		}
		got := answerOf(live, c, d, err)
		outcomes[c.op+" "+got.Result]++
		if c.op == "requeue" && len(d.Records) > 1 {
			outcomes["requeue with dependents"]++
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d step %d %s at %d:\n state answered %+v\n model answered %+v", seed, step, c, now, got, want)
		}
		if gotViews, wantViews := viewsOf(live, now), model.Views(now); !reflect.DeepEqual(gotViews, wantViews) {
			t.Fatalf("seed %d step %d %s at %d: the tasks differ\n state %+v\n model %+v", seed, step, c, now, gotViews, wantViews)
		}
	}
	replayed := New()
	for _, r := range recs {
		if err := replayed.Apply(r); err != nil {
			t.Fatalf("seed %d: replay refused %v", seed, err)
		}
	}
	if !reflect.DeepEqual(replayed, live) || !reflect.DeepEqual(v.State, live) {
		t.Fatalf("seed %d: replay differs from live application\nlive   %s\nreplay %s", seed, snapshot(live), snapshot(replayed))
	}
	return len(recs)
}

// call is one random client call, for both the state and the model.
type call struct {
	op                  string
	worker, task, lease string
	req                 string
	d                   time.Duration
	submit              Submit
	permanent           bool
	queues              []string
	reason              string
	result              string
	limit               int // a queue's limit of leases (0: none)
	delay               time.Duration
}

func (c call) String() string {
	type fields call // its fields, without this method (which printing an embedding would call again)
	return fmt.Sprintf("%+v", fields(c))
}

// randomCall picks a call the way a busy set of clients would, mostly
// sensible and sometimes stale or repeated. It draws task and lease ids from
// the model, so that a wrong state cannot steer its own test.
func randomCall(rng *rand.Rand, m *refmodel.Model, now int64) call {
	c := call{worker: "W" + strconv.Itoa(rng.IntN(4)), d: time.Duration(1+rng.IntN(40)) * time.Second}
	views := m.Views(now)
	switch op := rng.IntN(19); {
	case op < 2 || len(views) == 0:
		c.op = "submit"
		c.submit = Submit{
			Payload:  "p" + strconv.Itoa(rng.IntN(5)),
			Window:   randomWindow(rng),
			Policy:   RetryPolicy{MaxAttempts: 1 + rng.IntN(3), Backoff: Duration(time.Duration(rng.IntN(10)) * time.Second)},
			Queue:    []string{"", "default", "mail", "img"}[rng.IntN(4)],
			Priority: rng.IntN(3) - 1,
		}
		c.submit.Policy.BackoffMax = c.submit.Policy.Backoff * Duration(1+rng.IntN(4))
		if rng.IntN(3) == 0 {
			c.submit.RequestID = "req" + strconv.Itoa(rng.IntN(6))
		}
		if rng.IntN(3) == 0 && len(views) > 0 { // chains, fan-in, fan-out: what it waits for
			for range 1 + rng.IntN(3) {
				id := views[rng.IntN(len(views))].ID
				if rng.IntN(25) == 0 {
					id = "T9999"
				}
				if rng.IntN(3) == 0 {
					c.submit.AfterEnded = append(c.submit.AfterEnded, id)
				} else {
					c.submit.After = append(c.submit.After, id)
				}
			}
		}
		switch rng.IntN(5) {
		case 0:
			c.submit.Delay = time.Duration(rng.IntN(60)) * time.Second
		case 1:
			c.submit.NotBefore = now + int64(rng.IntN(60_000)) - 20_000 // sometimes in the past
		}
		return c
	case op < 5:
		c.op = "lease"
		if rng.IntN(4) == 0 {
			c.req = "lr" + strconv.Itoa(rng.IntN(8))
		}
		if rng.IntN(4) == 0 {
			c.task = views[rng.IntN(len(views))].ID
		} else if rng.IntN(3) == 0 {
			c.queues = [][]string{{"mail"}, {"img", "default"}, {"none"}}[rng.IntN(3)]
		}
		return c
	case op == 9:
		c.op = "expire"
		return c
	case op == 10:
		c.op, c.task = "abort", views[rng.IntN(len(views))].ID
		c.reason = []string{"bad batch", "operator"}[rng.IntN(2)]
		return c
	case op == 12:
		c.op, c.queues = "limit", []string{[]string{"default", "mail", "img"}[rng.IntN(3)]}
		c.limit = rng.IntN(3) // 0: none
		return c
	case op == 13:
		c.op, c.queues = "pause", []string{[]string{"default", "mail", "img"}[rng.IntN(3)]}
		c.delay = time.Duration(rng.IntN(3)*rng.IntN(60)) * time.Second // 0: until resumed
		return c
	case op == 14:
		c.op, c.queues = "resume", []string{[]string{"default", "mail", "img"}[rng.IntN(3)]}
		return c
	case op == 15:
		c.op, c.reason = "schedule", []string{"s1", "s2"}[rng.IntN(2)]
		c.delay = []time.Duration{20 * time.Second, 90 * time.Second, 5 * time.Minute}[rng.IntN(3)]
		c.result = []string{CatchUpNone, CatchUpLast, CatchUpAll}[rng.IntN(3)]
		c.submit = Submit{Payload: "p" + strconv.Itoa(rng.IntN(2)), Window: randomWindow(rng),
			Policy: RetryPolicy{MaxAttempts: 1 + rng.IntN(3)}, Queue: []string{"default", "mail"}[rng.IntN(2)]}
		return c
	case op == 18:
		c.op, c.queues = "rate", []string{[]string{"default", "mail", "img"}[rng.IntN(3)]}
		c.limit = rng.IntN(4) // a rate of 0: none
		c.delay = []time.Duration{time.Second, time.Minute}[rng.IntN(2)]
		c.permanent = rng.IntN(2) == 0 // with a burst of 2
		return c
	case op == 16:
		c.op, c.reason = "unschedule", []string{"s1", "s2"}[rng.IntN(2)]
		return c
	case op == 17:
		c.op = "fire"
		return c
	case op == 11:
		c.op, c.task = "requeue", views[rng.IntN(len(views))].ID
		if rng.IntN(2) == 0 {
			c.req = "req" + strconv.Itoa(rng.IntN(6))
		}
		c.permanent = rng.IntN(2) == 0 // with the dependents its end ended
		return c
	}
	c.task = views[rng.IntN(len(views))].ID
	leases := m.Leases(c.task)
	if len(leases) == 0 {
		c.op = "expire"
		return c
	}
	c.lease = leases[len(leases)-1]
	if rng.IntN(4) == 0 {
		c.lease = leases[rng.IntN(len(leases))]
	}
	c.op = []string{"extend", "complete", "fail", "release"}[rng.IntN(4)]
	c.delay = time.Duration(rng.IntN(3)*rng.IntN(20)) * time.Second
	c.permanent = rng.IntN(5) == 0
	c.result = []string{"", "", "done", "done: 3 rows"}[rng.IntN(4)]
	return c
}

func (c call) decide(s *State, now int64) (Decision, error) {
	switch c.op {
	case "submit":
		return s.DecideSubmit(c.submit, now)
	case "lease":
		return s.DecideLease(LeaseRequest{Worker: c.worker, Duration: c.d, TaskID: c.task, RequestID: c.req, Queues: c.queues}, now)
	case "abort":
		return s.DecideAbort(c.task, c.reason, now)
	case "requeue":
		if c.permanent {
			return s.DecideRequeueWithDependents(c.task, c.req, now)
		}
		return s.DecideRequeue(c.task, c.req, now)
	case "extend":
		return s.DecideExtend(c.task, c.lease, c.d, now)
	case "complete":
		return s.DecideComplete(c.task, c.lease, c.result, now)
	case "fail":
		return s.DecideFail(c.task, c.lease, "flaky", c.permanent, now)
	case "release":
		return s.DecideRelease(c.task, c.lease, c.delay, now)
	case "limit":
		var limit *int
		if c.limit > 0 {
			limit = &c.limit
		}
		return s.DecideQueueLimit(c.queues[0], limit)
	case "rate":
		if c.limit == 0 {
			return s.DecideQueueRate(c.queues[0], nil)
		}
		r := Rate{Count: c.limit, Per: c.delay.Milliseconds()}
		if c.permanent {
			r.Burst = 2
		}
		return s.DecideQueueRate(c.queues[0], &r)
	case "schedule":
		return s.DecideScheduleAdd(ScheduleSpec{Name: c.reason, Every: Duration(c.delay), CatchUp: c.result, Template: c.submit}, nil, now)
	case "unschedule":
		return s.DecideScheduleRemove(c.reason)
	case "fire":
		return Decision{Outcome: ResultOK, Records: s.DueFirings(nil, now)}, nil
	case "pause":
		return s.DecidePause(c.queues[0], "maintenance", c.delay, now)
	case "resume":
		return s.DecideResume(c.queues[0], now)
	}
	return s.DecideExpire(now)
}

// randomWindow is a window of 30s to 330s, or (one in four) none.
func randomWindow(rng *rand.Rand) Duration {
	if rng.IntN(4) == 0 {
		return NoWindow
	}
	return Duration(time.Duration(30+rng.IntN(300)) * time.Second)
}

// modelWindow is a window as the reference model takes it.
func modelWindow(w Duration) int64 {
	if w == NoWindow {
		return refmodel.NoWindow
	}
	return w.Millis()
}

func (c call) model(m *refmodel.Model, now int64) refmodel.Answer {
	switch c.op {
	case "submit":
		s, p := c.submit, c.submit.Policy
		return m.Submit(now, refmodel.Spec{Payload: s.Payload, Window: modelWindow(s.Window),
			Policy: refmodel.Policy{MaxAttempts: p.MaxAttempts, Backoff: p.Backoff.Millis(), BackoffMax: p.BackoffMax.Millis()},
			Req:    s.RequestID, Delay: s.Delay.Milliseconds(), NotBefore: s.NotBefore, Queue: s.Queue, Priority: s.Priority, After: s.After, AfterEnded: s.AfterEnded})
	case "lease":
		return m.Lease(now, c.worker, c.d.Milliseconds(), c.task, c.req, c.queues)
	case "abort":
		return m.Abort(now, c.task, c.reason)
	case "requeue":
		if c.permanent {
			return m.RequeueWithDependents(now, c.task, c.req)
		}
		return m.Requeue(now, c.task, c.req)
	case "extend":
		return m.Extend(now, c.task, c.lease, c.d.Milliseconds())
	case "complete":
		return m.Complete(now, c.task, c.lease, c.result)
	case "fail":
		return m.Fail(now, c.task, c.lease, c.permanent)
	case "release":
		return m.Release(now, c.task, c.lease, c.delay.Milliseconds())
	case "limit":
		return m.Limit(now, c.queues[0], c.limit)
	case "rate":
		burst := 0
		if c.permanent && c.limit > 0 {
			burst = 2
		}
		return m.Rate(now, c.queues[0], c.limit, c.delay.Milliseconds(), burst)
	case "schedule":
		p := c.submit.Policy
		return m.ScheduleAdd(now, c.reason, c.delay.Milliseconds(), c.result, refmodel.Spec{Payload: c.submit.Payload, Window: modelWindow(c.submit.Window),
			Policy: refmodel.Policy{MaxAttempts: p.MaxAttempts, Backoff: p.Backoff.Millis(), BackoffMax: p.BackoffMax.Millis()}, Queue: c.submit.Queue})
	case "unschedule":
		return m.ScheduleRemove(now, c.reason)
	case "fire":
		return m.Fire(now)
	case "pause":
		return m.Pause(now, c.queues[0], c.delay.Milliseconds())
	case "resume":
		return m.Resume(now, c.queues[0])
	}
	return m.Expire(now)
}

// answerOf is the state's answer in the model's terms, read from the
// decision and, after its records are applied, from the state, as the
// command line reads it.
func answerOf(s *State, c call, d Decision, err error) refmodel.Answer {
	var refusal *Error
	if errors.As(err, &refusal) {
		return refmodel.Answer{Result: "ERROR", Error: string(refusal.Kind)}
	}
	a := refmodel.Answer{Result: string(d.Outcome), Task: d.TaskID, Lease: d.LeaseID, Duplicate: d.Duplicate}
	for _, r := range d.Records {
		a.Written = append(a.Written, string(r.Type))
	}
	switch {
	case d.Outcome == ResultEmpty:
		a.NextEligibleAt, a.Live = d.NextEligibleAt, d.Live
	case c.op == "abort":
		a.State = string(d.State)
	case d.Outcome == ResultLeased:
		a.Attempt, a.Expiry = d.Attempt, d.Expiry
	case d.Outcome == ResultExtended:
		a.Expiry = d.Expiry
	case d.Outcome == ResultReleased:
		a.Attempt, a.State, a.NotBefore = d.Attempt, string(d.State), d.NotBefore
	case c.op == "fail" && (d.Outcome == ResultRetry || d.Outcome == ResultFailed):
		if !d.Duplicate { // as the command line does: a fresh failure's answer is read after it is applied
			fa, err := s.FailAnswer(c.task, c.lease)
			if err != nil {
				return refmodel.Answer{Result: "ERROR", Error: err.Error()}
			}
			d = fa
		}
		a.Attempt, a.State, a.NotBefore = d.Attempt, string(d.State), d.NotBefore
	case c.op == "submit" || c.op == "expire":
		if c.op == "expire" {
			a.Task, a.Lease = "", ""
		}
	}
	return a
}

// viewsOf is every task of s as it stands at now, in the model's terms.
func viewsOf(s *State, now int64) []refmodel.View {
	tasks, _ := s.Tasks()
	out := make([]refmodel.View, 0, len(tasks))
	for _, t := range tasks {
		c := t.At(now)
		v := refmodel.View{ID: c.ID, State: string(c.State), Attempt: c.Attempt, Deadline: c.Deadline(), Queue: c.Queue, Priority: c.Priority, Result: c.Result}
		if c.Lease != nil {
			v.Lease, v.Worker, v.Expiry = c.Lease.ID, c.Lease.Worker, c.Lease.Expiry
		}
		if c.State == Waiting {
			v.NotBefore = c.NotBefore
			for _, d := range c.Waits() {
				v.Waits += " " + d.ID
			}
		}
		out = append(out, v)
	}
	return out
}
