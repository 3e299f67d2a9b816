package cmd

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/metrics"
	"github.com/leasewal/leasewal/state"
)

func (a *app) newStatsCmd() *cobra.Command {
	var queue string
	c := &cobra.Command{
		Use:   "stats [--queue Q] [-o json|prom]",
		Short: "The figures an operator watches: each queue's tasks and latency, records by type",
		Long: `Print what a server's GET /metrics reports, computed from the WAL, for scripts and
cron jobs without a server: per queue the WAITING, eligible and LEASED tasks and
how long the task eligible longest has waited (the queue's latency); the records
of each type in the WAL's history (compacted ones included), which count the
leases granted, extended, lapsed, completed, failed and cancelled; the last seq.
The 50 busiest queues are named, the rest summed apart ("others" in JSON). -o prom prints the
Prometheus text format, as /metrics does (for a textfile collector). Writes
nothing.`,
		Example: `  leasewal stats
  leasewal stats --queue mail -o json
  leasewal stats -o prom > /var/lib/node_exporter/leasewal.prom`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runStats(a.env, queue) },
	}
	c.Flags().StringVar(&queue, "queue", "", "this queue only")
	return c
}

func runStats(e env, queue string) error {
	e.noteMissingWAL()
	s, err := e.session()
	if err != nil {
		return err
	}
	v, err := s.svc.Stats(e.context(), api.StatsRequest{Queue: queue})
	if err != nil {
		return e.remoteError(err)
	}
	return e.print(answer{doc: v, outcome: v.Result, prom: func(w io.Writer) error { return metrics.WriteText(w, v) },
		table: func(w io.Writer, p palette) error { return statsTable(w, p, v) }}, s.written)
}

// statsTable is a queue per row, then the lease counters.
func statsTable(w io.Writer, p palette, v api.Stats) error {
	t := newTable(w, p, "QUEUE", "WAITING", "ELIGIBLE", "LEASED", "OLDEST ELIGIBLE")
	for _, q := range v.Queues {
		latency := "-"
		if q.Eligible > 0 {
			latency = (time.Duration(q.OldestEligibleAgeMs) * time.Millisecond).String()
		}
		if err := t.Append(q.Queue, fmt.Sprint(q.Waiting), fmt.Sprint(q.Eligible), fmt.Sprint(q.Leased), latency); err != nil {
			return err
		}
	}
	if err := t.Render(); err != nil {
		return err
	}
	if p.tsv {
		return nil
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
	if _, err := fmt.Fprintf(w, "leases: %s granted, %s extended, %s lapsed, %s completed, %s failed, %s cancelled, %s released · last seq %d\n",
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
	return nil
}
