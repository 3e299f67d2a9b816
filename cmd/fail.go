package cmd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
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
		Short: "Report that an attempt failed: retried after a backoff, or FAILED",
		Long: `Report that the attempt under the current lease failed. Writes TaskFailed. The
task goes back to WAITING after its backoff (RETRY), or becomes FAILED if
--permanent or if this was its last attempt. Repeating it with the same lease
writes nothing and repeats the answer. A stale lease: TaskCancelled, exit 3.`,
		Example: `  leasewal fail --task T1 --lease L1 --reason 'upstream timeout'`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			req := api.FailRequest{Task: o.taskID, Lease: o.leaseID, Reason: o.reason, Permanent: o.permanent, Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Failed, error) { return s.Fail(ctx, req) },
				failedTable, "repeat the same fail: it answers as it did and writes nothing",
				"this failure was recorded as cancelled and changes nothing: stop working on "+o.taskID)
		},
	}
	o.flags(c)
	c.Flags().StringVar(&o.reason, "reason", "", "why the attempt failed (required)")
	c.Flags().BoolVar(&o.permanent, "permanent", false, "do not retry: the task becomes FAILED")
	_ = c.MarkFlagRequired("reason")
	return c
}

func failedTable(v api.Failed) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "state", v.State,
			"attempt", fmt.Sprint(v.Attempt), "not before", v.NotBefore, "duplicate", fmt.Sprint(v.Duplicate))
	}
}
