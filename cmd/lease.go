package cmd

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"leasewal/api"
	"leasewal/state"
	"leasewal/store"
	"leasewal/view"
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
		Short: "Lease the next eligible task to a worker (writes LeaseGranted)",
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
			if a.env.Server != "" {
				return a.env.remoteLease(*o)
			}
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
	d, err := api.ParseDuration("duration", o.duration)
	if err != nil {
		return err
	}
	queues, err := parseQueues(o.queues, o.queueSet)
	if err != nil {
		return err
	}
	if o.taskID != "" && len(queues) > 0 {
		return usageErr("give --task or --queue, not both")
	}
	var wait time.Duration
	if o.wait != "" {
		if wait, err = api.ParseDuration("wait", o.wait); err != nil {
			return err
		}
		if wait < 0 {
			return usageErr("--wait %s is negative", o.wait)
		}
		if wait > 0 {
			wait = e.capWait(wait)
		}
		if err := e.needsWallClock("lease --wait"); err != nil {
			return err
		}
	}
	req := state.LeaseRequest{Worker: o.worker, Duration: d, TaskID: o.taskID, RequestID: o.requestID, Queues: queues}
	var next int64 // when time alone next changes what is eligible
	decide := func(tx *store.Tx) (answer, error) {
		a, err := leaseAnswer(e, tx, req, o.requestID, wait == 0)
		if wait > 0 && a.outcome == state.ResultEmpty {
			next = tx.State.NextEventAt(tx.Now) // it reads every unfinished task: only when the lease will wait
		}
		return a, err
	}
	if wait == 0 {
		return e.operate(e.storeOptions(), true, decide)
	}
	h := store.Open(e.storeOptions())
	defer h.Close()
	waiter, err := e.newWaiter(h)
	if err != nil {
		return err
	}
	defer waiter.close()
	deadline := time.Now().Add(wait)
	for {
		a, committed, err := e.leaseOnce(h, decide)
		if err != nil || a.outcome != state.ResultEmpty || !time.Now().Before(deadline) || e.stopped() {
			if err != nil {
				return err
			}
			return e.print(a, committed)
		}
		if sig := waiter.signalled(); sig != nil {
			return e.interrupted(interruptedLease(sig), sig)
		}
		if err := waiter.wait(waitUntil(next, deadline)); err != nil {
			return err
		}
	}
}

// leaseOnce decides one turn of a waiting lease: on h, or inside a server
// through its batches, where a raft node's WAL takes no other writer.
func (e env) leaseOnce(h *store.Handle, decide func(tx *store.Tx) (answer, error)) (answer, []state.Record, error) {
	if e.batch != nil {
		return e.inBatch(decide)
	}
	return decideOn(h, true, decide)
}

// leaseAnswer decides one lease and its answer; note says whether an EMPTY
// on a missing WAL is worth a note (not on every turn of a wait).
func leaseAnswer(e env, tx *store.Tx, req state.LeaseRequest, requestID string, note bool) (answer, error) {
	dec, err := tx.State.DecideLease(req, tx.Now)
	if err != nil {
		return answer{}, err
	}
	switch dec.Outcome {
	case state.ResultEmpty:
		if tx.Missing && note {
			e.sayWALMissing()
		}
		v := api.Empty{Result: dec.Outcome, TaskID: dec.TaskID, Reason: dec.Reason, NextEligibleAt: view.Null(view.Stamp(dec.NextEligibleAt)), Live: dec.Live}
		return answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
			return fields(w, p, "result", string(v.Result), "reason", v.Reason, "next eligible at", deref(v.NextEligibleAt), "live tasks", fmt.Sprint(v.Live))
		}}, nil
	case state.ResultCancelled:
		return cancelled(dec, "nothing was written"), nil
	}
	if err := tx.Commit(dec.Records); err != nil {
		return answer{}, err
	}
	v := view.Lease(dec)
	recovery := "'leasewal inspect " + v.TaskID + "' shows the lease; lease with a --request-id to be able to repeat a lease safely"
	if requestID != "" {
		recovery = "repeat the same lease with --request-id " + requestID + " to get the answer again"
	}
	return answer{doc: v, outcome: v.Result, recovery: recovery, table: func(w io.Writer, p palette) error {
		payload := "" // a payload can be 64 KiB: whole with -o wide, json or tsv only
		if p.width == 0 {
			payload = v.Payload
		}
		return fields(w, p, "result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "worker", v.WorkerID,
			"attempt", fmt.Sprint(v.Attempt), "expiry", v.Expiry, "deadline", v.Deadline, "duplicate", fmt.Sprint(v.Duplicate), "payload", payload)
	}}, nil
}

// cancelled is a CANCELLED answer: the caller's lease is not the authority.
// It is a normal outcome with its own exit code; consequence tells the caller
// what became of its call and what to do.
func cancelled(d state.Decision, consequence string) answer {
	v := api.Cancelled{Result: state.ResultCancelled, TaskID: d.TaskID, LeaseID: d.LeaseID, Reason: d.Reason}
	return answer{doc: v, outcome: v.Result, advice: "CANCELLED: " + escape(d.Reason) + "; " + consequence,
		recovery: "'leasewal inspect " + d.TaskID + "' shows who holds the task now; stop working on it",
		table: func(w io.Writer, p palette) error {
			return fields(w, p, "result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "reason", v.Reason)
		}}
}

// parseQueues reads a --queue list: queue names separated by commas, each
// one a valid name ("" for none given: all queues).
func parseQueues(list string, given bool) ([]string, error) {
	if list == "" && given { // an unset variable in --queue "$Q" must not mean every queue
		return nil, usageErr("--queue is empty: name one or more queues, or leave --queue out to take from every queue")
	}
	if list == "" {
		return nil, nil
	}
	queues := strings.Split(list, ",")
	for _, q := range queues {
		if err := state.ValidateQueue(q); err != nil {
			return nil, usageErr("--queue %q: %v", list, err)
		}
	}
	return queues, nil
}

// interruptedLease is lease --wait's answer when a signal ended the wait:
// nothing was leased.
func interruptedLease(sig os.Signal) answer {
	v := struct {
		Result state.Outcome `json:"result"`
		Reason string        `json:"reason"`
	}{resultInterrupted, "stopped by " + unix.SignalName(sig.(syscall.Signal)) + " while waiting; nothing was leased"}
	return answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "reason", v.Reason)
	}}
}
