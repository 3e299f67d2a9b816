package cmd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
)

func (a *app) newCompleteCmd() *cobra.Command {
	o := &leaseRef{}
	var next api.NextLease
	var nextQueue, result, resultFile string
	c := &cobra.Command{
		Use:   "complete --task T --lease L [--result TEXT | --result-file F|-] [--next-worker W]",
		Short: "Finish a task you hold, with its result",
		Long: `Commit the task if --lease is its current, unexpired lease: writes TaskCompleted
and answers COMMITTED. Repeating it with the lease that completed the task writes
nothing and answers COMMITTED again. Any other lease, an expired one, or a
closed window: writes TaskCancelled and answers CANCELLED, exit 3 — the caller
lost authority and its result must be discarded.

--result TEXT (or --result-file F, - for stdin; at most 64 KiB of UTF-8) keeps
what the worker reports with the task: inspect, wait and log show it. A repeat
must give the same result (another one: exit 2, RequestConflict).

--next-worker W also leases the next eligible task to W in the same write,
whatever became of the completion (the worker is free either way): the
answer's "next" holds the lease, or none and when a task becomes eligible. A
repeat after a lost answer answers the same next lease (its request id is
next-after-<lease>). The exit code is the completion's.`,
		Example: `  leasewal complete --task T1 --lease L2
  leasewal complete --task T1 --lease L2 --result 'resized: 3 images'
  leasewal complete --task T1 --lease L2 --next-worker W1 --next-duration 1m -o json`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			text, err := readText(a.env.stdin, "result", result, resultFile)
			if err != nil {
				return err
			}
			req := api.CompleteRequest{Task: o.taskID, Lease: o.leaseID, Result: text, Actor: a.env.Actor}
			if c.Flags().Changed("next-queue") && nextQueue == "" { // an unset variable must not mean every queue
				return usageErr("--next-queue is empty: name one or more queues, or leave it out to take from every queue")
			}
			if next.Worker != "" {
				next.Queue = api.List(nextQueue)
				req.Next = &next
			}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Committed, error) { return s.Complete(ctx, req) },
				committedTable, "repeat the same complete: it answers COMMITTED again and writes nothing",
				"this completion was recorded as cancelled: discard its result")
		},
	}
	o.flags(c)
	c.Flags().StringVar(&result, "result", "", "what the worker reports, kept with the task")
	c.Flags().StringVar(&resultFile, "result-file", "", "read the result from FILE, or from stdin with -")
	c.Flags().StringVar(&next.Worker, "next-worker", "", "also lease the next eligible task to this worker, in the same write")
	c.Flags().StringVar(&next.Duration, "next-duration", "30s", "the next lease's duration")
	c.Flags().StringVar(&nextQueue, "next-queue", "", "take the next task only from these queues (comma-separated; default all)")
	return c
}

func committedTable(v api.Committed) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		return fields(w, p, append([]string{"result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "duplicate", fmt.Sprint(v.Duplicate)}, nextCells(v.Next)...)...)
	}
}

// nextCells are a completion's next lease as table rows (none when it
// asked for none).
func nextCells(next *api.Next) []string {
	switch {
	case next == nil:
		return nil
	case next.Lease != nil:
		return []string{"next task", next.Lease.TaskID, "next lease", next.Lease.LeaseID, "next expiry", next.Lease.Expiry}
	}
	return []string{"next task", "none eligible", "next eligible at", deref(next.NextEligibleAt)}
}
