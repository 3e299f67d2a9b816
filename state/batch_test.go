package state

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestDecideSubmitsIsSequential: a batch decides as its submits would one
// after the other, each applied before the next: the same records (task
// ids, request ids R<n> picked around the ones given, duplicates of the
// batch's own and of earlier tasks), or, where one of them is refused, a
// BatchError naming it and nothing decided. Random batches over a small pool
// of request ids (R<n> among them) and payloads, on states that already
// hold tasks.
func TestDecideSubmitsIsSequential(t *testing.T) {
	rng := rand.New(rand.NewPCG(24, 11))
	reqs := []string{"", "", "", "R1", "R2", "R4", "R5", "x", "y"}
	random := func() Submit {
		return Submit{Payload: []string{"p", "q"}[rng.IntN(2)], Window: Duration(300_000_000_000), Policy: RetryPolicy{MaxAttempts: 3},
			RequestID: reqs[rng.IntN(len(reqs))], Queue: []string{"", "mail"}[rng.IntN(2)]}
	}
	decideApply := func(s *State, c Submit, now int64) (Decision, error) {
		d, err := s.DecideSubmit(c, now)
		if err != nil {
			return d, err
		}
		for i := range d.Records {
			d.Records[i].Seq, d.Records[i].At = s.LastSeq()+1, now
			if err := s.Apply(d.Records[i]); err != nil {
				t.Fatalf("applying %+v: %v", d.Records[i], err)
			}
		}
		return d, nil
	}
	refusals := 0
	for round := range 400 {
		seq, batch := New(), New()
		now := t0
		for range rng.IntN(4) { // tasks already there, the same in both
			c := random()
			if _, err := decideApply(seq, c, now); err == nil {
				if _, err := decideApply(batch, c, now); err != nil {
					t.Fatal(err)
				}
			}
		}
		cs := make([]Submit, 1+rng.IntN(6))
		for i := range cs {
			cs[i] = random()
		}
		var want []Decision
		refusedAt := -1
		for i, c := range cs {
			d, err := decideApply(seq, c, now)
			if err != nil {
				refusedAt = i
				break
			}
			want = append(want, d)
		}
		got, _, err := batch.DecideSubmits(cs, now)
		var be *BatchError
		switch {
		case refusedAt >= 0:
			refusals++
			if !errors.As(err, &be) || be.Index != refusedAt || got != nil {
				t.Fatalf("round %d: %+v one by one is refused at %d; the batch: %v %+v", round, cs, refusedAt, err, got)
			}
		case err != nil:
			t.Fatalf("round %d: %+v one by one is decided; the batch: %v", round, cs, err)
		default:
			for i := range got { // the batch's records are stamped when they are committed
				for k := range got[i].Records {
					got[i].Records[k].Seq, got[i].Records[k].At = want[i].Records[k].Seq, now
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("round %d: %+v\nbatch:      %s\none by one: %s", round, cs, fmt.Sprint(got), fmt.Sprint(want))
			}
		}
	}
	if refusals == 0 {
		t.Fatal("no batch was refused: the pool of request ids makes no conflict")
	}
}
