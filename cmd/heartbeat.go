package cmd

import (
	"context"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
)

func (a *app) newHeartbeatCmd() *cobra.Command {
	var worker string
	c := &cobra.Command{
		Use:   "heartbeat --worker W",
		Short: "Say a worker is alive (inspect --workers shows it; it keeps no lease)",
		Long: `Note the worker's heartbeat in the soft worker registry, a side file beside the
WAL (<wal>.workers) that is advisory only and safe to delete, and list the
leases the worker currently holds. Nothing is written to the WAL: liveness is
never authority, and a heartbeat does not extend a lease (use extend).`,
		Example: `  leasewal heartbeat --worker W1`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			req := api.HeartbeatRequest{Worker: worker, Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Heartbeat, error) { return s.Heartbeat(ctx, req) },
				heartbeatTable, "", "")
		},
	}
	c.Flags().StringVar(&worker, "worker", "", "the worker (required)")
	_ = c.MarkFlagRequired("worker")
	return c
}

func heartbeatTable(v api.Heartbeat) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		t := newTable(w, p, "WORKER", "TASK", "LEASE", "EXPIRY")
		for _, l := range v.Leases {
			_ = t.Append(escape(v.WorkerID), l.TaskID, l.LeaseID, l.Expiry)
		}
		if len(v.Leases) == 0 {
			none := "-" // TSV leaves an empty cell empty, as everywhere
			if p.tsv {
				none = ""
			}
			_ = t.Append(escape(v.WorkerID), none, none, none)
		}
		return t.Render()
	}
}
