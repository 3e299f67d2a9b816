package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"
	"time"
)

// decodeWithEncodingJSON is the reference DecodeRecord is held to.
func decodeWithEncodingJSON(body []byte) (Record, error) {
	var r Record
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Record{}, err
	}
	if dec.More() {
		return Record{}, errors.New("trailing data")
	}
	return r, nil
}

// FuzzDecode: the record decoder never panics; whatever it accepts,
// encoding/json (strict) accepts with the same result (so it refuses all that
// encoding/json refuses, and more: inexact keys, a twice-given retry_policy);
// and what it accepts encodes and decodes back unchanged.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"seq":1,"at":1767225600000,"type":"TaskCreated","actor":"a","task_id":"T1","payload":"P","window":"5m0s","retry_policy":{"max_attempts":3,"backoff":"0s","backoff_max":"0s"},"request_id":"R1"}`))
	f.Add([]byte(`{"seq":4,"at":1767225600000,"type":"WorkFailed","domain":"d ä","offset":0,"token":"K1","acquired_at":5,"outcome":"give_up","hint":3,"max_retries":2}`))
	f.Add([]byte(`{"seq":1,"window":"-1h","retry_policy":null}`))
	f.Add([]byte(`{"seq":1e400}`))
	f.Add([]byte(`{"seq":1,"payload":"a\u00e9\n\"","offset":null,"hint":-0,"permanent":false}`))
	f.Add([]byte(` { "seq" : 2 , "retry_policy" : { "max_attempts" : 1 } } `))
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := DecodeRecord(body)
		ref, refErr := decodeWithEncodingJSON(body)
		if ref.Limit != nil && *ref.Limit > math.MaxInt32 { // an older version's limit reads as the largest
			ref.Limit = ptr(math.MaxInt32)
		}
		if err == nil && (refErr != nil || !reflect.DeepEqual(r, ref)) {
			t.Fatalf("accepted %q as %+v; encoding/json says %+v, %v", body, r, ref, refErr)
		}
		if err != nil {
			return
		}
		again, err := EncodeRecord(r)
		if err != nil {
			t.Fatalf("an accepted record does not encode: %v", err)
		}
		r2, err := DecodeRecord(again)
		if err != nil || !reflect.DeepEqual(r, r2) {
			t.Fatalf("round trip changed the record: %v\n%+v\n%+v", err, r, r2)
		}
	})
}

// FuzzReplay drives Apply with record streams decoded from arbitrary bytes:
// every record is either refused with a *RecordError, leaving the state as it
// was, or applied with every invariant intact; and replaying the accepted
// records from scratch gives the same state.
func FuzzReplay(f *testing.F) {
	f.Add([]byte{0, 0, 1, 1, 0, 5, 3, 1, 2, 1})
	f.Add([]byte{0, 1, 1, 2, 3, 0, 4, 1, 1, 7, 6, 2, 9, 9, 8, 1, 10, 0, 11, 3})
	f.Add([]byte("work lease and tasks interleaved, 0123456789"))
	f.Fuzz(func(t *testing.T, data []byte) {
		v := NewVerifier()
		var accepted []Record
		now := t0
		// Past a few hundred records an input only grows the state: cap it so
		// that the fuzzer spends its time on variety.
		data = data[:min(len(data), 512)]
		for len(data) >= 2 {
			op, arg := data[0], data[1]
			data = data[2:]
			now += int64(arg%8) * 5000
			r := fuzzRecord(op, arg, now)
			r.Seq = v.State.LastSeq() + 1
			if op%29 == 28 { // now and then, a record out of sequence
				r.Seq += int64(arg%3) - 1
			}
			before := snapshot(v.State)
			err := v.Step(r)
			var re *RecordError
			switch {
			case err == nil:
				accepted = append(accepted, r)
			case !errors.As(err, &re):
				t.Fatalf("refusal of %+v is not a *RecordError: %v", r, err)
			case snapshot(v.State) != before:
				// Apply took the record and the Verifier then found an invariant broken.
				t.Fatalf("an applied record broke an invariant: %+v: %v", r, err)
			}
		}
		replayed := New()
		for _, r := range accepted {
			if err := replayed.Apply(r); err != nil {
				t.Fatalf("replay refused an accepted record: %v", err)
			}
		}
		if !reflect.DeepEqual(replayed, v.State) {
			t.Fatal("replay differs from live application")
		}
	})
}

// fuzzRecord builds a record of any type from two bytes, over a small space of
// ids so that records often meet each other.
func fuzzRecord(op, arg byte, now int64) Record {
	task := []string{"T1", "T2", "T3"}[arg%3]
	lease := []string{"L1", "L2", "L3", "L4", "L5", "L6"}[arg%6]
	off := int64(arg % 4)
	token := []string{"K1", "K2", "K3", "K4"}[arg%4]
	switch op % 13 {
	case 0:
		return Record{At: now, Type: TaskCreated, TaskID: task, Payload: "p", Window: Duration(time.Duration(1+arg%5) * time.Minute),
			RetryPolicy: &RetryPolicy{MaxAttempts: 1 + int(arg%3), Backoff: Duration(time.Duration(arg%3) * time.Second), BackoffMax: Duration(10 * time.Second)}, RequestID: "R" + task}
	case 1:
		return Record{At: now, Type: LeaseGranted, TaskID: task, LeaseID: lease, WorkerID: "W", Attempt: 1 + int(arg%3), Expiry: now + int64(1+arg%4)*10_000}
	case 2:
		return Record{At: now, Type: LeaseExtended, TaskID: task, LeaseID: lease, Expiry: now + int64(1+arg%4)*10_000}
	case 3:
		return Record{At: now, Type: LeaseExpired, TaskID: task, LeaseID: lease}
	case 4:
		return Record{At: now, Type: TaskCompleted, TaskID: task, LeaseID: lease}
	case 5:
		return Record{At: now, Type: TaskCancelled, TaskID: task, LeaseID: lease, Reason: "late"}
	case 6:
		return Record{At: now, Type: TaskFailed, TaskID: task, LeaseID: lease, Reason: "x", Permanent: arg%5 == 0}
	case 7:
		return Record{At: now, Type: TaskDead, TaskID: task, Reason: "window"}
	case 8:
		return Record{At: now, Type: WorkAcquired, Domain: "D", Offset: &off, Token: token}
	case 9:
		return Record{At: now, Type: WorkEnqueued, Domain: "D", Offset: &off}
	case 10:
		return Record{At: now, Type: WorkSucceeded, Domain: "D", Offset: &off, Token: token, AcquiredAt: now - int64(arg%2)*5000}
	case 11:
		outcome := []string{FailRetry, FailGiveUp, "maybe"}[arg%3]
		return Record{At: now, Type: WorkFailed, Domain: "D", Offset: &off, Token: token, Outcome: outcome, RetryCount: int(arg % 3)}
	}
	return Record{At: now - int64(arg), Type: "Bogus", TaskID: task}
}
