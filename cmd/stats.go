package cmd

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/metrics"
	"github.com/leasewal/leasewal/state"
)

func (a *app) newStatsCmd() *cobra.Command {
	var queue, recent string
	c := &cobra.Command{
		Use:   "stats [--queue Q] [--recent 1h] [-o json|prom]",
		Short: "The figures an operator watches: each queue's backlog, latency and throughput",
		Long: `Print per queue the tasks WAITING (and of them eligible now) and LEASED, how
long the task eligible longest has waited (the queue's latency), and the tasks
that finished within --recent (default 1h: COMPLETED, FAILED and DEAD, and the
completions per minute, its throughput); then, over the whole history
(compacted records included), the leases granted, extended and lapsed, the
attempts that completed or failed (a failed attempt is retried unless it was the
last), late completions cancelled and leases released. The 50 busiest queues are
named, the rest summed apart ("others" in JSON). -o prom prints the Prometheus
text format of GET /metrics (for a textfile collector). Writes nothing.`,
		Example: `  leasewal stats
  leasewal stats --queue mail --recent 15m -o json
  leasewal stats -o prom > /var/lib/node_exporter/leasewal.prom`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runStats(a.env, queue, recent) },
	}
	c.Flags().StringVar(&queue, "queue", "", "this queue only")
	c.Flags().StringVar(&recent, "recent", "1h", "count the tasks finished in this span back from now (0: none)")
	return c
}

func runStats(e env, queue, recent string) error {
	e.noteMissingWAL()
	s, err := e.session()
	if err != nil {
		return err
	}
	if d, err := api.ParseSpan(recent); err == nil && d == 0 {
		recent = ""
	}
	v, err := s.svc.Stats(e.context(), api.StatsRequest{Queue: queue, Recent: recent})
	if err != nil {
		return e.remoteError(err)
	}
	return e.print(answer{doc: v, outcome: v.Result, prom: func(w io.Writer) error { return metrics.WriteText(w, v) },
		table: func(w io.Writer, p palette) error { return statsTable(w, p, v) }}, s.written)
}

// statsTable is a queue per row, then the counters of the history.
func statsTable(w io.Writer, p palette, v api.Stats) error {
	head := []string{"QUEUE", "WAITING", "READY", "LEASED", "LATENCY"}
	if v.Recent != "" {
		head = append(head, "DONE", "FAILED", "DEAD", "/MIN")
	}
	if len(v.Queues) > 0 || p.tsv {
		t := newTable(w, p, head...)
		for _, q := range v.Queues {
			latency := "-"
			if q.Eligible > 0 {
				latency = api.Age(q.OldestEligibleAgeMs)
			}
			row := []string{escape(q.Queue), fmt.Sprint(q.Waiting), fmt.Sprint(q.Eligible), fmt.Sprint(q.Leased), latency}
			if f := q.Finished; f != nil {
				row = append(row, fmt.Sprint(f.Completed), fmt.Sprint(f.Failed), fmt.Sprint(f.Dead), strconv.FormatFloat(f.CompletedPerMinute, 'f', 2, 64))
			}
			if err := t.Append(row...); err != nil {
				return err
			}
		}
		if err := t.Render(); err != nil {
			return err
		}
	}
	if p.tsv {
		return nil
	}
	if len(v.Queues) == 0 {
		line := "no unfinished task"
		if v.Recent != "" {
			line += ", and none finished in the last " + v.Recent
		}
		if _, err := fmt.Fprintln(w, p.line(line)); err != nil {
			return err
		}
	}
	if v.Recent != "" && len(v.Queues) > 0 {
		if _, err := fmt.Fprintf(w, "READY: waiting and eligible now; LATENCY: how long the oldest of them has waited; DONE (COMPLETED), FAILED, DEAD: the tasks that ended in the last %s; /MIN: completions a minute\n", v.Recent); err != nil {
			return err
		}
	}
	if o := v.Others; o != nil {
		latency := ""
		if o.Eligible > 0 {
			latency = ", oldest eligible " + (time.Duration(o.OldestEligibleAgeMs) * time.Millisecond).String()
		}
		if _, err := fmt.Fprintf(w, "and %d other queues: %d waiting, %d eligible, %d leased%s\n", o.Queues, o.Waiting, o.Eligible, o.Leased, latency); err != nil {
			return err
		}
	}
	n := func(t state.RecordType) string { return fmt.Sprint(v.Records[string(t)]) }
	if _, err := fmt.Fprintf(w, "all time: %s leases granted, %s extended, %s lapsed; attempts %s completed, %s failed; %s late completions cancelled, %s leases released · last seq %d\n",
		n(state.LeaseGranted), n(state.LeaseExtended), n(state.LeaseExpired), n(state.TaskCompleted), n(state.TaskFailed), n(state.TaskCancelled),
		n(state.LeaseReleased), v.LastSeq); err != nil {
		return err
	}
	for _, q := range v.Paused {
		reason := ""
		if q.Reason != "" {
			reason = " (" + escape(q.Reason) + ")"
		}
		if _, err := fmt.Fprintf(w, "paused: %s since %s%s, %s\n", escape(q.Queue), q.Since, reason, untilPhrase(q)); err != nil {
			return err
		}
	}
	var blocked []string
	for _, q := range v.Queues {
		if q.Blocked > 0 {
			blocked = append(blocked, fmt.Sprintf("%s %d", escape(q.Queue), q.Blocked))
		}
	}
	if len(blocked) > 0 {
		if _, err := fmt.Fprintf(w, "waiting for other tasks (among WAITING): %s\n", strings.Join(blocked, ", ")); err != nil {
			return err
		}
	}
	for _, q := range v.Rated {
		next := "may grant now"
		if q.NextGrantAt != nil {
			next = "next grant at " + *q.NextGrantAt
		}
		if q.HeldBack != nil {
			next += fmt.Sprintf(", %d %s held back", *q.HeldBack, api.Plural(int(*q.HeldBack), "lease", "leases"))
		}
		if _, err := fmt.Fprintf(w, "rated: %s %s (burst %d), %s\n", escape(q.Queue), q.Rate, q.Burst, next); err != nil {
			return err
		}
	}
	return nil
}
