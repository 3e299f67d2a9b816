package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/state"
	"leasewal/store"
)

func (a *app) newCompleteCmd() *cobra.Command {
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
		RunE: func(*cobra.Command, []string) error {
			if a.env.Server != "" {
				return a.env.sendTyped("complete", api.CompleteRequest{Task: o.taskID, Lease: o.leaseID, Actor: a.env.Actor})
			}
			return runComplete(a.env, *o)
		},
	}
	o.flags(c)
	return c
}

func runComplete(e env, o leaseRef) error {
	return e.write(func(tx *store.Tx) (answer, error) {
		dec, err := committer(tx)(tx.State.DecideComplete(o.taskID, o.leaseID, tx.Now))
		if err != nil {
			return answer{}, err
		}
		if dec.Outcome == state.ResultCancelled {
			return cancelled(dec, "this completion was recorded as cancelled: discard its result"), nil
		}
		v := api.Committed{Result: dec.Outcome, TaskID: dec.TaskID, LeaseID: dec.LeaseID, Duplicate: dec.Duplicate}
		return answer{doc: v, outcome: v.Result, recovery: "repeat the same complete: it answers COMMITTED again and writes nothing", table: func(w io.Writer, p palette) error {
			return fields(w, p, "result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "duplicate", fmt.Sprint(v.Duplicate))
		}}, nil
	})
}
