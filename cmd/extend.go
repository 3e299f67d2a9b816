package cmd

import (
	"io"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/state"
	"leasewal/store"
)

type leaseRef struct {
	taskID  string
	leaseID string
}

func (r *leaseRef) flags(c *cobra.Command) {
	c.Flags().StringVar(&r.taskID, "task", "", "the task (required)")
	c.Flags().StringVar(&r.leaseID, "lease", "", "the lease the caller holds (required)")
	_ = c.MarkFlagRequired("task")
	_ = c.MarkFlagRequired("lease")
}

type extendOptions struct {
	leaseRef
	duration string
}

func (a *app) newExtendCmd() *cobra.Command {
	o := &extendOptions{}
	c := &cobra.Command{
		Use:   "extend --task T --lease L",
		Short: "Extend a current lease (writes LeaseExtended)",
		Long: `Move a current, unexpired lease's expiry to now + --duration, capped at the
task's deadline. Writes one LeaseExtended record. A lease that is not current or
has expired gets CANCELLED, exit 3, and nothing is written.`,
		Example: `  leasewal extend --task T1 --lease L1 --duration 30s`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if a.env.Server != "" {
				return a.env.sendTyped("extend", api.ExtendRequest{Task: o.taskID, Lease: o.leaseID, Duration: o.duration, Actor: a.env.Actor})
			}
			return runExtend(a.env, *o)
		},
	}
	o.flags(c)
	c.Flags().StringVar(&o.duration, "duration", "30s", "new lease length, counted from now")
	return c
}

func runExtend(e env, o extendOptions) error {
	d, err := api.ParseDuration("duration", o.duration)
	if err != nil {
		return err
	}
	return e.write(func(tx *store.Tx) (answer, error) {
		dec, err := tx.State.DecideExtend(o.taskID, o.leaseID, d, tx.Now)
		if err != nil {
			return answer{}, err
		}
		if dec.Outcome == state.ResultCancelled {
			return cancelled(dec, "nothing was written: stop working on "+dec.TaskID), nil
		}
		if err := tx.Commit(dec.Records); err != nil {
			return answer{}, err
		}
		v := api.Extended{Result: dec.Outcome, TaskID: dec.TaskID, LeaseID: dec.LeaseID, Expiry: formatTime(dec.Expiry)}
		return answer{doc: v, outcome: v.Result, recovery: "extend again with the same lease: a current lease just moves its expiry", table: func(w io.Writer, p palette) error {
			return fields(w, p, "result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "expiry", v.Expiry)
		}}, nil
	})
}
