package api_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/state"
)

// TestRecordRoundTrip: a record as the API writes it reads back as the
// record it was, its times included: a client draws offsets and timelines
// from them.
func TestRecordRoundTrip(t *testing.T) {
	nb := int64(1767225660000)
	attempt := 2
	for _, r := range []state.Record{
		{Seq: 1, At: 1767225600000, Type: state.TaskCreated, TaskID: "T1", Payload: "p", NotBefore: &nb, RequestID: "r"},
		{Seq: 2, At: 1767225600500, Type: state.LeaseGranted, TaskID: "T1", LeaseID: "L1", WorkerID: "W", Attempt: attempt, Expiry: 1767225630500},
		{Seq: 3, At: 1767225601000, Type: state.WorkAcquired, Domain: "d", AcquiredAt: 1767225601000},
	} {
		b, err := json.Marshal(answers.Record(r))
		if err != nil {
			t.Fatal(err)
		}
		var back api.Record
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back.Record, r) {
			t.Fatalf("%s came back as %+v, was %+v", b, back.Record, r)
		}
	}
}
