package cmd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/service"
)

func (a *app) newPauseCmd() *cobra.Command {
	req := api.PauseRequest{}
	c := &cobra.Command{
		Use:   "pause QUEUE [--for D] [--reason S]",
		Short: "Stop handing out a queue's tasks for a while (their deadlines wait too)",
		Long: `Pause a queue: from now it leases nothing (submits are still taken, leases
already held run on), and its tasks' execution windows stand still, so each
deadline moves by the time the queue is paused. 'why' says so, 'inspect' shows
the moved deadline, 'stats' lists the pause, and 'lease --wait' and 'run' wake
when it ends. --for D ends it by itself after D; without it, 'leasewal resume
QUEUE' does. Pausing a paused queue answers its pause (duplicate) and writes
nothing: to change it, resume and pause again.`,
		Example: `  leasewal pause mail --reason 'smtp relay down'
  leasewal pause mail --for 30m -o json`,
		ValidArgsFunction: a.completion(service.CandidateQueues),
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("'leasewal pause' takes one queue, e.g. 'leasewal pause mail --for 30m'")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			req.Queue, req.Actor = args[0], a.env.Actor
			return call(a.env, func(ctx context.Context, s api.Service) (api.Paused, error) { return s.Pause(ctx, req) },
				pausedTable, "pause again: a paused queue answers its pause and writes nothing", "")
		},
	}
	c.Flags().StringVar(&req.For, "for", "", "how long the pause lasts (default: until 'leasewal resume QUEUE')")
	c.Flags().StringVar(&req.Reason, "reason", "", "why, for the people who will ask")
	return c
}

func (a *app) newResumeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "resume QUEUE",
		Short: "Hand out a paused queue's tasks again",
		Long: `End a queue's pause: it leases again at once, and its tasks' windows run again
from where they stood. A queue that is not paused: exit 2, nothing written.`,
		Example:           `  leasewal resume mail`,
		ValidArgsFunction: a.completion(service.CandidateQueues),
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("'leasewal resume' takes one queue, e.g. 'leasewal resume mail'")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			req := api.ResumeRequest{Queue: args[0], Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Resumed, error) { return s.Resume(ctx, req) },
				resumedTable, "'leasewal stats' lists the paused queues", "")
		},
	}
}

func pauseFields(v api.PausedQueue) []string {
	return []string{"queue", v.Queue, "since", v.Since, "until", untilText(v), "reason", v.Reason}
}

// untilText is when a pause ends: "until resumed", or its time.
func untilText(v api.PausedQueue) string {
	if v.Until == nil {
		return "until resumed"
	}
	return *v.Until
}

// untilPhrase is untilText in a sentence: "until resumed", "until TIME".
func untilPhrase(v api.PausedQueue) string {
	if v.Until == nil {
		return "until resumed"
	}
	return "until " + *v.Until
}

func pausedTable(v api.Paused) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		kv := append([]string{"result", string(v.Result)}, pauseFields(v.PausedQueue)...)
		return fields(w, p, append(kv, "duplicate", fmt.Sprint(v.Duplicate))...)
	}
}

func resumedTable(v api.Resumed) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		kv := append([]string{"result", string(v.Result)}, pauseFields(v.PausedQueue)...)
		return fields(w, p, append(kv, "resumed at", v.ResumedAt)...)
	}
}
