package state

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// want is the task as a row of the state-machine table leaves it.
type want struct {
	state     TaskState
	attempt   int
	lease     string // "" for none
	notBefore int64  // checked when non-zero
	expiry    int64  // checked when non-zero
}

func checkTask(t *testing.T, s *State, id string, w want) {
	t.Helper()
	task, err := s.Task(id)
	if err != nil {
		t.Fatalf("task %s: %v", id, err)
	}
	lease := ""
	if task.Lease != nil {
		lease = task.Lease.ID
	}
	if task.State != w.state || task.Attempt != w.attempt || lease != w.lease {
		t.Fatalf("%s = %s attempt %d lease %q; want %s attempt %d lease %q", id, task.State, task.Attempt, lease, w.state, w.attempt, w.lease)
	}
	if w.notBefore != 0 && task.NotBefore != w.notBefore {
		t.Fatalf("%s not_before = %d; want %d", id, task.NotBefore, w.notBefore)
	}
	if w.expiry != 0 && task.Lease.Expiry != w.expiry {
		t.Fatalf("%s expiry = %d; want %d", id, task.Lease.Expiry, w.expiry)
	}
}

var (
	fiveMin  = created("T1", t0, 5*time.Minute, policy(3, 0, 0))
	oneShot  = created("T1", t0, 5*time.Minute, policy(1, 0, 0))
	backoff  = created("T1", t0, 5*time.Minute, policy(3, 10*time.Second, 15*time.Second))
	grantL1  = granted("T1", "L1", "W1", 1, t0, sec(30))
	shortWin = created("T1", t0, time.Minute, policy(3, 0, 0))
)

// TestTransitions covers every row of the state machine's table
// (docs/guarantees.md) that applies.
func TestTransitions(t *testing.T) {
	cases := []struct {
		name  string
		story []Record
		want  want
	}{
		{"TaskCreated makes WAITING attempt 0", []Record{fiveMin}, want{state: Waiting}},
		{"LeaseGranted on WAITING", []Record{fiveMin, grantL1}, want{state: Leased, attempt: 1, lease: "L1", expiry: sec(30)}},
		{"LeaseGranted after an implicit expiry (seed 000)", []Record{fiveMin, grantL1, granted("T1", "L2", "W2", 2, sec(40), sec(70))},
			want{state: Leased, attempt: 2, lease: "L2"}},
		{"LeaseGranted exactly at expiry", []Record{fiveMin, grantL1, granted("T1", "L2", "W2", 2, sec(30), sec(60))},
			want{state: Leased, attempt: 2, lease: "L2"}},
		{"LeaseExtended moves expiry", []Record{fiveMin, grantL1, extended("T1", "L1", sec(20), sec(50))},
			want{state: Leased, attempt: 1, lease: "L1", expiry: sec(50)}},
		// Revision 2: the record writes down the lapse at the lease's expiry
		// (30s), so the backoff counts from there, not from the record's time.
		{"LeaseExpired goes WAITING with backoff from the lease's expiry", []Record{backoff, grantL1, onLease(LeaseExpired, "T1", "L1", sec(35))},
			want{state: Waiting, attempt: 1, notBefore: sec(40)}},
		{"LeaseExpired on the last attempt is DEAD", []Record{oneShot, grantL1, onLease(LeaseExpired, "T1", "L1", sec(30))},
			want{state: Dead, attempt: 1}},
		{"LeaseExpired after the deadline is DEAD", []Record{shortWin, granted("T1", "L1", "W1", 1, t0, sec(60)), onLease(LeaseExpired, "T1", "L1", sec(60))},
			want{state: Dead, attempt: 1}},
		{"TaskCompleted", []Record{fiveMin, grantL1, onLease(TaskCompleted, "T1", "L1", sec(10))}, want{state: Completed, attempt: 1}},
		{"TaskCancelled changes nothing", []Record{fiveMin, grantL1, granted("T1", "L2", "W2", 2, sec(40), sec(70)), onLease(TaskCancelled, "T1", "L1", sec(41))},
			want{state: Leased, attempt: 2, lease: "L2"}},
		{"TaskCancelled after completion (seed 000 step 7)", []Record{fiveMin, grantL1, granted("T1", "L2", "W2", 2, sec(40), sec(70)),
			onLease(TaskCompleted, "T1", "L2", sec(50)), onLease(TaskCancelled, "T1", "L1", sec(55))}, want{state: Completed, attempt: 2}},
		{"TaskFailed retries after backoff", []Record{backoff, grantL1, failed("T1", "L1", sec(5), false)},
			want{state: Waiting, attempt: 1, notBefore: sec(15)}},
		{"backoff doubles and is capped", []Record{backoff, grantL1, failed("T1", "L1", sec(5), false),
			granted("T1", "L2", "W1", 2, sec(15), sec(45)), failed("T1", "L2", sec(20), false)},
			want{state: Waiting, attempt: 2, notBefore: sec(35)}}, // min(10s*2, 15s)
		{"TaskFailed permanent is FAILED", []Record{fiveMin, grantL1, failed("T1", "L1", sec(5), true)}, want{state: Failed, attempt: 1}},
		{"TaskFailed on the last attempt is FAILED", []Record{oneShot, grantL1, failed("T1", "L1", sec(5), false)}, want{state: Failed, attempt: 1}},
		{"TaskDead on WAITING after the deadline", []Record{fiveMin, dead("T1", sec(300))}, want{state: Dead}},
		{"TaskDead on LEASED whose lease ran out", []Record{shortWin, grantL1, dead("T1", sec(61))}, want{state: Dead, attempt: 1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := applyAll(t, c.story...)
			checkTask(t, v.State, "T1", c.want)
		})
	}
}

// TestRefusals covers every precondition: each record must be refused, name
// the invariant where it protects one, and leave the state unchanged.
func TestRefusals(t *testing.T) {
	cases := []struct {
		name      string
		story     []Record
		bad       Record
		invariant string // "" when the refusal is a plain precondition
		contains  string
	}{
		{"duplicate task id", []Record{fiveMin}, created("T1", t0, time.Minute, policy(1, 0, 0)), "", "already exists"},
		{"malformed task id", nil, created("X1", t0, time.Minute, policy(1, 0, 0)), "", "T<n>"},
		{"empty payload", nil, func() Record { r := fiveMin; r.Payload = ""; return r }(), "", "payload is empty"},
		{"missing policy", nil, func() Record { r := fiveMin; r.RetryPolicy = nil; return r }(), "", "retry_policy"},
		{"zero window", nil, created("T1", t0, 0, policy(1, 0, 0)), "", "window"},
		{"zero attempts", nil, created("T1", t0, time.Minute, policy(0, 0, 0)), "", "max_attempts"},
		{"duplicate request id", []Record{fiveMin}, func() Record { r := created("T2", t0, time.Minute, policy(1, 0, 0)); r.RequestID = "R-T1"; return r }(), "", "request id"},
		{"grant on a current lease", []Record{fiveMin, grantL1}, granted("T1", "L2", "W2", 2, sec(10), sec(40)), InvOneLease, "still holds"},
		{"grant on a terminal task", []Record{fiveMin, grantL1, onLease(TaskCompleted, "T1", "L1", sec(1))}, granted("T1", "L2", "W2", 2, sec(10), sec(40)), InvTerminal, "COMPLETED"},
		{"grant before not_before", []Record{backoff, grantL1, failed("T1", "L1", sec(5), false)}, granted("T1", "L2", "W2", 2, sec(10), sec(40)), "", "backing off"},
		{"grant after the deadline", []Record{shortWin}, granted("T1", "L1", "W1", 1, sec(60), sec(61)), InvTerminal, "DEAD"},
		{"grant skipping an attempt", []Record{fiveMin}, granted("T1", "L1", "W1", 2, t0, sec(30)), InvAttempts, "attempt 2"},
		{"grant past max attempts", []Record{oneShot, grantL1}, granted("T1", "L2", "W1", 2, sec(31), sec(60)), InvTerminal, "DEAD"},
		{"grant expiring after the deadline", []Record{shortWin}, granted("T1", "L1", "W1", 1, t0, sec(61)), "", "deadline"},
		{"grant expiring at grant time", []Record{fiveMin}, granted("T1", "L1", "W1", 1, t0, t0), "", "after the grant"},
		{"lease id not increasing", []Record{fiveMin, grantL1, created("T2", t0, time.Minute, policy(1, 0, 0))}, granted("T2", "L1", "W1", 1, t0, sec(30)), InvSequence, "does not increase"},
		{"grant on an unknown task", nil, granted("T9", "L1", "W1", 1, t0, sec(30)), "", "unknown task"},
		{"extend an expired lease", []Record{fiveMin, grantL1}, extended("T1", "L1", sec(30), sec(60)), "", "not the current valid lease"},
		{"extend past the deadline", []Record{shortWin, grantL1}, extended("T1", "L1", sec(10), sec(61)), "", "deadline"},
		{"extend another task's lease", []Record{fiveMin, grantL1, created("T2", t0, time.Minute, policy(1, 0, 0))}, extended("T2", "L1", sec(10), sec(40)), InvOneLease, "belongs to T1"},
		{"extend a lease never granted", []Record{fiveMin}, extended("T1", "L7", sec(10), sec(40)), InvOneLease, "never granted"},
		{"expire before expiry", []Record{fiveMin, grantL1}, onLease(LeaseExpired, "T1", "L1", sec(29)), "", "expires at"},
		{"expire a lease that is not current", []Record{fiveMin, grantL1, granted("T1", "L2", "W1", 2, sec(31), sec(60))}, onLease(LeaseExpired, "T1", "L1", sec(61)), "", "not the current lease"},
		{"complete under an expired lease", []Record{fiveMin, grantL1}, onLease(TaskCompleted, "T1", "L1", sec(30)), "", "must be TaskCancelled"},
		{"complete under an old lease", []Record{fiveMin, grantL1, granted("T1", "L2", "W1", 2, sec(31), sec(60))}, onLease(TaskCompleted, "T1", "L1", sec(32)), "", "must be TaskCancelled"},
		{"complete twice", []Record{fiveMin, grantL1, onLease(TaskCompleted, "T1", "L1", sec(1))}, onLease(TaskCompleted, "T1", "L1", sec(2)), InvTerminal, "already COMPLETED"},
		{"cancel the current valid lease", []Record{fiveMin, grantL1}, onLease(TaskCancelled, "T1", "L1", sec(10)), "", "nothing was cancelled"},
		{"fail under a stale lease", []Record{fiveMin, grantL1}, failed("T1", "L1", sec(31), false), "", "must be TaskCancelled"},
		{"fail without a reason", []Record{fiveMin, grantL1}, func() Record { r := failed("T1", "L1", sec(1), false); r.Reason = ""; return r }(), "", "reason"},
		{"fail a terminal task", []Record{fiveMin, grantL1, failed("T1", "L1", sec(1), true)}, failed("T1", "L1", sec(2), true), InvTerminal, "already FAILED"},
		{"dead before the deadline", []Record{fiveMin}, dead("T1", sec(299)), "", "window closes"},
		{"dead on a terminal task", []Record{fiveMin, grantL1, onLease(TaskCompleted, "T1", "L1", sec(1))}, dead("T1", sec(300)), InvTerminal, "already COMPLETED"},
		{"dead after an expiry already ended it", []Record{oneShot, grantL1}, dead("T1", sec(300)), InvTerminal, "already DEAD"},
		{"time runs backwards", []Record{fiveMin, grantL1}, created("T2", sec(-1), time.Minute, policy(1, 0, 0)), InvSequence, "before the previous"},
		{"unknown record type", nil, Record{At: t0, Type: "TaskTeleported"}, "", "unknown record type"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			re := refused(t, c.story, c.bad)
			if re.Invariant != c.invariant || !strings.Contains(re.Msg, c.contains) {
				t.Fatalf("got %q [%s]; want message containing %q [%s]", re.Msg, re.Invariant, c.contains, c.invariant)
			}
		})
	}
}

func TestSequenceGap(t *testing.T) {
	s := New()
	r := fiveMin
	r.Seq = 2
	var re *RecordError
	if err := s.Apply(r); !errors.As(err, &re) || re.Invariant != InvSequence {
		t.Fatalf("a gap must break invariant 5, got %v", err)
	}
}

// TestLapseAtNow checks the state shown at a time with no record: the seed-000
// expiry, and a window closing.
func TestLapseAtNow(t *testing.T) {
	v := applyAll(t, backoff, grantL1)
	task, _ := v.State.Task("T1")
	if c := task.At(sec(29)); c.State != Leased {
		t.Fatalf("before expiry: %s", c.State)
	}
	c := task.At(sec(31))
	if c.State != Waiting || c.Lease != nil || c.Attempt != 1 || c.NotBefore != sec(40) {
		t.Fatalf("after expiry: %s lease %v attempt %d not_before %d", c.State, c.Lease, c.Attempt, c.NotBefore)
	}
	if task.State != Leased {
		t.Fatal("At must not modify the task")
	}
	if c := task.At(sec(300)); c.State != Dead {
		t.Fatalf("after the window: %s", c.State)
	}
}
