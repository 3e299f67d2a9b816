package cmd

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/state"
)

type logOptions struct {
	taskID   string
	from     int64
	to       int64
	types    []string
	worker   string
	lease    string
	domain   string
	queue    string
	since    string
	limit    int
	until    string
	absolute bool
	follow   bool
}

func (a *app) newLogCmd() *cobra.Command {
	o := &logOptions{}
	c := &cobra.Command{
		Use:   "log",
		Short: "Show the history: every change, oldest first",
		Long: `Print the records, one per table row, or one JSON object per line with -o json
(times as RFC 3339). The table shows each record's time as an offset from the
first record (+30.000s); --absolute shows timestamps. Filters combine: --task,
--type, --worker (records of leases granted to that worker), --lease, --domain,
--queue (records about tasks of that queue),
a --from/--to range of seq, and a --since/--until range of time (RFC 3339, unix
ms, a duration back from now as 1h or -1h, or +DURATION after the first
record). Writes nothing.`,
		Example: `  leasewal log --task T1
  leasewal log --type LeaseGranted,TaskCancelled --worker W1
  leasewal log --since 1h --follow
  leasewal log --since +30s --until +1m --absolute
  leasewal log --from 10 --to 20 -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return runLog(a.env, *o)
		},
	}
	f := c.Flags()
	f.StringVar(&o.taskID, "task", "", "only records about this task")
	f.Int64Var(&o.from, "from", 1, "first seq to print")
	f.Int64Var(&o.to, "to", 0, "last seq to print (default: the last record)")
	f.StringSliceVar(&o.types, "type", nil, "only records of these types (comma-separated)")
	f.StringVar(&o.worker, "worker", "", "only records of leases granted to this worker")
	f.StringVar(&o.lease, "lease", "", "only records naming this lease")
	f.StringVar(&o.domain, "domain", "", "only work-lease records of this domain")
	f.StringVar(&o.queue, "queue", "", "only records about tasks of this queue")
	f.StringVar(&o.since, "since", "", "only records at or after this time")
	f.StringVar(&o.until, "until", "", "only records at or before this time")
	f.IntVar(&o.limit, "limit", 0, "print at most this many records, the first that match (0: every one)")
	f.BoolVar(&o.absolute, "absolute", false, "show timestamps instead of offsets from the first record")
	f.BoolVar(&o.follow, "follow", false, "after the records so far, print new ones as they are appended, until interrupted")
	return c
}

// request is the log the flags ask for (following is the client's loop).
func (o logOptions) request() api.LogRequest {
	return api.LogRequest{Task: o.taskID, From: o.from, To: o.to, Type: api.List(strings.Join(o.types, ",")), Worker: o.worker,
		Lease: o.lease, Domain: o.domain, Queue: o.queue, Since: o.since, Until: o.until, Limit: o.limit, Absolute: o.absolute}
}

// runLog prints the records as the service hands them on, so that it
// holds the rows to draw, never every record; JSON lines wait in a spool,
// so that a damaged record prints only the error, as for any command. With
// --follow it then prints each new record as it comes, until SIGINT or
// SIGTERM, on the WAL or through a server alike.
func runLog(e env, o logOptions) error {
	e.noteMissingWAL()
	req := o.request()
	if o.follow {
		if err := e.needsWallClock("log --follow"); err != nil {
			return err
		}
		if o.limit != 0 {
			return usageErr("--limit stops the log and --follow never does: give one of them")
		}
	}
	s, err := e.session()
	if err != nil {
		return err
	}
	held := &heldLog{}
	lines := &spool{}
	defer lines.discard()
	defer held.rows.discard()
	end, err := s.svc.Log(e.context(), req, func(r api.Record) error {
		if e.Output == "json" {
			writeJSON(lines, r)
		} else {
			held.add(r)
		}
		return nil
	})
	if err != nil {
		return e.remoteError(err)
	}
	if end.Compacted != "" {
		fmt.Fprintf(e.stderr, "leasewal: note: %s\n", end.Compacted)
	}
	first, err := e.firstAt(s, end)
	if err != nil {
		return err
	}
	base := first
	if o.taskID != "" && held.n > 0 {
		base = held.firstAt // a task's story is told from its own first record, as inspect T does
	}
	if o.absolute {
		base = -1
	}
	err = e.print(answer{doc: lines, outcome: api.ResultOK, table: func(w io.Writer, p palette) error {
		if o.follow && !p.tsv { // a box cannot grow: the whole stream is aligned lines
			stream := newLogStream(p, o.absolute)
			stream.header(w)
			return held.each(base, func(cells []string) error { stream.write(w, cells); return nil })
		}
		if held.n == 0 && !p.tsv {
			_, err := fmt.Fprintln(w, "no records match")
			return err
		}
		return renderLogRows(w, p, base < 0, func(row func([]string) error) error { return held.each(base, row) })
	}}, written{})
	if err != nil || !o.follow {
		return err
	}
	for _, t := range []*string{&req.Since, &req.Until} {
		if rest, after := strings.CutPrefix(*t, "+"); after && first != 0 {
			d, _ := api.ParseSpan(rest)                   // read already, by the first call
			*t = api.FormatTime(first + d.Milliseconds()) // so that each turn need not read the first record again
		}
	}
	return e.follow(s, req, base, end.LastSeq)
}

// firstAt is the time of the WAL's first record, which a table's offsets
// count from: as the log call read it, or asked for.
func (e env) firstAt(s *session, end api.LogEnd) (int64, error) {
	if end.FirstAt != "" || end.LastSeq == 0 {
		return api.ParseTime(end.FirstAt), nil
	}
	var first int64
	_, err := s.svc.Log(e.context(), api.LogRequest{From: 1, To: 1}, func(r api.Record) error { first = r.AtMs(); return nil })
	return first, e.remoteError(err)
}

// follow prints the records appended after seq last as they come, one line
// each in the columns of the records so far (base as theirs), until SIGINT
// or SIGTERM: it looks again whenever the service says the WAL may have
// changed (inotify on this machine, a poll of a server).
func (e env) follow(s *session, req api.LogRequest, base, last int64) error {
	_, interrupted, stop := e.catchInterrupts()
	defer stop()
	ctx, cancel := context.WithCancel(interrupted)
	defer cancel()
	gone := readerGone(ctx, e.stdout)
	changes, err := s.svc.Changes(ctx)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(e.stdout)
	p := e.palette()
	stream := newLogStream(p, req.Absolute)
	for { // a turn first: what came before the changes were watched is not missed
		turn := req
		turn.From = max(last+1, req.From)
		end, err := s.svc.Log(ctx, turn, func(r api.Record) error {
			if base == 0 { // the log was empty: offsets count from its first record
				base = r.AtMs()
			}
			switch e.Output {
			case "json":
				writeJSON(out, r)
			case "tsv":
				p := p
				p.noHeaders = true // the header came with the records so far
				_ = renderLog(out, p, []api.Record{r}, base)
			default:
				stream.line(out, r, base)
			}
			return nil
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return e.remoteError(err)
		}
		last = max(last, end.LastSeq)
		if err := out.Flush(); err != nil {
			if errors.Is(err, syscall.EPIPE) {
				return nil // the reader went away: 'leasewal log --follow | head'
			}
			return fmt.Errorf("writing the records to stdout: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-gone:
			return nil // the reader went away with nothing more to print
		case <-changes:
		}
	}
}

// logStream draws log --follow's records as lines of fixed columns fitted
// to the terminal, its header once: the records so far and the ones that
// follow line up, and an empty cell keeps its column.
type logStream struct {
	p      palette
	widths []int // SEQ, AT, TYPE, TASK, LEASE, WORKER, DETAILS, ACTOR
}

func newLogStream(p palette, absolute bool) logStream {
	at := 10
	if absolute {
		at = 24
	}
	widths := []int{5, at, 14, 6, 6, 8, 0, 16}
	details := 40 // -o wide: no terminal to fit
	if p.width > 0 {
		used := 0
		for _, w := range widths {
			used += w + 2
		}
		details = max(12, p.width-used)
	}
	widths[6] = details
	return logStream{p: p, widths: widths}
}

func (s logStream) header(w io.Writer) {
	if !s.p.noHeaders {
		s.write(w, logColumns)
	}
}

// line draws one record; times are offsets from base, or timestamps when
// base is negative.
func (s logStream) line(w io.Writer, e api.Record, base int64) { s.write(w, logCells(e, base)) }

// logCells are a record's cells in log's columns; its time is an offset
// from base, or a timestamp when base is negative.
func logCells(e api.Record, base int64) []string {
	at := e.At
	if base >= 0 {
		at = offset(e.AtMs() - base)
	}
	return []string{fmt.Sprint(e.Seq), at, string(e.Type), escape(e.TaskID), escape(e.LeaseID), escape(e.WorkerID), escape(details(e)), escape(e.Actor)}
}

// heldLog holds log's rows until every record is read (an answer stands
// only then, see spool): a line of JSON per record, its cells with its time
// kept as both milliseconds and timestamp until the base its offset counts
// from is known. It holds a MiB in memory, the rest in a temporary file.
type heldLog struct {
	rows    spool
	n       int
	firstAt int64
}

func (l *heldLog) add(e api.Record) {
	if l.n == 0 {
		l.firstAt = e.AtMs()
	}
	l.n++
	writeJSON(&l.rows, append([]string{strconv.FormatInt(e.AtMs(), 10)}, logCells(e, -1)...))
}

// each hands fn every record's cells, as logCells gives them for base.
func (l *heldLog) each(base int64, fn func([]string) error) error {
	return l.rows.eachRow(func(held []string) error {
		if len(held) != len(logColumns)+1 {
			return fmt.Errorf("reading the held log rows back: %d cells, want %d", len(held), len(logColumns)+1)
		}
		cells := held[1:]
		if base >= 0 {
			ms, _ := strconv.ParseInt(held[0], 10, 64)
			cells[1] = offset(ms - base)
		}
		return fn(cells)
	})
}

func (s logStream) write(w io.Writer, cells []string) {
	var b strings.Builder
	for i, c := range cells {
		c = cutTo(c, s.widths[i])
		b.WriteString(c)
		if i < len(cells)-1 {
			b.WriteString(strings.Repeat(" ", s.widths[i]-displayWidth(c)+2))
		}
	}
	fmt.Fprintln(w, s.p.line(strings.TrimRight(b.String(), " ")))
}

// logColumns are the columns of log's table, TSV and follow lines.
var logColumns = []string{"SEQ", "AT", "TYPE", "TASK", "LEASE", "WORKER", "DETAILS", "ACTOR"}

// renderLog draws records as a table. Times are offsets from base, or
// timestamps when base is negative.
func renderLog(w io.Writer, p palette, entries []api.Record, base int64) error {
	return renderLogRows(w, p, base < 0, func(row func([]string) error) error {
		for _, e := range entries {
			if err := row(logCells(e, base)); err != nil {
				return err
			}
		}
		return nil
	})
}

// renderLogRows draws the rows each hands on as log's table; absolute says
// their times are timestamps.
func renderLogRows(w io.Writer, p palette, absolute bool, each func(func([]string) error) error) error {
	t := newTable(w, p, logColumns...)
	if absolute { // timestamps were asked for: they are kept whole as long as anything else can give way
		t.keep = map[string]bool{"AT": true}
	}
	if err := each(func(cells []string) error { return t.Append(cells...) }); err != nil {
		return err
	}
	return t.Render()
}

// details is the rest of a record's fields, compactly.
func details(e api.Record) string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if e.Type == string(state.TaskCreated) {
		add("payload", fmt.Sprintf("%q", e.Payload))
		add("window", e.Window)
		if p := e.RetryPolicy; p != nil {
			add("max_attempts", fmt.Sprint(p.MaxAttempts))
			add("backoff", p.Backoff)
			add("backoff_max", p.BackoffMax)
		}
		add("queue", e.Queue)
		if e.Priority != nil && *e.Priority != 0 {
			add("priority", fmt.Sprint(*e.Priority))
		}
		if e.NotBefore != "" && e.NotBefore != e.At {
			add("not_before", e.NotBefore)
		}
		add("requeued_from", e.RequeuedFrom)
	}
	if e.Type == string(state.LeaseReleased) && e.NotBefore != e.At {
		add("not_before", e.NotBefore)
	}
	if e.Type == string(state.ScheduleAdded) {
		add("payload", fmt.Sprintf("%q", e.Payload))
		if e.Every != "" {
			add("every", e.Every)
		}
		add("cron", e.Cron)
		add("tz", e.TZ)
		add("catch_up", e.CatchUp)
		add("queue", e.Queue)
	}
	add("schedule", e.Schedule)
	add("slot", e.Slot)
	if e.Type == string(state.QueuePaused) || e.Type == string(state.QueueResumed) || e.Type == string(state.QueueLimited) || e.Type == string(state.QueueRated) {
		add("queue", e.Queue)
	}
	if e.Type == string(state.QueueRated) {
		add("rate", cmp.Or(e.Rate, "none"))
		if e.Burst != 0 {
			add("burst", strconv.Itoa(e.Burst))
		}
	}
	if e.Type == string(state.QueueLimited) {
		limit := "none"
		if e.Limit != nil {
			limit = strconv.Itoa(*e.Limit)
		}
		add("limit", limit)
	}
	add("until", e.Until)
	add("request", e.RequestID)
	if e.Attempt > 0 {
		add("attempt", fmt.Sprint(e.Attempt))
	}
	add("expiry", e.Expiry)
	add("reason", e.Reason)
	if e.Result != "" {
		add("result", fmt.Sprintf("%q", e.Result))
	}
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
