package state

import (
	"math/rand/v2"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	for text, want := range map[string]Rate{"10/s": {Count: 10, Per: 1000}, "1/m": {Count: 1, Per: 60_000}, "10000/h": {Count: 10_000, Per: 3_600_000}} {
		got, err := ParseRate(text)
		if err != nil || got != want || got.String() != text {
			t.Errorf("ParseRate(%q) = %+v, %v; want %+v", text, got, err, want)
		}
	}
	for _, bad := range []string{"", "10", "10/", "/s", "0/s", "-1/s", "10001/s", "10/d", "10/S", "1e3/s", " 10/s", "10/s ", "9223372036854775808/s"} {
		if _, err := ParseRate(bad); err == nil {
			t.Errorf("ParseRate(%q) took it", bad)
		}
	}
	for rate, burst := range map[string]int{"10/s": 10, "1/s": 1, "30/m": 1, "120/m": 2, "7200/h": 2, "1/h": 1} {
		if r, _ := ParseRate(rate); r.DefaultBurst() != burst {
			t.Errorf("%s: default burst %d, want %d", rate, r.DefaultBurst(), burst)
		}
	}
}

// TestRateKeepsItsBoundAndNoMore leases from a rated queue at random times
// and checks every answer against the rule's words, counted over the grants
// themselves: no span of length t holds more than burst + rate × t grants,
// a lease answered EMPTY is one whose grant would have broken that, and its
// next_eligible_at is the first time a grant would not.
func TestRateKeepsItsBoundAndNoMore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 46))
	for round := range 200 {
		counts := []int{1, 2, 3, 7, 10, 60, 10_000}
		pers := []int64{1000, 60_000, 3_600_000}
		rate := Rate{Count: counts[rng.IntN(len(counts))], Per: pers[rng.IntN(len(pers))], Burst: 1 + rng.IntN(4)}
		s := New()
		now := sec(0)
		for range 80 {
			run(t, s, now, func() (Decision, error) {
				return s.DecideSubmit(Submit{Payload: "p", Queue: "q", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 1}}, now)
			})
		}
		run(t, s, now, func() (Decision, error) { return s.DecideQueueRate("q", &rate) })
		interval := float64(rate.Per) / float64(rate.Count) // ms
		var grants []int64
		for range 80 {
			now += int64(rng.Float64() * max(interval, 2) * 1.5)
			d := run(t, s, now, func() (Decision, error) {
				return s.DecideLease(LeaseRequest{Worker: "w", Duration: 100_000 * time.Hour}, now) // no lapse within the test
			})
			// breaks is the earliest grant with which one at now would
			// make too many: (n-i+2-burst) × Per > (now - g_i) × Count.
			allowedAt := now
			for i, g := range grants {
				over := int64(len(grants)-i+1-rate.Burst) * rate.Per
				if over > (now-g)*int64(rate.Count) {
					allowedAt = max(allowedAt, g+(over+int64(rate.Count)-1)/int64(rate.Count))
				}
			}
			switch d.Outcome {
			case ResultLeased:
				if allowedAt > now {
					t.Fatalf("round %d, rate %+v: a grant at %d makes too many after %v (allowed at %d)", round, rate, now, grants, allowedAt)
				}
				grants = append(grants, now)
			case ResultEmpty:
				if allowedAt == now {
					t.Fatalf("round %d, rate %+v: EMPTY at %d, though a grant then keeps the bound after %v: %s", round, rate, now, grants, d.Reason)
				}
				if d.NextEligibleAt != allowedAt || len(d.HeldBack) != 1 {
					t.Fatalf("round %d, rate %+v: EMPTY at %d says next %d, held back %v; the first grant the bound allows is at %d", round, rate, now, d.NextEligibleAt, d.HeldBack, allowedAt)
				}
				if next := s.NextEventAt(now); next != allowedAt {
					t.Fatalf("round %d: a waiting worker wakes at %d, not when the rate allows a grant (%d)", round, next, allowedAt)
				}
			default:
				t.Fatalf("lease: %+v", d)
			}
		}
		if len(grants) < 2 {
			t.Fatalf("round %d, rate %+v: %d grants in 80 leases", round, rate, len(grants))
		}
	}
}

func TestRateRules(t *testing.T) {
	s := New()
	for _, q := range []string{"mail", "mail", "mail", "other"} {
		run(t, s, t0, func() (Decision, error) {
			return s.DecideSubmit(Submit{Payload: "p", Queue: q, Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 1}}, t0)
		})
	}
	rate, _ := ParseRate("1/s")
	if d := run(t, s, t0, func() (Decision, error) { return s.DecideQueueRate("mail", &rate) }); len(d.Records) != 1 || d.Records[0].Burst != 1 || d.Records[0].Rate != "1/s" {
		t.Fatalf("a rate without a burst is recorded with its default: %+v", d.Records)
	}
	if d, _ := s.DecideQueueRate("mail", &Rate{Count: 1, Per: 1000, Burst: 1}); !d.Duplicate || len(d.Records) != 0 {
		t.Fatalf("the same rate again: %+v", d)
	}
	for _, bad := range []Rate{{Count: 0, Per: 1000}, {Count: 1, Per: 999}, {Count: 1, Per: 1000, Burst: 1_000_001}} {
		if _, err := s.DecideQueueRate("mail", &bad); refusalKind(err) != InvalidInput {
			t.Errorf("rate %+v: %v", bad, err)
		}
	}
	lease := func(at int64, task string, queues ...string) Decision {
		return run(t, s, at, func() (Decision, error) {
			return s.DecideLease(LeaseRequest{Worker: "w", Duration: time.Hour, TaskID: task, Queues: queues}, at)
		})
	}
	if d := lease(t0, "", "mail"); d.TaskID != "T1" {
		t.Fatalf("first grant: %+v", d)
	}
	// The queue at its rate: a lease of every queue takes another queue's
	// task, one of it answers EMPTY, as does lease --task.
	if d := lease(t0, ""); d.TaskID != "T4" {
		t.Fatalf("a lease of every queue while mail is at its rate: %+v", d)
	}
	for _, d := range []Decision{lease(sec(0.5), "", "mail"), lease(sec(0.5), "T2")} {
		if d.Outcome != ResultEmpty || d.NextEligibleAt != sec(1) {
			t.Fatalf("mail at its rate: %+v", d)
		}
	}
	if w, _ := s.Explain("T2", sec(0.5)); w.Because != BecauseRated || w.EligibleAt != sec(1) || w.Rate != "1/s (burst 1)" {
		t.Fatalf("why T2: %+v", w)
	}
	// A new rate starts afresh: its burst at once.
	three := Rate{Count: 1, Per: 1000, Burst: 3}
	run(t, s, sec(0.5), func() (Decision, error) { return s.DecideQueueRate("mail", &three) })
	if d := lease(sec(0.5), "", "mail"); d.TaskID != "T2" {
		t.Fatalf("after a new rate: %+v", d)
	}
	// Lifted, nothing holds the queue back; a lift again writes nothing.
	run(t, s, sec(0.5), func() (Decision, error) { return s.DecideQueueRate("mail", nil) })
	if d, _ := s.DecideQueueRate("mail", nil); !d.Duplicate {
		t.Fatalf("a lift of a queue without a rate: %+v", d)
	}
	if len(s.Rates()) != 0 {
		t.Fatalf("rates after the lift: %+v", s.Rates())
	}
}

// TestRateSurvivesTheHead: the head an index keeps and a base holds carries
// each rate's theoretical arrival time, so a state loaded from it answers
// as the replayed one does.
func TestRateSurvivesTheHead(t *testing.T) {
	s := New()
	for range 3 {
		run(t, s, t0, func() (Decision, error) {
			return s.DecideSubmit(Submit{Payload: "p", Window: NoWindow, Policy: RetryPolicy{MaxAttempts: 1}}, t0)
		})
	}
	rate := Rate{Count: 2, Per: 60_000, Burst: 2}
	run(t, s, t0, func() (Decision, error) { return s.DecideQueueRate(DefaultQueue, &rate) })
	run(t, s, sec(1), func() (Decision, error) { return s.DecideLease(LeaseRequest{Worker: "w", Duration: time.Hour}, sec(1)) })
	loaded, err := LoadSnapshot(s.Head())
	if err != nil {
		t.Fatal(err)
	}
	if got, want := loaded.Rates(), s.Rates(); len(got) != 1 || got[0] != want[0] || got[0].NextGrantAt != sec(1) {
		t.Fatalf("rates loaded %+v, want %+v", got, want)
	}
	if s.snapshotVersion() != snapshotVersion || s.FormatVersion() != 4 {
		t.Fatalf("a state with a rate: snapshot version %d, WAL format %d", s.snapshotVersion(), s.FormatVersion())
	}
}
