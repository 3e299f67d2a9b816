package cmd

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"

	"leasewal/api"
	"leasewal/server"
)

// The operations whose requests are typed end to end: the command line
// builds their api request from its flags and, with --server, sends it as
// JSON; the server decodes the body straight into it (no command line, no
// flag parsing on the request path) and runs the same function a local
// command runs.
var typedOps = map[string]func(body []byte) (func(env) error, error){
	"submit":    decodeAs("submit", runSubmitRequest),
	"lease":     decodeAs("lease", runLeaseRequest),
	"extend":    decodeAs("extend", runExtendRequest),
	"complete":  decodeAs("complete", runCompleteRequest),
	"fail":      decodeAs("fail", runFailRequest),
	"heartbeat": decodeAs("heartbeat", runHeartbeatRequest),
	"expire":    decodeAs("expire", runExpireRequest),
	"abort":     decodeAs("abort", runAbortRequest),
	"requeue":   decodeAs("requeue", runRequeueRequest),
	"why":       decodeAs("why", runWhyRequest),
	"wait":      decodeAs("wait", runWaitRequest),
	"inspect":   decodeAs("inspect", runInspectRequest),
	"log":       decodeAs("log", runLogRequest),

	"worklease/acquire": decodeAs("worklease acquire", runWorkAcquire),
	"worklease/succeed": decodeAs("worklease succeed", runWorkSucceed),
	"worklease/fail":    decodeAs("worklease fail", runWorkFail),
	"worklease/inspect": decodeAs("worklease inspect", runWorkInspect),
}

// sendOrRun is a typed command's RunE: its request sent to --server, or
// run here.
func sendOrRun[R any](e env, path string, req R, run func(env, R) error) error {
	if e.Server != "" {
		return e.sendTyped(path, req)
	}
	return run(e, req)
}

// decodeAs decodes a request body into R, one JSON object and nothing
// else, every key one of R's, and returns what runs it.
func decodeAs[R any](op string, run func(env, R) error) func([]byte) (func(env) error, error) {
	return func(body []byte) (func(env) error, error) {
		var r R
		if len(bytes.TrimSpace(body)) > 0 {
			if err := server.DecodeStrict(body, &r); err != nil {
				return nil, decodeError(op, err)
			}
		}
		return func(e env) error { return run(e, r) }, nil
	}
}

// decodeError says what is wrong with a typed request's body, as the
// command line would say it of a flag.
func decodeError(op string, err error) error {
	var typ *json.UnmarshalTypeError
	var syntax *json.SyntaxError
	switch {
	case errors.Is(err, server.ErrTrailing):
		return errors.New("the body holds more than one JSON object: send one object of flags")
	case errors.As(err, &typ):
		want := "a string"
		switch typ.Type.Kind() {
		case reflect.Int, reflect.Int64, reflect.Pointer:
			want = "a number"
		case reflect.Bool:
			want = "true or false"
		}
		return fmt.Errorf("flag %q must be %s, not a JSON %s (the API is typed: GET /v1/openapi.json); see 'leasewal %s --help'", typ.Field, want, typ.Value, op)
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("the body is not a JSON object of flags: %v", err)
	}
	name, unknown := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !unknown {
		return fmt.Errorf("the body is not a JSON object of flags: %v", err)
	}
	name = strings.Trim(name, `"`)
	switch {
	case name == "args":
		return fmt.Errorf(`"args" is gone: the API is typed, and what were positional arguments are named fields now ("task" for why, "tasks" for wait and inspect); see GET /v1/openapi.json`)
	case name == "follow": // a request that never ends would hold the server's resources for ever
		return errors.New(`"follow" is the client's loop: ask again for the records "from" the one after the last you have`)
	case clientSideFlags[name]:
		err = fmt.Errorf("--%s names a file, which the client reads: a server opens no file for a request", name)
	case clientFlags[name] || name == "now" || name == "help":
		err = fmt.Errorf("--%s is the server's to set, not a request's", name)
	default:
		err = fmt.Errorf("unknown flag: --%s", name)
	}
	return fmt.Errorf("%v; see 'leasewal help' for the commands and their flags", err)
}

// clientSideFlags name files, which a client reads on its own machine
// (--payload-file is sent as payload, --batch-file to the batch door): a
// server never opens a file for a request.
var clientSideFlags = map[string]bool{"payload-file": true, "batch-file": true, "expect": true, "token-file": true}

// unknownRoute says why a POST path is no operation.
func unknownRoute(path string) string {
	first, _, _ := strings.Cut(path, "/")
	switch {
	case first == "run":
		return "a server does not start children: 'leasewal --server URL run' runs them on the client and leases through /v1/lease"
	case localOnly[first]:
		return first + " works on the WAL's own machine only: run it there, without --server"
	}
	ops := slices.Sorted(maps.Keys(typedOps))
	return fmt.Sprintf("%q is not a command: the operations are /v1/%s and /v1/submit/batch (GET /v1/openapi.json describes them)", path, strings.Join(ops, ", /v1/"))
}

// required refuses a request without one of its required flags, as cobra
// refuses the command line.
func required(op string, fields map[string]string) error {
	for _, name := range []string{"worker", "task", "lease", "reason"} {
		if v, asked := fields[name]; asked && v == "" {
			return usageErr("required flag(s) %q not set; see 'leasewal %s --help'", name, op)
		}
	}
	return nil
}

func runSubmitRequest(e env, r api.SubmitRequest) error {
	e.Actor = cmp.Or(r.Actor, e.Actor)
	return runSubmitCommand(e, r)
}

func runLeaseRequest(e env, r api.LeaseRequest) error {
	if err := required("lease", map[string]string{"worker": r.Worker}); err != nil {
		return err
	}
	e.Actor = cmp.Or(r.Actor, e.Actor)
	return runLease(e, leaseOptions{worker: r.Worker, duration: cmp.Or(r.Duration, "30s"), taskID: r.Task, requestID: r.RequestID,
		queues: string(r.Queue), queueSet: r.Queue != "", wait: r.Wait})
}

func runExtendRequest(e env, r api.ExtendRequest) error {
	if err := required("extend", map[string]string{"task": r.Task, "lease": r.Lease}); err != nil {
		return err
	}
	e.Actor = cmp.Or(r.Actor, e.Actor)
	return runExtend(e, extendOptions{leaseRef: leaseRef{taskID: r.Task, leaseID: r.Lease}, duration: cmp.Or(r.Duration, "30s")})
}

func runFailRequest(e env, r api.FailRequest) error {
	if err := required("fail", map[string]string{"task": r.Task, "lease": r.Lease, "reason": r.Reason}); err != nil {
		return err
	}
	e.Actor = cmp.Or(r.Actor, e.Actor)
	return runFail(e, failOptions{leaseRef: leaseRef{taskID: r.Task, leaseID: r.Lease}, reason: r.Reason, permanent: r.Permanent})
}

func runHeartbeatRequest(e env, r api.HeartbeatRequest) error {
	if err := required("heartbeat", map[string]string{"worker": r.Worker}); err != nil {
		return err
	}
	e.Actor = cmp.Or(r.Actor, e.Actor)
	return runHeartbeat(e, r.Worker)
}

func runExpireRequest(e env, r api.ExpireRequest) error {
	e.Actor = cmp.Or(r.Actor, e.Actor)
	return runExpire(e)
}

func runAbortRequest(e env, r api.AbortRequest) error {
	if err := required("abort", map[string]string{"task": r.Task, "reason": r.Reason}); err != nil {
		return err
	}
	e.Actor = cmp.Or(r.Actor, e.Actor)
	return runAbort(e, r.Task, r.Reason)
}

func runRequeueRequest(e env, r api.RequeueRequest) error {
	if err := required("requeue", map[string]string{"task": r.Task}); err != nil {
		return err
	}
	e.Actor = cmp.Or(r.Actor, e.Actor)
	return runRequeue(e, r.Task, r.RequestID)
}

func runWhyRequest(e env, r api.WhyRequest) error {
	if err := required("why", map[string]string{"task": r.Task}); err != nil {
		return err
	}
	return runWhy(e, r.Task)
}

// sendTyped sends a typed request to --server and prints its answer as the
// command would print it.
func (e env) sendTyped(path string, req any) error {
	resp, server, err := e.postTyped(path, req)
	if err != nil {
		return err
	}
	return e.printRemote(resp, server)
}

func (e env) postTyped(path string, req any) (*http.Response, string, error) {
	return e.postTypedAs(path, req, e.Output)
}

// postTypedAs sends a typed request, asking for its answer in output.
func (e env) postTypedAs(path string, req any, output string) (*http.Response, string, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return nil, "", err
	}
	return e.send(http.MethodPost, path, body, output)
}

// remoteLease is lease --server: a --wait longer than a server waits in one
// request is sent again, with the same request id, until it has run out.
func (e env) remoteLease(o leaseOptions) error {
	if _, err := parseQueues(o.queues, o.queueSet); err != nil {
		return err
	}
	req := api.LeaseRequest{Worker: o.worker, Duration: o.duration, Queue: api.List(o.queues), Task: o.taskID,
		RequestID: o.requestID, Wait: o.wait, Actor: e.Actor}
	if o.wait == "" {
		return e.sendTyped("lease", req)
	}
	return e.remoteWait("wait", o.wait, ExitNotFound, func(slice string) (*http.Response, string, error) {
		req.Wait = slice
		return e.postTyped("lease", req)
	})
}
