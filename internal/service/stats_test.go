package service

import (
	"fmt"
	"testing"

	"github.com/leasewal/leasewal/api"
)

// TestStatsNameAtMostMaxQueues: beyond api.MaxStatsQueues queues, the
// busiest are named (in name order) and the rest summed apart.
func TestStatsNameAtMostMaxQueues(t *testing.T) {
	var qs []api.QueueStats
	for i := range api.MaxStatsQueues + 10 {
		qs = append(qs, api.QueueStats{Queue: fmt.Sprintf("q%03d", i), Waiting: i, Eligible: 1, OldestEligibleAgeMs: int64(i)})
	}
	got, other := boundQueues(qs)
	if len(got) != api.MaxStatsQueues || other == nil || other.Queues != 10 {
		t.Fatalf("%d queues, others %+v", len(got), other)
	}
	if other.Waiting != 0+1+2+3+4+5+6+7+8+9 || other.Eligible != 10 || other.OldestEligibleAgeMs != 9 {
		t.Fatalf("other: %+v, want the ten least busy summed", other)
	}
	if got[0].Queue != "q010" {
		t.Fatalf("the first named queue is %s, want q010 (the least busy one kept, by name)", got[0].Queue)
	}
}
