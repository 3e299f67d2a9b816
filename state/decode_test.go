package state

import (
	"strconv"
	"testing"
	"time"
)

// TestIntegerParser holds the decoder's integer parser to strconv, except
// where JSON is stricter (leading zeros, fractions, exponents).
func TestIntegerParser(t *testing.T) {
	for _, s := range []string{"0", "-0", "1", "-1", "42", "9223372036854775807", "-9223372036854775808",
		"9223372036854775808", "-9223372036854775809", "99999999999999999999", "-", "", "01", "-01", "1.5", "1e3", "x"} {
		d := decoder{b: []byte(s)}
		got, err := d.integer()
		ok := err == nil && d.i == len(s)
		want, werr := strconv.ParseInt(s, 10, 64)
		jsonStricter := len(s) > 1 && (s[0] == '0' || (s[0] == '-' && s[1] == '0' && len(s) > 2))
		if jsonStricter {
			werr = strconv.ErrSyntax
		}
		if ok != (werr == nil) || (ok && got != want) {
			t.Errorf("%q: got %d (%v), strconv says %d (%v)", s, got, err, want, werr)
		}
	}
}

// TestPeekAtReadsWhatTheDecoderReads: on every record EncodeRecord writes,
// PeekAt finds the time the decoder finds; on bodies of another shape it
// says it cannot.
func TestPeekAtReadsWhatTheDecoderReads(t *testing.T) {
	for _, at := range []int64{0, 1, -62135596800000, 1767225600000, 253402300799999} {
		r := Record{Seq: 7, At: at, Type: TaskCreated, TaskID: "T1", Payload: "p"}
		body, err := EncodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := DecodeRecord(body)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := PeekAt(body); !ok || got != decoded.At {
			t.Fatalf("PeekAt of %s: %d %v, the decoder reads %d", body, got, ok, decoded.At)
		}
	}
	for _, body := range []string{`{"at":5,"seq":1}`, `{"seq":1}`, `{"seq":1,"at":x}`, ``, `{"seq":1,"at":5`} {
		if at, ok := PeekAt([]byte(body)); ok {
			t.Fatalf("PeekAt of %q: %d", body, at)
		}
	}
}

// TestDurationsAreWrittenAsGoText pins a record's durations as the WAL has
// always held them: Go's text in a JSON string, NoWindow as the longest
// duration, a zero one left out.
func TestDurationsAreWrittenAsGoText(t *testing.T) {
	r := Record{Seq: 1, At: 2, Type: TaskCreated, TaskID: "T1", Window: NoWindow,
		RetryPolicy: &RetryPolicy{MaxAttempts: 3, Backoff: Duration(1500 * time.Microsecond), BackoffMax: Duration(90 * time.Second)}}
	want := `{"seq":1,"at":2,"type":"TaskCreated","task_id":"T1","window":"2562047h47m16.854775807s",` +
		`"retry_policy":{"max_attempts":3,"backoff":"1.5ms","backoff_max":"1m30s"}}`
	body, err := EncodeRecord(r)
	if err != nil || string(body) != want {
		t.Fatalf("got %s (%v), want %s", body, err, want)
	}
	r = Record{Seq: 1, At: 2, Type: ScheduleAdded, Every: Duration(time.Microsecond), Window: 0}
	want = `{"seq":1,"at":2,"type":"ScheduleAdded","every":"1µs"}`
	if body, err = EncodeRecord(r); err != nil || string(body) != want {
		t.Fatalf("got %s (%v), want %s", body, err, want)
	}
}
