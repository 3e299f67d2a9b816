package cmd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
)

type releaseOptions struct {
	leaseRef
	delay string
}

func (a *app) newReleaseCmd() *cobra.Command {
	o := &releaseOptions{}
	c := &cobra.Command{
		Use:   "release --task T --lease L [--delay D]",
		Short: "Give a lease back: another worker takes the task, the attempt does not count",
		Long: `Give the current lease back: the task is WAITING again, eligible after
--delay (default at once), and the attempt does not count toward max_attempts
(beanstalkd's release, SQS's visibility timeout of zero). Its execution window
keeps running. Writes one LeaseReleased record. Repeating it with the same
lease writes nothing and repeats the answer. A lease that is not current or has
expired gets CANCELLED, exit 3, and nothing is written.`,
		Example: `  leasewal release --task T1 --lease L1 --delay 10s`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			req := api.ReleaseRequest{Task: o.taskID, Lease: o.leaseID, Delay: o.delay, Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Released, error) { return s.Release(ctx, req) },
				releasedTable, "repeat the same release: it answers as it did and writes nothing",
				"nothing was written: the lease was no longer yours to give back")
		},
	}
	o.flags(c)
	c.Flags().StringVar(&o.delay, "delay", "0s", "how long the task waits before it is eligible again")
	return c
}

func releasedTable(v api.Released) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "state", v.State,
			"attempt", fmt.Sprint(v.Attempt), "not before", v.NotBefore, "duplicate", fmt.Sprint(v.Duplicate))
	}
}
