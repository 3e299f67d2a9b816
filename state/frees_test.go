package state

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/leasewal/leasewal/internal/refmodel"
)

// TestFreesNamesWhatMayGiveAWaiterATask drives random histories and, at
// every record, asks what a lease that found nothing and waits would: for
// each queue list (and a lease of each task), it sleeps until the next
// time-based event it computed (NextEventAt, NextFiringAt) unless a record
// wakes it. A record that Frees (asked once it is applied) says concerns
// no queue it asked for must not let it find a task before that time: not
// at once, and not at any event of the state the record left. The answers
// are the rules' own (DecideLease, NextEventAt), not Frees'. Half the
// histories have no task that waits for a task and no rate (records of
// format 4), and there a lease's or an end's record concerns its task's
// queue alone.
func TestFreesNamesWhatMayGiveAWaiterATask(t *testing.T) {
	histories := 300
	if testing.Short() {
		histories = 100
	}
	type probe struct {
		queues []string
		task   string
	}
	finds := func(s *State, p probe, now int64) bool {
		d, err := s.DecideLease(LeaseRequest{Worker: "probe", Duration: 30e9, Queues: p.queues, TaskID: p.task}, now)
		return err == nil && d.Outcome != ResultEmpty
	}
	nextAt := func(s *State, now int64) int64 {
		next := s.NextEventAt(now)
		if f := s.NextFiringAt(nil, now); next == 0 || (f != 0 && f < next) {
			next = f
		}
		return next
	}
	seen, kept := map[RecordType]int{}, map[RecordType]int{}
	for seed := range histories {
		rng := rand.New(rand.NewPCG(uint64(seed), 0xf1ee5))
		live, model := New(), refmodel.New()
		now := t0
		for step := range 80 {
			now += rng.Int64N(15_000)
			c := randomCall(rng, model, now)
			if seed%2 == 0 {
				if c.op == "rate" {
					continue
				}
				c.submit.After, c.submit.AfterEnded = nil, nil
			}
			d, _ := c.decide(live, now)
			c.model(model, now)
			for _, r := range d.Records {
				r.Seq, r.At, r.Actor = live.LastSeq()+1, now, "w"
				asked := []probe{{}, {queues: []string{"default"}}, {queues: []string{"mail"}}, {queues: []string{"img"}}, {queues: []string{"mail", "img"}}}
				tasks, err := live.Tasks()
				if err != nil {
					t.Fatal(err)
				}
				for _, task := range tasks {
					asked = append(asked, probe{task: task.ID})
				}
				waiting := make([]bool, len(asked))
				for i, p := range asked {
					waiting[i] = !finds(live, p, now)
				}
				wakeAt := nextAt(live, now) // 0: only a record wakes it
				if err := live.Apply(r); err != nil {
					t.Fatalf("seed %d step %d %s: %v", seed, step, c, err)
				}
				seen[r.Type]++
				queue, frees := live.Frees(r)
				for i, p := range asked {
					if !waiting[i] || (frees && (queue == "" || p.task != "" || len(p.queues) == 0 || slices.Contains(p.queues, queue))) {
						continue // it looks again after r
					}
					kept[r.Type]++
					for at, n := now, 0; at != 0 && (wakeAt == 0 || at < wakeAt) && n < 50; at, n = nextAt(live, at), n+1 {
						if finds(live, p, at) {
							t.Fatalf("seed %d step %d: after %s %s (Frees: %q, %v), a lease of queues %v task %q that waits until %d finds a task at %d",
								seed, step, r.Type, r.TaskID, queue, frees, p.queues, p.task, wakeAt, at)
						}
					}
				}
			}
		}
	}
	for _, must := range []RecordType{LeaseGranted, TaskCreated, TaskCompleted, LeaseExpired, LeaseExtended, QueuePaused} {
		if kept[must] == 0 {
			t.Errorf("no waiting lease slept through a %s: the test does not reach it", must)
		}
	}
	t.Logf("records: %v; waiting leases that slept through one: %v", seen, kept)
}
