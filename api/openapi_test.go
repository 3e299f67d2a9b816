package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/leasewal/leasewal/api"
)

// route is one operation of the typed HTTP API.
type route struct {
	path, summary string
	request       any
	answers       []any // besides api.Error
	batch         bool  // one request per line in, one answer per line out (NDJSON)
	// stream is what the lines of a streamed answer (NDJSON, ended by an
	// api.StreamEnd) may be, when the operation may answer so.
	stream []any
	// example is a request body the document shows (a batch's: an array
	// of its lines), which TestEveryDocumentedExampleIsTaken sends.
	example string
}

var routes = []route{
	{"/v1/submit", "Create a task (TaskCreated); a repeated request id answers the first task", api.SubmitRequest{}, []any{api.Ack{}}, false, nil, `{"payload":"resize img-42","window":"5m","max_attempts":3,"backoff":"1s","request_id":"job-42","queue":"img","priority":5}`},
	{"/v1/submit/batch", "Create many tasks in one write, all or none: one submit per line, one answer per line", api.SubmitRequest{}, []any{api.Ack{}}, true, nil, `[{"payload":"resize img-1","request_id":"img-1"},{"payload":"resize img-2","request_id":"img-2","delay":"10m"}]`},
	{"/v1/lease", "Lease the next eligible task to a worker (LeaseGranted), or EMPTY (exit 4)", api.LeaseRequest{}, []any{api.Lease{}, api.Empty{}}, false, nil, `{"worker":"W1","duration":"30s","queue":["default","img"],"request_id":"W1-poll-3"}`},
	{"/v1/extend", "Extend a current lease (LeaseExtended), or CANCELLED (exit 3)", api.ExtendRequest{}, []any{api.Extended{}, api.Cancelled{}}, false, nil, `{"task":"T1","lease":"L1","duration":"1m"}`},
	{"/v1/complete", "Complete a task under its current lease (TaskCompleted), or CANCELLED (exit 3)", api.CompleteRequest{}, []any{api.Committed{}, api.Cancelled{}}, false, nil, `{"task":"T1","lease":"L1","result":"done","next":{"worker":"W1","duration":"30s"}}`},
	{"/v1/fail", "Report a failed attempt (TaskFailed, TaskDead), or CANCELLED (exit 3)", api.FailRequest{}, []any{api.Failed{}, api.Cancelled{}}, false, nil, `{"task":"T1","lease":"L1","reason":"upstream timeout"}`},
	{"/v1/release", "Give the current lease back without using an attempt (LeaseReleased), or CANCELLED (exit 3)", api.ReleaseRequest{}, []any{api.Released{}, api.Cancelled{}}, false, nil, `{"task":"T1","lease":"L1","delay":"30s"}`},
	{"/v1/pause", "Pause a queue: it leases nothing and its tasks' windows stand still (QueuePaused)", api.PauseRequest{}, []any{api.Paused{}}, false, nil, `{"queue":"mail","for":"30m","reason":"smtp relay down"}`},
	{"/v1/resume", "End a queue's pause (QueueResumed)", api.ResumeRequest{}, []any{api.Resumed{}}, false, nil, `{"queue":"mail"}`},
	{"/v1/schedule/add", "Add a periodic task (ScheduleAdded)", api.ScheduleAddRequest{}, []any{api.ScheduleAdded{}}, false, nil, `{"name":"tick","every":"10m","catch_up":"last","task":{"payload":"check the mirrors","queue":"default"}}`},
	{"/v1/schedule/rm", "Remove a periodic task (ScheduleRemoved)", api.ScheduleRemoveRequest{}, []any{api.ScheduleRemoved{}}, false, nil, `{"name":"digest"}`},
	{"/v1/schedule/ls", "Every periodic task, with its last and next slots", api.ScheduleListRequest{}, []any{api.Schedules{}}, false, nil, `{}`},
	{"/v1/heartbeat", "Note that a worker is alive (nothing written to the WAL)", api.HeartbeatRequest{}, []any{api.Heartbeat{}}, false, nil, `{"worker":"W1"}`},
	{"/v1/expire", "Record what time has revoked (LeaseExpired, TaskDead)", api.ExpireRequest{}, []any{api.Expired{}}, false, nil, `{}`},
	{"/v1/abort", "End a waiting or leased task (TaskAborted)", api.AbortRequest{}, []any{api.Aborted{}}, false, nil, `{"task":"T1","reason":"bad batch"}`},
	{"/v1/queue/rate", "Set or lift a queue's rate of grants (QueueRated)", api.QueueRateRequest{}, []any{api.QueueRate{}}, false, nil, `{"queue":"mail","rate":"10/s","burst":5}`},
	{"/v1/queue/limit", "Set or lift a queue's limit of current leases (QueueLimited)", api.QueueLimitRequest{}, []any{api.QueueLimit{}}, false, nil, `{"queue":"img","limit":2}`},
	{"/v1/queue/ls", "The queues that hold unfinished tasks, by name, read without reading a task", api.QueueListRequest{}, []any{api.QueueList{}}, false, nil, `{}`},
	{"/v1/stats", "The figures an operator watches: queues, their latency, records by type", api.StatsRequest{}, []any{api.Stats{}}, false, nil, `{"queue":"default"}`},
	{"/v1/redact", "Stop serving a task's payload; the next compaction drops it (TaskRedacted)", api.RedactRequest{}, []any{api.Redacted{}}, false, nil, `{"task":"T1","reason":"a password was pasted"}`},
	{"/v1/requeue", "Run a FAILED or DEAD task again, as a new task (TaskCreated)", api.RequeueRequest{}, []any{api.Ack{}}, false, nil, `{"task":"T2","request_id":"rerun-T2"}`},
	{"/v1/requeue/all", "Run every FAILED or DEAD task selected again, each as a new task, in one write (TaskCreated each)", api.RequeueAllRequest{}, []any{api.RequeuedAll{}}, false, nil, `{"state":"FAILED","queue":"img"}`},
	{"/v1/why", "Why a task is where it is, and when it can run", api.WhyRequest{}, []any{api.Why{}}, false, nil, `{"task":"T1"}`},
	{"/v1/wait", "Wait until every named task is in one of the states (at most five minutes a request), or TIMEOUT / UNREACHABLE (exit 9)", api.WaitRequest{}, []any{api.Wait{}}, false, nil, `{"tasks":["T2"],"for":"FAILED","timeout":"0s"}`},
	{"/v1/inspect", "Tasks as they stand, or right after record until; the worker registry with workers. Every task (none named) is streamed: the head (tasks empty), each task, the end, one a line",
		api.InspectRequest{}, []any{api.Inspect{}, api.Workers{}}, false, []any{api.Inspect{}, api.Task{}, api.StreamEnd{}}, `{"tasks":["T1"]}`},
	{"/v1/log", "The records that match every filter, streamed one a line, then the end: where the log stood", api.LogRequest{}, nil, false, []any{api.Record{}, api.StreamEnd{}}, `{"task":"T1","from":1}`},
	{"/v1/compact", "Compact the WAL (a base, the records replaced sealed in the history): the server's own, beside its batches", api.CompactRequest{}, []any{api.Compacted{}}, false, nil, `{"keep_finished":"7d","keep_history":"30d"}`},
	{"/v1/worklease/acquire", "Acquire an offset of a domain under a new fencing token (WorkAcquired), or queue it (WorkEnqueued)", api.WorkAcquireRequest{}, []any{api.Work{}}, false, nil, `{"domain":"img","offset":1}`},
	{"/v1/worklease/succeed", "Mark the in-flight offset processed (WorkSucceeded)", api.WorkSucceedRequest{}, []any{api.Work{}}, false, nil, `{"domain":"img","token":"K1"}`},
	{"/v1/worklease/fail", "Report a failed try of the in-flight offset (WorkFailed)", api.WorkFailRequest{}, []any{api.Work{}}, false, nil, `{"domain":"img","token":"K1","max_retries":3}`},
	{"/v1/worklease/inspect", "Every domain's lease, backlog, processed and failed offsets", api.WorkInspectRequest{}, []any{api.WorkInspect{}}, false, nil, `{"domain":"img"}`},
}

// schemaOf is the JSON Schema of a Go type as encoding/json writes it:
// fields by their JSON names, those without omitempty required, pointers
// nullable, and in a request (closed) no key that is not a field.
func schemaOf(t reflect.Type, schemas map[string]any, closed bool) map[string]any {
	switch {
	case t.Implements(reflect.TypeOf((*json.Marshaler)(nil)).Elem()): // state.Duration: text such as 1m30s
		return map[string]any{"type": "string"}
	case t == reflect.TypeOf(api.List("")):
		return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, map[string]any{"type": "array", "items": map[string]any{"type": "string"}}},
			"description": "a comma-separated list, or an array of strings"}
	case t.Kind() == reflect.Pointer:
		s := schemaOf(t.Elem(), schemas, closed)
		if typ, ok := s["type"].(string); ok {
			s["type"] = []any{typ, "null"}
			return s
		}
		return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
	case t.Kind() == reflect.String:
		return map[string]any{"type": "string"}
	case t.Kind() == reflect.Int, t.Kind() == reflect.Int64:
		return map[string]any{"type": "integer"}
	case t.Kind() == reflect.Float64:
		return map[string]any{"type": "number"}
	case t.Kind() == reflect.Bool:
		return map[string]any{"type": "boolean"}
	case t.Kind() == reflect.Slice:
		return map[string]any{"type": "array", "items": schemaOf(t.Elem(), schemas, closed)}
	case t.Kind() == reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": schemaOf(t.Elem(), schemas, closed)}
	}
	if _, done := schemas[t.Name()]; !done {
		schemas[t.Name()] = nil // a placeholder against cycles
		props, required := map[string]any{}, []any{}
		// encoding/json's rule: a field of the struct itself hides one of
		// the same name in a struct it embeds.
		var fields func(t reflect.Type, embedded bool)
		fields = func(t reflect.Type, embedded bool) {
			for i := range t.NumField() {
				f := t.Field(i)
				name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
				if name == "-" || !f.IsExported() || f.Anonymous {
					continue
				}
				if _, hidden := props[name]; hidden && embedded {
					continue
				}
				props[name] = schemaOf(f.Type, schemas, closed)
				if !strings.Contains(opts, "omitempty") {
					required = append(required, name)
				}
			}
			for i := range t.NumField() {
				if f := t.Field(i); f.Anonymous {
					fields(f.Type, true)
				}
			}
		}
		fields(t, false)
		s := map[string]any{"type": "object", "properties": props, "required": required}
		if closed {
			s["additionalProperties"] = false
		}
		schemas[t.Name()] = s
	}
	return map[string]any{"$ref": "#/components/schemas/" + t.Name()}
}

// document is the OpenAPI document the routes and the types say.
func document() map[string]any {
	schemas := map[string]any{}
	errRef := schemaOf(reflect.TypeOf(api.Error{}), schemas, false)
	exit := map[string]any{"Leasewal-Exit": map[string]any{"description": "the exit code the command line exits with", "schema": map[string]any{"type": "integer"}}}
	refusal := map[string]any{"description": "nothing decided: bad input (a body that does not parse, a missing or wrong field), a wrong token, a body too large, no leader", "headers": exit,
		"content": map[string]any{"application/json": map[string]any{"schema": errRef}}}
	decided := func(what string) map[string]any {
		return map[string]any{"description": "refused: " + what, "headers": exit,
			"content": map[string]any{"application/json": map[string]any{"schema": errRef}}}
	}
	paths := map[string]any{}
	for _, r := range routes {
		req := schemaOf(reflect.TypeOf(r.request), schemas, true)
		answers := []any{errRef}
		for _, a := range r.answers {
			answers = append(answers, schemaOf(reflect.TypeOf(a), schemas, false))
		}
		in, kind := req, "application/json"
		content := map[string]any{}
		if len(answers) > 1 {
			content["application/json"] = map[string]any{"schema": map[string]any{"anyOf": answers}}
		}
		if r.batch {
			in, kind = map[string]any{"type": "array", "items": req}, "application/x-ndjson"
			content = map[string]any{"application/x-ndjson": map[string]any{"schema": map[string]any{"anyOf": []any{errRef, map[string]any{"type": "array", "items": answers[1]}}}}}
		}
		if r.stream != nil {
			var lines []any
			for _, l := range r.stream {
				lines = append(lines, schemaOf(reflect.TypeOf(l), schemas, false))
			}
			content["application/x-ndjson"] = map[string]any{"schema": map[string]any{"type": "array", "items": map[string]any{"anyOf": lines}}}
		}
		paths[r.path] = map[string]any{"post": map[string]any{
			"summary":     r.summary,
			"operationId": strings.ReplaceAll(strings.TrimPrefix(r.path, "/v1/"), "/", "_"),
			"requestBody": map[string]any{"required": true, "content": map[string]any{kind: map[string]any{"schema": in, "example": json.RawMessage(r.example)}}},
			"responses": map[string]any{
				"200": map[string]any{"description": "the answer (EMPTY and CANCELLED included), its exit code in Leasewal-Exit", "headers": exit,
					"content": content},
				"400": refusal, "401": refusal, "403": refusal, "413": refusal, "415": refusal, "421": refusal, "503": refusal,
				"429": decided("a long read beyond the most a server runs at once (Busy, exit 6): ask again after Retry-After"),
				"404": decided("an unknown task, lease or domain (exit 4)"),
				"409": decided("a request id reused with other options, a fencing token or backlog order that does not hold"),
				"500": decided("not the request's fault: a damaged or locked WAL, a failed write, an outcome unknown (exit 10)"),
			},
		}}
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "leasewal", "version": "1",
			"description": "The typed operations of leasewal serve. Every key is snake_case: a command-line flag's name with _ for - (request_id for --request-id); the old spelling (request-id) is still read, answered with a Deprecation header, until 0.2. A bearer token when the server has one."},
		"components": map[string]any{"schemas": schemas,
			"securitySchemes": map[string]any{"token": map[string]any{"type": "http", "scheme": "bearer"}}},
		"security": []any{map[string]any{"token": []any{}}, map[string]any{}},
		"paths":    paths,
	}
}

// TestOpenAPIDocument: the served document is what the types and routes
// say (LEASEWAL_UPDATE_GOLDEN=1 rewrites it), and a valid OpenAPI 3.1
// document.
func TestOpenAPIDocument(t *testing.T) {
	want, err := json.MarshalIndent(document(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	if os.Getenv("LEASEWAL_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile("openapi.json", want, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Skip("rewrote api/openapi.json: run the test again to check it")
	}
	if !bytes.Equal(api.OpenAPI, want) {
		t.Fatal("api/openapi.json is not what the types say: run LEASEWAL_UPDATE_GOLDEN=1 go test ./api and commit it")
	}
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("the document is not valid OpenAPI: %v", err)
	}
}

// TestEveryNameIsSnakeCase: every property of every schema, and every
// example's key, is snake_case: one JSON vocabulary for requests and
// answers.
func TestEveryNameIsSnakeCase(t *testing.T) {
	snake := regexp.MustCompile(`^[a-z][a-z0-9]*(_[a-z0-9]+)*$`)
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	for name, schema := range doc.Components.Schemas {
		for prop := range schema.Properties {
			if !snake.MatchString(prop) {
				t.Errorf("%s.%s is not snake_case", name, prop)
			}
		}
	}
	var keys func(v any)
	keys = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if !snake.MatchString(k) {
					t.Errorf("an example's key %q is not snake_case", k)
				}
				keys(e)
			}
		case []any:
			for _, e := range v {
				keys(e)
			}
		}
	}
	for _, r := range routes {
		var v any
		if err := json.Unmarshal([]byte(r.example), &v); err != nil || r.example == "" {
			t.Errorf("%s: no example, or one that is not JSON: %v", r.path, err)
		}
		keys(v)
	}
}
