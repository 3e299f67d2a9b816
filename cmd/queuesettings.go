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
		Short: "The queues, and a queue's settings (limit, rate)",
		Long: `Settings that hold for every task of a queue, recorded in the WAL like the tasks
(so replay and every node of a cluster know them).`,
		Example: `  leasewal queue ls
  leasewal queue limit api 3
  leasewal queue limit api none
  leasewal queue rate mail 10/s --burst 20`,
		Args: cobra.ArbitraryArgs,
		RunE: unknownCommand,
	}
	c.AddCommand(a.newQueueLsCmd(), a.newQueueLimitCmd(), a.newQueueRateCmd())
	return c
}

func (a *app) newQueueLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the queues that hold unfinished tasks",
		Long: `The queues that hold a task not ended as recorded (WAITING, blocked or LEASED;
one whose time has run out counts until expire records it), by name. It reads
the index's keys, not the tasks: as quick beside millions of tasks as beside a
few. 'leasewal stats' counts each queue's tasks.`,
		Example: `  leasewal queue ls -o json`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			a.env.noteMissingWAL()
			return call(a.env, func(ctx context.Context, s api.Service) (api.QueueList, error) {
				return s.QueueList(ctx, api.QueueListRequest{})
			}, queueListTable, "", "")
		},
	}
}

func queueListTable(v api.QueueList) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		t := newTable(w, p, "QUEUE")
		for _, q := range v.Queues {
			if err := t.Append(escape(q)); err != nil {
				return err
			}
		}
		return t.Render()
	}
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

func (a *app) newQueueRateCmd() *cobra.Command {
	var burst int
	c := &cobra.Command{
		Use:   "rate QUEUE RATE|none [--burst N]",
		Short: "Lease at most RATE of QUEUE's tasks (10/s, 600/m, 50/h)",
		Long: `At most burst + RATE x t of the queue's tasks are leased in any span of time t
(the generic cell rate algorithm): a lease of the queue at its rate answers
EMPTY with next_eligible_at the moment the rate allows a grant again, and
lease --wait, run and wait wake then; why says "queue mail is at its rate of
10/s (burst 10)". Every grant counts, those of complete --next-worker
included; a repeated request answered from its earlier grant does not. RATE is
N/s, N/m or N/h (N from 1 to 10000); --burst is how many may come at once
(default: one second's worth, at least 1). The rate is derived from the
grants the WAL records, so replay, every node of a cluster and verify agree.
A new rate starts its count afresh; the same rate and burst again answers
again (duplicate) and writes nothing; 'none' lifts it. A rate that is not
N/s, N/m or N/h: exit 2.`,
		Example: `  leasewal queue rate mail 10/s
  leasewal queue rate api 600/m --burst 20
  leasewal queue rate mail none -o json`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 2 {
				return usageErr("'leasewal queue rate' takes a queue and a rate or none, e.g. 'leasewal queue rate mail 10/s'")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			req := api.QueueRateRequest{Queue: args[0], Rate: args[1], Actor: a.env.Actor}
			if c.Flags().Changed("burst") {
				req.Burst = &burst
			}
			return call(a.env, func(ctx context.Context, s api.Service) (api.QueueRate, error) { return s.QueueRate(ctx, req) },
				queueRateTable, "repeat the same queue rate: it answers again and writes nothing", "")
		},
	}
	c.Flags().IntVar(&burst, "burst", 0, "how many grants may come at once (default: one second's worth of the rate, at least 1)")
	return c
}

func queueRateTable(v api.QueueRate) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		rate, burst := "none", "none"
		if v.Rate != nil {
			rate, burst = *v.Rate, fmt.Sprint(v.Burst)
		}
		return fields(w, p, "result", string(v.Result), "queue", v.Queue, "rate", rate, "burst", burst, "duplicate", fmt.Sprint(v.Duplicate))
	}
}
