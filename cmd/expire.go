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
		Short: "Write down what time has ended: lapsed leases, tasks past their deadline",
		Long: `Write down that every current lease whose expiry has passed has lapsed, and
that every task whose execution window has closed is DEAD. The tasks are in
that state already, whether written down or not (time alone does it); expire
makes it visible in the log, all at once.`,
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
