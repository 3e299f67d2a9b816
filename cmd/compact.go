package cmd

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/store"
)

// The retention a compaction applies unless told otherwise.
const (
	defaultKeepFinished = "7d"
	defaultKeepHistory  = "30d"
	defaultCompactAbove = "1GiB" // serve's
)

// compactOptions reads the retention flags.
func compactOptions(keepFinished, keepHistory string, drop bool) (store.CompactOptions, error) {
	finished, err := api.ParseDuration("keep-finished", keepFinished)
	if err != nil {
		return store.CompactOptions{}, err
	}
	history, err := api.ParseDuration("keep-history", keepHistory)
	if err != nil {
		return store.CompactOptions{}, err
	}
	if finished < 0 || history < 0 {
		return store.CompactOptions{}, usageErr("--keep-finished and --keep-history are durations of 0 or more, e.g. 7d")
	}
	return store.CompactOptions{KeepFinished: finished, KeepHistory: history, Drop: drop}, nil
}

// parseSize reads a size in bytes: a number, optionally with KiB, MiB or GiB.
func parseSize(flag, text string) (int64, error) {
	units := []struct {
		suffix string
		bytes  int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}, {"", 1}}
	for _, u := range units {
		if number, ok := strings.CutSuffix(strings.TrimSpace(text), u.suffix); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(number), 10, 64)
			if err != nil || n < 0 || n > math.MaxInt64/u.bytes {
				break
			}
			return n * u.bytes, nil
		}
	}
	return 0, usageErr("--%s %q is not a size: give bytes, or a whole number of KiB, MiB or GiB (e.g. 512MiB), or 0", flag, text)
}

func (a *app) newCompactCmd() *cobra.Command {
	var keepFinished, keepHistory string
	var drop bool
	c := &cobra.Command{
		Use:   "compact [--keep-finished D] [--keep-history D] [--drop]",
		Short: "Bound the WAL: replace its records with a base, sealing them in <wal>.history/",
		Long: `Rewrite the WAL so that it starts with a base: the state its records lead to,
without the finished tasks that ended more than --keep-finished ago (default ` + defaultKeepFinished + `).
Everything else is kept: unfinished tasks, recent finished ones with their request
ids and leases (a retry within the retention still answers as before), the id
counters and every work-lease domain. The records replaced are sealed in
<wal>.history/ as a segment that is itself a WAL ('leasewal --wal SEGMENT verify'
reads it); segments whose last record is older than --keep-history (default
` + defaultKeepHistory + `) are deleted. --drop keeps no segment.

Writers wait only for the last step (the records appended during the copy, the
base, the rename): the history is read and copied without the lock. A crash at
any point leaves the old WAL or the new one. The new WAL has format version 3,
which every release reads, 0.1.0 on ('leasewal version' says which formats a
binary reads; docs/wal-format.md).`,
		Example: `  leasewal compact
  leasewal compact --keep-finished 1d --keep-history 7d
  leasewal compact --drop`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			opts, err := compactOptions(keepFinished, keepHistory, drop)
			if err != nil {
				return err
			}
			return runCompact(a.env, opts)
		},
	}
	c.Flags().StringVar(&keepFinished, "keep-finished", defaultKeepFinished, "keep the finished tasks that ended within this")
	c.Flags().StringVar(&keepHistory, "keep-history", defaultKeepHistory, "delete the history segments older than this")
	c.Flags().BoolVar(&drop, "drop", false, "keep no history segment: the records replaced are gone")
	return c
}

type compactView struct {
	Result       api.Outcome `json:"result"`
	Seq          int64       `json:"seq"`
	At           string      `json:"at"`
	KeptFrom     string      `json:"kept_from"`
	Records      int         `json:"records"`
	BytesBefore  int64       `json:"bytes_before"`
	BytesAfter   int64       `json:"bytes_after"`
	TasksKept    int         `json:"tasks_kept"`
	TasksDropped int         `json:"tasks_dropped"`
	Segment      string      `json:"segment"`
	Expired      []string    `json:"expired"`
	HistoryFrom  int64       `json:"history_from"` // the first record the history holds (0: none)
}

func runCompact(e env, opts store.CompactOptions) error {
	if _, err := os.Stat(e.WAL); err != nil {
		return usageErr("no WAL to compact at %s: %v; check --wal", e.WAL, unwrapPathErr(err))
	}
	h := store.Open(e.storeOptions())
	defer h.Close()
	c, err := h.Compact(opts)
	switch {
	case errors.Is(err, store.ErrNothingToCompact): // a nightly compaction of an idle WAL did its job
		fmt.Fprintf(e.stderr, "leasewal: note: %v\n", err)
	case err != nil:
		return err
	}
	if c.Redacted > 0 {
		fmt.Fprintf(e.stderr, "leasewal: note: the WAL holds no redacted payload now, but the history in %s may still hold those of %s: delete the segments, or compact with --drop, to remove them from disk\n",
			store.HistoryDir(e.WAL), fmt.Sprintf("%d redacted %s", c.Redacted, api.Plural(c.Redacted, "task", "tasks")))
	}
	v := compactView{Result: api.ResultOK, Seq: c.Seq, At: formatTime(c.At), KeptFrom: formatTime(c.KeptFrom), Records: c.Records,
		BytesBefore: c.BytesBefore, BytesAfter: c.BytesAfter, TasksKept: c.TasksKept, TasksDropped: c.TasksDropped,
		Segment: c.Segment, Expired: c.Expired, HistoryFrom: c.HistoryFrom}
	if v.Expired == nil {
		v.Expired = []string{}
	}
	segment := v.Segment
	if segment == "" {
		segment = "none (--drop)"
	}
	return e.print(answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "compacted", fmt.Sprintf("%d records, up to seq %d", v.Records, v.Seq),
			"bytes", fmt.Sprintf("%d -> %d", v.BytesBefore, v.BytesAfter),
			"tasks", fmt.Sprintf("%d kept, %d dropped (finished before %s)", v.TasksKept, v.TasksDropped, v.KeptFrom),
			"history", segment, "expired", strings.Join(v.Expired, " "), "history from", historyFrom(v.HistoryFrom))
	}}, written{})
}

// historyFrom says where the history kept starts.
func historyFrom(seq int64) string {
	if seq == 0 {
		return "nothing kept"
	}
	return "seq " + strconv.FormatInt(seq, 10)
}
