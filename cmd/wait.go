package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/service"
)

type waitOptions struct {
	states  string
	timeout string
}

func (a *app) newWaitCmd() *cobra.Command {
	o := &waitOptions{}
	c := &cobra.Command{
		Use:   "wait TASK... [--for STATE,...] [--timeout D]",
		Short: "Wait until the tasks have ended (or reach the states named)",
		Long: `Wait, holding no lock, until every named task is in one of the --for states
(default: COMPLETED, FAILED or DEAD), woken when the WAL changes (inotify) or when
time alone changes a task (a lease's expiry, a backoff's end, a deadline). OK
with each task as 'inspect -o json' shows it. TIMEOUT (exit 9) when --timeout
runs out first; UNREACHABLE (exit 9) as soon as a task has ended in a state not
asked for. No --timeout waits for ever; --timeout 0 looks once. An unknown
task: exit 4.`,
		Example: `  leasewal wait T7
  leasewal wait T7 T8 --for COMPLETED --timeout 10m`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr("'leasewal wait' needs at least one task id, e.g. 'leasewal wait T1'")
			}
			return nil
		},
		ValidArgsFunction: a.completion(service.CandidateTasks),
		RunE: func(_ *cobra.Command, args []string) error {
			return runWait(a.env, api.WaitRequest{Tasks: args, For: api.List(o.states), Timeout: o.timeout})
		},
	}
	c.Flags().StringVar(&o.states, "for", service.DefaultWaitStates, "the states to wait for (comma-separated)")
	c.Flags().StringVar(&o.timeout, "timeout", "", "give up after this long (default: never; 0 looks once)")
	return c
}

// runWait waits as r asks, on the WAL or through the server; SIGINT or
// SIGTERM ends it with what it last saw, INTERRUPTED.
func runWait(e env, r api.WaitRequest) error {
	e.noteMissingWAL()
	if err := e.needsWallClock("wait"); err != nil {
		return err
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	caught, ctx, stop := e.catchInterrupts()
	defer stop()
	v, err := s.svc.Wait(ctx, r)
	if ctx.Err() != nil && caught.signal() != nil { // a signal ended the wait, here or at the server
		v.Result = resultInterrupted
		return e.interrupted(answer{doc: v, outcome: v.Result, table: waitTable(v)}, caught.signal())
	}
	return present(e, s, v, e.remoteError(err), waitTable, "", "")
}

// waitTable is wait's answer: the result, then the tasks as inspect shows
// them when it last looked.
func waitTable(v api.Wait) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		fmt.Fprintln(w, p.word(string(v.Result)))
		t := newInspectTable(w, p)
		for _, tv := range v.Tasks {
			appendTaskRow(t, p, tv, api.ParseTime(v.At))
		}
		return t.Render()
	}
}
