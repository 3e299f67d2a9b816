package state

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"strconv"
	"testing"
	"time"
)

// TestRandomHistories runs thousands of random command sequences (several
// workers, random time steps) through Decide and Apply, checking every
// invariant after every record, that every decided record is one Apply
// accepts, and that replaying the records from scratch gives exactly the
// state live application built.
func TestRandomHistories(t *testing.T) {
	histories, steps := 3000, 80
	if testing.Short() {
		histories = 300
	}
	total := 0
	for seed := range histories {
		total += runHistory(t, uint64(seed), steps)
	}
	t.Logf("%d histories, %d records, every invariant checked after every record", histories, total)
}

func runHistory(t *testing.T, seed uint64, steps int) int {
	rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
	live, v := New(), NewVerifier()
	var recs []Record
	now := t0
	completions := map[string]int{}
	for step := range steps {
		now += rng.Int64N(15_000)
		d, err := randomCommand(rng, live, now)
		if err != nil {
			var r *Error
			if !errors.As(err, &r) {
				t.Fatalf("seed %d step %d: a refusal must be a *Error, got %v", seed, step, err)
			}
			continue
		}
		for _, r := range d.Records {
			r.Seq, r.At, r.Actor = live.LastSeq()+1, now, "w"+strconv.Itoa(rng.IntN(3))
			if err := live.Apply(r); err != nil {
				t.Fatalf("seed %d step %d: decided record refused: %v", seed, step, err)
			}
			if err := v.Step(r); err != nil {
				t.Fatalf("seed %d step %d: %v", seed, step, err)
			}
			if r.Type == TaskCompleted {
				if completions[r.TaskID]++; completions[r.TaskID] > 1 {
					t.Fatalf("seed %d: %s completed twice", seed, r.TaskID)
				}
			}
			recs = append(recs, r)
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

// randomCommand picks a command the way a busy set of clients would, mostly
// sensible and sometimes stale or repeated.
func randomCommand(rng *rand.Rand, s *State, now int64) (Decision, error) {
	worker := "W" + strconv.Itoa(rng.IntN(4))
	switch op := rng.IntN(10); {
	case op < 2 || len(s.order) == 0:
		c := Submit{
			Payload: "p" + strconv.Itoa(rng.IntN(5)),
			Window:  Duration(time.Duration(30+rng.IntN(300)) * time.Second),
			Policy:  RetryPolicy{MaxAttempts: 1 + rng.IntN(3), Backoff: Duration(time.Duration(rng.IntN(10)) * time.Second)},
		}
		c.Policy.BackoffMax = c.Policy.Backoff * Duration(1+rng.IntN(4))
		if rng.IntN(3) == 0 {
			c.RequestID = "req" + strconv.Itoa(rng.IntN(6))
		}
		return s.DecideSubmit(c)
	case op < 5:
		c := LeaseRequest{Worker: worker, Duration: time.Duration(1+rng.IntN(40)) * time.Second}
		if rng.IntN(4) == 0 {
			c.RequestID = "lr" + strconv.Itoa(rng.IntN(8))
		}
		if rng.IntN(4) == 0 {
			c.TaskID = s.order[rng.IntN(len(s.order))].ID
		}
		return s.DecideLease(c, now)
	case op == 9:
		return s.DecideExpire(now), nil
	}
	task := s.order[rng.IntN(len(s.order))]
	if len(task.Attempts) == 0 {
		return s.DecideExpire(now), nil
	}
	lease := task.Attempts[len(task.Attempts)-1].LeaseID
	if rng.IntN(4) == 0 {
		lease = task.Attempts[rng.IntN(len(task.Attempts))].LeaseID
	}
	switch rng.IntN(3) {
	case 0:
		return s.DecideExtend(task.ID, lease, time.Duration(1+rng.IntN(40))*time.Second, now)
	case 1:
		return s.DecideComplete(task.ID, lease, now)
	}
	return s.DecideFail(task.ID, lease, "flaky", rng.IntN(5) == 0, now)
}
