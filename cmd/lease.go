package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"leasewal/state"
)

type leaseOptions struct {
	worker    string
	duration  string
	taskID    string
	requestID string
}

func newLeaseCmd(g *globals) *cobra.Command {
	o := &leaseOptions{}
	c := &cobra.Command{
		Use:   "lease --worker W",
		Short: "Lease the oldest eligible task to a worker (writes LeaseGranted)",
		Long: `Grant a lease on the oldest WAITING task that is past its backoff and inside its
window (FIFO by creation), or on --task. Writes one LeaseGranted record with a
new lease id, which is also the fencing token. The expiry is capped at the
task's deadline. Nothing eligible: EMPTY, exit 4, nothing written.`,
		Example: `  leasewal lease --worker W1 --duration 30s --request-id W1-poll-7`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runLease(g, o) },
	}
	f := c.Flags()
	f.StringVar(&o.worker, "worker", "", "the worker taking the lease (required)")
	f.StringVar(&o.duration, "duration", "30s", "how long the lease lasts unless extended")
	f.StringVar(&o.taskID, "task", "", "lease this task rather than the oldest eligible one")
	f.StringVar(&o.requestID, "request-id", "", "idempotency key: a repeat returns the same lease while it is current")
	_ = c.MarkFlagRequired("worker")
	return c
}

type leaseView struct {
	Result    state.Outcome `json:"result"`
	TaskID    string        `json:"task_id"`
	LeaseID   string        `json:"lease_id"`
	WorkerID  string        `json:"worker_id"`
	Attempt   int           `json:"attempt"`
	Expiry    string        `json:"expiry"`
	Payload   string        `json:"payload"`
	Duplicate bool          `json:"duplicate"`
}

type emptyView struct {
	Result state.Outcome `json:"result"`
	TaskID string        `json:"task_id,omitempty"`
	Reason string        `json:"reason"`
}

func runLease(g *globals, o *leaseOptions) error {
	d, err := parseDuration("duration", o.duration)
	if err != nil {
		return err
	}
	req := state.LeaseRequest{Worker: o.worker, Duration: d, TaskID: o.taskID, RequestID: o.requestID}
	return g.write(func(s *session) error {
		dec, err := s.st.DecideLease(req, s.now)
		if err != nil {
			return err
		}
		switch dec.Outcome {
		case state.ResultEmpty:
			v := emptyView{Result: dec.Outcome, TaskID: dec.TaskID, Reason: dec.Reason}
			g.emit(v, func(w io.Writer, p palette) { fields(w, "result", p.word(string(v.Result)), "reason", v.Reason) })
			return &outcomeExit{code: ExitNotFound}
		case state.ResultCancelled:
			return g.emitCancelled(dec, "nothing was written")
		}
		if err := s.commit(dec.Records); err != nil {
			return err
		}
		t, _ := s.st.Task(dec.TaskID)
		a := t.Attempts[len(t.Attempts)-1]
		v := leaseView{Result: dec.Outcome, TaskID: t.ID, LeaseID: dec.LeaseID, WorkerID: a.Worker, Attempt: a.Number,
			Expiry: state.FormatTime(a.Expiry), Payload: t.Payload, Duplicate: dec.Duplicate}
		g.emit(v, func(w io.Writer, p palette) {
			fields(w, "result", p.word(string(v.Result)), "task", v.TaskID, "lease", v.LeaseID, "worker", v.WorkerID,
				"attempt", fmt.Sprint(v.Attempt), "expiry", v.Expiry, "duplicate", fmt.Sprint(v.Duplicate), "payload", v.Payload)
		})
		return nil
	})
}

type cancelledView struct {
	Result  state.Outcome `json:"result"`
	TaskID  string        `json:"task_id"`
	LeaseID string        `json:"lease_id"`
	Reason  string        `json:"reason"`
}

// emitCancelled prints a CANCELLED answer: the caller's lease is not the
// authority. It is a normal outcome with its own exit code; consequence tells
// the caller what became of its call and what to do.
func (g *globals) emitCancelled(d state.Decision, consequence string) error {
	v := cancelledView{Result: state.ResultCancelled, TaskID: d.TaskID, LeaseID: d.LeaseID, Reason: d.Reason}
	g.emit(v, func(w io.Writer, p palette) {
		fields(w, "result", p.word(string(v.Result)), "task", v.TaskID, "lease", v.LeaseID, "reason", v.Reason)
	})
	fmt.Fprintf(g.stderr, "leasewal: CANCELLED: %s; %s\n", d.Reason, consequence)
	return &outcomeExit{code: ExitCancelled}
}
