package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// badKey is the reference DecodeStrict's key walk is held to: it walks the
// tokens encoding/json reads as a value of type t and says whether an object
// gives a key twice, or a struct a key that is not exactly one of its
// fields' JSON names.
func badKey(body []byte, t reflect.Type) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	var walk func(t reflect.Type) bool
	walk = func(t reflect.Type) bool {
		for t != nil && t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t != nil && t.Kind() != reflect.Struct && t.Kind() != reflect.Slice {
			t = nil
		}
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return false
				}
				key, _ := k.(string)
				if seen[key] {
					return true
				}
				seen[key] = true
				var field reflect.Type
				if t != nil && t.Kind() == reflect.Struct {
					f, ok := fieldNamed(t, key)
					if !ok {
						return true
					}
					field = f
				}
				if walk(field) {
					return true
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			var elem reflect.Type
			if t != nil && t.Kind() == reflect.Slice {
				elem = t.Elem()
			}
			for dec.More() {
				if walk(elem) {
					return true
				}
			}
			_, _ = dec.Token()
		}
		return false
	}
	return walk(t)
}

// fieldNamed is the type of t's field whose JSON name is exactly name.
func fieldNamed(t reflect.Type, name string) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && tag == "" {
			if ft, ok := fieldNamed(f.Type, name); ok {
				return ft, true
			}
			continue
		}
		if tag == name {
			return f.Type, true
		}
	}
	return nil, false
}

// FuzzDecodeStrict: the strict decoder never panics nor hangs; what it
// takes, encoding/json (with unknown fields refused) takes the same; it
// refuses every body in which encoding/json's tokens give an object a key
// twice or a key that is no field's name exactly (which encoding/json
// matches in any case).
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{
		`{"payload":"x","request-id":"r1","priority":3}`, `{"payload":"x","payload":"y"}`, `{"Payload":"x"}`,
		`{"task":"T1","lease":"L1","next":{"worker":"W","Worker":"V"}}`, `{"name":"n","every":"1m","task":{"payload":"x","queue":"q"}}`,
		`{"payload":"a\u0062","queue":["a","b"]}`, `{"pay\u006coad":"x","payload":"y"}`, `{"payload":"x"} {}`, `[{"a":1,"a":2}]`, `{"payload":`,
		`{"payload":"x","request-id":"r"}`, `{"request_id":"r","request-id":"r"}`, `{"name":"n","catch-up":"all","task":{"payload":"p","max-attempts":2}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, v := range []any{&SubmitRequest{}, &CompleteRequest{}, &ScheduleAddRequest{}, &InspectRequest{}} {
			old, err := DecodeStrict(body, v)
			if err != nil {
				continue
			}
			if len(old) > 0 { // read as the body with today's spellings
				for _, k := range old {
					body = bytes.ReplaceAll(body, []byte(`"`+k+`"`), []byte(`"`+strings.ReplaceAll(k, "-", "_")+`"`))
				}
			}
			if badKey(body, reflect.TypeOf(v)) {
				t.Fatalf("took %q, which gives a key twice or one that is no field's exactly", body)
			}
			ref := reflect.New(reflect.TypeOf(v).Elem()).Interface()
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.DisallowUnknownFields()
			if refErr := dec.Decode(ref); refErr != nil || !reflect.DeepEqual(ref, v) {
				t.Fatalf("took %q as %+v; encoding/json says %+v, %v", body, v, ref, refErr)
			}
		}
	})
}

// BenchmarkDecodeStrictSubmit: what reading one request costs (every
// request of a server, every line of a batch).
func BenchmarkDecodeStrictSubmit(b *testing.B) {
	body := []byte(`{"payload":"job 1","request_id":"r1","window":"5m","queue":"mail"}`)
	b.ReportAllocs()
	for b.Loop() {
		var r SubmitRequest
		if _, err := DecodeStrict(body, &r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCollectBatchKeepsOrderAndLines: a batch longer than the chunks it is
// gathered in comes back whole, in its order, each request with the number
// of its line (blank lines skipped but counted), over the base given.
func TestCollectBatchKeepsOrderAndLines(t *testing.T) {
	var in strings.Builder
	var wantLines []int
	line := 0
	for i := range 3*batchChunk + 17 {
		if i%7 == 3 {
			in.WriteString("\n")
			line++
		}
		fmt.Fprintf(&in, "{\"payload\":\"p%d\"}\n", i)
		line++
		wantLines = append(wantLines, line)
	}
	reqs, lines, err := CollectBatch(strings.NewReader(in.String()), SubmitRequest{Queue: "q"}, MaxBatchTasks, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != len(wantLines) || !reflect.DeepEqual(lines, wantLines) {
		t.Fatalf("%d requests, lines %v...; want %d", len(reqs), lines[:min(len(lines), 10)], len(wantLines))
	}
	for i, r := range reqs {
		if r.Payload != fmt.Sprintf("p%d", i) || r.Queue != "q" {
			t.Fatalf("request %d is %+v", i, r)
		}
	}
	if _, _, err := CollectBatch(strings.NewReader(in.String()+"{oops\n"), SubmitRequest{}, MaxBatchTasks, nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("batch line %d", line+1)) {
		t.Fatalf("a bad last line: %v", err)
	}
}
