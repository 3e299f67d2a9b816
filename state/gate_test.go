package state

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/limits"
)

// FuzzGate: a record the gate lets through (CheckRecord, and the WAL's
// largest body) is one the decoder reads back exactly: what is written is
// what replay applies. Among them are strings that are not UTF-8, which
// JSON would write as U+FFFD and read back as other text.
func FuzzGate(f *testing.F) {
	f.Add("T1", "payload", "actor", "default", "r1", int64(1), int64(0), int64(3), int64(0), "5m")
	f.Add("T1", "a\xffb", "", "q", "", int64(2147483648), int64(1001), int64(0), int64(-1), "1ms")
	f.Add("", strings.Repeat("\x01", 1000), strings.Repeat("a", 201), "q\x00", "r\n", int64(-5), int64(-1001), int64(math.MaxInt64), int64(1), "-1s")
	f.Fuzz(func(t *testing.T, task, payload, actor, queue, request string, limit, priority, attempts, retries int64, every string) {
		r := Record{Seq: 1, At: 1767225600000, Type: TaskCreated, TaskID: task, Payload: payload, Actor: actor, Queue: queue, RequestID: request,
			Limit: ptr(int(limit)), Priority: ptr(int(priority)), RetryPolicy: &RetryPolicy{MaxAttempts: int(attempts)}, MaxRetries: ptr(int(retries))}
		if d, err := time.ParseDuration(every); err == nil {
			r.Type, r.Every = ScheduleAdded, Duration(d)
		}
		body, err := EncodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		if CheckRecord(r) != nil || len(body) > limits.RecordBody {
			return
		}
		back, err := DecodeRecord(body)
		if err != nil {
			t.Fatalf("the gate let through %q, which the decoder refuses: %v", body, err)
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("the gate let through a record that reads back as another:\n%+v\n%+v", r, back)
		}
	})
}

// TestTheDecoderReadsOlderLimits: the decoder refuses a priority outside the
// table's range, as it always did; it reads a queue limit past the table's
// largest, which older versions wrote, as the largest, and an actor of any
// length and character; the gate refuses all of those in a new record.
func TestTheDecoderReadsOlderLimits(t *testing.T) {
	for _, p := range []int64{limits.MinPriority - 1, limits.MaxPriority + 1, math.MaxInt64} {
		if _, err := DecodeRecord([]byte(fmt.Sprintf(`{"seq":1,"type":"TaskCreated","priority":%d}`, p))); err == nil {
			t.Errorf("priority %d decoded", p)
		}
	}
	for _, n := range []int64{math.MaxInt32 + 1, 3000000000, math.MaxInt64} {
		r, err := DecodeRecord([]byte(fmt.Sprintf(`{"seq":1,"type":"QueueLimited","queue":"q","limit":%d}`, n)))
		if err != nil || *r.Limit != math.MaxInt32 {
			t.Errorf("limit %d: %v, %v; want the largest, 2^31-1", n, err, r.Limit)
		}
		if CheckRecord(Record{Type: QueueLimited, Queue: "q", Limit: ptr(int(n))}) == nil {
			t.Errorf("the gate lets a new limit of %d through", n)
		}
	}
	for _, n := range []int64{0, -1} {
		if _, err := DecodeRecord([]byte(fmt.Sprintf(`{"seq":1,"type":"QueueLimited","queue":"q","limit":%d}`, n))); err == nil {
			t.Errorf("limit %d decoded", n)
		}
	}
	actor := strings.Repeat(`\u001b`, 20_000)
	if _, err := DecodeRecord([]byte(`{"seq":1,"type":"TaskCreated","actor":"` + actor + `"}`)); err != nil {
		t.Errorf("an older version's long actor of escape bytes: %v", err)
	}
	if CheckRecord(Record{Type: TaskCreated, Actor: strings.Repeat("a", limits.NameBytes+1)}) == nil || CheckRecord(Record{Type: TaskCreated, Actor: "a\x1bb"}) == nil {
		t.Error("the gate lets a long actor, or one with a control character, through")
	}
}

// TestTheTableHoldsWhatTheRulesUse: the state's limits are the table's.
func TestTheTableHoldsWhatTheRulesUse(t *testing.T) {
	if MaxPayloadBytes != limits.Payload.Max || MaxIDBytes != limits.Worker.Max || MinPriority != limits.Priority.Min || MaxPriority != limits.Priority.Max {
		t.Fatal("state's limits are not the table's")
	}
	for _, l := range limits.Table {
		if l.Min > l.Max || l.Field == "" {
			t.Errorf("limit %+v: empty range or no name", l)
		}
	}
}
