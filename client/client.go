// Package client is leasewal's Go client: the operations of a leasewal
// server (leasewal serve) or cluster as typed calls, with the answers and
// errors of package api. A call tries the servers in order until one
// answers; while a cluster elects a leader (503) it tries them again for a
// while; a request whose answer is lost after it was sent is an
// *UnknownOutcomeError, never guessed: repeat it with the same request id.
//
//	c, err := client.New([]string{"http://127.0.0.1:7420"}, client.Options{})
//	ack, err := c.Submit(ctx, api.SubmitRequest{Payload: "resize img-42", RequestID: "job-42"})
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/parallel"
)

// Options say how a client reaches its servers.
type Options struct {
	Token string       // the servers' bearer token ("" for none)
	HTTP  *http.Client // nil: one with a 10-minute timeout and the system's certificates
	// ElectionWait is how long a call keeps trying a cluster that knows no
	// leader yet (0: 20 s, a few election timeouts).
	ElectionWait time.Duration
	// Actor is recorded in the records a call writes, for audit ("" leaves
	// the request's own Actor, or the server's default).
	Actor string
	// NoLines sends every operation as an HTTP request of its own; else
	// the operations that never wait go over the first server's lines door
	// when it is an http:// URL (lines.go).
	NoLines bool
}

// Client sends operations to leasewal servers. It is safe for concurrent use.
type Client struct {
	urls  []string
	opts  Options
	lines *lines
}

var _ api.Service = (*Client)(nil)

// New is a client of the servers at urls (http or https, tried in order).
func New(urls []string, opts Options) (*Client, error) {
	if len(urls) == 0 {
		return nil, errors.New("no server URL given")
	}
	var clean []string
	for _, entry := range urls {
		if err := CheckURL(entry); err != nil {
			return nil, err
		}
		clean = append(clean, strings.TrimRight(strings.TrimSpace(entry), "/"))
	}
	if opts.HTTP == nil {
		opts.HTTP = &http.Client{Timeout: 10 * time.Minute}
	}
	if opts.ElectionWait == 0 {
		opts.ElectionWait = 20 * time.Second
	}
	return &Client{urls: clean, opts: opts, lines: &lines{never: opts.NoLines}}, nil
}

// BadURLError is a server address that is not an http or https URL.
type BadURLError struct {
	URL      string
	NoScheme bool // host:port given without http://
}

func (e *BadURLError) Error() string {
	return fmt.Sprintf("%q is not an http or https URL", e.URL)
}

// CheckURL says whether entry is an http or https URL with a host.
func CheckURL(entry string) error {
	entry = strings.TrimSpace(entry)
	u, err := url.Parse(entry)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" {
		return nil
	}
	return &BadURLError{URL: entry, NoScheme: !strings.Contains(entry, "://") && entry != ""}
}

// UnknownOutcomeError is a request sent to a server whose answer never came
// back: it may or may not have been decided. Repeat it with the same
// request id (or, for extend, complete and fail, the same lease) to learn.
type UnknownOutcomeError struct {
	Server string
	Err    error
}

func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("the request was sent to %s but its answer was lost (%v): the outcome is unknown; repeat it with the same request id", e.Server, e.Err)
}

func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// NoServerError is a request no server took: nothing was sent (every
// server refused the connection, or a cluster knew no leader for
// ElectionWait).
type NoServerError struct{ Err error }

func (e *NoServerError) Error() string {
	return fmt.Sprintf("no server answered (%v); nothing was sent", e.Err)
}

func (e *NoServerError) Unwrap() error { return e.Err }

// UntrustedError is a server whose certificate the client does not trust:
// nothing was sent.
type UntrustedError struct {
	Server string
	Err    error
}

func (e *UntrustedError) Error() string {
	return fmt.Sprintf("%s: the server's certificate is not trusted (%v)", e.Server, e.Err)
}

func (e *UntrustedError) Unwrap() error { return e.Err }

// Send sends one request to the first server that takes it and returns
// its response (the caller closes its body) and the server's URL. header
// is added to the request (a body other than JSON names its Content-Type
// there). It is the transport of every call; the command line sends
// through it too.
func (c *Client) Send(ctx context.Context, method, path string, body []byte, header http.Header) (*http.Response, string, error) {
	var lastErr error
	deadline := time.Now().Add(c.opts.ElectionWait)
	for {
		electing := false
		for _, base := range c.urls {
			req, err := http.NewRequestWithContext(ctx, method, base+"/v1/"+path, bytes.NewReader(body))
			if err != nil {
				return nil, "", err
			}
			req.Header.Set("Content-Type", "application/json")
			for name, values := range header {
				req.Header[name] = values
			}
			if c.opts.Token != "" {
				req.Header.Set("Authorization", "Bearer "+c.opts.Token)
			}
			resp, err := c.opts.HTTP.Do(req)
			if err != nil {
				if ctx.Err() != nil {
					return nil, "", &UnknownOutcomeError{Server: base, Err: ctx.Err()}
				}
				var untrusted *tls.CertificateVerificationError
				if errors.As(err, &untrusted) { // the handshake failed: nothing was sent
					return nil, "", &UntrustedError{Server: base, Err: untrusted.Err}
				}
				var op *net.OpError
				if errors.As(err, &op) && op.Op == "dial" {
					lastErr = err // nothing was sent: the next server may answer
					continue
				}
				return nil, "", &UnknownOutcomeError{Server: base, Err: err}
			}
			if resp.StatusCode == http.StatusServiceUnavailable {
				resp.Body.Close()
				electing, lastErr = true, fmt.Errorf("%s knows no leader yet", base)
				continue
			}
			if resp.StatusCode == http.StatusGone { // a node removed from its cluster: nothing was decided there
				resp.Body.Close()
				lastErr = &RemovedError{Server: base}
				continue
			}
			return resp, base, nil
		}
		if !electing || time.Now().After(deadline) {
			return nil, "", &NoServerError{Err: lastErr}
		}
		select {
		case <-ctx.Done():
			return nil, "", &NoServerError{Err: ctx.Err()}
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// RemovedError is a server that was removed from its cluster: it decides
// nothing. The client tries the next URL.
type RemovedError struct{ Server string }

func (e *RemovedError) Error() string {
	return fmt.Sprintf("%s was removed from its cluster and decides nothing: give --server another member's URL ('leasewal cluster members' lists them)", e.Server)
}

// ExitCode is the exit code a response carries (Leasewal-Exit), or an
// *UnknownOutcomeError when it carries none.
func ExitCode(resp *http.Response, server string) (int, error) {
	code, err := strconv.Atoi(resp.Header.Get("Leasewal-Exit"))
	if err != nil {
		return 0, &UnknownOutcomeError{Server: server, Err: fmt.Errorf("HTTP %s without an exit code", resp.Status)}
	}
	return code, nil
}

// call sends req to the operation at path and decodes its answer into out;
// a refusal is an *api.Error, EMPTY an *api.Empty, CANCELLED an
// *api.Cancelled. The operations that never wait go over the lines door
// when they may.
func (c *Client) call(ctx context.Context, path string, req, out any) error {
	return c.callOver(ctx, path, req, out, slices.Contains(api.LineOperations, path))
}

// callOver is call, over the lines door if overLines and it may.
func (c *Client) callOver(ctx context.Context, path string, req, out any, overLines bool) error {
	body, err := encode(req)
	if err != nil {
		return err
	}
	raw, code, server, err := c.answer(ctx, path, body, overLines)
	if err != nil {
		return err
	}
	var head struct {
		Result api.Outcome `json:"result"`
	}
	if err := json.Unmarshal(raw, &head); err != nil {
		return &UnknownOutcomeError{Server: server, Err: fmt.Errorf("an answer that is not JSON: %.200s", raw)}
	}
	var refusal error
	switch {
	case head.Result == "ERROR":
		e := &api.Error{Exit: code}
		refusal, out = e, e
	case head.Result == api.ResultEmpty:
		e := &api.Empty{}
		refusal, out = e, e
	case head.Result == api.ResultCancelled:
		e := &api.Cancelled{}
		refusal, out = e, e
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &UnknownOutcomeError{Server: server, Err: fmt.Errorf("an answer that does not decode: %v", err)}
	}
	return refusal
}

// answer sends body to the operation at path and reads its whole answer
// and exit code, and which server gave them.
func (c *Client) answer(ctx context.Context, path string, body []byte, overLines bool) (raw []byte, code int, server string, err error) {
	if overLines {
		if raw, code, server, sent, err := c.sendLine(ctx, path, body); sent {
			return raw, code, server, err
		}
	}
	resp, server, err := c.Send(ctx, http.MethodPost, path, body, http.Header{})
	if err != nil {
		return nil, 0, "", err
	}
	defer resp.Body.Close()
	if raw, err = readAnswer(resp.Body); err != nil {
		return nil, 0, "", &UnknownOutcomeError{Server: server, Err: err}
	}
	code, err = ExitCode(resp, server)
	return raw, code, server, err
}

// encode is a request's body; a string in it that is not UTF-8 is refused
// (an *api.UsageError), which JSON would send mangled.
func encode(req any) ([]byte, error) {
	if err := api.NotUTF8(req); err != nil {
		return nil, err
	}
	return json.Marshal(req)
}

// maxAnswer is the longest answer the client reads whole (a streamed one
// is read a line at a time, each at most maxAnswer): no answer of the API
// comes near it.
const maxAnswer = 16 << 20

// readAnswer reads an answer whole, refusing one past maxAnswer.
func readAnswer(body io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(body, maxAnswer+1))
	if err == nil && len(raw) > maxAnswer {
		err = fmt.Errorf("an answer over %d bytes", maxAnswer)
	}
	return raw, err
}

// stream sends req to the streamed operation at path and hands each line
// of its answer to each as it comes, then returns the stream's end, which
// must come: a stream without it was cut short. A refusal is an
// *api.Error.
func (c *Client) stream(ctx context.Context, path string, req any, each func(line []byte) error) (api.StreamEnd, error) {
	body, err := encode(req)
	if err != nil {
		return api.StreamEnd{}, err
	}
	resp, server, err := c.Send(ctx, http.MethodPost, path, body, http.Header{})
	if err != nil {
		return api.StreamEnd{}, err
	}
	defer resp.Body.Close()
	code, err := ExitCode(resp, server)
	if err != nil {
		return api.StreamEnd{}, err
	}
	if code != api.ExitOK {
		raw, err := readAnswer(resp.Body)
		refusal := &api.Error{Exit: code}
		if err != nil || json.Unmarshal(raw, refusal) != nil {
			return api.StreamEnd{}, &UnknownOutcomeError{Server: server, Err: fmt.Errorf("an answer that is not JSON: %.200s", raw)}
		}
		return api.StreamEnd{}, refusal
	}
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 64<<10), maxAnswer)
	for lines.Scan() {
		line := lines.Bytes()
		if !api.IsStreamEnd(line) {
			if err := each(line); err != nil {
				return api.StreamEnd{}, err
			}
			continue
		}
		var end api.StreamEnd
		if err := json.Unmarshal(line, &end); err != nil || lines.Scan() {
			return api.StreamEnd{}, &UnknownOutcomeError{Server: server, Err: fmt.Errorf("a stream whose end does not decode, or is not its last line: %.200s", line)}
		}
		return end, nil
	}
	cause := lines.Err()
	if cause == nil {
		cause = errors.New("the stream was cut short: its last line never came")
	}
	return api.StreamEnd{}, &UnknownOutcomeError{Server: server, Err: cause}
}

// callAs is call for an answer of type A.
func callAs[A any](ctx context.Context, c *Client, path string, req any) (A, error) {
	var answer A
	return answer, c.call(ctx, path, req, &answer)
}

func (c *Client) actor(given string) string {
	if given != "" {
		return given
	}
	return c.opts.Actor
}

// Submit creates a task. With a RequestID, a repeat answers the first task
// (Duplicate) and writes nothing.
func (c *Client) Submit(ctx context.Context, req api.SubmitRequest) (api.Ack, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Ack](ctx, c, "submit", req)
}

// PollEvery is how often Changes asks a server for its last seq when the
// server does not wait for the next record (an older one), or cannot be
// reached.
const PollEvery = 500 * time.Millisecond

// serverWaitCap is the most a server waits in one request: a longer Wait is
// sent in slices.
const serverWaitCap = 5 * time.Minute

// Lease leases the next eligible task to req.Worker. When no task is
// eligible the error is an *api.Empty; with Wait it waits up to that long
// for one first. A lease repeated with its RequestID is the same lease.
func (c *Client) Lease(ctx context.Context, req api.LeaseRequest) (api.Lease, error) {
	req.Actor = c.actor(req.Actor)
	var lease api.Lease
	if req.Wait == "" {
		return lease, c.call(ctx, "lease", req, &lease)
	}
	wait, err := time.ParseDuration(req.Wait)
	if err != nil || wait < 0 {
		return lease, &api.Error{Result: "ERROR", Kind: "Usage", Message: fmt.Sprintf("wait %q is not a duration such as 30s or 5m", req.Wait), Exit: api.ExitUsage}
	}
	deadline := time.Now().Add(wait)
	for {
		req.Wait = max(0, min(serverWaitCap, time.Until(deadline))).String()
		err := c.callOver(ctx, "lease", req, &lease, false) // a wait over HTTP, which ends it if the client goes
		var empty *api.Empty
		if !errors.As(err, &empty) || !time.Now().Before(deadline) || ctx.Err() != nil {
			return lease, err
		}
	}
}

// Extend extends a current lease; a lease that is not the task's authority
// any more is an *api.Cancelled.
func (c *Client) Extend(ctx context.Context, req api.ExtendRequest) (api.Extended, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Extended](ctx, c, "extend", req)
}

// Complete commits a task's result under its current lease; a completion
// under a lease that is not the authority any more is recorded as
// cancelled and is an *api.Cancelled: discard the result. With req.Next it
// also leases the next task to a worker in the same write and fsync: the
// answer's Next (the *api.Cancelled's too) holds the lease, or none.
func (c *Client) Complete(ctx context.Context, req api.CompleteRequest) (api.Committed, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Committed](ctx, c, "complete", req)
}

// Fail reports a failed attempt under the current lease: the task waits
// for another attempt (RETRY) or has none left (FAILED).
func (c *Client) Fail(ctx context.Context, req api.FailRequest) (api.Failed, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Failed](ctx, c, "fail", req)
}

// Release gives the current lease back: the task waits req.Delay and the
// attempt does not count. A lease without authority any more is an
// *api.Cancelled.
func (c *Client) Release(ctx context.Context, req api.ReleaseRequest) (api.Released, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Released](ctx, c, "release", req)
}

// Pause pauses a queue: it leases nothing and its tasks' windows stand
// still, for req.For or until a Resume.
func (c *Client) Pause(ctx context.Context, req api.PauseRequest) (api.Paused, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Paused](ctx, c, "pause", req)
}

// Resume ends a queue's pause; a queue not paused is an *api.Error.
func (c *Client) Resume(ctx context.Context, req api.ResumeRequest) (api.Resumed, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Resumed](ctx, c, "resume", req)
}

// ScheduleAdd adds a periodic task; the same schedule again answers as a
// Duplicate, the name with other options is an *api.Error.
func (c *Client) ScheduleAdd(ctx context.Context, req api.ScheduleAddRequest) (api.ScheduleAdded, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.ScheduleAdded](ctx, c, "schedule/add", req)
}

// ScheduleRemove removes a schedule: no slot of it fires any more.
func (c *Client) ScheduleRemove(ctx context.Context, req api.ScheduleRemoveRequest) (api.ScheduleRemoved, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.ScheduleRemoved](ctx, c, "schedule/rm", req)
}

// QueueList lists the queues that hold unfinished tasks.
func (c *Client) QueueList(ctx context.Context, req api.QueueListRequest) (api.QueueList, error) {
	return callAs[api.QueueList](ctx, c, "queue/ls", req)
}

// ScheduleList lists every schedule with its last and next slots.
func (c *Client) ScheduleList(ctx context.Context, req api.ScheduleListRequest) (api.Schedules, error) {
	return callAs[api.Schedules](ctx, c, "schedule/ls", req)
}

// SubmitBatch creates many tasks in one request, one write and one fsync:
// all of them, or, when one is refused, none (the error, an *api.Error,
// names its line, from 1). Give each a RequestID so that the batch may be
// sent again: every task answers as a Duplicate. A server takes at most
// api.MaxServerBatchTasks lines and api.MaxServerBatchBody bytes a batch:
// api.BatchParts cuts a bigger one into batches within them.
func (c *Client) SubmitBatch(ctx context.Context, reqs []api.SubmitRequest) ([]api.Ack, error) {
	// A string that is not UTF-8 is refused before anything is sent, as a
	// lone request's is (encode): JSON would send it mangled.
	bad := make([]error, len(reqs))
	parallel.Ranges(len(reqs), func(_, from, to int) {
		for i := from; i < to; i++ {
			bad[i] = api.NotUTF8(reqs[i])
		}
	})
	for i, err := range bad {
		if err != nil {
			return nil, api.Usage("item %d of the batch: %v", i+1, err)
		}
	}
	body, err := api.EncodeLines(len(reqs), func(i int) any {
		req := reqs[i]
		req.Actor = c.actor(req.Actor)
		return req
	})
	if err != nil {
		return nil, err
	}
	return callLines[api.Ack](ctx, c, "submit/batch", body, "application/x-ndjson")
}

// callLines sends body to the operation at path and decodes its answer,
// one JSON value a line, into As; a refusal is an *api.Error.
func callLines[A any](ctx context.Context, c *Client, path string, body []byte, contentType string) ([]A, error) {
	resp, server, err := c.Send(ctx, http.MethodPost, path, body, http.Header{"Content-Type": {contentType}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := readAnswer(resp.Body)
	if err != nil {
		return nil, &UnknownOutcomeError{Server: server, Err: err}
	}
	code, err := ExitCode(resp, server)
	if err != nil {
		return nil, err
	}
	if code != api.ExitOK {
		refusal := &api.Error{Exit: code}
		if err := json.Unmarshal(raw, refusal); err != nil {
			return nil, &UnknownOutcomeError{Server: server, Err: fmt.Errorf("an answer that is not JSON: %.200s", raw)}
		}
		return nil, refusal
	}
	lines, err := api.DecodeLines[A](raw)
	if err != nil {
		return nil, &UnknownOutcomeError{Server: server, Err: fmt.Errorf("an answer that does not decode: %v", err)}
	}
	return lines, nil
}

// Heartbeat notes that req.Worker is alive, in the server's advisory
// worker registry (nothing is written to the WAL: liveness is never
// authority), and answers the leases it holds.
func (c *Client) Heartbeat(ctx context.Context, req api.HeartbeatRequest) (api.Heartbeat, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Heartbeat](ctx, c, "heartbeat", req)
}

// Expire records what time has revoked: lapsed leases, closed windows.
func (c *Client) Expire(ctx context.Context, req api.ExpireRequest) (api.Expired, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Expired](ctx, c, "expire", req)
}

// QueueLimit sets or lifts a queue's limit of current leases.
func (c *Client) QueueLimit(ctx context.Context, req api.QueueLimitRequest) (api.QueueLimit, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.QueueLimit](ctx, c, "queue/limit", req)
}

// QueueRate sets or lifts a queue's rate of grants.
func (c *Client) QueueRate(ctx context.Context, req api.QueueRateRequest) (api.QueueRate, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.QueueRate](ctx, c, "queue/rate", req)
}

// Stats is the figures an operator watches.
func (c *Client) Stats(ctx context.Context, req api.StatsRequest) (api.Stats, error) {
	return callAs[api.Stats](ctx, c, "stats", req)
}

// Redact has a task's payload no longer served.
func (c *Client) Redact(ctx context.Context, req api.RedactRequest) (api.Redacted, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Redacted](ctx, c, "redact", req)
}

// Abort ends a waiting or leased task: DEAD, its lease no longer counts.
func (c *Client) Abort(ctx context.Context, req api.AbortRequest) (api.Aborted, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Aborted](ctx, c, "abort", req)
}

// Requeue runs a FAILED or DEAD task again, as a new task.
func (c *Client) Requeue(ctx context.Context, req api.RequeueRequest) (api.Ack, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Ack](ctx, c, "requeue", req)
}

func (c *Client) RequeueAll(ctx context.Context, req api.RequeueAllRequest) (api.RequeuedAll, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.RequeuedAll](ctx, c, "requeue/all", req)
}

// Why says why a task is where it is, and when it can run.
func (c *Client) Why(ctx context.Context, req api.WhyRequest) (api.Why, error) {
	return callAs[api.Why](ctx, c, "why", req)
}

// Inspect shows tasks as they stand (req.Workers: use Workers instead).
func (c *Client) Inspect(ctx context.Context, req api.InspectRequest) (api.Inspect, error) {
	if len(req.Tasks) > 0 {
		return callAs[api.Inspect](ctx, c, "inspect", req)
	}
	var all api.Inspect
	err := c.List(ctx, req, api.Listing{
		Head: func(head api.Inspect) error { all = head; return nil },
		Task: func(t api.Task) error { all.Tasks = append(all.Tasks, t); return nil },
	})
	return all, err
}

// Workers shows the soft worker registry and each worker's current leases.
func (c *Client) Workers(ctx context.Context) (api.Workers, error) {
	return callAs[api.Workers](ctx, c, "inspect", api.InspectRequest{Workers: true})
}

// Wait waits until every task of req.Tasks is in one of req.For's states
// (by default ended), or req.Timeout has run out (Result TIMEOUT; no
// Timeout waits until ctx is done). A task that ended in another state is
// Result UNREACHABLE. The answer is returned with a nil error in every
// case the server decided.
func (c *Client) Wait(ctx context.Context, req api.WaitRequest) (api.Wait, error) {
	forever := req.Timeout == ""
	var deadline time.Time
	if !forever {
		total, err := time.ParseDuration(req.Timeout)
		if err != nil || total < 0 {
			return api.Wait{}, &api.Error{Result: "ERROR", Kind: "Usage", Message: fmt.Sprintf("timeout %q is not a duration such as 30s or 5m", req.Timeout), Exit: api.ExitUsage}
		}
		deadline = time.Now().Add(total)
	}
	for {
		slice := serverWaitCap
		if !forever {
			slice = max(0, min(slice, time.Until(deadline)))
		}
		req.Timeout = slice.String()
		var v api.Wait
		err := c.call(ctx, "wait", req, &v) // TIMEOUT and UNREACHABLE (exit 9) are answers, not errors
		if err != nil || v.Result != api.ResultTimeout || ctx.Err() != nil || (!forever && !time.Now().Before(deadline)) {
			return v, err
		}
	}
}

// WorkAcquire tries to acquire an offset of a domain under a new fencing
// token, or queues it behind the one in flight.
func (c *Client) WorkAcquire(ctx context.Context, req api.WorkAcquireRequest) (api.Work, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Work](ctx, c, "worklease/acquire", req)
}

// WorkSucceed marks the in-flight offset processed.
func (c *Client) WorkSucceed(ctx context.Context, req api.WorkSucceedRequest) (api.Work, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Work](ctx, c, "worklease/succeed", req)
}

// WorkFail reports a failed try of the in-flight offset.
func (c *Client) WorkFail(ctx context.Context, req api.WorkFailRequest) (api.Work, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Work](ctx, c, "worklease/fail", req)
}

// Compact has the server compact its WAL.
func (c *Client) Compact(ctx context.Context, req api.CompactRequest) (api.Compacted, error) {
	req.Actor = c.actor(req.Actor)
	return callAs[api.Compacted](ctx, c, "compact", req)
}

// WorkInspect shows every domain, or req.Domain.
func (c *Client) WorkInspect(ctx context.Context, req api.WorkInspectRequest) (api.WorkInspect, error) {
	return callAs[api.WorkInspect](ctx, c, "worklease/inspect", req)
}

// Log hands each record that matches req on to each, in order, and says
// where the log stood.
func (c *Client) Log(ctx context.Context, req api.LogRequest, each func(api.Record) error) (api.LogEnd, error) {
	end, err := c.stream(ctx, "log", req, func(line []byte) error {
		var rec api.Record
		if err := json.Unmarshal(line, &rec); err != nil {
			return fmt.Errorf("a record of the log does not decode: %w", err)
		}
		return each(rec)
	})
	if err != nil {
		return api.LogEnd{}, err
	}
	if end.Log == nil {
		return api.LogEnd{}, errors.New("the log's stream ended without saying where the log stood")
	}
	return *end.Log, nil
}

// List hands inspect's listing on one task at a time, its head first, as
// they come from the server.
func (c *Client) List(ctx context.Context, req api.InspectRequest, into api.Listing) error {
	if len(req.Tasks) > 0 || req.Workers {
		v, err := callAs[api.Inspect](ctx, c, "inspect", req)
		if err != nil {
			return err
		}
		return into.Hand(v)
	}
	headed := false
	_, err := c.stream(ctx, "inspect", req, func(line []byte) error {
		if !headed {
			var head api.Inspect
			if err := json.Unmarshal(line, &head); err != nil {
				return fmt.Errorf("a listing's head does not decode: %w", err)
			}
			headed = true
			return into.Head(head)
		}
		var t api.Task
		if err := json.Unmarshal(line, &t); err != nil {
			return fmt.Errorf("a listing's task does not decode: %w", err)
		}
		return into.Task(t)
	})
	return err
}

// Changes signals each record the server's WAL gains after the call,
// until ctx is done: it waits in GET /v1/status?after=N for a record past
// the last it saw. A server that does not wait (an older one), or cannot
// be reached, is asked again every PollEvery, and an error signals too:
// what the signal wakes asks the server itself, and meets the error.
func (c *Client) Changes(ctx context.Context) (<-chan struct{}, error) {
	changed := make(chan struct{}, 1)
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	last, err := c.lastSeq(ctx, -1) // before the call returns: what the caller does next is a change
	if err != nil {
		last = -1 // not known: the first answer signals
	}
	go func() {
		for ctx.Err() == nil {
			asked := time.Now()
			seq, err := c.lastSeq(ctx, last)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				signal()
			case seq != last:
				signal()
				last = seq
				continue
			}
			select { // nothing new, at once or after an error: not again before PollEvery
			case <-ctx.Done():
			case <-time.After(PollEvery - time.Since(asked)):
			}
		}
	}()
	return changed, nil
}

// lastSeq is the server's last seq, once past after (-1: at once).
func (c *Client) lastSeq(ctx context.Context, after int64) (int64, error) {
	path := "status"
	if after >= 0 {
		path += "?after=" + strconv.FormatInt(after, 10)
	}
	resp, server, err := c.Send(ctx, http.MethodGet, path, nil, http.Header{})
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	raw, err := readAnswer(resp.Body)
	if err != nil {
		return 0, &UnknownOutcomeError{Server: server, Err: err}
	}
	var status struct {
		LastSeq *int64 `json:"last_seq"`
	}
	if err := json.Unmarshal(raw, &status); err != nil || status.LastSeq == nil {
		return 0, fmt.Errorf("%s answered its status with %.200s", server, raw)
	}
	return *status.LastSeq, nil
}
