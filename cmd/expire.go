package cmd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
)

func (a *app) newExpireCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "expire",
		Short: "Record what time has revoked (writes LeaseExpired, TaskDead)",
		Long: `Write a LeaseExpired record for every current lease whose expiry has passed,
and a TaskDead record for every task whose execution window has closed. The
state is the same without these records (replay applies lapses of time by
itself); expire makes them visible in the log. All of them are appended in one
write with one fsync: all or none.`,
		Example: `  leasewal expire --now +1m`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			req := api.ExpireRequest{Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Expired, error) { return s.Expire(ctx, req) },
				expiredTable, "'leasewal log --type LeaseExpired,TaskDead' lists what expire wrote", "")
		},
	}
	return c
}

func expiredTable(v api.Expired) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		if len(v.Transitions) == 0 {
			_, err := fmt.Fprintln(w, "nothing has expired")
			return err
		}
		t := newTable(w, p, "SEQ", "RECORD", "TASK", "LEASE", "STATE")
		for _, tr := range v.Transitions {
			_ = t.Append(fmt.Sprint(tr.Seq), tr.Type, tr.TaskID, tr.LeaseID, p.word(tr.State))
		}
		return t.Render()
	}
}
