package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/service"
)

// route is one operation of the API (POST /v1/<path>): its body decoded
// into the operation's typed request, handed to the service, and its typed
// answer encoded as JSON with its exit code.
type route struct {
	readOnly    bool
	stream      bool   // its answer may be long: at most MaxStreams run at once
	contentType string // what its body must be sent as; "" is application/json
	limit       int64  // the most its body may hold; 0 is DefaultLimit
	// whole says that serve is handed the whole body, read before (a
	// typed request); else it reads the body as it goes (the batch door).
	whole bool
	serve func(ctx context.Context, body io.Reader) reply
	// check refuses a body serve would refuse before deciding anything: a
	// follower checks before it forwards, as its leader will again.
	check func(body []byte) error
}

// reply is an operation's answer, ready to send.
type reply struct {
	refused     error // a body that does not decode: 400, exit 2, nothing decided
	gone        bool  // the client went away: nothing to send
	status      int   // 0: 200
	exit        int
	contentType string
	header      http.Header
	body        []byte
	// spooled, instead of body, is a streamed answer written whole to a
	// file before its first byte is sent (the sender closes it).
	spooled *os.File
}

// spooler makes the file a streamed answer is written to.
type spooler func() (*os.File, error)

// routes are every operation of svc; describe says what an error is, and
// spool where a streamed answer is written.
func routes(svc api.Service, describe func(error) api.Error, spool spooler) map[string]route {
	answer := func(v any, err error) reply { return encode(v, err, describe) }
	return map[string]route{
		"submit": typed(func(ctx context.Context, r api.SubmitRequest) reply { return answer(svc.Submit(ctx, r)) }),
		"submit/batch": {contentType: "application/x-ndjson", limit: api.MaxServerBatchBody, check: func(body []byte) error {
			return api.ReadBatch(bytes.NewReader(body), api.SubmitRequest{}, api.MaxServerBatchTasks, nil, func(api.SubmitRequest, int) error { return nil })
		}, serve: func(ctx context.Context, body io.Reader) reply {
			var old []string
			deprecated := func(_ int, keys []string) {
				for _, k := range keys {
					if !slices.Contains(old, k) {
						old = append(old, k)
					}
				}
			}
			reqs, lines, err := api.CollectBatch(body, api.SubmitRequest{}, api.MaxServerBatchTasks, deprecated)
			if err != nil {
				return reply{refused: err}
			}
			acks, err := svc.SubmitBatch(ctx, reqs)
			if err != nil {
				return encode(nil, service.BatchRefusal(err, lines), describe)
			}
			out, _ := api.EncodeLines(len(acks), func(i int) any { return acks[i] }) // acks always encode
			return deprecating(reply{contentType: "application/x-ndjson", body: out}, old)
		}},
		"lease":        typed(func(ctx context.Context, r api.LeaseRequest) reply { return answer(svc.Lease(ctx, r)) }),
		"extend":       typed(func(ctx context.Context, r api.ExtendRequest) reply { return answer(svc.Extend(ctx, r)) }),
		"complete":     typed(func(ctx context.Context, r api.CompleteRequest) reply { return answer(svc.Complete(ctx, r)) }),
		"fail":         typed(func(ctx context.Context, r api.FailRequest) reply { return answer(svc.Fail(ctx, r)) }),
		"release":      typed(func(ctx context.Context, r api.ReleaseRequest) reply { return answer(svc.Release(ctx, r)) }),
		"pause":        typed(func(ctx context.Context, r api.PauseRequest) reply { return answer(svc.Pause(ctx, r)) }),
		"resume":       typed(func(ctx context.Context, r api.ResumeRequest) reply { return answer(svc.Resume(ctx, r)) }),
		"schedule/add": typed(func(ctx context.Context, r api.ScheduleAddRequest) reply { return answer(svc.ScheduleAdd(ctx, r)) }),
		"schedule/rm": typed(func(ctx context.Context, r api.ScheduleRemoveRequest) reply {
			return answer(svc.ScheduleRemove(ctx, r))
		}),
		"queue/ls":    readOnly(typed(func(ctx context.Context, r api.QueueListRequest) reply { return answer(svc.QueueList(ctx, r)) })),
		"schedule/ls": readOnly(typed(func(ctx context.Context, r api.ScheduleListRequest) reply { return answer(svc.ScheduleList(ctx, r)) })),
		"heartbeat":   typed(func(ctx context.Context, r api.HeartbeatRequest) reply { return answer(svc.Heartbeat(ctx, r)) }),
		"expire":      typed(func(ctx context.Context, r api.ExpireRequest) reply { return answer(svc.Expire(ctx, r)) }),
		"abort":       typed(func(ctx context.Context, r api.AbortRequest) reply { return answer(svc.Abort(ctx, r)) }),
		"redact":      typed(func(ctx context.Context, r api.RedactRequest) reply { return answer(svc.Redact(ctx, r)) }),
		"queue/limit": typed(func(ctx context.Context, r api.QueueLimitRequest) reply { return answer(svc.QueueLimit(ctx, r)) }),
		"queue/rate":  typed(func(ctx context.Context, r api.QueueRateRequest) reply { return answer(svc.QueueRate(ctx, r)) }),
		"stats":       readOnly(typed(func(ctx context.Context, r api.StatsRequest) reply { return answer(svc.Stats(ctx, r)) })),
		"requeue":     typed(func(ctx context.Context, r api.RequeueRequest) reply { return answer(svc.Requeue(ctx, r)) }),
		"requeue/all": typed(func(ctx context.Context, r api.RequeueAllRequest) reply { return answer(svc.RequeueAll(ctx, r)) }),
		"why":         readOnly(typed(func(ctx context.Context, r api.WhyRequest) reply { return answer(svc.Why(ctx, r)) })),
		"wait":        readOnly(typed(func(ctx context.Context, r api.WaitRequest) reply { return answer(svc.Wait(ctx, r)) })),
		"inspect": stream(readOnly(typed(func(ctx context.Context, r api.InspectRequest) reply {
			switch {
			case r.Workers:
				return answer(svc.Workers(ctx))
			case len(r.Tasks) > 0:
				return answer(svc.Inspect(ctx, r))
			}
			return streamed(spool, describe, func(w io.Writer) (*api.LogEnd, error) {
				return nil, svc.List(ctx, r, api.Listing{
					Head: func(head api.Inspect) error { writeJSON(w, head); return nil },
					Task: func(t api.Task) error { writeJSON(w, t); return nil },
				})
			})
		}))),
		"log": stream(readOnly(typed(func(ctx context.Context, r api.LogRequest) reply {
			return streamed(spool, describe, func(w io.Writer) (*api.LogEnd, error) {
				end, err := svc.Log(ctx, r, func(rec api.Record) error { writeJSON(w, rec); return nil })
				return &end, err
			})
		}))),
		"compact":           typed(func(ctx context.Context, r api.CompactRequest) reply { return answer(svc.Compact(ctx, r)) }),
		"worklease/acquire": typed(func(ctx context.Context, r api.WorkAcquireRequest) reply { return answer(svc.WorkAcquire(ctx, r)) }),
		"worklease/succeed": typed(func(ctx context.Context, r api.WorkSucceedRequest) reply { return answer(svc.WorkSucceed(ctx, r)) }),
		"worklease/fail":    typed(func(ctx context.Context, r api.WorkFailRequest) reply { return answer(svc.WorkFail(ctx, r)) }),
		"worklease/inspect": readOnly(typed(func(ctx context.Context, r api.WorkInspectRequest) reply { return answer(svc.WorkInspect(ctx, r)) })),
	}
}

func readOnly(r route) route { r.readOnly = true; return r }

func stream(r route) route { r.stream = true; return r }

// typed is the route of an operation whose request is R: its body decoded
// straight into R, every key one of R's, one JSON object and nothing else.
func typed[R any](serve func(context.Context, R) reply) route {
	check := func(b []byte) error {
		var r R
		if len(bytes.TrimSpace(b)) == 0 {
			return nil
		}
		if _, err := api.DecodeStrict(b, &r); err != nil {
			return decodeError(err)
		}
		return nil
	}
	return route{whole: true, check: check, serve: func(ctx context.Context, body io.Reader) reply {
		b, err := io.ReadAll(body) // read already, bounded (ServeHTTP)
		if err != nil {
			return reply{refused: err}
		}
		var r R
		var old []string
		if len(bytes.TrimSpace(b)) > 0 {
			if old, err = api.DecodeStrict(b, &r); err != nil {
				return reply{refused: decodeError(err)}
			}
		}
		return deprecating(serve(ctx, r), old)
	}}
}

// deprecation is the Deprecation header (RFC 9745) of an answer to a
// request that spelled a key as versions before 0.2 did: the date of the
// version that changed the spelling, 0.1.0.
const deprecation = "@1795737600" // 2026-11-27T00:00:00Z

// deprecating adds to an answer the Deprecation header, and which keys it
// is for, when the request spelled any the old way.
func deprecating(a reply, old []string) reply {
	if len(old) == 0 {
		return a
	}
	if a.header == nil {
		a.header = http.Header{}
	}
	a.header.Set("Deprecation", deprecation)
	var now []string
	for _, k := range old {
		now = append(now, k+" is "+strings.ReplaceAll(k, "-", "_"))
	}
	a.header.Set("Leasewal-Deprecated", strings.Join(now, ", "))
	return a
}

// streamed is a streamed answer (a log, inspect's listing): one JSON value
// a line as read writes them, then its api.StreamEnd. The whole answer is
// written to a spooled file first, so that the WAL is read under its lock
// as quickly as any answer, and a client however slow holds only the file
// (not the lock, nor memory). A read that fails is answered as an error,
// nothing of it sent.
func streamed(spool spooler, describe func(error) api.Error, read func(io.Writer) (*api.LogEnd, error)) reply {
	f, err := spool()
	if err != nil {
		return encode(nil, fmt.Errorf("spooling the answer: %w", err), describe)
	}
	w := bufio.NewWriterSize(f, 64<<10)
	end, err := read(w)
	if err == nil {
		writeJSON(w, api.StreamEnd{End: "OK", Exit: api.ExitOK, Log: end})
		err = w.Flush()
		if err != nil {
			err = fmt.Errorf("spooling the answer: %w", err)
		}
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return encode(nil, err, describe)
	}
	return reply{contentType: "application/x-ndjson", spooled: f}
}

// encode is an answer, or the error in its place, as JSON with its exit
// code: EMPTY and CANCELLED are answers with their own exit codes.
func encode(v any, err error, describe func(error) api.Error) reply {
	var (
		empty     *api.Empty
		cancelled *api.Cancelled
	)
	switch {
	case errors.Is(err, service.ErrClientGone):
		return reply{gone: true}
	case errors.As(err, &empty):
		v = empty
	case errors.As(err, &cancelled):
		v = cancelled
	case err != nil:
		e := describe(err)
		e.Result = "ERROR"
		var b bytes.Buffer
		writeJSON(&b, e)
		return reply{status: statusOf(e), exit: e.Exit, contentType: "application/json", body: b.Bytes()}
	}
	var b bytes.Buffer
	writeJSON(&b, v)
	return reply{exit: api.OutcomeExit(api.OutcomeOf(v)), contentType: "application/json", body: b.Bytes()}
}

// statusOf is the HTTP status of a refusal: bad input 400, a request id
// reused with other options 409, an unknown task, lease or domain 404, a
// fencing token or backlog order that does not hold 409, and 500 for what
// is not the request's fault (a damaged or locked WAL, a failed write, an
// outcome unknown). Every answer, EMPTY and CANCELLED included, is 200; the
// exit code says the rest.
func statusOf(e api.Error) int {
	switch {
	case e.Kind == "RequestConflict" || e.Exit == api.ExitContract:
		return http.StatusConflict
	case e.Exit == api.ExitUsage:
		return http.StatusBadRequest
	case e.Exit == api.ExitNotFound:
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

// decodeError says what is wrong with a typed request's body, as the
// command line would say it of a flag.
func decodeError(err error) error {
	var typ *json.UnmarshalTypeError
	var syntax *json.SyntaxError
	switch {
	case errors.Is(err, api.ErrTrailing):
		return errors.New("the body holds more than one JSON object: send one object of the request's fields")
	case errors.As(err, &typ):
		want := "a string"
		switch typ.Type.Kind() {
		case reflect.Int, reflect.Int64, reflect.Pointer:
			want = "a number"
		case reflect.Bool:
			want = "true or false"
		}
		return fmt.Errorf("field %q must be %s, not a JSON %s (the API is typed: GET /v1/openapi.json)", typ.Field, want, typ.Value)
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the body is not a JSON object of the request's fields: %v", err)
	}
	name, unknown := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !unknown {
		return fmt.Errorf("the body is not a JSON object of the request's fields: %v", err)
	}
	name = strings.Trim(name, `"`)
	flag := api.OldSpelling(name)
	switch {
	case name == "args":
		return fmt.Errorf(`"args" is gone: the API is typed, and what were positional arguments are named fields now ("task" for why, "tasks" for wait and inspect); see GET /v1/openapi.json`)
	case name == "follow": // a request that never ends would hold the server's resources for ever
		return errors.New(`"follow" is the client's loop: ask again for the records "from" the one after the last you have`)
	case clientFiles[flag]:
		err = fmt.Errorf("%q (--%s) names a file, which the client reads: a server opens no file for a request", name, flag)
	case serverSettings[flag]:
		err = fmt.Errorf("%q (--%s) is the server's to set, not a request's", name, flag)
	default:
		err = fmt.Errorf("unknown field %q", name)
	}
	return fmt.Errorf("%v; a request's fields are its command's flags, snake_case (request_id for --request-id): GET /v1/openapi.json", err)
}

// clientFiles name files, which a client reads on its own machine
// (--payload-file is sent as payload, --batch-file to the batch door): a
// server never opens a file for a request.
var clientFiles = map[string]bool{"payload-file": true, "batch-file": true, "expect": true, "token-file": true}

// serverSettings are the flags that configure a process, never a request.
var serverSettings = map[string]bool{"wal": true, "ca": true, "config": true, "output": true, "no-color": true, "no-headers": true,
	"lock-timeout": true, "server": true, "now": true, "help": true}

// operationList is the operations' paths, for a request to an unknown one.
func operationList(rs map[string]route) string {
	return "/v1/" + strings.Join(slices.Sorted(maps.Keys(rs)), ", /v1/")
}
