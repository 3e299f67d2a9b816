package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"leasewal/state"
)

func newCompleteCmd(g *globals) *cobra.Command {
	o := &leaseRef{}
	c := &cobra.Command{
		Use:   "complete --task T --lease L",
		Short: "Commit a task's result under the current lease (writes TaskCompleted)",
		Long: `Commit the task if --lease is its current, unexpired lease: writes TaskCompleted
and answers COMMITTED. Repeating it with the lease that completed the task writes
nothing and answers COMMITTED again. Any other lease, an expired one, or a
closed window: writes TaskCancelled and answers CANCELLED, exit 3 — the caller
lost authority and its result must be discarded.`,
		Example: `  leasewal complete --task T1 --lease L2`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runComplete(g, o) },
	}
	o.flags(c)
	return c
}

type committedView struct {
	Result    state.Outcome `json:"result"`
	TaskID    string        `json:"task_id"`
	LeaseID   string        `json:"lease_id"`
	Duplicate bool          `json:"duplicate"`
}

func runComplete(g *globals, o *leaseRef) error {
	return g.write(func(s *session) error {
		dec, err := s.st.DecideComplete(o.taskID, o.leaseID, s.now)
		if err != nil {
			return err
		}
		if err := s.commit(dec.Records); err != nil {
			return err
		}
		if dec.Outcome == state.ResultCancelled {
			return g.emitCancelled(dec, "this completion was recorded as cancelled: discard its result")
		}
		v := committedView{Result: dec.Outcome, TaskID: dec.TaskID, LeaseID: dec.LeaseID, Duplicate: dec.Duplicate}
		g.emit(v, func(w io.Writer, p palette) {
			fields(w, "result", p.word(string(v.Result)), "task", v.TaskID, "lease", v.LeaseID, "duplicate", fmt.Sprint(v.Duplicate))
		})
		return nil
	})
}
