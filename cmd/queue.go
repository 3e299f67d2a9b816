package cmd

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/internal/suggest"
)

// The operator's verbs of a queue: abort, requeue, and why.

func (a *app) newAbortCmd() *cobra.Command {
	var reason string
	c := &cobra.Command{
		Use:   "abort TASK --reason TEXT",
		Short: "Cancel a waiting or running task (it ends DEAD)",
		Long: `An operator's way to stop a task (asynq's task cancel, beanstalkd's bury):
writes TaskAborted and the task is DEAD with that reason, its attempt count
unchanged. Its current lease loses authority at once: the holder's extend,
complete and fail answer CANCELLED, naming the abort. Repeating it with the same
reason answers again (duplicate) and writes nothing. A task already COMPLETED,
FAILED or DEAD otherwise: exit 2; an unknown task: exit 4.`,
		Example:           `  leasewal abort T7 --reason 'bad batch'`,
		Args:              exactlyOneTask,
		ValidArgsFunction: a.completion(service.CandidateTasks),
		RunE: func(_ *cobra.Command, args []string) error {
			req := api.AbortRequest{Task: args[0], Reason: reason, Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Aborted, error) { return s.Abort(ctx, req) },
				abortedTable, "repeat the same abort: it answers again and writes nothing", "")
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the task is stopped (required)")
	_ = c.MarkFlagRequired("reason")
	return c
}

func (a *app) newRedactCmd() *cobra.Command {
	var reason string
	c := &cobra.Command{
		Use:   "redact TASK --reason TEXT",
		Short: "Stop showing a task's payload (a pasted secret); compact removes it",
		Long: `For a secret pasted into a payload: writes TaskRedacted, after which no answer
shows the task's payload (lease, inspect, wait, log and its records, inspect
--until of a time before), in any state; nothing else of the task changes. The
next compaction writes no copy of it into the WAL. The history segments sealed
before (<wal>.history/) still hold it: compact --drop, or delete them, to remove
it from disk. Redacting a task again answers again (duplicate, with the first
reason) and writes nothing. An unknown task: exit 4.`,
		Example:           `  leasewal redact T7 --reason 'an API key was pasted into it'`,
		Args:              exactlyOneTask,
		ValidArgsFunction: a.completion(service.CandidateTasks),
		RunE: func(_ *cobra.Command, args []string) error {
			req := api.RedactRequest{Task: args[0], Reason: reason, Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Redacted, error) { return s.Redact(ctx, req) },
				redactedTable, "repeat the same redact: it answers again and writes nothing", "")
		},
	}
	c.Flags().StringVar(&reason, "reason", "", "why the payload must go (required)")
	_ = c.MarkFlagRequired("reason")
	return c
}

func redactedTable(v api.Redacted) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "task", v.TaskID, "state", v.State, "redacted", v.Reason,
			"duplicate", fmt.Sprint(v.Duplicate))
	}
}

// exactlyOneTask is the argument rule of the verbs about one task.
func exactlyOneTask(c *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usageErr("'%s' takes one task id, e.g. '%s T1'", c.CommandPath(), c.CommandPath())
	}
	return nil
}

func abortedTable(v api.Aborted) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "task", v.TaskID, "state", v.State, "reason", v.Reason,
			"fenced lease", deref(v.LeaseID), "duplicate", fmt.Sprint(v.Duplicate))
	}
}

func (a *app) newRequeueCmd() *cobra.Command {
	var (
		requestID, states, queue string
		limit                    int
		withDependents           bool
	)
	c := &cobra.Command{
		Use:   "requeue TASK [--request-id R] | requeue --state FAILED,DEAD [--queue Q] [--limit N]",
		Short: "Run a FAILED or DEAD task again, or every such task",
		Long: `Create a new task with the payload, window, retry policy, queue and priority of
a FAILED or DEAD one, eligible at once, and requeued_from naming it (asynq's task
run, beanstalkd's kick). The old task stays as it ended. With --request-id, a
repeat answers with the same new task; request ids of submit and requeue share
one name space. The tasks submitted --after it that its end ended DEAD stay so
(a note says which); --with-dependents runs them again too, in the same write,
each waiting for the new task as it waited for the old (and theirs in turn).
A live task: exit 2; an unknown task: exit 4.

With --state instead of a task, every task in those states (of --queue) that
was not requeued before is requeued, in creation order, in one write: at most
--limit (and 20,000) at once, the answer saying how many are left. Running it
again (an answer lost) requeues nothing twice: a task already requeued is
skipped.`,
		Example: `  leasewal requeue T7 --request-id rerun-T7
  leasewal requeue --state FAILED --queue mail`,
		ValidArgsFunction: a.completion(service.CandidateTasks),
		RunE: func(c *cobra.Command, args []string) error {
			if c.Flags().Changed("state") || c.Flags().Changed("queue") || c.Flags().Changed("limit") {
				if len(args) > 0 || requestID != "" {
					return usageErr("give a task to requeue, or --state (with --queue, --limit) to requeue every such task, not both")
				}
				req := api.RequeueAllRequest{State: api.List(states), Queue: queue, Limit: limit, Actor: a.env.Actor}
				return call(a.env, func(ctx context.Context, s api.Service) (api.RequeuedAll, error) { return s.RequeueAll(ctx, req) },
					requeuedAllTable, "'leasewal log --type TaskCreated' shows what was requeued; a requeue again skips those", "")
			}
			if err := exactlyOneTask(c, args); err != nil {
				return err
			}
			req := api.RequeueRequest{Task: args[0], RequestID: requestID, WithDependents: withDependents, Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Ack, error) {
				v, err := s.Requeue(ctx, req)
				if err == nil && len(v.DeadDependents) > 0 {
					fmt.Fprintf(a.env.stderr, "leasewal: note: %s stay DEAD (ended by %s's end); 'leasewal requeue %s --with-dependents' runs them again with it\n",
						strings.Join(v.DeadDependents, ", "), req.Task, req.Task)
				}
				return v, err
			}, ackTable, "", "")
		},
	}
	c.Flags().StringVar(&requestID, "request-id", "", "idempotency key: a repeat answers with the same new task")
	c.Flags().BoolVar(&withDependents, "with-dependents", false, "run again, in the same write, the tasks its end ended DEAD (and theirs in turn), each waiting for the new task")
	c.Flags().StringVar(&states, "state", "", "requeue every task in these states instead (FAILED, DEAD or both)")
	c.Flags().StringVar(&queue, "queue", "", "with --state: only tasks of this queue")
	c.Flags().IntVar(&limit, "limit", 0, "with --state: at most this many, the first created (default and most 20,000)")
	return c
}

func requeuedAllTable(v api.RequeuedAll) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		if len(v.Tasks) > 0 || p.tsv {
			t := newTable(w, p, "TASK", "REQUEUED FROM")
			for _, one := range v.Tasks {
				_ = t.Append(one.TaskID, one.RequeuedFrom)
			}
			if err := t.Render(); err != nil || p.tsv {
				return err
			}
		}
		line := fmt.Sprintf("%d requeued", len(v.Tasks))
		if len(v.Tasks) == 0 {
			line = "nothing to requeue: no task selected, or each was requeued before"
		}
		if v.More > 0 {
			line += fmt.Sprintf("; %d more left: requeue again to take them", v.More)
		}
		_, err := fmt.Fprintln(w, p.line(line))
		return err
	}
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
		ValidArgsFunction: a.completion(service.CandidateTasks),
		RunE: func(_ *cobra.Command, args []string) error {
			req := api.WhyRequest{Task: args[0]}
			a.env.noteMissingWAL()
			return call(a.env, func(ctx context.Context, s api.Service) (api.Why, error) { return s.Why(ctx, req) },
				whyTable, "", "")
		},
	}
}

func whyTable(v api.Why) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		_, err := fmt.Fprintln(w, escape(v.Sentence))
		return err
	}
}

// noteQueueTypos says on stderr, for each named queue that holds no
// unfinished task, the queue with tasks it is likely a typo of: a lease
// from it would wait for ever. A queue with no near name says nothing (it
// may just be empty now).
func (e env) noteQueueTypos(svc api.Service, queues []string) {
	if len(queues) == 0 {
		return
	}
	list, err := svc.QueueList(e.context(), api.QueueListRequest{}) // names alone: no task read, whatever the backlog
	if err != nil {
		return // the command itself says what is wrong
	}
	withTasks := list.Queues
	for _, q := range queues {
		if slices.Contains(withTasks, q) {
			continue
		}
		if near := suggest.Closest(q, withTasks); near != "" {
			fmt.Fprintf(e.stderr, "leasewal: queue %q has no unfinished task; did you mean %q? ('leasewal queue ls' lists the queues)\n", escape(q), escape(near))
		}
	}
}
