package cmd

import (
	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/report"
)

type reportOptions struct {
	from, to     int64
	since, until string
	tasks        []string
	queue        string
	title        string
}

func (a *app) newReportCmd() *cobra.Command {
	o := &reportOptions{}
	c := &cobra.Command{
		Use:   "report -o html [--from/--to SEQ | --since/--until TIME] [--task T,…] [--queue Q] > report.html",
		Short: "Draw the WAL's story as one self-contained HTML page",
		Long: `Write one HTML page that opens from disk in any browser (no network, no script):
an overview (tasks by state and queue, completions and unfinished tasks over
time, lapses, cancelled late completions and deaths marked on the time axis), a
lane per worker showing which task it held when, and every task's timeline
with its records, drawn with the terminal timeline's marks. The first 500 tasks
are drawn; the others are counted and named (--task or --from/--to draws them).
Writes nothing to the WAL; through --server it draws the server's WAL.`,
		Example: `  leasewal report -o html > report.html
  leasewal --wal testdata/seeds/lease_expiry.wal report -o html --task T1 > t1.html`,
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
	return c
}

func runReport(e env, o reportOptions) error {
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
	page, err := report.Build(e.context(), s.svc, report.Options{Title: title, Tasks: o.tasks,
		Log: api.LogRequest{From: o.from, To: o.to, Since: o.since, Until: o.until, Queue: o.queue}})
	if err != nil {
		return e.remoteError(err)
	}
	return report.Render(e.stdout, page)
}
