package report

import (
	"testing"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/state"
)

// TestLayout: each task is drawn on its own span (a task of two seconds
// an hour into the WAL fills its timeline), the tasks stand as of the
// report's now (a lease that lapsed since the last record shows lapsed),
// the failed, dead and lapsed tasks are listed first, and the chart has a
// scale.
func TestLayout(t *testing.T) {
	const t0 = int64(1767225600000) // 2026-01-01T00:00:00Z
	policy := &state.RetryPolicy{MaxAttempts: 1, Backoff: 0, BackoffMax: 0}
	at := func(ms int64) *int64 { return &ms }
	zero := 0
	var recs []api.Record
	add := func(r state.Record) {
		r.Seq = int64(len(recs) + 1)
		recs = append(recs, answers.Record(r))
	}
	created := func(id string, ms int64) state.Record {
		return state.Record{At: ms, Type: state.TaskCreated, TaskID: id, Payload: "p", Window: state.NoWindow, RetryPolicy: policy,
			RequestID: "R" + id, NotBefore: at(ms), Queue: "default", Priority: &zero}
	}
	add(created("T1", t0))
	add(state.Record{At: t0 + 1000, Type: state.LeaseGranted, TaskID: "T1", LeaseID: "L1", WorkerID: "W", Attempt: 1, Expiry: t0 + 31000})
	add(state.Record{At: t0 + 2000, Type: state.TaskFailed, TaskID: "T1", LeaseID: "L1", Reason: "boom"})
	add(created("T2", t0+3600_000))
	add(state.Record{At: t0 + 3601_000, Type: state.LeaseGranted, TaskID: "T2", LeaseID: "L2", WorkerID: "W", Attempt: 1, Expiry: t0 + 3632_000})
	add(state.Record{At: t0 + 3602_000, Type: state.TaskCompleted, TaskID: "T2", LeaseID: "L2"})
	add(created("T3", t0+3603_000))
	add(state.Record{At: t0 + 3603_000, Type: state.LeaseGranted, TaskID: "T3", LeaseID: "L3", WorkerID: "W", Attempt: 1, Expiry: t0 + 3633_000})

	p := FromRecords(recs, int64(len(recs)), Options{Now: func(int64) int64 { return t0 + 3700_000 }})
	if len(p.Tasks) != 3 {
		t.Fatalf("%d tasks drawn: %+v", len(p.Tasks), p.Tasks)
	}
	if sp := p.Tasks[1].Spans[0]; sp.W < 300 {
		t.Errorf("T2's lease, a second of its two, is %.1f of %.0f units wide: not drawn on its own span", sp.W, width)
	}
	if got := p.Tasks[2].State; got != "DEAD" { // its one attempt lapsed after the last record
		t.Errorf("T3 as of the report's now: %s, want DEAD", got)
	}
	if p.AsOf != api.FormatTime(t0+3700_000) {
		t.Errorf("as of %s", p.AsOf)
	}
	var attention []string
	for _, tv := range p.Attention {
		attention = append(attention, tv.ID+" "+tv.State)
	}
	if len(attention) != 2 || attention[0] != "T1 FAILED" || attention[1] != "T3 DEAD" {
		t.Errorf("needs attention: %v, want T1 FAILED and T3 DEAD", attention)
	}
	if n := len(p.Chart.YTicks); n < 2 || p.Chart.YTicks[0].Label != "0" || p.Chart.YTicks[n-1].Y != 0 {
		t.Errorf("the chart's scale: %+v", p.Chart.YTicks)
	}
	cut := FromRecords(recs, int64(len(recs)), Options{Now: func(int64) int64 { return t0 + 3700_000 }, Log: api.LogRequest{To: 8}})
	if got := cut.Tasks[2].State; got != "LEASED" {
		t.Errorf("T3 in a page cut by --to: %s, want LEASED as of the last record shown", got)
	}
}
