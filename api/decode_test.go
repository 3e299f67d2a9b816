package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"runtime"
	"slices"
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
		`{"priority":-0,"max_attempts":7}`, `{"priority":01}`, `{"priority":1.0}`, `{"priority":1e2}`, `{"max_attempts":9223372036854775808}`,
		"{\"payload\":\"a\tb\"}", `{"payload":"x","priority":true}`, `{"payload":truex}`, `{"max_attempts":null,"after":[]}`,
		` { "payload" : "x" , "priority" : 5 } `, `{"task":"T1","lease":"L1","next":{"worker":"W","queue":"a,b"}}`,
		`{"result":"ACK","task_id":"T1","duplicate":false,"available_at":null,"deadline":"2026-01-01T00:00:00.000Z","waiting_for":null}`, `{"deadline":nul}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		// Over defaults, as a batch's line is read: what encoding/json makes
		// of the same defaults, its pointer written through.
		over := func() *SubmitRequest {
			n := 4
			return &SubmitRequest{Queue: "q", Priority: 2, MaxAttempts: &n, After: []string{"T1"}}
		}
		if got, want := over(), over(); true {
			if old, err := DecodeStrict(body, got); err == nil {
				renamed := body
				for _, k := range old {
					renamed = bytes.ReplaceAll(renamed, []byte(`"`+k+`"`), []byte(`"`+strings.ReplaceAll(k, "-", "_")+`"`))
				}
				dec := json.NewDecoder(bytes.NewReader(renamed))
				dec.DisallowUnknownFields()
				if refErr := dec.Decode(want); refErr != nil || !reflect.DeepEqual(got, want) {
					t.Fatalf("took %q over defaults as %+v; encoding/json says %+v, %v", body, got, want, refErr)
				}
			}
		}
		for _, v := range []any{&SubmitRequest{}, &CompleteRequest{}, &ScheduleAddRequest{}, &InspectRequest{}, &Ack{}, &Lease{}} {
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

// TestBatchLinesKeepTheirOwnDefaults: the flags' defaults are every line's
// own. A line that sets what the base points to (max_attempts, after,
// after_ended) changes neither the base nor any other line: decoded over
// one shared base, every line took the last such line's values.
func TestBatchLinesKeepTheirOwnDefaults(t *testing.T) {
	spread(t)
	// Every field the base shares by reference is one this test gives; a new
	// one must be copied in batchLines.fresh and given here.
	var shared []string
	for f := range reflect.TypeFor[SubmitRequest]().Fields() {
		if k := f.Type.Kind(); k == reflect.Pointer || k == reflect.Slice || k == reflect.Map {
			shared = append(shared, f.Name)
		}
	}
	if want := []string{"MaxAttempts", "After", "AfterEnded"}; !slices.Equal(shared, want) {
		t.Fatalf("SubmitRequest's fields held by reference are %v, this test gives %v: copy the new ones in batchLines.fresh", shared, want)
	}
	five := 5
	base := SubmitRequest{MaxAttempts: &five, After: []string{"T1"}, AfterEnded: []string{"T2", "T3"}}
	var in strings.Builder
	for i := range 400 {
		if i%2 == 0 {
			fmt.Fprintf(&in, "{\"payload\":\"p%d\",\"max_attempts\":%d,\"after\":[\"a%d\"],\"after_ended\":[\"e%d\"]}\n", i, 10+i, i, i)
		} else {
			fmt.Fprintf(&in, "{\"payload\":\"p%d\"}\n", i)
		}
	}
	reqs, _, err := CollectBatch(strings.NewReader(in.String()), base, MaxBatchTasks, nil)
	if err != nil {
		t.Fatal(err)
	}
	if five != 5 || !slices.Equal(base.After, []string{"T1"}) || !slices.Equal(base.AfterEnded, []string{"T2", "T3"}) {
		t.Fatalf("decoding the batch changed its base: max attempts %d, after %v, after_ended %v", five, base.After, base.AfterEnded)
	}
	for i, r := range reqs {
		want := base
		want.Payload = fmt.Sprintf("p%d", i)
		if i%2 == 0 {
			attempts := 10 + i
			want.MaxAttempts, want.After, want.AfterEnded = &attempts, []string{fmt.Sprintf("a%d", i)}, []string{fmt.Sprintf("e%d", i)}
		}
		if !reflect.DeepEqual(r, want) {
			t.Fatalf("line %d is %+v (max attempts %d); want %+v (max attempts %d)", i+1, r, *r.MaxAttempts, want, *want.MaxAttempts)
		}
	}
}

// spread has the tests below cut their work in four parts whatever the
// machine's processors, so that the parallel path runs.
func spread(t *testing.T) {
	t.Cleanup(func(n int) func() { return func() { runtime.GOMAXPROCS(n) } }(runtime.GOMAXPROCS(4)))
}

func TestReadBatchStopsAtTheFirstBadLineAcrossChunks(t *testing.T) {
	spread(t)
	lines := make([]string, 3*batchChunk)
	for i := range lines {
		lines[i] = fmt.Sprintf(`{"payload":"p%d"}`, i)
	}
	lines[batchChunk+903] = `{"payload":"p", "oops":1}` // line batchChunk+904, in the second chunk
	lines[2*batchChunk+5] = `{oops`
	lines[7] = `{"payload":"old","request-id":"r7"}`
	lines[batchChunk+2] = `{"payload":"old","request-id":"r2"}`
	var seen []int
	var old []int
	err := ReadBatch(strings.NewReader(strings.Join(lines, "\n")), SubmitRequest{}, MaxBatchTasks,
		func(line int, _ []string) { old = append(old, line) },
		func(req SubmitRequest, line int) error {
			if want := fmt.Sprintf("p%d", line-1); req.Payload != want && req.Payload != "old" {
				t.Fatalf("line %d handed over as %+v", line, req)
			}
			seen = append(seen, line)
			return nil
		})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("batch line %d:", batchChunk+904)) {
		t.Fatalf("err = %v, want the first bad line, %d", err, batchChunk+904)
	}
	if len(seen) != batchChunk+903 || !slices.IsSorted(seen) {
		t.Fatalf("%d lines handed over (sorted: %v), want the %d before the bad one, in order", len(seen), slices.IsSorted(seen), batchChunk+903)
	}
	if !reflect.DeepEqual(old, []int{8, batchChunk + 3}) {
		t.Fatalf("old spellings heard at lines %v, want 8 and %d", old, batchChunk+3)
	}

	// A bad line before the limit is what is wrong, not the limit.
	few := append(slices.Clone(lines[:10]), `{oops`)
	few = append(few, lines[20:40]...)
	if _, _, err := CollectBatch(strings.NewReader(strings.Join(few, "\n")), SubmitRequest{}, 20, nil); err == nil || !strings.Contains(err.Error(), "batch line 11:") {
		t.Fatalf("a bad line 11 in a batch over its limit of 20: %v", err)
	}
	if _, _, err := CollectBatch(strings.NewReader(strings.Join(lines[:40], "\n")), SubmitRequest{}, 20, nil); err == nil || !strings.Contains(err.Error(), "more than 20 tasks") {
		t.Fatalf("a batch over its limit of 20: %v", err)
	}
}

// TestABatchPastItsBoundSaysHowToSplitIt: a batch past a server's bound is
// told that the command line sends a bigger file in parts; one past the
// command line's own, which nothing sends in parts, to split the file.
func TestABatchPastItsBoundSaysHowToSplitIt(t *testing.T) {
	for _, c := range []struct {
		bound int
		hint  string
	}{{MaxServerBatchTasks, "sends a bigger file in parts"}, {MaxBatchTasks, "split the file into files of at most that many lines"}} {
		body := strings.Repeat(`{"payload":"p"}`+"\n", c.bound+1)
		err := ReadBatch(strings.NewReader(body), SubmitRequest{}, c.bound, nil, func(SubmitRequest, int) error { return nil })
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d tasks", c.bound)) || !strings.Contains(err.Error(), c.hint) {
			t.Fatalf("a batch of %d lines past its bound: %v", c.bound+1, err)
		}
	}
}

func TestReadBatchReportsTheReadThatCutALine(t *testing.T) {
	spread(t)
	var in strings.Builder
	for i := range batchChunk {
		fmt.Fprintf(&in, "{\"payload\":\"p%d\"}\n", i)
	}
	limit := int64(in.Len() - 5) // the chunk's last line, cut short
	body := http.MaxBytesReader(nil, io.NopCloser(strings.NewReader(in.String())), limit)
	if _, _, err := CollectBatch(body, SubmitRequest{}, MaxBatchTasks, nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("over %d bytes", limit)) {
		t.Fatalf("err = %v, want the batch's size refused", err)
	}
	// A line too long for the scanner is no line cut by a read: the bad
	// line before it is what is wrong.
	if _, _, err := CollectBatch(strings.NewReader("{oops\n"+strings.Repeat("x", MaxBatchLine+1)), SubmitRequest{}, MaxBatchTasks, nil); err == nil || !strings.Contains(err.Error(), "batch line 1:") {
		t.Fatalf("a bad line before one too long: %v", err)
	}
}

func TestEncodeAndDecodeLinesKeepOrder(t *testing.T) {
	spread(t)
	acks := make([]Ack, 5000)
	for i := range acks {
		acks[i] = Ack{TaskID: fmt.Sprintf("T%d", i+1), Queue: "<a&b>"}
	}
	raw, err := EncodeLines(len(acks), func(i int) any { return acks[i] })
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(raw, []byte("\n")); n != len(acks) || !bytes.Contains(raw, []byte(`"<a&b>"`)) {
		t.Fatalf("%d lines, HTML escaped: %v", n, !bytes.Contains(raw, []byte(`"<a&b>"`)))
	}
	back, err := DecodeLines[Ack](raw)
	if err != nil || !reflect.DeepEqual(back, acks) {
		t.Fatalf("decoded %d acks (%v), not the %d encoded", len(back), err, len(acks))
	}
	lines := bytes.Split(raw, []byte("\n"))
	lines[4321] = []byte(`{"task_id":`)
	if _, err := DecodeLines[Ack](bytes.Join(lines, []byte("\n"))); err == nil || !strings.HasPrefix(err.Error(), "line 4322:") {
		t.Fatalf("a cut line 4322: %v", err)
	}
	if got, err := DecodeLines[Ack]([]byte(" \n")); got != nil || err != nil {
		t.Fatalf("an empty answer: %v, %v", got, err)
	}
	// An answer is not held to a request's strictness: a key this client
	// does not know, one in other letters, one given twice or in an old
	// spelling are read as encoding/json reads them.
	lenient := `{"task_id":"T1","queue":"q","added_later":1}` + "\n" + `{"Task_ID":"T2","queue":"a","queue":"b"}` + "\n" + `{"task_id":"T3","request-id":"r"}`
	got, err := DecodeLines[Ack]([]byte(lenient))
	if want := []Ack{{TaskID: "T1", Queue: "q"}, {TaskID: "T2", Queue: "b"}, {TaskID: "T3"}}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("read %+v, %v; want %+v", got, err, want)
	}
}

// TestBatchPartsCutAtTheServersLimits: a batch's parts follow each other
// over every line, each within the lines and bytes a server takes (each
// line as the client encodes it, and its newline; a line alone is a part
// whatever its size), and each but the last as long as those allow: the
// next line would take it past one.
func TestBatchPartsCutAtTheServersLimits(t *testing.T) {
	spread(t)
	defer func(tasks int, body int64) { MaxServerBatchTasks, MaxServerBatchBody = tasks, body }(MaxServerBatchTasks, MaxServerBatchBody)
	reqs := make([]SubmitRequest, 2000)
	size := make([]int64, len(reqs))
	for i := range reqs {
		reqs[i] = SubmitRequest{Payload: strings.Repeat("x", i%97), RequestID: fmt.Sprint("r", i)}
		b, _ := json.Marshal(reqs[i])
		size[i] = int64(len(b) + 1)
	}
	for _, limits := range []struct {
		tasks int
		body  int64
	}{{300, 1 << 30}, {1 << 20, 9000}, {250, 12000}, {1, 1}, {1 << 20, 1 << 30}} {
		MaxServerBatchTasks, MaxServerBatchBody = limits.tasks, limits.body
		parts, err := BatchParts(reqs)
		if err != nil {
			t.Fatal(err)
		}
		next := 0
		for k, p := range parts {
			var bytes int64
			for i := p[0]; i < p[1]; i++ {
				bytes += size[i]
			}
			switch {
			case p[0] != next || p[1] <= p[0]:
				t.Fatalf("limits %+v: part %d is %v after line %d", limits, k, p, next)
			case p[1]-p[0] > 1 && (p[1]-p[0] > limits.tasks || bytes > limits.body):
				t.Fatalf("limits %+v: part %d %v holds %d lines, %d bytes", limits, k, p, p[1]-p[0], bytes)
			case k < len(parts)-1 && p[1]-p[0] < limits.tasks && bytes+size[p[1]] <= limits.body:
				t.Fatalf("limits %+v: part %d %v ends before a line that fits", limits, k, p)
			}
			next = p[1]
		}
		if next != len(reqs) {
			t.Fatalf("limits %+v: the parts %v end at line %d of %d", limits, parts, next, len(reqs))
		}
	}
}

// shout reads itself as text, upper-cased.
type shout string

func (s *shout) UnmarshalText(b []byte) error {
	*s = shout(strings.ToUpper(string(b)))
	return nil
}

// TestTheWalkLeavesWhatReadsItselfToEncodingJSON: a field read by its
// type's own UnmarshalText, or from a quoted string (",string"), is read as
// encoding/json reads it, not set by the key walk as the string it spells;
// each alone in its body, with a plain field the walk sets.
func TestTheWalkLeavesWhatReadsItselfToEncodingJSON(t *testing.T) {
	type fields struct {
		Text    shout  `json:"text"`
		Pointer *shout `json:"pointer"`
		Quoted  int    `json:"quoted,string"`
		Plain   string `json:"plain"`
	}
	for _, body := range []string{`{"text":"a","plain":"c"}`, `{"pointer":"b","plain":"c"}`, `{"quoted":"7","plain":"c"}`} {
		var got, want fields
		if _, err := DecodeStrict([]byte(body), &got); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(body), &want); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("read %s as %+v; encoding/json reads %+v", body, got, want)
		}
	}
}

// TestADeepValueIsRefusedAsEncodingJSONRefusesIt: a value nested as deep as
// a server's request body allows (a megabyte of '[') is refused with
// encoding/json's error, and the walk's stack stays small (the walk alone
// grew it to 128 MB, and a batch's bodies to the runtime's limit, which
// ends the process); a value nested as deep as encoding/json reads is
// read as it reads it.
func TestADeepValueIsRefusedAsEncodingJSONRefusesIt(t *testing.T) {
	for _, n := range []int{maxDepth - 1, maxDepth, 1 << 20} {
		body := []byte(`{"payload":"x","after":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`)
		var got, want SubmitRequest
		var stack uint64
		done := make(chan error)
		go func() { // a goroutine of its own: the stack measured is the walk's
			_, err := DecodeStrict(body, &got)
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			stack = ms.StackInuse
			done <- err
		}()
		err := <-done
		wantErr := json.Unmarshal(body, &want)
		if wantErr == nil || err == nil || err.Error() != wantErr.Error() {
			t.Fatalf("%d deep: %v; encoding/json says %v", n, err, wantErr)
		}
		if stack > 16<<20 {
			t.Fatalf("%d deep: the stacks hold %d MB as the walk ends", n, stack>>20)
		}
	}
}

// TestNotUTF8NamesThePath: a string that is not UTF-8 is named by its JSON
// path, found wherever it is; text is passed.
func TestNotUTF8NamesThePath(t *testing.T) {
	type inner struct {
		Reason string            `json:"reason"`
		Labels map[string]string `json:"labels"`
	}
	type request struct {
		Payload string  `json:"payload"`
		Ops     []inner `json:"ops"`
		Ptr     *inner  `json:"ptr"`
		Plain   string
		Raw     []byte `json:"raw"`
	}
	for want, req := range map[string]any{
		"payload":                  request{Payload: "\xff"},
		"ops[3].reason":            request{Ops: []inner{{}, {}, {}, {Reason: "a\xffb"}}},
		"ptr.labels.k":             request{Ptr: &inner{Labels: map[string]string{"k": "\xff"}}},
		`ptr.labels's key "\xff"`:  request{Ptr: &inner{Labels: map[string]string{"\xff": "v"}}},
		`the request's key "\xfe"`: map[string]string{"\xfe": "x"},
		"Plain":                    request{Plain: "\xff"},
		"the request":              "\xff",
		"[1]":                      []string{"ok", "\xff"},
		"(none: bytes are base64)": request{Raw: []byte{0xff}},
		"(none: text)":             request{Payload: "fine", Ops: []inner{{Reason: "é"}}},
	} {
		err := NotUTF8(req)
		if strings.HasPrefix(want, "(none") {
			if err != nil {
				t.Errorf("%+v: %v; want nothing refused", req, err)
			}
			continue
		}
		if err == nil || err.Error() != want+" is not UTF-8 text: encode binary data (e.g. base64) first" {
			t.Errorf("%+v: %v; want %s named", req, err, want)
		}
	}
}

// BenchmarkNotUTF8Submit: what the check of a request costs the client (a
// batch's every line).
func BenchmarkNotUTF8Submit(b *testing.B) {
	req := SubmitRequest{Payload: "resize img-42", RequestID: "job-42", Queue: "images", Actor: "root@vm:123", After: []string{"T1"}}
	b.ReportAllocs()
	for b.Loop() {
		if err := NotUTF8(req); err != nil {
			b.Fatal(err)
		}
	}
}
