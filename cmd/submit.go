package cmd

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"leasewal/state"
	"leasewal/store"
)

type submitOptions struct {
	payload     string
	payloadFile string
	window      string
	maxAttempts int
	backoff     string
	backoffMax  string
	requestID   string
}

func (a *app) newSubmitCmd() *cobra.Command {
	o := &submitOptions{}
	c := &cobra.Command{
		Use:   "submit (--payload TEXT | --payload-file FILE|-)",
		Short: "Create a task (writes TaskCreated)",
		Long: `Create a WAITING task with an execution window and a retry policy. Writes one
TaskCreated record. Repeating a submit with the same --request-id and the same
payload and policy writes nothing and answers with the first task id.`,
		Example: `  leasewal submit --payload 'resize img-42' --window 5m --max-attempts 3 --request-id job-42`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runSubmit(a.env, *o) },
	}
	f := c.Flags()
	f.StringVar(&o.payload, "payload", "", "the task's payload (text, at most 64 KiB)")
	f.StringVar(&o.payloadFile, "payload-file", "", "read the payload from FILE, or from stdin with -")
	f.StringVar(&o.window, "window", "5m", "execution window: the task is DEAD if not done by created+window")
	f.IntVar(&o.maxAttempts, "max-attempts", 3, "leases the task may be granted")
	f.StringVar(&o.backoff, "backoff", "0s", "wait after the first failed attempt, doubling after each")
	f.StringVar(&o.backoffMax, "backoff-max", "", "longest wait between attempts (default 100 x --backoff)")
	f.StringVar(&o.requestID, "request-id", "", "idempotency key: a repeat returns the first answer (default R<n>)")
	return c
}

func (o *submitOptions) command(stdin io.Reader) (state.Submit, error) {
	payload, err := o.readPayload(stdin)
	if err != nil {
		return state.Submit{}, err
	}
	window, err := parseDuration("window", o.window)
	if err != nil {
		return state.Submit{}, err
	}
	backoff, err := parseDuration("backoff", o.backoff)
	if err != nil {
		return state.Submit{}, err
	}
	backoffMax := 100 * backoff
	if o.backoffMax != "" {
		if backoffMax, err = parseDuration("backoff-max", o.backoffMax); err != nil {
			return state.Submit{}, err
		}
	}
	return state.Submit{
		Payload: payload, Window: state.Duration(window), RequestID: o.requestID,
		Policy: state.RetryPolicy{MaxAttempts: o.maxAttempts, Backoff: state.Duration(backoff), BackoffMax: state.Duration(backoffMax)},
	}, nil
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

type ackView struct {
	Result    state.Outcome `json:"result"`
	TaskID    string        `json:"task_id"`
	RequestID string        `json:"request_id"`
	Duplicate bool          `json:"duplicate"`
	Deadline  string        `json:"deadline"`
}

func runSubmit(e env, o submitOptions) error {
	cmd, err := o.command(e.stdin)
	if err != nil {
		return err
	}
	return e.write(func(tx *store.Tx) (answer, error) {
		d, err := tx.State.DecideSubmit(cmd, tx.Now)
		if err != nil {
			return answer{}, err
		}
		if err := tx.Commit(d.Records); err != nil {
			return answer{}, err
		}
		t, err := tx.State.Task(d.TaskID)
		if err != nil {
			return answer{}, err
		}
		v := ackView{Result: d.Outcome, TaskID: t.ID, RequestID: t.RequestID, Duplicate: d.Duplicate, Deadline: formatTime(t.Deadline())}
		return answer{doc: v, outcome: v.Result, recovery: "repeat the same submit with --request-id " + t.RequestID + ": it answers with the same task and writes nothing",
			table: func(w io.Writer, p palette) error {
				return fields(w, p, "result", string(v.Result), "task", v.TaskID, "request", v.RequestID,
					"duplicate", fmt.Sprint(v.Duplicate), "deadline", v.Deadline,
					"window", time.Duration(t.Window).String(), "max attempts", fmt.Sprint(t.Policy.MaxAttempts))
			}}, nil
	})
}
