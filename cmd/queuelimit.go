package cmd

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
)

func (a *app) newQueueCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "queue",
		Short: "A queue's settings (limit)",
		Long: `Settings that hold for every task of a queue, recorded in the WAL like the tasks
(so replay and every node of a cluster know them).`,
		Example: `  leasewal queue limit api 3
  leasewal queue limit api none`,
		Args: cobra.ArbitraryArgs,
		RunE: unknownCommand,
	}
	c.AddCommand(a.newQueueLimitCmd())
	return c
}

func (a *app) newQueueLimitCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "limit QUEUE N|none",
		Short: "Let at most N tasks of QUEUE run at once",
		Long: `At most N tasks of the queue are LEASED at once: while N are, a lease takes
from the other queues (or answers EMPTY, next_eligible_at null: the next one
waits for a completion, a failure or a lapse, not for a time), lease --task of
one of its tasks answers EMPTY, and why says "3 of 3 leases of queue api are
held". A limit is a capacity choice: the tasks' execution windows keep running
behind it. 'none' lifts it. The same limit again answers again (duplicate) and
writes nothing; a limit of 0 or less: exit 2.`,
		Example: `  leasewal queue limit api 3
  leasewal queue limit api none -o json`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageErr("'leasewal queue limit' takes a queue and a number or none, e.g. 'leasewal queue limit api 3'")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			req := api.QueueLimitRequest{Queue: args[0], Actor: a.env.Actor}
			if args[1] != "none" {
				n, err := strconv.Atoi(args[1])
				if err != nil {
					return usageErr("the limit %q is not a number: give the most leases at once (1 or more), or none", args[1])
				}
				req.Limit = &n
			}
			return call(a.env, func(ctx context.Context, s api.Service) (api.QueueLimit, error) { return s.QueueLimit(ctx, req) },
				queueLimitTable, "repeat the same queue limit: it answers again and writes nothing", "")
		},
	}
}

func queueLimitTable(v api.QueueLimit) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		limit := "none"
		if v.Limit != nil {
			limit = fmt.Sprint(*v.Limit)
		}
		return fields(w, p, "result", string(v.Result), "queue", v.Queue, "limit", limit, "duplicate", fmt.Sprint(v.Duplicate))
	}
}
