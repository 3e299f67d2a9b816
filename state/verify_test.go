package state

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// TestVerifierCatchesWhatABrokenApplyLetsThrough: verify keeps its own
// account of every task (LeaseGranted records counted, terminal states seen,
// current leases) instead of trusting Apply's bookkeeping. Here Apply's
// result is tampered with after a record, standing in for a bug in Apply that
// accepts the record but records the wrong effect; the Verifier must name the
// broken invariant at the next record about that task.
func TestVerifierCatchesWhatABrokenApplyLetsThrough(t *testing.T) {
	story := []Record{
		created("T1", t0, 5*time.Minute, policy(3, 0, 0)),
		granted("T1", "L1", "W1", 1, sec(0), sec(30)),
		onLease(TaskCompleted, "T1", "L1", sec(10)),
		onLease(TaskCancelled, "T1", "L1", sec(20)), // a late verdict: valid, and about T1 again
	}
	cases := []struct {
		name      string
		after     int // the record after which Apply's effect is tampered with
		tamper    func(t *Task)
		invariant string
	}{
		{"a grant not counted", 2, func(t *Task) { t.Attempt = 0 }, InvAttempts},
		{"a completed task reopened", 3, func(t *Task) { t.State = Waiting }, InvTerminal},
		{"a lease kept after completion", 3, func(t *Task) { t.Lease = &Lease{ID: "L1", Worker: "W1", Expiry: sec(30)} }, InvLeaseByState},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := NewVerifier()
			var err error
			for i, r := range story {
				r.Seq = int64(i + 1)
				if err = v.Step(r); err != nil {
					break
				}
				if i+1 == c.after {
					task, _ := v.State.Task("T1")
					c.tamper(task)
				}
			}
			var re *RecordError
			if !errors.As(err, &re) || re.Invariant != c.invariant || re.Seq != int64(c.after+1) {
				t.Fatalf("got %v; want %q at record %d", err, c.invariant, c.after+1)
			}
		})
	}
}

// TestVerifierCatchesATokenHandedOutTwice: an Apply that hands a work token
// out again (its counter of tokens set back) or rewrites a held lease's
// record lets the record through; the Verifier, which keeps each domain's
// lease as first seen and the highest token seen, names the invariant.
func TestVerifierCatchesATokenHandedOutTwice(t *testing.T) {
	off := func(n int64) *int64 { return &n }
	acq := func(domain string, o int64, tok string) Record {
		return Record{At: t0, Type: WorkAcquired, Domain: domain, Offset: off(o), Token: tok}
	}
	cases := []struct {
		name   string
		story  []Record
		tamper func(s *State)
	}{
		{"another domain's token", []Record{acq("A", 1, "K1"), acq("B", 1, "K1")}, func(s *State) { s.lastTokenNum = 0 }},
		{"an older token of the same domain", []Record{acq("A", 1, "K1"),
			{At: t0, Type: WorkSucceeded, Domain: "A", Offset: off(1), Token: "K1", AcquiredAt: t0}, acq("A", 2, "K1")}, func(s *State) { s.lastTokenNum = 0 }},
		{"a held lease's record rewritten", []Record{acq("A", 1, "K1"), {At: t0, Type: WorkEnqueued, Domain: "A", Offset: off(2)}},
			func(s *State) { s.domains["A"].Lease.AcquiredAt = t0 + 1 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := NewVerifier()
			last := len(c.story)
			var err error
			for i, r := range c.story {
				r.Seq = int64(i + 1)
				if i+1 == last {
					c.tamper(v.State)
				}
				if err = v.Step(r); err != nil {
					break
				}
			}
			var re *RecordError
			if !errors.As(err, &re) || re.Invariant != WorkInvMonitor || re.Seq != int64(last) {
				t.Fatalf("got %v; want %q at record %d", err, WorkInvMonitor, last)
			}
		})
	}
}

// TestShadowTableAgainstAMap: the Verifier's packed account of each task
// answers as a map of whole shadows does, through grants outside a byte and
// leases taken and let go, and lets go of a page's lease numbers once none
// of its tasks holds one.
func TestShadowTableAgainstAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 8))
	var table shadowTable
	model := map[int64]shadow{}
	for step := range 20_000 {
		num := int64(rng.IntN(3 * shadowPageSize))
		sh := shadow{state: uint8(rng.IntN(6)), grants: int32(rng.IntN(300) - 2)}
		if rng.IntN(3) == 0 {
			sh.held = rng.Int64N(1 << 40)
		}
		table.set(num, sh)
		model[num] = sh
		probe := int64(rng.IntN(3 * shadowPageSize))
		if got := table.get(probe); got != model[probe] {
			t.Fatalf("step %d: task %d is %+v, want %+v", step, probe, got, model[probe])
		}
	}
	for num := range model {
		table.set(num, shadow{state: 3, grants: 1})
	}
	for _, p := range table.pages {
		if p.held != nil || p.holds != 0 {
			t.Fatalf("a page none of whose tasks holds a lease keeps %d lease numbers", p.holds)
		}
	}
	if len(table.wide) != 0 {
		t.Fatalf("%d grants kept wide after every task's fit in a byte", len(table.wide))
	}
}
