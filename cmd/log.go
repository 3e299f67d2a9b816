package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/state"
	"leasewal/store"
	"leasewal/view"
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
	until    string
	absolute bool
	follow   bool
}

func (a *app) newLogCmd() *cobra.Command {
	o := &logOptions{}
	c := &cobra.Command{
		Use:   "log",
		Short: "Print the WAL's records",
		Long: `Print the records, one per table row, or one JSON object per line with -o json
(times as RFC 3339). The table shows each record's time as an offset from the
first record (+30.000s); --absolute shows timestamps. Filters combine: --task,
--type, --worker (records of leases granted to that worker), --lease, --domain,
--queue (records about tasks of that queue),
a --from/--to range of seq, and a --since/--until range of time (RFC 3339, unix
ms, or +DURATION after the first record). Writes nothing.`,
		Example: `  leasewal log --task T1
  leasewal log --type LeaseGranted,TaskCancelled --worker W1
  leasewal log --since +30s --until +1m --absolute
  leasewal log --from 10 --to 20 -o json`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if a.env.Server != "" {
				if o.follow {
					return a.env.followRemote(o.request())
				}
				return a.env.sendTyped("log", o.request())
			}
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
	f.BoolVar(&o.absolute, "absolute", false, "show timestamps instead of offsets from the first record")
	f.BoolVar(&o.follow, "follow", false, "after the records so far, print new ones as they are appended, until interrupted")
	return c
}

// request is the log the flags ask for (following is the client's loop).
func (o logOptions) request() api.LogRequest {
	return api.LogRequest{Task: o.taskID, From: o.from, To: o.to, Type: api.List(strings.Join(o.types, ",")), Worker: o.worker,
		Lease: o.lease, Domain: o.domain, Queue: o.queue, Since: o.since, Until: o.until, Absolute: o.absolute}
}

// runLogRequest prints the records r asks for: a server's client's.
func runLogRequest(e env, r api.LogRequest) error {
	o := logOptions{taskID: r.Task, from: max(r.From, 1), to: r.To, worker: r.Worker, lease: r.Lease, domain: r.Domain,
		queue: r.Queue, since: r.Since, until: r.Until, absolute: r.Absolute}
	if r.From < 0 {
		o.from = r.From // refused as the flag is
	}
	if r.Type != "" {
		o.types = strings.Split(string(r.Type), ",")
	}
	return runLog(e, o)
}

// logFilter decides which records log prints.
type logFilter struct {
	o            *logOptions
	types        map[state.RecordType]bool
	since, until int64
	st           *state.State // as of the record being filtered
}

// newLogFilter reads the filter flags; --since and --until count from the
// time of the first record (first).
func newLogFilter(o *logOptions, first int64) (*logFilter, error) {
	if o.from < 1 || (o.to != 0 && o.to < o.from) {
		return nil, usageErr("--from must be at least 1 and --to (if given) at least --from")
	}
	f := &logFilter{o: o, until: -1}
	for _, name := range o.types {
		typ, ok := state.ParseRecordType(name)
		if !ok {
			return nil, usageErr("--type %q is not a record type: use one of %s", name, strings.Join(state.RecordTypeNames(), ", "))
		}
		if f.types == nil {
			f.types = map[state.RecordType]bool{}
		}
		f.types[typ] = true
	}
	var err error
	if o.since != "" {
		if f.since, err = logTime("since", o.since, first); err != nil {
			return nil, err
		}
	}
	if o.until != "" {
		if f.until, err = logTime("until", o.until, first); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// logTime reads a --since/--until time: RFC 3339, unix ms, or +DURATION after first.
func logTime(flag, text string, first int64) (int64, error) {
	if n, err := strconv.ParseInt(text, 10, 64); err == nil && n >= 0 && n < 1e11 {
		seq := map[string]string{"since": "from", "until": "to"}[flag]
		return 0, usageErr("--%s %q is a time, and this looks like a record's seq: did you mean --%s %s?", flag, text, seq, text)
	}
	ms, err := api.ParseTimeFlag("--"+flag, text, first, first)
	if err != nil {
		return 0, usageErr("--%s %q is not a time: use RFC 3339, unix milliseconds, or +DURATION after the first record", flag, text)
	}
	return ms, nil
}

func (f *logFilter) keep(r state.Record) bool {
	o := f.o
	switch {
	case r.Seq < o.from || (o.to != 0 && r.Seq > o.to):
		return false
	case r.At < f.since || (f.until >= 0 && r.At > f.until):
		return false
	case f.types != nil && !f.types[r.Type]:
		return false
	case o.taskID != "" && r.TaskID != o.taskID:
		return false
	case o.lease != "" && r.LeaseID != o.lease:
		return false
	case o.domain != "" && r.Domain != o.domain:
		return false
	case o.worker != "" && f.workerOf(r) != o.worker:
		return false
	case o.queue != "" && f.queueOf(r) != o.queue:
		return false
	}
	return true
}

// queueOf is the queue of the task a record is about ("" for none).
func (f *logFilter) queueOf(r state.Record) string {
	if r.TaskID == "" {
		return ""
	}
	if t, err := f.st.Task(r.TaskID); err == nil {
		return t.Queue
	}
	return ""
}

// workerOf is the worker a record concerns: the one it names, or the one its
// lease was granted to.
func (f *logFilter) workerOf(r state.Record) string {
	if r.WorkerID != "" || r.LeaseID == "" {
		return r.WorkerID
	}
	if t, err := f.st.Task(r.TaskID); err == nil {
		if a := t.AttemptOf(r.LeaseID); a != nil {
			return a.Worker
		}
	}
	return ""
}

// runLog filters the records as the replay reads them, so that it holds the
// state and the rows to draw, never every record; JSON lines wait in a spool,
// so that a damaged record prints only the error, as for any command.
func runLog(e env, o logOptions) error {
	f, err := newLogFilter(&o, 0) // the flags' syntax, before reading anything
	if err != nil {
		return err
	}
	first, taskFirst := int64(0), int64(-1)
	var entries []api.Record
	lines := &spool{}
	defer lines.discard()
	opts := e.storeOptions()
	opts.FullReplay = true
	opts.OnRecord = func(r state.Record, st *state.State) error {
		if r.Seq == 1 {
			first = r.At
			if f, err = newLogFilter(&o, first); err != nil {
				return err
			}
		}
		if f.st = st; !f.keep(r) {
			return nil
		}
		if taskFirst < 0 && o.taskID != "" {
			taskFirst = r.At // a task's story is told from its own first record, as inspect T does
		}
		if e.Output == "json" {
			writeJSON(lines, view.Record(r))
		} else {
			entries = append(entries, view.Record(r))
		}
		if o.to != 0 && r.Seq >= o.to {
			return store.ErrStop // nothing after --to is printed
		}
		return nil
	}
	var last int64 // the last record of the first pass: following prints what comes after
	h := store.Open(opts)
	defer h.Close()
	err = e.operateOn(h, false, func(tx *store.Tx) (answer, error) {
		last = tx.State.LastSeq()
		if o.taskID != "" {
			if _, err := tx.State.Task(o.taskID); err != nil {
				return answer{}, err
			}
		}
		base := first
		if taskFirst >= 0 {
			base = taskFirst
		}
		if o.absolute {
			base = -1
		}
		return answer{doc: lines, outcome: state.ResultOK, table: func(w io.Writer, p palette) error {
			if o.follow && !p.tsv { // a box cannot grow: the whole stream is aligned lines
				stream := newLogStream(p, o.absolute)
				stream.header(w)
				for _, entry := range entries {
					stream.line(w, entry, base)
				}
				return nil
			}
			if len(entries) == 0 && !p.tsv {
				_, err := fmt.Fprintln(w, "no records match")
				return err
			}
			return renderLog(w, p, entries, base)
		}}, nil
	})
	if err != nil || !o.follow {
		return err
	}
	if err := e.needsWallClock("log --follow"); err != nil {
		return err
	}
	if taskFirst >= 0 {
		first = taskFirst // new records are timed as the ones so far were
	}
	return followLog(e, &o, f, first, last)
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
func (s logStream) line(w io.Writer, e api.Record, base int64) {
	at := e.At
	if base >= 0 {
		at = offset(e.Record.At - base)
	}
	s.write(w, []string{fmt.Sprint(e.Seq), at, string(e.Type), escape(e.TaskID), escape(e.LeaseID), escape(e.WorkerID), escape(details(e)), escape(e.Actor)})
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

// followLog prints the records appended after seq last as they come, one
// line each in the columns of the records so far, until SIGINT or SIGTERM. It keeps one
// handle: each turn reads only what was appended since the last.
func followLog(e env, o *logOptions, f *logFilter, first, last int64) error {
	out := bufio.NewWriter(e.stdout)
	stream := newLogStream(e.palette(), o.absolute)
	opts := e.storeOptions()
	opts.OnRecord = func(r state.Record, st *state.State) error {
		if r.Seq <= last {
			return nil // printed already, or before a checkpoint's position
		}
		last = r.Seq
		if f.st = st; !f.keep(r) {
			return nil
		}
		entry := view.Record(r)
		base := first
		if o.absolute {
			base = -1
		}
		switch e.Output {
		case "json":
			writeJSON(out, entry)
		case "tsv":
			p := e.palette()
			p.noHeaders = true // the header came with the records so far
			_ = renderLog(out, p, []api.Record{entry}, base)
		default:
			stream.line(out, entry, base)
		}
		return nil
	}
	h := store.Open(opts)
	defer h.Close()
	watcher, err := h.Watch()
	if err != nil {
		return fmt.Errorf("watching %s for changes: %w", e.WAL, err)
	}
	defer watcher.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	for {
		if err := h.Read(func(*store.Tx) error { return nil }); err != nil {
			return err
		}
		if err := out.Flush(); err != nil {
			if errors.Is(err, syscall.EPIPE) {
				return nil // the reader went away: 'leasewal log --follow | head'
			}
			return fmt.Errorf("writing the records to stdout: %w", err)
		}
		select {
		case <-sigs:
			return nil
		default:
		}
		if _, err := watcher.Wait(time.Now().Add(250 * time.Millisecond)); err != nil {
			return err
		}
	}
}

// logColumns are the columns of log's table, TSV and follow lines.
var logColumns = []string{"SEQ", "AT", "TYPE", "TASK", "LEASE", "WORKER", "DETAILS", "ACTOR"}

// renderLog draws records as a table. Times are offsets from base, or
// timestamps when base is negative.
func renderLog(w io.Writer, p palette, entries []api.Record, base int64) error {
	t := newTable(w, p, logColumns...)
	if base < 0 { // timestamps were asked for: they are kept whole as long as anything else can give way
		t.keep = map[string]bool{"AT": true}
	}
	for _, e := range entries {
		at := e.At
		if base >= 0 {
			at = offset(e.Record.At - base)
		}
		_ = t.Append(fmt.Sprint(e.Seq), at, string(e.Type), escape(e.TaskID), escape(e.LeaseID), escape(e.WorkerID), escape(details(e)), escape(e.Actor))
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
	if e.Type == state.TaskCreated {
		add("payload", fmt.Sprintf("%q", e.Payload))
		add("window", e.Window.String())
		if p := e.RetryPolicy; p != nil {
			add("max_attempts", fmt.Sprint(p.MaxAttempts))
			add("backoff", p.Backoff.String())
			add("backoff_max", p.BackoffMax.String())
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
