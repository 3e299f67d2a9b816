package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/state"
)

type inspectOptions struct {
	state    string
	queue    string
	limit    int
	until    int64
	workers  bool
	timeline bool
}

func (a *app) newInspectCmd() *cobra.Command {
	o := &inspectOptions{}
	c := &cobra.Command{
		Use:   "inspect [TASK...]",
		Short: "Show the tasks as they stand (or stood, --until)",
		Long: `Show each task's state, attempt, current lease, worker, expiry, deadline and
not_before as they stand at --now (lapses of time applied), or as they stood
right after record --until SEQ, at that record's time. Naming one task also
lists its records, and --timeline draws its life on a time axis (with -o json,
the same data as for one task). --workers shows the soft worker registry.
Writes nothing. An unknown task: exit 4.`,
		Example: `  leasewal inspect
  leasewal inspect T1 -o json
  leasewal inspect --state FAILED,DEAD --queue mail --limit 20
  leasewal inspect --until 3
  leasewal inspect T1 --timeline
  leasewal inspect --workers`,
		RunE: func(c *cobra.Command, args []string) error {
			req := api.InspectRequest{Tasks: args, State: api.List(o.state), Queue: o.queue, Limit: o.limit, Workers: o.workers, Timeline: o.timeline}
			if c.Flags().Changed("until") {
				req.Until = &o.until
			}
			return runInspect(a.env, req)
		},
		ValidArgsFunction: a.completion(service.CandidateTasks),
	}
	c.Flags().StringVar(&o.state, "state", "", "only tasks in one of these states (comma-separated: WAITING, LEASED, COMPLETED, FAILED, DEAD)")
	c.Flags().StringVar(&o.queue, "queue", "", "only tasks of this queue")
	c.Flags().IntVar(&o.limit, "limit", 0, "list at most this many tasks, the first created (0: every one)")
	c.Flags().Int64Var(&o.until, "until", 0, "show the state right after record SEQ, at its time")
	c.Flags().BoolVar(&o.workers, "workers", false, "show the soft worker registry (advisory) and each worker's current leases")
	c.Flags().BoolVar(&o.timeline, "timeline", false, "draw one task's life on a time axis: attempts, extensions, expiries, late completions, the deadline")
	return c
}

// runInspect shows what r asks for.
func runInspect(e env, r api.InspectRequest) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	e.noteMissingWAL()
	ctx := e.context()
	switch {
	case r.Workers:
		v, err := s.svc.Workers(ctx)
		return present(e, s, v, e.remoteError(err), workersTable, "", "")
	case len(r.Tasks) == 0:
		if r.Queue != "" {
			e.noteQueueTypos(s.svc, []string{r.Queue})
		}
		return e.list(s, r)
	}
	v, err := s.svc.Inspect(ctx, r)
	table := func(v api.Inspect) func(io.Writer, palette) error {
		return func(w io.Writer, p palette) error { return renderInspect(w, p, v) }
	}
	if r.Timeline && err == nil && len(v.Tasks) == 1 {
		table = func(v api.Inspect) func(io.Writer, palette) error {
			return func(w io.Writer, p palette) error {
				records := make([]state.Record, len(v.Tasks[0].Records))
				for i, rec := range v.Tasks[0].Records {
					records[i] = answers.StateRecord(rec)
				}
				t, err := state.TaskOf(records)
				if err != nil {
					return fmt.Errorf("drawing %s's timeline from its records: %w", v.Tasks[0].TaskID, err)
				}
				width := p.width
				if width == 0 {
					width = max(e.terminalWidth(), 200) // wide: room for every note
				}
				renderTimeline(w, p, width, t, v.Tasks[0], cancellations(records), api.ParseTime(v.At))
				return nil
			}
		}
	}
	return present(e, s, v, e.remoteError(err), table, "", "")
}

// list is inspect without task ids: every task, drawn or encoded one at a
// time as the service hands it on, so that a listing of a long history
// never holds every task's view, nor all of its output, in memory.
func (e env) list(s *session, r api.InspectRequest) error {
	out := &stickyWriter{w: bufio.NewWriterSize(e.stdout, 8<<10)}
	into, end := api.JSONListing(out)
	var table *sheet
	if e.Output != "json" {
		p := e.palette()
		var at int64
		more := 0
		into = api.Listing{
			Head: func(v api.Inspect) error {
				at, more = api.ParseTime(v.At), v.More
				listed := 0
				for _, n := range v.Counts {
					listed += n
				}
				renderInspectHead(out, p, v, listed)
				if listed > 0 || p.tsv { // TSV has its header row even with no rows
					table = newInspectTable(out, p)
				}
				return nil
			},
			Task: func(t api.Task) error { appendTaskRow(table, p, t, at); return nil },
		}
		end = func() error {
			if table == nil {
				return nil
			}
			if err := table.Render(); err != nil || more == 0 || p.tsv {
				return err
			}
			_, err := fmt.Fprintln(out, p.line(fmt.Sprintf("and %d more, not listed (--limit %d)", more, r.Limit)))
			return err
		}
	}
	if err := s.svc.List(e.context(), r, into); err != nil {
		return e.remoteError(err)
	}
	if err := end(); err != nil && !out.failed() {
		return err
	}
	if err := out.flush(); err != nil && !errors.Is(err, syscall.EPIPE) {
		return fmt.Errorf("writing the answer to stdout: %w", err)
	}
	return nil
}

// cancellations are the TaskCancelled records among a task's records.
func cancellations(records []state.Record) []state.Record {
	var out []state.Record
	for _, r := range records {
		if r.Type == state.TaskCancelled {
			out = append(out, r)
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func renderInspect(w io.Writer, p palette, v api.Inspect) error {
	renderInspectHead(w, p, v, len(v.Tasks))
	if len(v.Tasks) == 0 && !p.tsv { // TSV has its header row even with no rows
		return nil
	}
	at := api.ParseTime(v.At)
	t := newInspectTable(w, p)
	for _, tv := range v.Tasks {
		appendTaskRow(t, p, tv, at)
	}
	if err := t.Render(); err != nil {
		return err
	}
	if len(v.Tasks) == 1 && len(v.Tasks[0].Records) > 0 && !p.tsv {
		return renderLog(w, p, v.Tasks[0].Records, v.Tasks[0].Records[0].AtMs())
	}
	return nil
}

// renderInspectHead prints the line of counts and the summary.
func renderInspectHead(w io.Writer, p palette, v api.Inspect, listed int) {
	if p.tsv {
		return // TSV is the rows only
	}
	head := "at " + v.At + ":"
	for _, st := range []state.TaskState{state.Waiting, state.Leased, state.Completed, state.Failed, state.Dead} {
		if n := v.Counts[string(st)]; n > 0 {
			head += fmt.Sprintf(" %d %s", n, p.word(string(st)))
		}
	}
	if listed == 0 {
		head += " no tasks"
	}
	fmt.Fprintln(w, p.line(head))
	if sum := v.Summary; sum != nil {
		line := fmt.Sprintf("current leases: %d", sum.CurrentLeases)
		if len(sum.Queues) > 1 || sum.Queues[state.DefaultQueue] == nil && len(sum.Queues) == 1 {
			var queues []string
			for _, q := range slices.Sorted(maps.Keys(sum.Queues)) {
				queues = append(queues, fmt.Sprintf("%s %d waiting %d leased", escape(q), sum.Queues[q][string(state.Waiting)], sum.Queues[q][string(state.Leased)]))
			}
			line += " · queues: " + strings.Join(queues, ", ")
		}
		if o := sum.OldestWaiting; o != nil {
			line += fmt.Sprintf(" · oldest waiting: %s, created %s ago", o.TaskID, api.Age(o.AgeMs))
		}
		if n := sum.NextExpiry; n != nil {
			line += fmt.Sprintf(" · next to expire: %s on %s at %s", n.LeaseID, n.TaskID, n.Expiry)
		}
		for _, q := range sum.Paused {
			line += fmt.Sprintf(" · paused: %s since %s, %s", escape(q.Queue), q.Since, untilPhrase(q))
		}
		fmt.Fprintln(w, p.line(line))
	}
}

func newInspectTable(w io.Writer, p palette) *sheet {
	return newTable(w, p, "TASK", "STATE", "TRY", "LEASE", "WORKER", "EXPIRY", "READY", "DEADLINE", "REASON")
}

// appendTaskRow draws a task as a row; in a fitted table its times are
// relative to at ("in 25s", "3m ago"), in a wide one they are timestamps.
func appendTaskRow(t *sheet, p palette, tv api.Task, at int64) {
	_ = t.Append(escape(tv.TaskID), p.word(tv.State), fmt.Sprintf("%d/%d", tv.Attempt, tv.MaxAttempts),
		escape(deref(tv.LeaseID)), escape(deref(tv.WorkerID)), p.when(deref(tv.Expiry), at), p.when(deref(tv.NotBefore), at),
		p.when(openDeadline(tv), at), escape(tv.Reason))
}

// openDeadline is the deadline a table shows: none for a finished task
// (past caring) or a task without a window.
func openDeadline(tv api.Task) string {
	if state.TaskState(tv.State).Terminal() {
		return ""
	}
	return deref(tv.Deadline)
}

// workersTable draws every worker that heartbeated or holds a lease.
func workersTable(v api.Workers) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		t := newTable(w, p, "WORKER", "LAST HEARTBEAT", "AGO", "CURRENT LEASES")
		for _, wv := range v.Workers {
			ago := "never"
			if wv.HeartbeatAge != nil {
				ago = api.Age(*wv.HeartbeatAge)
			}
			var held []string
			for _, l := range wv.Leases {
				held = append(held, l.LeaseID+" on "+l.TaskID)
			}
			_ = t.Append(escape(wv.WorkerID), deref(wv.LastHeartbeat), ago, escape(strings.Join(held, ", ")))
		}
		if err := t.Render(); err != nil {
			return err
		}
		if p.tsv {
			return nil
		}
		_, err := fmt.Fprintln(w, p.line("note: "+v.Note))
		return err
	}
}
