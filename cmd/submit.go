package cmd

import (
	"cmp"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/state"
)

type submitOptions struct {
	payload     string
	payloadFile string
	window      string
	maxAttempts int
	backoff     string
	backoffMax  string
	requestID   string
	delay       string
	notBefore   string
	queue       string
	priority    int
	batchFile   string
}

func (a *app) newSubmitCmd() *cobra.Command {
	o := &submitOptions{}
	c := &cobra.Command{
		Use:   "submit (--payload TEXT | --payload-file FILE|-)",
		Short: "Create a task (writes TaskCreated)",
		Long: `Create a WAITING task with an execution window and a retry policy, in a queue
with a priority. Writes one TaskCreated record. A task submitted with --delay or
--not-before is eligible only from then on (SQS's DelaySeconds), and its window
counts from then. Repeating a submit with the same --request-id and the same
payload, policy, queue and priority writes nothing and answers with the first
task id (and its first time).

--batch-file submits many tasks in one write and one fsync, all or nothing:
each line is a JSON object with the flags' names as keys ("payload",
"window", "max-attempts", "request-id", "queue", "priority", …), the other
flags given being every line's defaults; if any line is refused, none is
written. It answers one line per task (-o json: one JSON object per line).`,
		Example: `  leasewal submit --payload 'resize img-42' --window 5m --max-attempts 3 --request-id job-42
  leasewal submit --payload 'send digest' --delay 10m --queue mail --priority 5
  printf '{"payload":"a","request-id":"a"}\n{"payload":"b","request-id":"b","priority":5}\n' | leasewal submit --batch-file - --queue mail`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runSubmit(a.env, *o) },
	}
	f := c.Flags()
	f.StringVar(&o.payload, "payload", "", "the task's payload (text, at most 64 KiB)")
	f.StringVar(&o.payloadFile, "payload-file", "", "read the payload from FILE, or from stdin with -")
	f.StringVar(&o.window, "window", "5m", "execution window: the task is DEAD if not done by created+window")
	f.IntVar(&o.maxAttempts, "max-attempts", 3, "leases the task may be granted")
	f.StringVar(&o.backoff, "backoff", "0s", "wait after the first failed attempt, doubling after each")
	f.StringVar(&o.backoffMax, "backoff-max", "", "longest wait between attempts (default 100 x --backoff)")
	f.StringVar(&o.requestID, "request-id", "", "idempotency key: a repeat returns the first answer (default R<n>)")
	f.StringVar(&o.delay, "delay", "", "eligible only after this long (a duration such as 10m)")
	f.StringVar(&o.notBefore, "not-before", "", "eligible only from this time (RFC 3339 or unix ms; a past time is now)")
	f.StringVar(&o.queue, "queue", state.DefaultQueue, "the queue: lease --queue takes only from the queues it names")
	f.IntVar(&o.priority, "priority", 0, "from -1000 to 1000; a lease takes the highest first, the oldest within a priority")
	f.StringVar(&o.batchFile, "batch-file", "", "submit many tasks at once from FILE (or stdin with -): one JSON object per line, e.g. {\"payload\":\"x\",\"request-id\":\"r1\"}; the other flags are every line's defaults")
	return c
}

// request is the submit the flags ask for. The payload of --payload-file is
// read here, by the client: a server never opens a file for a request.
func (o *submitOptions) request(stdin io.Reader) (api.SubmitRequest, error) {
	if o.queue == "" {
		return api.SubmitRequest{}, usageErr("--queue must name a queue (the default is %q)", state.DefaultQueue)
	}
	payload, err := o.readPayload(stdin)
	if err != nil {
		return api.SubmitRequest{}, err
	}
	maxAttempts := o.maxAttempts
	return api.SubmitRequest{Payload: payload, Window: o.window, MaxAttempts: &maxAttempts, Backoff: o.backoff, BackoffMax: o.backoffMax,
		RequestID: o.requestID, Delay: o.delay, NotBefore: o.notBefore, Queue: o.queue, Priority: o.priority}, nil
}

// submitCommand is a submit request as state decides it: the one place its
// durations and times are read and its defaults filled in.
func submitCommand(r api.SubmitRequest) (state.Submit, error) {
	window, err := api.ParseDuration("window", cmp.Or(r.Window, "5m"))
	if err != nil {
		return state.Submit{}, err
	}
	backoff, err := api.ParseDuration("backoff", cmp.Or(r.Backoff, "0s"))
	if err != nil {
		return state.Submit{}, err
	}
	backoffMax := 100 * backoff
	if r.BackoffMax != "" {
		if backoffMax, err = api.ParseDuration("backoff-max", r.BackoffMax); err != nil {
			return state.Submit{}, err
		}
	}
	maxAttempts := 3
	if r.MaxAttempts != nil {
		maxAttempts = *r.MaxAttempts
	}
	sub := state.Submit{
		Payload: r.Payload, Window: state.Duration(window), RequestID: r.RequestID,
		Policy: state.RetryPolicy{MaxAttempts: maxAttempts, Backoff: state.Duration(backoff), BackoffMax: state.Duration(backoffMax)},
		Queue:  cmp.Or(r.Queue, state.DefaultQueue), Priority: r.Priority,
	}
	if r.Delay != "" && r.NotBefore != "" {
		return state.Submit{}, usageErr("give --delay or --not-before, not both")
	}
	if r.Delay != "" {
		if sub.Delay, err = api.ParseDuration("delay", r.Delay); err != nil {
			return state.Submit{}, err
		}
		if sub.Delay < 0 {
			return state.Submit{}, usageErr("--delay %s is negative; give a duration of 0 or more", r.Delay)
		}
	}
	if r.NotBefore != "" {
		if strings.HasPrefix(r.NotBefore, "+") {
			return state.Submit{}, usageErr("--not-before %q: give a time (RFC 3339 or unix ms); for a time after now use --delay", r.NotBefore)
		}
		if sub.NotBefore, err = api.ParseTimeFlag("--not-before", r.NotBefore, 0, 0); err != nil {
			return state.Submit{}, err
		}
	}
	return sub, nil
}

func (o *submitOptions) readPayload(stdin io.Reader) (string, error) {
	switch {
	case o.payload != "" && o.payloadFile != "":
		return "", usageErr("give --payload or --payload-file, not both")
	case o.payloadFile == "-":
		return readLimited(stdin, "stdin")
	case o.payloadFile != "":
		f, err := os.Open(o.payloadFile)
		if err != nil {
			return "", usageErr("cannot read --payload-file %s: %v", o.payloadFile, unwrapPathErr(err))
		}
		defer f.Close()
		return readLimited(f, o.payloadFile)
	}
	return o.payload, nil
}

// readLimited reads at most one byte past the payload limit, so that an
// oversized payload is reported without reading all of it.
func readLimited(r io.Reader, name string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, state.MaxPayloadBytes+1))
	if err != nil {
		return "", usageErr("cannot read the payload from %s: %v", name, err)
	}
	if len(b) > state.MaxPayloadBytes {
		return "", usageErr("the payload from %s is over the limit of %d bytes (64 KiB); store large data elsewhere and submit a reference to it", name, state.MaxPayloadBytes)
	}
	return string(b), nil
}

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// ackOf is the answer of a submit or a requeue that created (or names) task t.
func ackOf(d state.Decision, t *state.Task) api.Ack {
	return api.Ack{Result: d.Outcome, TaskID: t.ID, RequestID: t.RequestID, Duplicate: d.Duplicate, Queue: t.Queue, Priority: t.Priority,
		AvailableAt: formatTime(t.AvailableAt), Deadline: formatTime(t.Deadline()), RequeuedFrom: t.RequeuedFrom}
}

// ackAnswer is ackOf as a command prints it.
func ackAnswer(d state.Decision, t *state.Task) answer {
	v := ackOf(d, t)
	return answer{doc: v, outcome: v.Result, recovery: "repeat the same command with --request-id " + t.RequestID + ": it answers with the same task and writes nothing",
		table: func(w io.Writer, p palette) error {
			return fields(w, p, "result", string(v.Result), "task", v.TaskID, "request", v.RequestID,
				"duplicate", fmt.Sprint(v.Duplicate), "queue", v.Queue, "priority", fmt.Sprint(v.Priority),
				"available at", v.AvailableAt, "deadline", v.Deadline, "requeued from", v.RequeuedFrom,
				"window", time.Duration(t.Window).String(), "max attempts", fmt.Sprint(t.Policy.MaxAttempts))
		}}
}

func runSubmit(e env, o submitOptions) error {
	if o.batchFile != "" {
		return runSubmitBatch(e, o)
	}
	req, err := o.request(e.stdin)
	if err != nil {
		return err
	}
	if e.Server != "" {
		req.Actor = e.Actor
		return e.sendTyped("submit", req)
	}
	return runSubmitCommand(e, req)
}

// runSubmitCommand decides a submit request: the command's, or a server's
// client's.
func runSubmitCommand(e env, req api.SubmitRequest) error {
	cmd, err := submitCommand(req)
	if err != nil {
		return err
	}
	return e.runAck(func(st *state.State, now int64) (state.Decision, error) { return st.DecideSubmit(cmd, now) })
}
