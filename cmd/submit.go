package cmd

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/state"
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
	after       []string
	afterEnded  []string
	batchFile   string
}

func (a *app) newSubmitCmd() *cobra.Command {
	o := &submitOptions{}
	c := &cobra.Command{
		Use:   "submit (--payload TEXT | --payload-file FILE|-)",
		Short: "Add a task",
		Long: `Create a WAITING task with an execution window and a retry policy, in a queue
with a priority. Writes one TaskCreated record. A task submitted with --delay or
--not-before is eligible only from then on (SQS's DelaySeconds), and its window
counts from then. A task submitted with --after waits until every task named
has COMPLETED; if one ends FAILED or DEAD instead, it ends DEAD too (recorded by
the next expire), unless it named that task with --after-ended, which waits for
an end of any outcome. Its --delay and --window count from when the last is met;
an unknown task is exit 4. Repeating a submit with the same --request-id and the
same payload, policy, queue, priority and dependencies writes nothing and
answers with the first task id (and its first time).

--batch-file submits many tasks at once, all or nothing:
each line is a JSON object with the flags' names in snake_case as keys
("payload", "window", "max_attempts", "request_id", "queue", "priority", …), the other
flags given being every line's defaults; if any line is refused, none is
written. A line's "after" and "after_ended" (arrays) name request ids of earlier
lines first, then task ids: a whole graph of tasks in one write. It answers one
line per task (-o json: one JSON object per line).`,
		Example: `  leasewal submit --payload 'resize img-42' --window 5m --max-attempts 3 --request-id job-42
  leasewal submit --payload 'send digest' --delay 10m --queue mail --priority 5
  leasewal submit --payload 'upload out.mp4' --after T7 --window 10m
  printf '{"payload":"a","request_id":"a"}\n{"payload":"b","request_id":"b","priority":5}\n' | leasewal submit --batch-file - --queue mail`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runSubmit(a.env, *o) },
	}
	o.flags(c.Flags())
	return c
}

// flags declares the submit flags on f: submit's own, and schedule add's
// after its --.
func (o *submitOptions) flags(f *pflag.FlagSet) {
	f.StringVar(&o.payload, "payload", "", "the task's payload (text, at most 64 KiB)")
	f.StringVar(&o.payloadFile, "payload-file", "", "read the payload from FILE, or from stdin with -")
	f.StringVar(&o.window, "window", "", "execution window (e.g. 1h): the task is DEAD if not done by then (default none: no deadline)")
	f.IntVar(&o.maxAttempts, "max-attempts", 3, "leases the task may be granted")
	f.StringVar(&o.backoff, "backoff", "", "wait after the first failed attempt, doubling after each (default 1s)")
	f.StringVar(&o.backoffMax, "backoff-max", "", "longest wait between attempts (default 5m, or --backoff if longer)")
	f.StringVar(&o.requestID, "request-id", "", "idempotency key: a repeat returns the first answer (default R<n>)")
	f.StringVar(&o.delay, "delay", "", "eligible only after this long (a duration such as 10m)")
	f.StringVar(&o.notBefore, "not-before", "", "eligible only from this time (RFC 3339 or unix ms; a past time is now)")
	f.StringVar(&o.queue, "queue", state.DefaultQueue, "the queue: lease --queue takes only from the queues it names")
	f.IntVar(&o.priority, "priority", 0, "from -1000 to 1000; a lease takes the highest first, the oldest within a priority")
	f.StringSliceVar(&o.after, "after", nil, "wait until these tasks have COMPLETED (T3,T4); one that ends otherwise ends this one DEAD. Its --delay and --window count from then")
	f.StringSliceVar(&o.afterEnded, "after-ended", nil, "wait until these tasks have ended, whatever their outcome")
	f.StringVar(&o.batchFile, "batch-file", "", "submit many tasks at once from FILE (or stdin with -): one JSON object per line, e.g. {\"payload\":\"x\",\"request_id\":\"r1\"}; the other flags are every line's defaults")
}

// request is the submit the flags ask for. The payload of --payload-file is
// read here, by the client: a server never opens a file for a request.
func (o *submitOptions) request(stdin io.Reader) (api.SubmitRequest, error) {
	if o.queue == "" {
		return api.SubmitRequest{}, usageErr("--queue must name a queue (the default is %q)", state.DefaultQueue)
	}
	payload, err := readText(stdin, "payload", o.payload, o.payloadFile)
	if err != nil {
		return api.SubmitRequest{}, err
	}
	maxAttempts := o.maxAttempts
	return api.SubmitRequest{Payload: payload, Window: o.window, MaxAttempts: &maxAttempts, Backoff: o.backoff, BackoffMax: o.backoffMax,
		RequestID: o.requestID, Delay: o.delay, NotBefore: o.notBefore, Queue: o.queue, Priority: o.priority, After: o.after, AfterEnded: o.afterEnded}, nil
}

// readText is a payload or a result (what) as its flags give it: --what
// TEXT, or --what-file FILE, or - for stdin, at most 64 KiB. The file is
// read here, by the client: a server never opens a file for a request.
func readText(stdin io.Reader, what, text, file string) (string, error) {
	switch {
	case text != "" && file != "":
		return "", usageErr("give --%s or --%s-file, not both", what, what)
	case file == "-":
		return readLimited(stdin, what, "stdin")
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return "", usageErr("cannot read --%s-file %s: %v", what, file, unwrapPathErr(err))
		}
		defer f.Close()
		return readLimited(f, what, file)
	}
	return text, nil
}

// readLimited reads at most one byte past the limit, so that an oversized
// text is reported without reading all of it.
func readLimited(r io.Reader, what, name string) (string, error) {
	b, err := io.ReadAll(io.LimitReader(r, state.MaxPayloadBytes+1))
	if err != nil {
		return "", usageErr("cannot read the %s from %s: %v", what, name, err)
	}
	if len(b) > state.MaxPayloadBytes {
		return "", usageErr("the %s from %s is over the limit of %d bytes (64 KiB); store large data elsewhere and give a reference to it", what, name, state.MaxPayloadBytes)
	}
	return string(b), nil
}

func unwrapPathErr(err error) error {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Err
	}
	return err
}

// ackRecovery says how to get the answer of a submit or a requeue again:
// by its request id, given or assigned.
func ackRecovery(requestID string) string {
	return "repeat the same command with --request-id " + requestID + ": it answers with the same task and writes nothing"
}

func ackTable(v api.Ack) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "task", v.TaskID, "request", v.RequestID,
			"duplicate", fmt.Sprint(v.Duplicate), "queue", v.Queue, "priority", fmt.Sprint(v.Priority),
			"available at", cmp.Or(deref(v.AvailableAt), "after "+strings.Join(v.WaitingFor, ", ")), "deadline", cmp.Or(deref(v.Deadline), "none"),
			"requeued from", v.RequeuedFrom, "window", v.Window, "max attempts", fmt.Sprint(v.MaxAttempts))
	}
}

func runSubmit(e env, o submitOptions) error {
	if o.batchFile != "" {
		return runSubmitBatch(e, o)
	}
	req, err := o.request(e.stdin)
	if err != nil {
		return err
	}
	req.Actor = e.Actor
	return call(e, func(ctx context.Context, s api.Service) (api.Ack, error) { return s.Submit(ctx, req) },
		ackTable, "", "")
}
