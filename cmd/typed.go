package cmd

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"

	"leasewal/api"
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
}

// decodeAs decodes a request body into R, one JSON object and nothing
// else, every key one of R's, and returns what runs it.
func decodeAs[R any](op string, run func(env, R) error) func([]byte) (func(env) error, error) {
	return func(body []byte) (func(env) error, error) {
		var r R
		if len(bytes.TrimSpace(body)) > 0 {
			if err := strictJSON(body, &r); err != nil {
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
	case errors.Is(err, errTrailing):
		return errors.New("the body holds more than one JSON object: send one object of flags")
	case errors.As(err, &typ):
		want := "a string"
		switch typ.Type.Kind() {
		case reflect.Int, reflect.Int64, reflect.Pointer:
			want = "a number"
		case reflect.Bool:
			want = "true or false"
		}
		return fmt.Errorf("flag %q must be %s, not a JSON %s; see 'leasewal %s --help'", typ.Field, want, typ.Value, op)
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
		err = fmt.Errorf("unknown command: 'leasewal %s' takes no positional arguments", op)
	case clientSideFlags[name]:
		err = fmt.Errorf("--%s names a file, which the client reads: a server opens no file for a request", name)
	case clientFlags[name] || name == "now" || name == "help":
		err = fmt.Errorf("--%s is the server's to set, not a request's", name)
	default:
		err = fmt.Errorf("unknown flag: --%s", name)
	}
	return fmt.Errorf("%v; see 'leasewal help' for the commands and their flags", err)
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

func runCompleteRequest(e env, r api.CompleteRequest) error {
	if err := required("complete", map[string]string{"task": r.Task, "lease": r.Lease}); err != nil {
		return err
	}
	e.Actor = cmp.Or(r.Actor, e.Actor)
	return runComplete(e, leaseRef{taskID: r.Task, leaseID: r.Lease})
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
	body, err := json.Marshal(req)
	if err != nil {
		return nil, "", err
	}
	return e.send(http.MethodPost, path, body, e.Output)
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
