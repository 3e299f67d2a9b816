package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"leasewal/state"
)

type failOptions struct {
	leaseRef
	reason    string
	permanent bool
}

func newFailCmd(g *globals) *cobra.Command {
	o := &failOptions{}
	c := &cobra.Command{
		Use:   "fail --task T --lease L --reason TEXT",
		Short: "Report a failed attempt (writes TaskFailed)",
		Long: `Report that the attempt under the current lease failed. Writes TaskFailed. The
task goes back to WAITING after its backoff (RETRY), or becomes FAILED if
--permanent or if this was its last attempt. Repeating it with the same lease
writes nothing and repeats the answer. A stale lease: TaskCancelled, exit 3.`,
		Example: `  leasewal fail --task T1 --lease L1 --reason 'upstream timeout'`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runFail(g, o) },
	}
	o.flags(c)
	c.Flags().StringVar(&o.reason, "reason", "", "why the attempt failed (required)")
	c.Flags().BoolVar(&o.permanent, "permanent", false, "do not retry: the task becomes FAILED")
	_ = c.MarkFlagRequired("reason")
	return c
}

type failView struct {
	Result    state.Outcome `json:"result"`
	TaskID    string        `json:"task_id"`
	LeaseID   string        `json:"lease_id"`
	State     string        `json:"state"`
	Attempt   int           `json:"attempt"`
	NotBefore string        `json:"not_before,omitempty"`
	Duplicate bool          `json:"duplicate"`
}

func runFail(g *globals, o *failOptions) error {
	return g.write(func(s *session) error {
		dec, err := s.st.DecideFail(o.taskID, o.leaseID, o.reason, o.permanent, s.now)
		if err != nil {
			return err
		}
		if err := s.commit(dec.Records); err != nil {
			return err
		}
		if dec.Outcome == state.ResultCancelled {
			return g.emitCancelled(dec, "this failure was recorded as cancelled and changes nothing: stop working on "+dec.TaskID)
		}
		t, _ := s.st.Task(o.taskID)
		v := failView{Result: dec.Outcome, TaskID: t.ID, LeaseID: o.leaseID, Attempt: t.Attempt, Duplicate: dec.Duplicate,
			State: string(state.Waiting), NotBefore: state.FormatTime(t.AttemptOf(o.leaseID).NotBefore)}
		if dec.Outcome == state.ResultFailed {
			v.State, v.NotBefore = string(state.Failed), ""
		}
		g.emit(v, func(w io.Writer, p palette) {
			fields(w, "result", p.word(string(v.Result)), "task", v.TaskID, "lease", v.LeaseID, "state", p.word(v.State),
				"attempt", fmt.Sprint(v.Attempt), "not before", v.NotBefore, "duplicate", fmt.Sprint(v.Duplicate))
		})
		return nil
	})
}
