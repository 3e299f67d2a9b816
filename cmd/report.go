package cmd

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/report"
	"github.com/leasewal/leasewal/internal/trace"
)

type reportOptions struct {
	from, to     int64
	since, until string
	tasks        []string
	queue        string
	title        string
	expect       string
}

func (a *app) newReportCmd() *cobra.Command {
	o := &reportOptions{}
	c := &cobra.Command{
		Use:   "report [--from/--to SEQ | --since/--until TIME] [--task T,…] [--queue Q] > report.html",
		Short: "Draw the history as one HTML page",
		Long: `Write one HTML page that opens from disk in any browser (no network, no script):
an overview (tasks by state and queue, completions and unfinished tasks over
time, lapses, cancelled late completions and deaths marked on the time axis), a
lane per worker showing which task it held when, and every task's timeline
with its records, drawn with the terminal timeline's marks. The first 500 tasks
are drawn; the others are counted and named (--task or --from/--to draws them).
With --expect FILE (an expectation trace, as verify --expect takes) the page
lists the trace's steps beside the recorded path, each marked held or not, the
first divergence highlighted with verify's differences; the report is still
written, and the exit code is 5 when the WAL differs. Writes nothing to the
WAL; through --server it draws the server's WAL (--expect needs a local one).`,
		Example: `  leasewal report > report.html
  leasewal --wal testdata/seeds/lease_expiry.wal report --task T1 > t1.html`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runReport(a.env, *o) },
	}
	f := c.Flags()
	f.Int64Var(&o.from, "from", 0, "the first record's seq (default: the first)")
	f.Int64Var(&o.to, "to", 0, "the last record's seq (default: the last)")
	f.StringVar(&o.since, "since", "", "records at or after this time (RFC 3339, unix ms, or +DURATION after the first)")
	f.StringVar(&o.until, "until", "", "records at or before this time")
	f.StringSliceVar(&o.tasks, "task", nil, "only these tasks")
	f.StringVar(&o.queue, "queue", "", "only this queue's records")
	f.StringVar(&o.title, "title", "", "the page's title (default: leasewal report of the WAL)")
	f.StringVar(&o.expect, "expect", "", "an expectation trace: its steps beside the recorded path, each held or not (a local WAL)")
	return c
}

func runReport(e env, o reportOptions) error {
	e.noteMissingWAL()
	s, err := e.session()
	if err != nil {
		return err
	}
	title := o.title
	if title == "" {
		title = "leasewal report of " + e.WAL
		if e.Server != "" {
			title = "leasewal report of " + e.Server
		}
	}
	var checked *report.Expectation
	var differs error
	if o.expect != "" {
		if e.Server != "" {
			return usageErr("--expect replays a local WAL: give --wal, not --server")
		}
		if checked, differs, err = expectation(e, o.expect); err != nil {
			return err
		}
	}
	now := func(lastAt int64) int64 { // the command's clock, as every command's: --now, or the wall clock
		at, err := e.clock(lastAt)
		if err != nil {
			return lastAt // --now was read already, when the records were
		}
		return at
	}
	page, err := report.Build(e.context(), s.svc, report.Options{Title: title, Tasks: o.tasks, Expect: checked, Now: now,
		Log: api.LogRequest{From: o.from, To: o.to, Since: o.since, Until: o.until, Queue: o.queue}})
	if err != nil {
		return e.remoteError(err)
	}
	if err := report.Render(e.stdout, page); err != nil && !errors.Is(err, syscall.EPIPE) { // the reader went away: 'report | head'
		return fmt.Errorf("writing the report: %w", err)
	}
	return differs
}

// expectation checks the WAL against a trace as verify --expect does, and
// says how each step fared; differs is the *trace.MismatchError when any
// did not hold (exit 5, after the page is written).
func expectation(e env, file string) (out *report.Expectation, differs error, err error) {
	want, err := trace.Read(file)
	if err != nil {
		return nil, nil, err
	}
	if !want.IsTrace() {
		return nil, nil, usageErr("--expect %s is an 'inspect -o json' document; a report draws a trace's steps: give a list of steps (after:, at:, final:)", file)
	}
	outline := want.Outline() // before the check, which consumes the steps
	err = e.local().CheckTrace(e.context(), want)
	var mismatch *trace.MismatchError
	if err != nil && !errors.As(err, &mismatch) {
		return nil, nil, err
	}
	out = &report.Expectation{File: file}
	for _, st := range outline {
		step := report.ExpectStep{Label: st.Label, Expects: st.Expects, Held: true}
		if mismatch != nil {
			for _, m := range mismatch.Mismatches {
				if m.Step == st.Label {
					step.Held = false
					step.Differences = append(step.Differences, m.String())
				}
			}
		}
		out.Steps = append(out.Steps, step)
	}
	if mismatch != nil {
		differs = mismatch
	}
	return out, differs, nil
}
