package state

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"reflect"
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

// TestEncodeRecordWritesWhatJSONWrites holds EncodeRecord to encoding/json:
// records whose every field (found by reflection, so a field added later is
// covered at once) is left empty or given a value at random, strings among
// them with escapes, HTML, other scripts, invalid UTF-8 and U+2028, encode
// to the bytes json.Marshal writes.
func TestEncodeRecordWritesWhatJSONWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	texts := []string{"", "T1", "job 42", `say "hi"\n`, "a\tb\x00c\x1f", "<b>&amp;</b>", "naïve ✓", "\xff\xfe", "line\u2028sep\u2029", "\x7f", "µs", "a&b", "a>b", `x\y`, "é"}
	value := func(v reflect.Value, name string) {
		switch v.Kind() {
		case reflect.String:
			v.SetString(texts[rng.IntN(len(texts))])
		case reflect.Int, reflect.Int64:
			v.SetInt([]int64{0, 1, -1, 42, math.MaxInt64, math.MinInt64, int64(NoWindow)}[rng.IntN(7)])
		case reflect.Bool:
			v.SetBool(rng.IntN(2) == 0)
		default:
			t.Fatalf("field %s is a %s: teach this test to give it values", name, v.Type())
		}
	}
	for range 20_000 {
		var r Record
		rv := reflect.ValueOf(&r).Elem()
		for i := range rv.NumField() {
			f := rv.Type().Field(i)
			if f.Tag.Get("json") == "-" || rng.IntN(3) == 0 {
				continue
			}
			v := rv.Field(i)
			switch v.Kind() {
			case reflect.Pointer:
				v.Set(reflect.New(v.Type().Elem()))
				if e := v.Elem(); e.Kind() == reflect.Struct {
					for j := range e.NumField() {
						value(e.Field(j), f.Name+"."+e.Type().Field(j).Name)
					}
				} else {
					value(e, f.Name)
				}
			case reflect.Slice:
				xs := make([]string, rng.IntN(3))
				for j := range xs {
					xs[j] = texts[rng.IntN(len(texts))]
				}
				v.Set(reflect.ValueOf(xs))
			default:
				value(v, f.Name)
			}
		}
		got, err := EncodeRecord(r)
		want, werr := json.Marshal(r)
		if err != nil || werr != nil || !bytes.Equal(got, want) {
			t.Fatalf("EncodeRecord(%+v):\n%s (%v)\nencoding/json:\n%s (%v)", r, got, err, want, werr)
		}
	}
}

// BenchmarkEncodeRecordCreated encodes a submit's TaskCreated, as the gate
// does for every record written.
func BenchmarkEncodeRecordCreated(b *testing.B) {
	notBefore, priority := int64(1764000000000), 0
	r := Record{Seq: 123456, At: 1764000000000, Type: TaskCreated, TaskID: "T123456", Payload: "resize img-42", Window: NoWindow,
		RetryPolicy: &RetryPolicy{MaxAttempts: 3, Backoff: Duration(time.Second), BackoffMax: Duration(time.Minute)},
		RequestID:   "R123456", NotBefore: &notBefore, Queue: "images", Priority: &priority}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeRecord(r); err != nil {
			b.Fatal(err)
		}
	}
}
