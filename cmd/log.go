package cmd

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"leasewal/state"
)

type logOptions struct {
	taskID string
	from   int64
	to     int64
}

func newLogCmd(g *globals) *cobra.Command {
	o := &logOptions{}
	c := &cobra.Command{
		Use:   "log",
		Short: "Print the WAL's records",
		Long: `Print the records, one per table row, or one JSON object per line with -o json
(times as RFC 3339). Filter by --task and by a --from/--to range of seq.
Writes nothing.`,
		Example: `  leasewal log --task T1
  leasewal log --from 10 --to 20 -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runLog(g, o) },
	}
	c.Flags().StringVar(&o.taskID, "task", "", "only records about this task")
	c.Flags().Int64Var(&o.from, "from", 1, "first seq to print")
	c.Flags().Int64Var(&o.to, "to", 0, "last seq to print (default: the last record)")
	return c
}

// logEntry is a record as log and inspect print it: every field of the
// record, with its times as RFC 3339 instead of unix milliseconds.
type logEntry struct {
	state.Record
	At         string `json:"at"`
	Expiry     string `json:"expiry,omitempty"`
	AcquiredAt string `json:"acquired_at,omitempty"`
}

func newLogEntry(r state.Record) logEntry {
	return logEntry{Record: r, At: state.FormatTime(r.At), Expiry: optTime(r.Expiry), AcquiredAt: optTime(r.AcquiredAt)}
}

func runLog(g *globals, o *logOptions) error {
	if o.from < 1 || (o.to != 0 && o.to < o.from) {
		return usageErr("--from must be at least 1 and --to (if given) at least --from")
	}
	return g.read(func(s *session) error {
		if o.taskID != "" {
			if _, ok := s.st.Task(o.taskID); !ok {
				return &state.Refusal{Kind: state.NotFound, Msg: fmt.Sprintf("unknown task %q; 'leasewal inspect' lists the tasks", o.taskID)}
			}
		}
		var entries []logEntry
		for _, r := range s.records {
			if r.Seq < o.from || (o.to != 0 && r.Seq > o.to) || (o.taskID != "" && r.TaskID != o.taskID) {
				continue
			}
			entries = append(entries, newLogEntry(r))
		}
		if g.output == "json" {
			for _, e := range entries {
				writeJSON(g.stdout, e)
			}
			return nil
		}
		renderLog(g.stdout, palette{on: g.color}, entries)
		return nil
	})
}

func renderLog(w io.Writer, p palette, entries []logEntry) {
	t := newTable(w, "SEQ", "AT", "TYPE", "TASK", "LEASE", "WORKER", "DETAILS", "ACTOR")
	for _, e := range entries {
		_ = t.Append(fmt.Sprint(e.Seq), e.At, string(e.Type), e.TaskID, e.LeaseID, e.WorkerID, details(e), e.Actor)
	}
	_ = t.Render()
}

// details is the rest of a record's fields, compactly.
func details(e logEntry) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if e.Type == state.TaskCreated {
		add("payload", fmt.Sprintf("%q", e.Payload))
		add("window", e.Window.String())
		if p := e.RetryPolicy; p != nil {
			add("max_attempts", fmt.Sprint(p.MaxAttempts))
			add("backoff", p.Backoff.String())
			add("backoff_max", p.BackoffMax.String())
		}
	}
	add("request", e.RequestID)
	if e.Attempt > 0 {
		add("attempt", fmt.Sprint(e.Attempt))
	}
	add("expiry", e.Expiry)
	add("reason", e.Reason)
	if e.Permanent {
		add("permanent", "true")
	}
	if e.Domain != "" {
		add("domain", fmt.Sprintf("%q", e.Domain))
		add("offset", optInt(e.Offset))
		add("token", e.Token)
		add("outcome", e.Outcome)
		if e.RetryCount > 0 {
			add("retry_count", fmt.Sprint(e.RetryCount))
		}
		add("hint", optInt(e.Hint))
	}
	return strings.Join(parts, " ")
}
