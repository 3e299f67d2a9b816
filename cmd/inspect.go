package cmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/state"
	"leasewal/store"
	"leasewal/view"
)

type inspectOptions struct {
	state    string
	queue    string
	until    int64
	workers  bool
	timeline bool
}

func (a *app) newInspectCmd() *cobra.Command {
	o := &inspectOptions{}
	c := &cobra.Command{
		Use:   "inspect [TASK...]",
		Short: "Show tasks as they stand now, or after record --until",
		Long: `Show each task's state, attempt, current lease, worker, expiry, deadline and
not_before as they stand at --now (lapses of time applied), or as they stood
right after record --until SEQ, at that record's time. Naming one task also
lists its records, and --timeline draws its life on a time axis (with -o json,
the same data as for one task). --workers shows the soft worker registry.
Writes nothing. An unknown task: exit 4.`,
		Example: `  leasewal inspect
  leasewal inspect T1 -o json
  leasewal inspect --state WAITING
  leasewal inspect --until 3
  leasewal inspect T1 --timeline
  leasewal inspect --workers`,
		RunE: func(c *cobra.Command, args []string) error {
			req := api.InspectRequest{Tasks: args, State: o.state, Queue: o.queue, Workers: o.workers, Timeline: o.timeline}
			if c.Flags().Changed("until") {
				req.Until = &o.until
			}
			if a.env.Server != "" {
				return a.env.sendTyped("inspect", req)
			}
			return runInspectRequest(a.env, req)
		},
		ValidArgsFunction: a.completion(completeTasks),
	}
	c.Flags().StringVar(&o.state, "state", "", "only tasks in this state (WAITING, LEASED, COMPLETED, FAILED, DEAD)")
	c.Flags().StringVar(&o.queue, "queue", "", "only tasks of this queue")
	c.Flags().Int64Var(&o.until, "until", 0, "show the state right after record SEQ, at its time")
	c.Flags().BoolVar(&o.workers, "workers", false, "show the soft worker registry (advisory) and each worker's current leases")
	c.Flags().BoolVar(&o.timeline, "timeline", false, "draw one task's life on a time axis: attempts, extensions, expiries, late completions, the deadline")
	return c
}

// runInspectRequest shows what r asks for: the command's, or a server's
// client's.
func runInspectRequest(e env, r api.InspectRequest) error {
	only := taskFilter{queue: r.Queue}
	if r.State != "" {
		st, ok := state.ParseTaskState(r.State)
		if !ok {
			return usageErr("--state %q is not a state: use WAITING, LEASED, COMPLETED, FAILED or DEAD", r.State)
		}
		only.state = st
	}
	var until int64
	if r.Until != nil {
		until = *r.Until
	}
	ids := slices.Compact(slices.Clone(r.Tasks)) // a task named twice in a row is shown once
	if seen := map[string]bool{}; len(ids) > 1 {
		ids = slices.DeleteFunc(ids, func(id string) bool { dup := seen[id]; seen[id] = true; return dup })
	}
	if r.Timeline && len(ids) != 1 {
		return usageErr("--timeline draws one task: name it, e.g. 'leasewal inspect T1 --timeline'")
	}
	if r.Until != nil && until < 1 {
		return usageErr("--until %d: give the seq of a record (1 or more)", until)
	}
	opts := e.storeOptions()
	var taskRecords []state.Record // the records about the one task named
	if len(ids) == 1 || r.Until != nil {
		opts.FullReplay = true
		opts.OnRecord = func(rec state.Record, _ *state.State) error {
			if len(ids) == 1 && rec.TaskID == ids[0] {
				taskRecords = append(taskRecords, rec)
			}
			if r.Until != nil && rec.Seq == until {
				return store.ErrStop // the state right after record --until
			}
			return nil
		}
	}
	h := store.Open(opts)
	defer h.Close()
	return e.operateOn(h, false, func(tx *store.Tx) (answer, error) {
		st, at := tx.State, tx.Now
		if r.Until != nil {
			if st.LastSeq() < until {
				return answer{}, &state.Error{Kind: state.NotFound, Msg: fmt.Sprintf("--until %d: the WAL has records 1 to %d", until, st.LastSeq())}
			}
			at = st.LastAt()
		}
		if tx.Missing {
			e.sayWALMissing()
		}
		if r.Workers {
			return workersAnswer(st, at, h.Workers()), nil
		}
		if len(ids) == 0 {
			return listingAnswer(st, at, only)
		}
		v, err := buildInspect(st, at, ids, only)
		if err != nil {
			return answer{}, err
		}
		if len(ids) == 1 && len(v.Tasks) == 1 {
			v.Tasks[0].Records = make([]api.Record, 0, len(taskRecords))
			for _, r := range taskRecords {
				v.Tasks[0].Records = append(v.Tasks[0].Records, view.Record(r))
			}
		}
		var timelineTask *state.Task
		if r.Timeline {
			if timelineTask, err = st.Task(ids[0]); err != nil {
				return answer{}, err
			}
		}
		return answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
			if timelineTask != nil {
				width := p.width
				if width == 0 {
					width = max(e.terminalWidth(), 200) // wide: room for every note
				}
				renderTimeline(w, p, width, timelineTask, cancellations(taskRecords), at)
				return nil
			}
			return renderInspect(w, p, v)
		}}, nil
	})
}

// taskFilter is what --state and --queue keep of a listing.
type taskFilter struct {
	state state.TaskState
	queue string
}

// shows reports whether a task as viewed is listed.
func (f taskFilter) shows(tv api.Task) bool {
	return (f.state == "" || tv.State == string(f.state)) && (f.queue == "" || tv.Queue == f.queue)
}

// inspectTasks selects the tasks inspect shows: the named ones, or all of
// them (only the unfinished ones for --state WAITING or LEASED: a finished
// task never waits or holds a lease again, so the archive is not read).
func inspectTasks(st *state.State, ids []string, only taskFilter) ([]*state.Task, error) {
	switch {
	case len(ids) == 0 && (only.state == state.Waiting || only.state == state.Leased):
		return st.Live(), nil
	case len(ids) == 0:
		return st.Tasks()
	}
	tasks := make([]*state.Task, 0, len(ids))
	for _, id := range ids {
		t, err := st.Task(id)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// countStates counts the tasks listed, by their state at at.
func countStates(tasks []*state.Task, at int64, only taskFilter) map[string]int {
	counts := map[string]int{}
	for _, t := range tasks {
		if c := t.At(at); only.shows(api.Task{State: string(c.State), Queue: c.Queue}) {
			counts[string(c.State)]++
		}
	}
	return counts
}

func buildInspect(st *state.State, at int64, ids []string, only taskFilter) (api.Inspect, error) {
	v := api.Inspect{Result: state.ResultOK, At: formatTime(at), Counts: map[string]int{}, Tasks: []api.Task{}}
	tasks, err := inspectTasks(st, ids, only)
	if err != nil {
		return v, err
	}
	eachShown(tasks, at, only, func(tv api.Task) error {
		v.Counts[tv.State]++
		v.Tasks = append(v.Tasks, tv)
		return nil
	})
	return v, nil
}

// eachShown calls fn with the view of each task listed under only, in
// order, until fn fails.
func eachShown(tasks []*state.Task, at int64, only taskFilter, fn func(api.Task) error) error {
	for _, t := range tasks {
		if tv := view.Task(t, at); only.shows(tv) {
			if err := fn(tv); err != nil {
				return err
			}
		}
	}
	return nil
}

// listingHead is the view of inspect without task ids, but for its tasks
// (counts and summary), and the tasks to draw it from one at a time.
func listingHead(st *state.State, at int64, only taskFilter) (api.Inspect, []*state.Task, error) {
	tasks, err := inspectTasks(st, nil, only)
	if err != nil {
		return api.Inspect{}, nil, err
	}
	v := api.Inspect{Result: state.ResultOK, At: formatTime(at), Counts: countStates(tasks, at, only), Summary: summarize(st, at), Tasks: []api.Task{}}
	return v, tasks, nil
}

// listingAnswer is inspect without task ids: every task, drawn or encoded
// one at a time from the tasks selected under the lock, so that a listing of
// a long history never holds every task's view, nor all of its output, in
// memory.
func listingAnswer(st *state.State, at int64, only taskFilter) (answer, error) {
	v, tasks, err := listingHead(st, at, only)
	if err != nil {
		return answer{}, err
	}
	l := listing{head: v, tasks: tasks, at: at, only: only}
	return answer{doc: l, outcome: v.Result, table: l.render}, nil
}

// listing is the listing of every task, as api.Inspect would hold it.
type listing struct {
	head  api.Inspect
	tasks []*state.Task
	at    int64
	only  taskFilter
}

// streamJSON writes exactly what writeJSON writes for the view with every
// task in it, one task at a time.
func (l listing) streamJSON(w io.Writer) error {
	var head bytes.Buffer
	writeJSON(&head, l.head)
	prefix, ok := bytes.CutSuffix(head.Bytes(), []byte("[]}\n"))
	if !ok {
		return fmt.Errorf("internal error: the listing does not end with its tasks")
	}
	out := bufio.NewWriter(w)
	out.Write(prefix)
	out.WriteByte('[')
	var one bytes.Buffer
	enc := json.NewEncoder(&one)
	enc.SetEscapeHTML(false) // as writeJSON
	first := true
	err := eachShown(l.tasks, l.at, l.only, func(tv api.Task) error {
		if !first {
			out.WriteByte(',')
		}
		first = false
		one.Reset()
		if err := enc.Encode(tv); err != nil {
			return err
		}
		_, err := out.Write(bytes.TrimSuffix(one.Bytes(), []byte("\n")))
		return err
	})
	if err != nil {
		return err
	}
	out.WriteString("]}\n")
	return out.Flush()
}

func summarize(st *state.State, at int64) *api.InspectSummary {
	sum := &api.InspectSummary{Queues: map[string]map[string]int{}}
	var next int64
	for _, t := range st.Live() { // only unfinished tasks wait or hold leases
		c := t.At(at)
		if !c.State.Terminal() {
			if sum.Queues[c.Queue] == nil {
				sum.Queues[c.Queue] = map[string]int{}
			}
			sum.Queues[c.Queue][string(c.State)]++
		}
		switch {
		case c.State == state.Leased:
			sum.CurrentLeases++
			if sum.NextExpiry == nil || c.Lease.Expiry < next {
				next = c.Lease.Expiry
				sum.NextExpiry = &api.HeldLease{TaskID: c.ID, LeaseID: c.Lease.ID, Expiry: formatTime(next)}
			}
		case c.State == state.Waiting && sum.OldestWaiting == nil: // tasks are in creation order
			sum.OldestWaiting = &api.OldestWaiting{TaskID: c.ID, CreatedAt: formatTime(c.CreatedAt), AgeMs: at - c.CreatedAt}
		}
	}
	return sum
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
		return renderLog(w, p, v.Tasks[0].Records, v.Tasks[0].Records[0].Record.At)
	}
	return nil
}

// render draws the listing of every task as renderInspect draws its view,
// building each task's view only for its row.
func (l listing) render(w io.Writer, p palette) error {
	listed := 0
	for _, n := range l.head.Counts {
		listed += n
	}
	renderInspectHead(w, p, l.head, listed)
	if listed == 0 && !p.tsv { // TSV has its header row even with no rows
		return nil
	}
	t := newInspectTable(w, p)
	eachShown(l.tasks, l.at, l.only, func(tv api.Task) error {
		appendTaskRow(t, p, tv, l.at)
		return nil
	})
	return t.Render()
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
		p.when(tv.Deadline, at), escape(tv.Reason))
}

const registryNote = "the registry is advisory soft state: heartbeats never grant or keep a lease, only the WAL does"

// workersAnswer shows every worker that heartbeated or holds a lease at at.
func workersAnswer(st *state.State, at int64, reg map[string]int64) answer {
	leases := currentLeases(st, at)
	names := map[string]bool{}
	for w := range reg {
		names[w] = true
	}
	for w := range leases {
		names[w] = true
	}
	v := api.Workers{Result: state.ResultOK, At: formatTime(at), Note: registryNote, Workers: []api.Worker{}}
	for _, w := range slices.Sorted(maps.Keys(names)) {
		wv := api.Worker{WorkerID: w, Leases: leases[w]}
		if wv.Leases == nil {
			wv.Leases = []api.HeldLease{}
		}
		if last, ok := reg[w]; ok {
			ago := at - last
			wv.LastHeartbeat, wv.HeartbeatAge = view.Null(formatTime(last)), &ago
		}
		v.Workers = append(v.Workers, wv)
	}
	return answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
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
	}}
}
