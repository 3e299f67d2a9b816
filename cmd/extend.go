package cmd

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
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
		Short: "Keep a lease you hold for longer",
		Long: `Move a current, unexpired lease's expiry to now + --duration, capped at the
task's deadline. Writes one LeaseExtended record. A lease that is not current or
has expired gets CANCELLED, exit 3, and nothing is written.`,
		Example: `  leasewal extend --task T1 --lease L1 --duration 30s`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			req := api.ExtendRequest{Task: o.taskID, Lease: o.leaseID, Duration: o.duration, Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Extended, error) { return s.Extend(ctx, req) },
				extendedTable, "extend again with the same lease: a current lease just moves its expiry", "nothing was written: stop working on "+o.taskID)
		},
	}
	o.flags(c)
	c.Flags().StringVar(&o.duration, "duration", "30s", "new lease length, counted from now")
	return c
}

func extendedTable(v api.Extended) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "expiry", v.Expiry)
	}
}
