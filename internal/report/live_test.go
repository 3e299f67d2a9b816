package report_test

import (
	"testing"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/internal/report"
	"github.com/leasewal/leasewal/state"
)

func rec(seq int64) state.Record {
	id := "T" + string(rune('0'+seq))
	return state.Record{Seq: seq, At: 1767225600000 + seq, Type: state.TaskCreated, TaskID: id, Payload: "p", RequestID: "R" + id,
		Window: state.Duration(time.Minute), RetryPolicy: &state.RetryPolicy{MaxAttempts: 1}}
}

// TestLiveKeepsEachRecordOnceInOrder: records told out of order (two
// requests of one batch) or twice (a raft leader's commit and apply), and
// a load of older ones after, leave the page's records in seq order, each
// once.
func TestLiveKeepsEachRecordOnceInOrder(t *testing.T) {
	l := report.NewLive("test")
	l.Add([]state.Record{rec(5)})
	l.Add([]state.Record{rec(4)})
	l.Add([]state.Record{rec(5), rec(6)})
	l.Load([]api.Record{answers.Record(rec(1)), answers.Record(rec(2)), answers.Record(rec(3)), answers.Record(rec(4))}, 4)
	p, _ := l.Page()
	var got []string
	for _, tv := range p.Tasks {
		got = append(got, tv.ID)
	}
	if p.Records != 6 || len(got) != 6 || got[0] != "T1" || got[5] != "T6" {
		t.Fatalf("the page's records: %d, tasks %v; want 6, T1 to T6 in order", p.Records, got)
	}
	if last, _ := l.Last(); last != 6 {
		t.Fatalf("last seq %d, want 6", last)
	}
}

// TestLiveTakesNothingUntilLookedAt: a page that reads the WAL at its first
// look takes no committed record before it (the look reads those), and
// every one after; none is missed or drawn twice.
func TestLiveTakesNothingUntilLookedAt(t *testing.T) {
	l := report.NewLive("test")
	loads := 0
	l.LoadFrom(func() ([]api.Record, int64, error) {
		loads++
		return []api.Record{answers.Record(rec(1)), answers.Record(rec(2)), answers.Record(rec(3))}, 3, nil
	})
	l.Add([]state.Record{rec(1)})
	l.Add([]state.Record{rec(2), rec(3)})
	if last, _ := l.Last(); last != 3 || loads != 1 {
		t.Fatalf("at the first look: last seq %d, %d loads; want 3, 1", last, loads)
	}
	l.Add([]state.Record{rec(3), rec(4)})
	p, _ := l.Page()
	var got []string
	for _, tv := range p.Tasks {
		got = append(got, tv.ID)
	}
	if p.Records != 4 || len(got) != 4 || got[3] != "T4" || loads != 1 {
		t.Fatalf("the page's records: %d, tasks %v, %d loads; want 4, T1 to T4, 1", p.Records, got, loads)
	}
}
