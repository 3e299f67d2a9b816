package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/state"
	"leasewal/store"
	"leasewal/view"
)

// The operator's verbs of a queue: abort, requeue, and why.

func (a *app) newAbortCmd() *cobra.Command {
	var reason string
	c := &cobra.Command{
		Use:   "abort TASK --reason TEXT",
		Short: "End a WAITING or LEASED task (writes TaskAborted)",
		Long: `An operator's way to stop a task (asynq's task cancel, beanstalkd's bury):
writes TaskAborted and the task is DEAD with that reason, its attempt count
unchanged. Its current lease loses authority at once: the holder's extend,
complete and fail answer CANCELLED, naming the abort. Repeating it with the same
reason answers again (duplicate) and writes nothing. A task already COMPLETED,
FAILED or DEAD otherwise: exit 2; an unknown task: exit 4.`,
		Example:           `  leasewal abort T7 --reason 'bad batch'`,
		Args:              exactlyOneTask,
		ValidArgsFunction: a.completion(completeTasks),
		RunE: func(_ *cobra.Command, args []string) error {
			if a.env.Server != "" {
				return a.env.sendTyped("abort", api.AbortRequest{Task: args[0], Reason: reason, Actor: a.env.Actor})
			}
			return runAbort(a.env, args[0], reason)
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the task is stopped (required)")
	_ = c.MarkFlagRequired("reason")
	return c
}

// exactlyOneTask is the argument rule of the verbs about one task.
func exactlyOneTask(c *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageErr("'%s' takes one task id, e.g. '%s T1'", c.CommandPath(), c.CommandPath())
	}
	return nil
}

func runAbort(e env, taskID, reason string) error {
	return e.write(func(tx *store.Tx) (answer, error) {
		d, err := committer(tx)(tx.State.DecideAbort(taskID, reason, tx.Now))
		if err != nil {
			return answer{}, err
		}
		v := api.Aborted{Result: d.Outcome, TaskID: d.TaskID, State: string(d.State), Reason: d.Reason, LeaseID: view.Null(d.LeaseID), Duplicate: d.Duplicate}
		return answer{doc: v, outcome: v.Result, recovery: "repeat the same abort: it answers again and writes nothing",
			table: func(w io.Writer, p palette) error {
				return fields(w, p, "result", string(v.Result), "task", v.TaskID, "state", v.State, "reason", v.Reason,
					"fenced lease", deref(v.LeaseID), "duplicate", fmt.Sprint(v.Duplicate))
			}}, nil
	})
}

func (a *app) newRequeueCmd() *cobra.Command {
	var requestID string
	c := &cobra.Command{
		Use:   "requeue TASK [--request-id R]",
		Short: "Run a FAILED or DEAD task again, as a new task (writes TaskCreated)",
		Long: `Create a new task with the payload, window, retry policy, queue and priority of
a FAILED or DEAD one, eligible at once, and requeued_from naming it (asynq's task
run, beanstalkd's kick). The old task stays as it ended. With --request-id, a
repeat answers with the same new task; request ids of submit and requeue share
one name space. A live task: exit 2; an unknown task: exit 4.`,
		Example:           `  leasewal requeue T7 --request-id rerun-T7`,
		Args:              exactlyOneTask,
		ValidArgsFunction: a.completion(completeTasks),
		RunE: func(_ *cobra.Command, args []string) error {
			if a.env.Server != "" {
				return a.env.sendTyped("requeue", api.RequeueRequest{Task: args[0], RequestID: requestID, Actor: a.env.Actor})
			}
			return runRequeue(a.env, args[0], requestID)
		},
	}
	c.Flags().StringVar(&requestID, "request-id", "", "idempotency key: a repeat answers with the same new task")
	return c
}

func runRequeue(e env, taskID, requestID string) error {
	return e.runAck(func(st *state.State, now int64) (state.Decision, error) {
		return st.DecideRequeue(taskID, requestID, now)
	})
}

func (a *app) newWhyCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "why TASK",
		Short: "Say why a task is where it is, in one sentence",
		Long: `Answer why a task is not running, or is: eligible (and how many tasks a lease
of its queue would take before it), delayed, backing off, leased (by whom, until
when), or ended (completed, failed, window closed, attempts exhausted, aborted),
with what to do where there is something to do. Writes nothing. An unknown task:
exit 4.`,
		Example:           `  leasewal why T7`,
		Args:              exactlyOneTask,
		ValidArgsFunction: a.completion(completeTasks),
		RunE: func(_ *cobra.Command, args []string) error {
			if a.env.Server != "" {
				return a.env.sendTyped("why", api.WhyRequest{Task: args[0]})
			}
			return runWhy(a.env, args[0])
		},
	}
}

func runWhy(e env, taskID string) error {
	return e.read(func(tx *store.Tx) (answer, error) {
		w, err := tx.State.Explain(taskID, tx.Now)
		if err != nil {
			return answer{}, err
		}
		t := w.Task
		v := api.Why{Result: state.ResultOK, TaskID: t.ID, State: string(t.State), Eligible: w.Eligible, Ahead: w.Ahead,
			Because: w.Because, Queue: t.Queue, Priority: t.Priority, Sentence: whySentence(w, tx.Now)}
		switch {
		case w.Eligible:
			v.EligibleAt = view.Null(formatTime(tx.Now))
		case w.EligibleAt != 0:
			v.EligibleAt = view.Null(formatTime(w.EligibleAt))
		}
		return answer{doc: v, outcome: v.Result, table: func(out io.Writer, p palette) error {
			_, err := fmt.Fprintln(out, escape(v.Sentence))
			return err
		}}, nil
	})
}

// whySentence says w in one sentence a person can act on.
func whySentence(w state.Why, now int64) string {
	t := w.Task
	at := func(ms int64) string {
		if ms > now {
			return fmt.Sprintf("%s (in %s)", formatTime(ms), api.Age(ms-now))
		}
		return formatTime(ms)
	}
	requeue := fmt.Sprintf("; 'leasewal requeue %s' runs it again as a new task", t.ID)
	switch w.Because {
	case state.BecauseEligible:
		where := fmt.Sprintf("queue %s, priority %d", t.Queue, t.Priority)
		if w.Ahead == 0 {
			return fmt.Sprintf("%s is WAITING and eligible: a lease of queue %s takes it next (%s)", t.ID, t.Queue, where)
		}
		return fmt.Sprintf("%s is WAITING and eligible: %d %s of higher priority or older %s ahead of it in queue %s (%s)",
			t.ID, w.Ahead, plural(w.Ahead, "task", "tasks"), plural(w.Ahead, "is", "are"), t.Queue, where)
	case state.BecauseDelayed:
		return fmt.Sprintf("%s is WAITING until %s: it was submitted with a delay (queue %s)", t.ID, at(w.EligibleAt), t.Queue)
	case state.BecauseBackoff:
		s := fmt.Sprintf("%s is WAITING until %s, backoff after attempt %d of %d", t.ID, at(w.EligibleAt), t.Attempt, t.Policy.MaxAttempts)
		if l := w.LastEnd; l != nil && l.Reason != "" {
			s += fmt.Sprintf(" (it failed: %s)", l.Reason)
		} else if l != nil && l.End == state.EndExpired {
			s += fmt.Sprintf(" (lease %s of %s expired)", l.LeaseID, l.Worker)
		}
		return s
	case state.BecauseLeased:
		ext := "not extended"
		switch w.Extensions {
		case 1:
			ext = "extended once"
		case 0:
		default:
			ext = fmt.Sprintf("extended %d times", w.Extensions)
		}
		return fmt.Sprintf("%s is LEASED by %s under %s until %s, attempt %d of %d, %s", t.ID, t.Lease.Worker, t.Lease.ID, at(t.Lease.Expiry), t.Attempt, t.Policy.MaxAttempts, ext)
	case state.BecauseCompleted:
		l := w.LastEnd
		return fmt.Sprintf("%s is COMPLETED: %s finished it under %s at %s", t.ID, l.Worker, l.LeaseID, formatTime(l.EndedAt))
	case state.BecauseFailed:
		return fmt.Sprintf("%s is FAILED: %s%s", t.ID, t.EndReason, requeue)
	case state.BecauseAttemptsExhausted:
		return fmt.Sprintf("%s is DEAD: %s (%d of %d attempts)%s", t.ID, t.EndReason, t.Attempt, t.Policy.MaxAttempts, requeue)
	case state.BecauseAborted:
		return fmt.Sprintf("%s is DEAD: %s%s", t.ID, t.EndReason, requeue)
	}
	return fmt.Sprintf("%s is DEAD: its execution window closed at %s after %d of %d attempts%s", t.ID, formatTime(t.Deadline()), t.Attempt, t.Policy.MaxAttempts, requeue)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
