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

	"github.com/olekukonko/tablewriter"
	"github.com/spf13/cobra"

	"leasewal/state"
)

type inspectOptions struct {
	state    string
	until    int64
	workers  bool
	timeline bool
}

func newInspectCmd(g *globals) *cobra.Command {
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
		RunE:              func(_ *cobra.Command, args []string) error { return runInspect(g, o, args) },
		ValidArgsFunction: g.completion(completeTasks),
	}
	c.Flags().StringVar(&o.state, "state", "", "only tasks in this state (WAITING, LEASED, COMPLETED, FAILED, DEAD)")
	c.Flags().Int64Var(&o.until, "until", 0, "show the state right after record SEQ, at its time")
	c.Flags().BoolVar(&o.workers, "workers", false, "show the soft worker registry (advisory) and each worker's current leases")
	c.Flags().BoolVar(&o.timeline, "timeline", false, "draw one task's life on a time axis: attempts, extensions, expiries, late completions, the deadline")
	return c
}

// taskView is one task in inspect's JSON; verify --expect reads the same shape.
type taskView struct {
	TaskID      string     `json:"task_id"`
	State       string     `json:"state"`
	Attempt     int        `json:"attempt"`
	MaxAttempts int        `json:"max_attempts"`
	LeaseID     *string    `json:"lease_id"`
	WorkerID    *string    `json:"worker_id"`
	Expiry      *string    `json:"expiry"`
	Deadline    string     `json:"deadline"`
	NotBefore   *string    `json:"not_before"`
	CreatedAt   string     `json:"created_at"`
	Payload     string     `json:"payload"`
	Reason      string     `json:"reason,omitempty"`
	Records     []logEntry `json:"records,omitempty"`
}

type inspectView struct {
	Result  state.Outcome   `json:"result"`
	At      string          `json:"at"`
	Counts  map[string]int  `json:"counts"`
	Summary *inspectSummary `json:"summary,omitempty"`
	Tasks   []taskView      `json:"tasks"`
}

// inspectSummary is what a reader wants at a glance: how many leases are
// out, what has waited longest, and what expires next.
type inspectSummary struct {
	CurrentLeases int            `json:"current_leases"`
	OldestWaiting *oldestWaiting `json:"oldest_waiting"`
	NextExpiry    *heldLease     `json:"next_expiry"`
}

type oldestWaiting struct {
	TaskID    string `json:"task_id"`
	CreatedAt string `json:"created_at"`
	AgeMs     int64  `json:"age_ms"`
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// viewTask renders a task as it stands at time at.
func viewTask(t *state.Task, at int64) taskView {
	c := t.At(at)
	v := taskView{TaskID: c.ID, State: string(c.State), Attempt: c.Attempt, MaxAttempts: c.Policy.MaxAttempts,
		Deadline: state.FormatTime(c.Deadline()), CreatedAt: state.FormatTime(c.CreatedAt), Payload: c.Payload, Reason: c.EndReason}
	if c.Lease != nil {
		v.LeaseID, v.WorkerID, v.Expiry = orNull(c.Lease.ID), orNull(c.Lease.Worker), orNull(state.FormatTime(c.Lease.Expiry))
	}
	if c.State == state.Waiting {
		v.NotBefore = orNull(state.FormatTime(c.NotBefore))
	}
	return v
}

func runInspect(g *globals, o *inspectOptions, ids []string) error {
	var only state.TaskState
	if o.state != "" {
		st, ok := state.ParseTaskState(o.state)
		if !ok {
			return usageErr("--state %q is not a state: use WAITING, LEASED, COMPLETED, FAILED or DEAD", o.state)
		}
		only = st
	}
	if o.timeline && len(ids) != 1 {
		return usageErr("--timeline draws one task: name it, e.g. 'leasewal inspect T1 --timeline'")
	}
	if o.until < 0 {
		return usageErr("--until %d: give the seq of a record (1 or more)", o.until)
	}
	var taskRecords []state.Record // the records about the one task named
	if len(ids) == 1 || o.until != 0 {
		g.onRecord = func(r state.Record, _ *state.State) error {
			if len(ids) == 1 && r.TaskID == ids[0] {
				taskRecords = append(taskRecords, r)
			}
			if r.Seq == o.until {
				return errStopReplay // the state right after record --until
			}
			return nil
		}
	}
	return g.read(func(s *session) error {
		st, at := s.st, s.now
		if o.until != 0 {
			if st.LastSeq() < o.until {
				return &state.Refusal{Kind: state.NotFound, Msg: fmt.Sprintf("--until %d: the WAL has records 1 to %d", o.until, st.LastSeq())}
			}
			at = st.LastAt()
		}
		if o.workers {
			return g.emitWorkers(st, at)
		}
		if len(ids) == 0 && g.output == "json" {
			return writeListingJSON(g.stdout, st, at, only)
		}
		if len(ids) == 0 {
			return renderListing(g.stdout, palette{on: g.color}, st, at, only)
		}
		v, err := buildInspect(st, at, ids, only)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			v.Summary = summarize(st, at)
		}
		if len(ids) == 1 {
			v.Tasks[0].Records = make([]logEntry, 0, len(taskRecords))
			for _, r := range taskRecords {
				v.Tasks[0].Records = append(v.Tasks[0].Records, newLogEntry(r))
			}
		}
		g.emit(v, func(w io.Writer, p palette) {
			if o.timeline {
				t, _ := st.Task(ids[0])
				renderTimeline(w, p, g.terminalWidth(), t, cancellations(taskRecords), at)
				return
			}
			renderInspect(w, p, v)
		})
		return nil
	})
}

// inspectTasks selects the tasks inspect shows: the named ones, or all of
// them (only the unfinished ones for --state WAITING or LEASED: a finished
// task never waits or holds a lease again, so the archive is not read).
func inspectTasks(st *state.State, ids []string, only state.TaskState) ([]*state.Task, error) {
	switch {
	case len(ids) == 0 && (only == state.Waiting || only == state.Leased):
		return st.Live(), nil
	case len(ids) == 0:
		return st.Tasks(), nil
	}
	tasks := make([]*state.Task, 0, len(ids))
	for _, id := range ids {
		t, ok := st.Task(id)
		if !ok {
			return nil, &state.Refusal{Kind: state.NotFound, Msg: fmt.Sprintf("unknown task %q; 'leasewal inspect' lists the tasks", id)}
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// shows reports whether a task in state s is listed under --state only.
func shows(s state.TaskState, only state.TaskState) bool { return only == "" || s == only }

// countStates counts the tasks listed, by their state at at.
func countStates(tasks []*state.Task, at int64, only state.TaskState) map[string]int {
	counts := map[string]int{}
	for _, t := range tasks {
		if s := t.At(at).State; shows(s, only) {
			counts[string(s)]++
		}
	}
	return counts
}

func buildInspect(st *state.State, at int64, ids []string, only state.TaskState) (inspectView, error) {
	v := inspectView{Result: state.ResultOK, At: state.FormatTime(at), Counts: map[string]int{}, Tasks: []taskView{}}
	tasks, err := inspectTasks(st, ids, only)
	if err != nil {
		return v, err
	}
	eachShown(tasks, at, only, func(tv taskView) error {
		v.Counts[tv.State]++
		v.Tasks = append(v.Tasks, tv)
		return nil
	})
	return v, nil
}

// eachShown calls fn with the view of each task listed under --state only,
// in order, until fn fails.
func eachShown(tasks []*state.Task, at int64, only state.TaskState, fn func(taskView) error) error {
	for _, t := range tasks {
		if tv := viewTask(t, at); shows(state.TaskState(tv.State), only) {
			if err := fn(tv); err != nil {
				return err
			}
		}
	}
	return nil
}

// listingHead is the view of inspect without task ids, but for its tasks
// (counts and summary), and the tasks to draw it from one at a time.
func listingHead(st *state.State, at int64, only state.TaskState) (inspectView, []*state.Task, error) {
	tasks, err := inspectTasks(st, nil, only)
	if err != nil {
		return inspectView{}, nil, err
	}
	v := inspectView{Result: state.ResultOK, At: state.FormatTime(at), Counts: countStates(tasks, at, only), Summary: summarize(st, at), Tasks: []taskView{}}
	return v, tasks, nil
}

// writeListingJSON writes the listing of every task exactly as writeJSON
// would write its view, but encodes the tasks one at a time, so that a
// listing of a long history never holds every task's view, nor all of its
// output, in memory.
func writeListingJSON(w io.Writer, st *state.State, at int64, only state.TaskState) error {
	v, tasks, err := listingHead(st, at, only)
	if err != nil {
		return err
	}
	var head bytes.Buffer
	writeJSON(&head, v)
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
	err = eachShown(tasks, at, only, func(tv taskView) error {
		if !first {
			out.WriteByte(',')
		}
		first = false
		one.Reset()
		if err := enc.Encode(tv); err != nil {
			return err
		}
		out.Write(bytes.TrimSuffix(one.Bytes(), []byte("\n")))
		return nil
	})
	if err != nil {
		return err
	}
	out.WriteString("]}\n")
	return out.Flush()
}

func summarize(st *state.State, at int64) *inspectSummary {
	sum := &inspectSummary{}
	var next int64
	for _, t := range st.Live() { // only unfinished tasks wait or hold leases
		c := t.At(at)
		switch {
		case c.State == state.Leased:
			sum.CurrentLeases++
			if sum.NextExpiry == nil || c.Lease.Expiry < next {
				next = c.Lease.Expiry
				sum.NextExpiry = &heldLease{TaskID: c.ID, LeaseID: c.Lease.ID, Expiry: state.FormatTime(next)}
			}
		case c.State == state.Waiting && sum.OldestWaiting == nil: // tasks are in creation order
			sum.OldestWaiting = &oldestWaiting{TaskID: c.ID, CreatedAt: state.FormatTime(c.CreatedAt), AgeMs: at - c.CreatedAt}
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

func renderInspect(w io.Writer, p palette, v inspectView) {
	renderInspectHead(w, p, v, len(v.Tasks))
	if len(v.Tasks) == 0 {
		return
	}
	t := newInspectTable(w)
	for _, tv := range v.Tasks {
		appendTaskRow(t, p, tv)
	}
	_ = t.Render()
	if len(v.Tasks) == 1 && len(v.Tasks[0].Records) > 0 {
		renderLog(w, p, v.Tasks[0].Records, v.Tasks[0].Records[0].Record.At)
	}
}

// renderListing draws the listing of every task as renderInspect draws its
// view, building each task's view only for its row.
func renderListing(w io.Writer, p palette, st *state.State, at int64, only state.TaskState) error {
	v, tasks, err := listingHead(st, at, only)
	if err != nil {
		return err
	}
	listed := 0
	for _, n := range v.Counts {
		listed += n
	}
	renderInspectHead(w, p, v, listed)
	if listed == 0 {
		return nil
	}
	t := newInspectTable(w)
	eachShown(tasks, at, only, func(tv taskView) error {
		appendTaskRow(t, p, tv)
		return nil
	})
	return t.Render()
}

// renderInspectHead prints the line of counts and the summary.
func renderInspectHead(w io.Writer, p palette, v inspectView, listed int) {
	fmt.Fprintf(w, "at %s:", v.At)
	for _, st := range []state.TaskState{state.Waiting, state.Leased, state.Completed, state.Failed, state.Dead} {
		if n := v.Counts[string(st)]; n > 0 {
			fmt.Fprintf(w, " %d %s", n, p.word(string(st)))
		}
	}
	if listed == 0 {
		fmt.Fprint(w, " no tasks")
	}
	fmt.Fprintln(w)
	if sum := v.Summary; sum != nil {
		line := fmt.Sprintf("current leases: %d", sum.CurrentLeases)
		if o := sum.OldestWaiting; o != nil {
			line += fmt.Sprintf(" · oldest waiting: %s, created %s ago", o.TaskID, strings.TrimPrefix(offset(o.AgeMs), "+"))
		}
		if n := sum.NextExpiry; n != nil {
			line += fmt.Sprintf(" · next to expire: %s on %s at %s", n.LeaseID, n.TaskID, n.Expiry)
		}
		fmt.Fprintln(w, line)
	}
}

func newInspectTable(w io.Writer) *tablewriter.Table {
	return newTable(w, "TASK", "STATE", "ATTEMPT", "LEASE", "WORKER", "EXPIRY", "NOT BEFORE", "DEADLINE")
}

func appendTaskRow(t *tablewriter.Table, p palette, tv taskView) {
	_ = t.Append(tv.TaskID, p.word(tv.State), fmt.Sprintf("%d/%d", tv.Attempt, tv.MaxAttempts),
		deref(tv.LeaseID), deref(tv.WorkerID), deref(tv.Expiry), deref(tv.NotBefore), tv.Deadline)
}

type workerView struct {
	WorkerID      string      `json:"worker_id"`
	LastHeartbeat *string     `json:"last_heartbeat"`
	HeartbeatAge  *int64      `json:"heartbeat_age_ms"`
	Leases        []heldLease `json:"leases"`
}

type workersView struct {
	Result  state.Outcome `json:"result"`
	At      string        `json:"at"`
	Note    string        `json:"note"`
	Workers []workerView  `json:"workers"`
}

const registryNote = "the registry is advisory soft state: heartbeats never grant or keep a lease, only the WAL does"

// emitWorkers shows every worker that heartbeated or holds a lease at at.
func (g *globals) emitWorkers(st *state.State, at int64) error {
	reg := readRegistry(g.sidePath(registrySuffix))
	leases := currentLeases(st, at)
	names := map[string]bool{}
	for w := range reg {
		names[w] = true
	}
	for w := range leases {
		names[w] = true
	}
	v := workersView{Result: state.ResultOK, At: state.FormatTime(at), Note: registryNote, Workers: []workerView{}}
	for _, w := range slices.Sorted(maps.Keys(names)) {
		wv := workerView{WorkerID: w, Leases: leases[w]}
		if wv.Leases == nil {
			wv.Leases = []heldLease{}
		}
		if e, ok := reg[w]; ok {
			age := at - e.LastHeartbeat
			wv.LastHeartbeat, wv.HeartbeatAge = orNull(state.FormatTime(e.LastHeartbeat)), &age
		}
		v.Workers = append(v.Workers, wv)
	}
	g.emit(v, func(w io.Writer, p palette) {
		t := newTable(w, "WORKER", "LAST HEARTBEAT", "AGO", "CURRENT LEASES")
		for _, wv := range v.Workers {
			ago := "never"
			if wv.HeartbeatAge != nil {
				ago = strings.TrimPrefix(offset(*wv.HeartbeatAge), "+")
			}
			var held []string
			for _, l := range wv.Leases {
				held = append(held, l.LeaseID+" on "+l.TaskID)
			}
			_ = t.Append(wv.WorkerID, deref(wv.LastHeartbeat), ago, strings.Join(held, ", "))
		}
		_ = t.Render()
		fmt.Fprintln(w, "note: "+v.Note)
	})
	return nil
}
