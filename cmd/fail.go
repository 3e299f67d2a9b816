package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/state"
	"leasewal/store"
	"leasewal/view"
)

type failOptions struct {
	leaseRef
	reason    string
	permanent bool
}

func (a *app) newFailCmd() *cobra.Command {
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
		RunE: func(*cobra.Command, []string) error {
			if a.env.Server != "" {
				return a.env.sendTyped("fail", api.FailRequest{Task: o.taskID, Lease: o.leaseID, Reason: o.reason, Permanent: o.permanent, Actor: a.env.Actor})
			}
			return runFail(a.env, *o)
		},
	}
	o.flags(c)
	c.Flags().StringVar(&o.reason, "reason", "", "why the attempt failed (required)")
	c.Flags().BoolVar(&o.permanent, "permanent", false, "do not retry: the task becomes FAILED")
	_ = c.MarkFlagRequired("reason")
	return c
}

func runFail(e env, o failOptions) error {
	return e.write(func(tx *store.Tx) (answer, error) {
		dec, err := committer(tx)(tx.State.DecideFail(o.taskID, o.leaseID, o.reason, o.permanent, tx.Now))
		if err != nil {
			return answer{}, err
		}
		if dec.Outcome == state.ResultCancelled {
			return cancelled(dec, "this failure was recorded as cancelled and changes nothing: stop working on "+dec.TaskID), nil
		}
		if !dec.Duplicate {
			if dec, err = tx.State.FailAnswer(o.taskID, o.leaseID); err != nil {
				return answer{}, err
			}
		}
		v := api.Failed{Result: dec.Outcome, TaskID: dec.TaskID, LeaseID: dec.LeaseID, State: string(dec.State), Attempt: dec.Attempt,
			NotBefore: view.Stamp(dec.NotBefore), Duplicate: dec.Duplicate}
		return answer{doc: v, outcome: v.Result, recovery: "repeat the same fail: it answers as it did and writes nothing", table: func(w io.Writer, p palette) error {
			return fields(w, p, "result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "state", v.State,
				"attempt", fmt.Sprint(v.Attempt), "not before", v.NotBefore, "duplicate", fmt.Sprint(v.Duplicate))
		}}, nil
	})
}
