package cmd

import (
	"cmp"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/server"
	"leasewal/state"
	"leasewal/store"
	"leasewal/view"
)

// defaultWaitStates are the states wait waits for unless told: the ended ones.
const defaultWaitStates = "COMPLETED,FAILED,DEAD"

type waitOptions struct {
	states  string
	timeout string
}

func (a *app) newWaitCmd() *cobra.Command {
	o := &waitOptions{}
	c := &cobra.Command{
		Use:   "wait TASK... [--for STATE,...] [--timeout D]",
		Short: "Block until every named task is in one of the states (default: ended)",
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
		ValidArgsFunction: a.completion(completeTasks),
		RunE: func(_ *cobra.Command, args []string) error {
			req := api.WaitRequest{Tasks: args, For: api.List(o.states), Timeout: o.timeout}
			if a.env.Server != "" {
				return a.env.remoteWait("timeout", o.timeout, ExitWaitedOut, func(slice string) (*http.Response, string, error) {
					req.Timeout = slice
					return a.env.postTyped("wait", req)
				})
			}
			return runWaitRequest(a.env, req)
		},
	}
	c.Flags().StringVar(&o.states, "for", defaultWaitStates, "the states to wait for (comma-separated)")
	c.Flags().StringVar(&o.timeout, "timeout", "", "give up after this long (default: never; 0 looks once)")
	return c
}

// runWaitRequest waits as r asks: the command's, or a server's client's.
func runWaitRequest(e env, r api.WaitRequest) error {
	if len(r.Tasks) == 0 {
		return usageErr("'leasewal wait' needs at least one task id, e.g. 'leasewal wait T1'")
	}
	ids := r.Tasks
	states := cmp.Or(string(r.For), defaultWaitStates)
	var want []state.TaskState
	for _, name := range strings.Split(states, ",") {
		st, ok := state.ParseTaskState(strings.TrimSpace(name))
		if !ok {
			return usageErr("--for %q: %q is not a state: use WAITING, LEASED, COMPLETED, FAILED or DEAD", states, name)
		}
		want = append(want, st)
	}
	var deadline time.Time
	if r.Timeout != "" {
		d, err := api.ParseDuration("timeout", r.Timeout)
		if err != nil {
			return err
		}
		if d < 0 {
			return usageErr("--timeout %s is negative", r.Timeout)
		}
		deadline = time.Now().Add(e.capWait(d))
	} else if e.batch != nil {
		deadline = time.Now().Add(server.WaitCap)
	}
	if err := e.needsWallClock("wait"); err != nil {
		return err
	}
	h := store.Open(e.storeOptions())
	defer h.Close()
	var next, lookedAt int64
	decide := func(tx *store.Tx) (answer, error) {
		v := api.Wait{Result: state.ResultOK}
		for _, id := range ids {
			t, err := tx.State.Task(id)
			if err != nil {
				return answer{}, err
			}
			tv := view.Task(t, tx.Now)
			v.Tasks = append(v.Tasks, tv)
			st := state.TaskState(tv.State)
			switch {
			case slices.Contains(want, st):
			case st.Terminal():
				v.Result = state.ResultUnreachable
			case v.Result == state.ResultOK:
				v.Result = state.ResultTimeout // not yet: the final answer only if time runs out
			}
		}
		next, lookedAt = tx.State.NextEventAt(tx.Now), tx.Now
		return waitAnswer(v, tx.Now), nil
	}
	var waiter *waiter
	for {
		a, _, err := decideOn(h, false, decide)
		if err != nil {
			return err
		}
		if sig := waiter.signalled(); sig != nil && a.outcome == state.ResultTimeout {
			v := a.doc.(api.Wait)
			v.Result = resultInterrupted
			return e.interrupted(waitAnswer(v, lookedAt), sig)
		}
		if a.outcome != state.ResultTimeout || (!deadline.IsZero() && !time.Now().Before(deadline)) || e.stopped() {
			return e.print(a, nil)
		}
		if waiter == nil {
			if waiter, err = e.newWaiter(h); err != nil {
				return err
			}
			defer waiter.close()
			continue // look again now that changes are watched: none is missed in between
		}
		if err := waiter.wait(waitUntil(next, deadline)); err != nil {
			return err
		}
	}
}

// waitAnswer is wait's answer: the result, then the tasks as inspect shows
// them at now.
func waitAnswer(v api.Wait, now int64) answer {
	return answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
		fmt.Fprintln(w, p.word(string(v.Result)))
		t := newInspectTable(w, p)
		for _, tv := range v.Tasks {
			appendTaskRow(t, p, tv, now)
		}
		return t.Render()
	}}
}
