package cmd

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
)

type leaseOptions struct {
	worker    string
	duration  string
	taskID    string
	requestID string
	queues    string
	queueSet  bool // --queue was given, perhaps empty
	wait      string
}

func (a *app) newLeaseCmd() *cobra.Command {
	o := &leaseOptions{}
	c := &cobra.Command{
		Use:   "lease --worker W",
		Short: "Take the next task to work on, under a lease (a claim for a while)",
		Long: `Grant a lease on the eligible task (WAITING, past its delay or backoff, inside
its window) of highest priority among the --queue queues (all by default), the
oldest by creation within a priority; or on --task. Writes one LeaseGranted
record with a new lease id, which is also the fencing token. The expiry is
capped at the task's deadline. Nothing eligible: EMPTY, exit 4, nothing
written, with when the next task becomes eligible and how many are live.
--wait D waits up to D while nothing is eligible, holding no lock, woken when
the WAL changes (inotify) or when a task becomes eligible by time (a lease's
expiry, a backoff's end, a delayed task's time); then EMPTY as before.`,
		Example: `  leasewal lease --worker W1 --duration 30s --request-id W1-poll-7
  leasewal lease --worker W2 --queue mail,img
  leasewal lease --worker W3 --wait 30s`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			o.queueSet = c.Flags().Changed("queue")
			return runLease(a.env, *o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.worker, "worker", "", "the worker taking the lease (required)")
	f.StringVar(&o.duration, "duration", "30s", "how long the lease lasts unless extended")
	f.StringVar(&o.taskID, "task", "", "lease this task rather than the oldest eligible one")
	f.StringVar(&o.requestID, "request-id", "", "idempotency key: a repeat returns the same lease while it is current")
	f.StringVar(&o.queues, "queue", "", "take only from these queues (comma-separated; default all)")
	f.StringVar(&o.wait, "wait", "", "while nothing is eligible, wait up to this long (holding no lock) for a task")
	_ = c.MarkFlagRequired("worker")
	return c
}

func runLease(e env, o leaseOptions) error {
	queues, err := parseQueues(o.queues, o.queueSet)
	if err != nil {
		return err
	}
	req := api.LeaseRequest{Worker: o.worker, Duration: o.duration, Queue: api.List(o.queues), Task: o.taskID,
		RequestID: o.requestID, Wait: o.wait, Actor: e.Actor}
	recovery := "'leasewal inspect TASK' shows the lease; lease with a --request-id to be able to repeat a lease safely"
	if o.requestID != "" {
		recovery = "repeat the same lease with --request-id " + o.requestID + " to get the answer again"
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	ctx := e.context()
	if o.wait != "" && o.wait != "0" && o.wait != "0s" {
		if err := e.needsWallClock("lease --wait"); err != nil {
			return err
		}
		e.noteQueueTypos(s.svc, queues) // before a wait that a typo would make endless
		caught, waitCtx, stop := e.catchInterrupts()
		defer stop()
		ctx = waitCtx
		v, err := s.svc.Lease(ctx, req)
		if ctx.Err() != nil && caught.signal() != nil { // a signal ended the wait, here or at the server
			return e.interrupted(interruptedLease(caught.signal()), caught.signal())
		}
		return e.leased(s, v, err, recovery)
	}
	v, err := s.svc.Lease(ctx, req)
	if empty := (*api.Empty)(nil); errors.As(err, &empty) && empty.Live == 0 {
		e.noteQueueTypos(s.svc, queues)
	}
	return e.leased(s, v, err, recovery)
}

// leased presents a lease's answer; an EMPTY from a WAL that does not
// exist says so.
func (e env) leased(s *session, v api.Lease, err error, recovery string) error {
	var empty *api.Empty
	if errors.As(err, &empty) {
		e.noteMissingWAL()
	}
	return present(e, s, v, e.remoteError(err), leaseTable, recovery, "nothing was written")
}

func leaseTable(v api.Lease) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		payload := "" // a payload can be 64 KiB: whole with -o wide, json or tsv only
		if p.width == 0 {
			payload = v.Payload
		}
		return fields(w, p, "result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "worker", v.WorkerID,
			"attempt", fmt.Sprint(v.Attempt), "expiry", v.Expiry, "deadline", cmp.Or(deref(v.Deadline), "none"), "duplicate", fmt.Sprint(v.Duplicate), "payload", payload)
	}
}

// interruptedLease is lease --wait's answer when a signal ended the wait:
// nothing was leased.
func interruptedLease(sig os.Signal) answer {
	v := struct {
		Result api.Outcome `json:"result"`
		Reason string      `json:"reason"`
	}{resultInterrupted, "stopped by " + signalName(sig) + " while waiting; nothing was leased"}
	return answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "reason", v.Reason)
	}}
}
