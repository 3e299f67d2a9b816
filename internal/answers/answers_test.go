package answers_test

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/state"
)

// TestRecordRoundTrip: a record as the API writes it reads back as the
// record it was, its times and durations included: a client draws offsets
// and timelines from them. And the JSON of a record is the WAL's body with
// its times written out, in the WAL's order of fields.
func TestRecordRoundTrip(t *testing.T) {
	nb, until, slot := int64(1767225660000), int64(1767229200000), int64(1767225600000)
	attempt, limit, priority := 2, 3, 5
	for _, r := range []state.Record{
		{Seq: 1, At: 1767225600000, Type: state.TaskCreated, Actor: "a", TaskID: "T1", Payload: "p", NotBefore: &nb, RequestID: "r",
			Window: state.Duration(5 * time.Minute), RetryPolicy: &state.RetryPolicy{MaxAttempts: 3, Backoff: state.Duration(time.Second), BackoffMax: state.Duration(time.Minute)},
			Queue: "q", Priority: &priority, Schedule: "s", Slot: &slot},
		{Seq: 2, At: 1767225600500, Type: state.LeaseGranted, TaskID: "T1", LeaseID: "L1", WorkerID: "W", Attempt: attempt, Expiry: 1767225630500},
		{Seq: 3, At: 1767225601000, Type: state.WorkAcquired, Domain: "d", AcquiredAt: 1767225601000},
		{Seq: 4, At: 1767225601000, Type: state.QueueLimited, Queue: "q", Limit: &limit},
		{Seq: 5, At: 1767225601000, Type: state.QueuePaused, Queue: "q", Until: &until, Reason: "why"},
		{Seq: 6, At: 1767225601000, Type: state.ScheduleAdded, Schedule: "s", Every: state.Duration(time.Hour), CatchUp: "all", Payload: "p"},
		{Seq: 7, At: 1767225601000, Type: state.QueueRated, Queue: "q", Rate: "10/s", Burst: 5},
		{Seq: 8, At: 1767225601000, Type: state.TaskCreated, TaskID: "T2", Payload: "p", NotBefore: &nb, RequestID: "r2", After: []string{"T1"}, AfterEnded: []string{"T0"}},
		{Seq: 9, At: 1767225601000, Type: state.TaskDead, TaskID: "T2", Reason: "dependency T1 ended FAILED", Dependency: "T1"},
	} {
		b, err := json.Marshal(answers.Record(r))
		if err != nil {
			t.Fatal(err)
		}
		var back api.Record
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if got := answers.StateRecord(back); !reflect.DeepEqual(got, r) {
			t.Fatalf("%s came back as %+v, was %+v", b, got, r)
		}
	}
	r := state.Record{Seq: 2, At: 1767225600500, Type: state.LeaseGranted, TaskID: "T1", LeaseID: "L1", WorkerID: "W", Attempt: 1, Expiry: 1767225630500}
	b, _ := json.Marshal(answers.Record(r))
	if want := `{"seq":2,"type":"LeaseGranted","task_id":"T1","lease_id":"L1","worker_id":"W","attempt":1,"at":"2026-01-01T00:00:00.500Z","expiry":"2026-01-01T00:00:30.500Z"}`; string(b) != want {
		t.Fatalf("a record's JSON:\n%s\nwant\n%s", b, want)
	}
}
