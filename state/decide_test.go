package state

import (
	"errors"
	"testing"
	"time"
)

// run decides and applies like the CLI does, returning the decision.
func run(t *testing.T, s *State, now int64, decide func() (Decision, error)) Decision {
	t.Helper()
	d, err := decide()
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	for _, r := range d.Records {
		r.Seq, r.At = s.LastSeq()+1, now
		if err := s.Apply(r); err != nil {
			t.Fatalf("a decided record was refused: %v", err)
		}
	}
	return d
}

func refusalKind(err error) Kind {
	var r *Error
	if errors.As(err, &r) {
		return r.Kind
	}
	return ""
}

var defaultSubmit = Submit{Payload: "P", Window: Duration(5 * time.Minute), Policy: RetryPolicy{MaxAttempts: 3}}

func TestSubmitIdempotence(t *testing.T) {
	s := New()
	first := run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(withRequest(defaultSubmit, "job-1"), t0) })
	again := run(t, s, sec(1), func() (Decision, error) { return s.DecideSubmit(withRequest(defaultSubmit, "job-1"), sec(1)) })
	if first.TaskID != "T1" || again.TaskID != "T1" || !again.Duplicate || len(again.Records) != 0 {
		t.Fatalf("repeat = %+v", again)
	}
	other := withRequest(defaultSubmit, "job-1")
	other.Payload = "Q"
	if _, err := s.DecideSubmit(other, sec(3)); refusalKind(err) != RequestConflict {
		t.Fatalf("a different payload under the same request id: %v", err)
	}
	gen := run(t, s, sec(2), func() (Decision, error) { return s.DecideSubmit(defaultSubmit, sec(2)) })
	if task, _ := s.Task(gen.TaskID); gen.TaskID != "T2" || task.RequestID != "R2" {
		t.Fatalf("generated ids: %s %s", gen.TaskID, task.RequestID)
	}
}

func TestGeneratedRequestIDSkipsTakenOnes(t *testing.T) {
	s := New()
	run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(withRequest(defaultSubmit, "R2"), t0) })
	d := run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(defaultSubmit, t0) })
	if task, _ := s.Task(d.TaskID); task.RequestID != "R3" {
		t.Fatalf("generated request id %s collides with a client's", task.RequestID)
	}
}

func withRequest(c Submit, id string) Submit {
	c.RequestID = id
	return c
}

func TestLeaseFIFOAndEmpty(t *testing.T) {
	s := New()
	for range 2 {
		run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(defaultSubmit, t0) })
	}
	lease := func(worker string, now int64) Decision {
		return run(t, s, now, func() (Decision, error) {
			return s.DecideLease(LeaseRequest{Worker: worker, Duration: 30 * time.Second}, now)
		})
	}
	if d := lease("W1", t0); d.TaskID != "T1" || d.LeaseID != "L1" {
		t.Fatalf("first lease %+v", d)
	}
	if d := lease("W2", t0); d.TaskID != "T2" || d.LeaseID != "L2" {
		t.Fatalf("second lease %+v", d)
	}
	if d := lease("W3", sec(10)); d.Outcome != ResultEmpty || len(d.Records) != 0 {
		t.Fatalf("nothing eligible: %+v", d)
	}
	if d := lease("W3", sec(30)); d.TaskID != "T1" || d.LeaseID != "L3" {
		t.Fatalf("after expiry the oldest task comes first: %+v", d)
	}
}

func TestLeaseRequestIDRepeat(t *testing.T) {
	s := New()
	run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(defaultSubmit, t0) })
	req := LeaseRequest{Worker: "W1", Duration: 30 * time.Second, RequestID: "poll-1"}
	first := run(t, s, t0, func() (Decision, error) { return s.DecideLease(req, t0) })
	again := run(t, s, sec(5), func() (Decision, error) { return s.DecideLease(req, sec(5)) })
	if again.Outcome != ResultLeased || again.LeaseID != first.LeaseID || !again.Duplicate || len(again.Records) != 0 {
		t.Fatalf("repeat while current: %+v", again)
	}
	late := run(t, s, sec(31), func() (Decision, error) { return s.DecideLease(req, sec(31)) })
	if late.Outcome != ResultCancelled || len(late.Records) != 0 {
		t.Fatalf("repeat after expiry: %+v", late)
	}
	other := req
	other.Worker = "W2"
	if _, err := s.DecideLease(other, sec(5)); refusalKind(err) != RequestConflict {
		t.Fatalf("another worker reusing the id: %v", err)
	}
}

func TestLeaseCappedAtDeadline(t *testing.T) {
	s := New()
	c := defaultSubmit
	c.Window = Duration(20 * time.Second)
	run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(c, t0) })
	d := run(t, s, t0, func() (Decision, error) {
		return s.DecideLease(LeaseRequest{Worker: "W1", Duration: time.Minute}, t0)
	})
	if task, _ := s.Task(d.TaskID); task.Lease.Expiry != sec(20) {
		t.Fatalf("expiry %d, want the deadline %d", task.Lease.Expiry, sec(20))
	}
}

func TestCompleteAndFailAnswers(t *testing.T) {
	s := New()
	run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(defaultSubmit, t0) })
	run(t, s, t0, func() (Decision, error) {
		return s.DecideLease(LeaseRequest{Worker: "W1", Duration: 30 * time.Second}, t0)
	})
	f := run(t, s, sec(1), func() (Decision, error) { return s.DecideFail("T1", "L1", "boom", false, sec(1)) })
	if f.Outcome != ResultRetry || len(f.Records) != 1 {
		t.Fatalf("fail: %+v", f)
	}
	if again := run(t, s, sec(2), func() (Decision, error) { return s.DecideFail("T1", "L1", "boom", false, sec(2)) }); again.Outcome != ResultRetry || !again.Duplicate || len(again.Records) != 0 {
		t.Fatalf("repeated fail: %+v", again)
	}
	if late := run(t, s, sec(3), func() (Decision, error) { return s.DecideComplete("T1", "L1", "", sec(3)) }); late.Outcome != ResultCancelled || late.Records[0].Type != TaskCancelled {
		t.Fatalf("complete under a failed lease: %+v", late)
	}
	run(t, s, sec(4), func() (Decision, error) {
		return s.DecideLease(LeaseRequest{Worker: "W2", Duration: 30 * time.Second}, sec(4))
	})
	c := run(t, s, sec(5), func() (Decision, error) { return s.DecideComplete("T1", "L2", "", sec(5)) })
	if c.Outcome != ResultCommitted || c.Duplicate {
		t.Fatalf("complete: %+v", c)
	}
	if again := run(t, s, sec(6), func() (Decision, error) { return s.DecideComplete("T1", "L2", "", sec(6)) }); !again.Duplicate || len(again.Records) != 0 {
		t.Fatalf("repeated complete: %+v", again)
	}
	if _, err := s.DecideComplete("T1", "L9", "", sec(7)); refusalKind(err) != NotFound {
		t.Fatalf("a lease never granted: %v", err)
	}
	if _, err := s.DecideComplete("T9", "L1", "", sec(7)); refusalKind(err) != NotFound {
		t.Fatalf("an unknown task: %v", err)
	}
	if _, err := s.DecideComplete("T1", "nope", "", sec(7)); refusalKind(err) != InvalidInput {
		t.Fatalf("a malformed lease id: %v", err)
	}
}

func TestExtendCancelledWritesNothing(t *testing.T) {
	s := New()
	run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(defaultSubmit, t0) })
	run(t, s, t0, func() (Decision, error) {
		return s.DecideLease(LeaseRequest{Worker: "W1", Duration: 30 * time.Second}, t0)
	})
	if d := run(t, s, sec(10), func() (Decision, error) { return s.DecideExtend("T1", "L1", time.Minute, sec(10)) }); d.Outcome != ResultExtended {
		t.Fatalf("extend: %+v", d)
	}
	if task, _ := s.Task("T1"); task.Lease.Expiry != sec(70) {
		t.Fatalf("expiry %d", task.Lease.Expiry)
	}
	d := run(t, s, sec(70), func() (Decision, error) { return s.DecideExtend("T1", "L1", time.Minute, sec(70)) })
	if d.Outcome != ResultCancelled || len(d.Records) != 0 {
		t.Fatalf("extend after expiry: %+v", d)
	}
}

func TestExpireWritesWhatTimeRevoked(t *testing.T) {
	s := New()
	short := defaultSubmit
	short.Window = Duration(time.Minute)
	run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(defaultSubmit, t0) })
	run(t, s, t0, func() (Decision, error) { return s.DecideSubmit(short, t0) })
	run(t, s, t0, func() (Decision, error) {
		return s.DecideLease(LeaseRequest{Worker: "W1", Duration: 30 * time.Second}, t0)
	})
	d := run(t, s, sec(60), func() (Decision, error) { return s.DecideExpire(sec(60)) })
	if len(d.Records) != 2 || d.Records[0].Type != LeaseExpired || d.Records[1].Type != TaskDead {
		t.Fatalf("expire: %+v", d.Records)
	}
	if again, _ := s.DecideExpire(sec(60)); len(again.Records) != 0 {
		t.Fatalf("a second expire must find nothing: %+v", again.Records)
	}
}
