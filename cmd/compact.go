package cmd

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/service"
)

// The retention a compaction applies unless told otherwise.
const (
	defaultKeepFinished = service.DefaultKeepFinished
	defaultKeepHistory  = service.DefaultKeepHistory
	defaultCompactAbove = "1GiB" // serve's
)

// compactOptions reads the retention flags.
func compactOptions(keepFinished, keepHistory string, drop bool) (service.CompactOptions, error) {
	return service.CompactOptionsOf(api.CompactRequest{KeepFinished: keepFinished, KeepHistory: keepHistory, Drop: drop})
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
		Short: "Shrink the task log: keep what is live and recent, seal the rest away",
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
binary reads; docs/wal-format.md). With --server, the server compacts its own
WAL, beside its batches (a cluster's every node at the same record).`,
		Example: `  leasewal compact
  leasewal compact --keep-finished 1d --keep-history 7d
  leasewal compact --drop`,
		Args: cobra.NoArgs,
		RunE: func(_ *cobra.Command, _ []string) error {
			return runCompact(a.env, api.CompactRequest{KeepFinished: keepFinished, KeepHistory: keepHistory, Drop: drop, Actor: a.env.Actor})
		},
	}
	c.Flags().StringVar(&keepFinished, "keep-finished", defaultKeepFinished, "keep the finished tasks that ended within this")
	c.Flags().StringVar(&keepHistory, "keep-history", defaultKeepHistory, "delete the history segments older than this")
	c.Flags().BoolVar(&drop, "drop", false, "keep no history segment: the records replaced are gone")
	return c
}

func runCompact(e env, r api.CompactRequest) error {
	return call(e, func(ctx context.Context, s api.Service) (api.Compacted, error) {
		v, err := s.Compact(ctx, r)
		if err == nil && v.Records == 0 { // a nightly compaction of an idle WAL did its job
			fmt.Fprintf(e.stderr, "leasewal: note: nothing to compact: no record follows the last compaction\n")
		}
		if err == nil && v.Redacted > 0 {
			fmt.Fprintf(e.stderr, "leasewal: note: the WAL holds no redacted payload now, but the history in %s may still hold those of %s: delete the segments, or compact with --drop, to remove them from disk\n",
				service.HistoryDir(e.WAL), fmt.Sprintf("%d redacted %s", v.Redacted, api.Plural(v.Redacted, "task", "tasks")))
		}
		return v, err
	}, compactTable, "", "")
}

// compactTable draws a compaction's answer.
func compactTable(v api.Compacted) func(io.Writer, palette) error {
	segment := v.Segment
	if segment == "" {
		segment = "none (--drop)"
	}
	return func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "compacted", fmt.Sprintf("%d records, up to seq %d", v.Records, v.Seq),
			"bytes", fmt.Sprintf("%d -> %d", v.BytesBefore, v.BytesAfter),
			"tasks", fmt.Sprintf("%d kept, %d dropped (finished before %s)", v.TasksKept, v.TasksDropped, v.KeptFrom),
			"history", segment, "expired", strings.Join(v.Expired, " "), "history from", historyFrom(v.HistoryFrom))
	}
}

// historyFrom says where the history kept starts.
func historyFrom(seq int64) string {
	if seq == 0 {
		return "nothing kept"
	}
	return "seq " + strconv.FormatInt(seq, 10)
}
