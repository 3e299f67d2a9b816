package state

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"testing"
)

// workRun applies a work decision like the CLI does.
// It is curried so that a Decide call's two results can be passed straight in.
func workRun(t *testing.T, s *State, now int64) func(WorkDecision, error) WorkDecision {
	return func(d WorkDecision, err error) WorkDecision {
		t.Helper()
		if err != nil {
			t.Fatalf("decide: %v", err)
		}
		if d.Record != nil {
			r := *d.Record
			r.Seq, r.At = s.LastSeq()+1, now
			if err := s.Apply(r); err != nil {
				t.Fatalf("a decided record was refused: %v", err)
			}
		}
		return d
	}
}

// TestWorkLeaseSeedScenarios is seed 003's "Sanity Test Scenarios", 1 to 6.
func TestWorkLeaseSeedScenarios(t *testing.T) {
	t.Run("1 happy path", func(t *testing.T) {
		s := New()
		a := workRun(t, s, t0)(s.DecideAcquire("A", 1))
		if a.Outcome != ResultAcquired || a.Token != "K1" {
			t.Fatalf("acquire: %+v", a)
		}
		if d := workRun(t, s, sec(1))(s.DecideSucceed("A", a.Token)); d.Outcome != ResultNoBacklog {
			t.Fatalf("succeed: %+v", d)
		}
	})
	// 2 and 3 continue one story.
	s := New()
	a := workRun(t, s, t0)(s.DecideAcquire("A", 1))
	t.Run("2 queue then orchestrated hand-off", func(t *testing.T) {
		if d := workRun(t, s, sec(1))(s.DecideAcquire("A", 2)); d.Outcome != ResultEnqueued {
			t.Fatalf("acquire 2: %+v", d)
		}
		workRun(t, s, sec(1))(s.DecideAcquire("A", 3))
		d := workRun(t, s, sec(2))(s.DecideSucceed("A", a.Token))
		if d.Outcome != ResultNextHint || *d.Hint != 2 {
			t.Fatalf("succeed: %+v", d)
		}
		if dom, _ := s.Domain("A"); dom.Lease != nil || !slices.Equal(dom.Backlog, []int64{2, 3}) {
			t.Fatal("succeed must not hand off: the lease is cleared and the backlog unchanged")
		}
	})
	t.Run("3 out-of-order acquire", func(t *testing.T) {
		_, err := s.DecideAcquire("A", 3)
		if refusalKind(err) != BacklogOrdering || err.Error() != `domain "A": acquire of offset 3 out of order: the backlog's head is 2 (expected 2, got 3); acquire 2 first` {
			t.Fatalf("got %v", err)
		}
		if d := workRun(t, s, sec(3))(s.DecideAcquire("A", 2)); d.Outcome != ResultAcquired || d.Token != "K2" {
			t.Fatalf("head matches, popped: %+v", d)
		}
		if dom, _ := s.Domain("A"); !slices.Equal(dom.Backlog, []int64{3}) {
			t.Fatalf("backlog %v", dom.Backlog)
		}
	})
	t.Run("4 retry", func(t *testing.T) {
		d := workRun(t, s, sec(10))(s.DecideWorkFail("A", "K2", 2))
		dom, _ := s.Domain("A")
		if d.Outcome != ResultRetryScheduled || d.Retries != 1 || dom.Lease == nil || dom.Lease.AcquiredAt != sec(3) || dom.Lease.RetryCount != 1 {
			t.Fatalf("fail: %+v lease %+v", d, dom.Lease)
		}
		workRun(t, s, sec(20))(s.DecideWorkFail("A", "K2", 2))
	})
	t.Run("5 final give-up", func(t *testing.T) {
		d := workRun(t, s, sec(30))(s.DecideWorkFail("A", "K2", 2))
		dom, _ := s.Domain("A")
		if d.Outcome != ResultGiveUpNextHint || *d.Hint != 3 || dom.Lease != nil || !dom.Failed.Has(2) {
			t.Fatalf("give up: %+v", d)
		}
	})
	t.Run("6 idempotence", func(t *testing.T) {
		if d := workRun(t, s, sec(31))(s.DecideAcquire("A", 1)); d.Outcome != ResultAlreadyProcessed || d.Record != nil {
			t.Fatalf("acquire 1: %+v", d)
		}
		if d := workRun(t, s, sec(31))(s.DecideAcquire("A", 2)); d.Outcome != ResultAlreadyFailed || d.Record != nil {
			t.Fatalf("acquire 2: %+v", d)
		}
		workRun(t, s, sec(32))(s.DecideAcquire("A", 3))
		if d := workRun(t, s, sec(33))(s.DecideAcquire("A", 1)); d.Outcome != ResultAlreadyProcessed {
			t.Fatalf("not re-enqueued: %+v", d)
		}
		if dom, _ := s.Domain("A"); len(dom.Backlog) != 0 {
			t.Fatalf("backlog %v", dom.Backlog)
		}
	})
}

func TestWorkLeaseErrors(t *testing.T) {
	s := New()
	if _, err := s.DecideSucceed("A", "K1"); refusalKind(err) != LeaseNotFound {
		t.Fatalf("no lease: %v", err)
	}
	workRun(t, s, t0)(s.DecideAcquire("A", 5))
	if _, err := s.DecideWorkFail("A", "K9", 3); refusalKind(err) != TokenMismatch {
		t.Fatalf("wrong token: %v", err)
	}
	for name, err := range map[string]error{
		"empty domain":    second(s.DecideAcquire("", 1)),
		"negative offset": second(s.DecideAcquire("A", -1)),
		"bad token":       second(s.DecideSucceed("A", "5")),
		"bad retries":     second(s.DecideWorkFail("A", "K1", -1)),
	} {
		if refusalKind(err) != InvalidInput {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if d := workRun(t, s, t0)(s.DecideAcquire("A", 5)); d.Outcome != ResultAlreadyAcquired || d.Token != "K1" {
		t.Fatalf("again: %+v", d)
	}
	workRun(t, s, t0)(s.DecideAcquire("A", 6))
	if d := workRun(t, s, t0)(s.DecideAcquire("A", 6)); d.Outcome != ResultEnqueued || d.Record != nil {
		t.Fatalf("a queued offset again writes nothing: %+v", d)
	}
}

func withHint(r Record, hint int64) Record {
	r.Hint = &hint
	return r
}

func second(_ WorkDecision, err error) error { return err }

// TestWorkInvariantRefusals: a hand-made record breaking each of seed 003's
// invariants is refused, naming it.
func TestWorkInvariantRefusals(t *testing.T) {
	off := func(n int64) *int64 { return &n }
	acq := func(o int64, tok string) Record {
		return Record{At: t0, Type: WorkAcquired, Domain: "A", Offset: off(o), Token: tok}
	}
	enq := func(o int64) Record { return Record{At: t0, Type: WorkEnqueued, Domain: "A", Offset: off(o)} }
	succ := func(o int64, tok string, at int64) Record {
		return Record{At: t0, Type: WorkSucceeded, Domain: "A", Offset: off(o), Token: tok, AcquiredAt: at}
	}
	cases := []struct {
		name      string
		story     []Record
		bad       Record
		invariant string
	}{
		{"1 a second in-flight offset", []Record{acq(1, "K1")}, acq(2, "K2"), WorkInvSingle},
		{"2 the current offset queued", []Record{acq(1, "K1")}, enq(1), WorkInvDisjoint},
		{"2 a queued offset queued again", []Record{acq(1, "K1"), enq(2)}, enq(2), WorkInvDisjoint},
		{"3 acquire of a non-head", []Record{acq(1, "K1"), enq(2), enq(3), withHint(succ(1, "K1", t0), 2)}, acq(3, "K2"), WorkInvFIFO},
		{"4 a processed offset re-acquired", []Record{acq(1, "K1"), succ(1, "K1", t0)}, acq(1, "K2"), WorkInvIdempotence},
		{"4 a processed offset re-enqueued", []Record{acq(1, "K1"), succ(1, "K1", t0), acq(2, "K2")}, enq(1), WorkInvIdempotence},
		{"5 succeed with another token", []Record{acq(1, "K1")}, succ(1, "K7", t0), WorkInvFencing},
		{"6 a replaced lease record", []Record{acq(1, "K1")}, succ(1, "K1", sec(5)), WorkInvMonitor},
		{"tokens strictly increase", []Record{acq(1, "K3"), succ(1, "K3", t0)}, acq(2, "K2"), InvSequence},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if re := refused(t, c.story, c.bad); re.Invariant != c.invariant {
				t.Fatalf("got %v, want %s", re, c.invariant)
			}
		})
	}
}

// refModel is seed 003's contract transcribed as directly as possible: the
// property test checks the real implementation against it.
type refModel struct {
	domains map[string]*refDomain
	tokens  int
}

type refDomain struct {
	lease             *WorkLease
	processed, failed map[int64]bool
	backlog           []int64
}

func (m *refModel) get(name string) *refDomain {
	if m.domains[name] == nil {
		m.domains[name] = &refDomain{processed: map[int64]bool{}, failed: map[int64]bool{}}
	}
	return m.domains[name]
}

func (m *refModel) tryAcquire(name string, offset, now int64) (Outcome, string, error) {
	d := m.get(name)
	if d.processed[offset] {
		return ResultAlreadyProcessed, "", nil
	}
	if d.failed[offset] {
		return ResultAlreadyFailed, "", nil
	}
	if d.lease != nil {
		if offset == d.lease.Offset {
			return ResultAlreadyAcquired, d.lease.Token, nil
		}
		if !slices.Contains(d.backlog, offset) {
			d.backlog = append(d.backlog, offset)
		}
		return ResultEnqueued, "", nil
	}
	if len(d.backlog) > 0 {
		if d.backlog[0] != offset {
			return "", "", &Error{Kind: BacklogOrdering}
		}
		d.backlog = d.backlog[1:]
	}
	m.tokens++
	d.lease = &WorkLease{Offset: offset, Token: "K" + strconv.Itoa(m.tokens), AcquiredAt: now}
	return ResultAcquired, d.lease.Token, nil
}

func (m *refModel) check(name, token string) (*refDomain, error) {
	d := m.get(name)
	if d.lease == nil {
		return nil, &Error{Kind: LeaseNotFound}
	}
	if token != d.lease.Token {
		return nil, &Error{Kind: TokenMismatch}
	}
	return d, nil
}

func (d *refDomain) hint(some, none Outcome) (Outcome, string) {
	if len(d.backlog) == 0 {
		return none, ""
	}
	return some, fmt.Sprint(d.backlog[0])
}

func (m *refModel) succeed(name, token string) (Outcome, string, error) {
	d, err := m.check(name, token)
	if err != nil {
		return "", "", err
	}
	d.processed[d.lease.Offset] = true
	d.lease = nil
	o, h := d.hint(ResultNextHint, ResultNoBacklog)
	return o, h, nil
}

func (m *refModel) fail(name, token string, maxRetries int) (Outcome, string, error) {
	d, err := m.check(name, token)
	if err != nil {
		return "", "", err
	}
	if d.lease.RetryCount >= maxRetries {
		d.failed[d.lease.Offset] = true
		d.lease = nil
		o, h := d.hint(ResultGiveUpNextHint, ResultGiveUpNoBacklog)
		return o, h, nil
	}
	d.lease.RetryCount++
	return ResultRetryScheduled, fmt.Sprint(d.lease.RetryCount), nil
}

// TestWorkLeaseAgainstModel runs thousands of random acquire/succeed/fail
// sequences over a few domains: the same answers as the reference model, every
// invariant after every record, and replay equal to live application.
func TestWorkLeaseAgainstModel(t *testing.T) {
	sequences := 3000
	if testing.Short() {
		sequences = 300
	}
	records := 0
	for seed := range sequences {
		records += workHistory(t, uint64(seed))
	}
	t.Logf("%d sequences, %d records, same answers as the reference model", sequences, records)
}

func workHistory(t *testing.T, seed uint64) int {
	rng := rand.New(rand.NewPCG(seed, 0x3003))
	live, v := New(), NewVerifier()
	ref := &refModel{domains: map[string]*refDomain{}}
	var recs []Record
	now := t0
	for step := range 60 {
		now += rng.Int64N(5000)
		domain := []string{"A", "B", "dom ä"}[rng.IntN(3)]
		var got WorkDecision
		var err error
		var wantOutcome Outcome
		var wantDetail string
		var wantErr error
		switch op := rng.IntN(3); op {
		case 0:
			offset := int64(rng.IntN(8))
			got, err = live.DecideAcquire(domain, offset)
			wantOutcome, wantDetail, wantErr = ref.tryAcquire(domain, offset, now)
		default:
			token := "K" + strconv.Itoa(1+rng.IntN(ref.tokens+1))
			if d := ref.domains[domain]; d != nil && d.lease != nil && rng.IntN(3) > 0 {
				token = d.lease.Token
			}
			if op == 1 {
				got, err = live.DecideSucceed(domain, token)
				wantOutcome, wantDetail, wantErr = ref.succeed(domain, token)
			} else {
				maxRetries := rng.IntN(3)
				got, err = live.DecideWorkFail(domain, token, maxRetries)
				wantOutcome, wantDetail, wantErr = ref.fail(domain, token, maxRetries)
			}
		}
		if refusalKind(err) != refusalKind(wantErr) || (err == nil) != (wantErr == nil) {
			t.Fatalf("seed %d step %d: error %v, the model says %v", seed, step, err, wantErr)
		}
		if err != nil {
			continue
		}
		if got.Outcome != wantOutcome || detail(got) != wantDetail {
			t.Fatalf("seed %d step %d: %s %q, the model says %s %q", seed, step, got.Outcome, detail(got), wantOutcome, wantDetail)
		}
		if got.Record != nil {
			r := *got.Record
			r.Seq, r.At = live.LastSeq()+1, now
			if err := live.Apply(r); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if err := v.Step(r); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			recs = append(recs, r)
		}
	}
	for name, d := range ref.domains {
		real := live.domain(name)
		if !reflect.DeepEqual(real.Lease, d.lease) || !slices.Equal(real.Backlog, d.backlog) ||
			!sameSet(&real.Processed, d.processed) || !sameSet(&real.Failed, d.failed) {
			t.Fatalf("seed %d: domain %q differs from the model", seed, name)
		}
	}
	replayed := New()
	for _, r := range recs {
		if err := replayed.Apply(r); err != nil {
			t.Fatalf("seed %d: replay: %v", seed, err)
		}
	}
	if !reflect.DeepEqual(replayed, live) {
		t.Fatalf("seed %d: replay differs from live application", seed)
	}
	return len(recs)
}

// detail is the part of an answer the model returns beside the outcome.
func detail(d WorkDecision) string {
	switch {
	case d.Token != "" && d.Outcome != ResultRetryScheduled:
		return d.Token
	case d.Hint != nil:
		return fmt.Sprint(*d.Hint)
	case d.Outcome == ResultRetryScheduled:
		return fmt.Sprint(d.Retries)
	}
	return ""
}

// maps compares two offset sets, treating a missing set as empty.
// sameSet compares an Offsets with the model's plain set, through Has, Len and Sorted.
func sameSet(got *Offsets, want map[int64]bool) bool {
	if got.Len() != len(want) || len(got.Sorted()) != len(want) {
		return false
	}
	for _, off := range got.Sorted() {
		if !want[off] || !got.Has(off) {
			return false
		}
	}
	return true
}
