// Package report draws a WAL's story as one self-contained HTML page: an
// overview (counts, throughput and depth over time, lapses, cancellations
// and deaths on the time axis), a lane per worker, and every task's
// timeline with its records. It reads through api.Service, as every door
// does, so a report of a server's WAL is drawn the same way as a local one.
// Every payload, reason and name goes through html/template's escaping; the
// page loads nothing (no script, no font, no image from elsewhere).
package report

import (
	"bytes"
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/state"
)

// MaxTasks is how many tasks a page draws in full: the first ones; the
// others are counted in the overview and named in a list.
const MaxTasks = 500

// Options say which part of the WAL a page shows.
type Options struct {
	Log    api.LogRequest // the records: --from/--to, --since/--until, --queue
	Tasks  []string       // only these tasks (none: every task)
	Title  string
	Expect *Expectation // a trace checked against the WAL, drawn beside it
	// Now is the time the tasks' states are shown at, given the last
	// record's (unix ms): now, so that a lease lapsed since the last record
	// shows as lapsed. nil, or a page cut by --to or --until: as of the
	// last record shown.
	Now func(lastAt int64) int64
}

// Expectation is a trace's steps, each held by the WAL or not.
type Expectation struct {
	File  string
	Steps []ExpectStep
}

// ExpectStep is one step of a trace: what it expects, whether the WAL
// held it, and verify --expect's differences when not.
type ExpectStep struct {
	Label, Expects string
	Held           bool
	Differences    []string
	First          bool // the first step that did not hold
}

// Page is everything the template draws.
type Page struct {
	Title            string
	From, To         string // the first and last record's times
	FirstSeq, Last   int64
	Records          int
	Counts           []Count
	Queues           []Count
	Chart            Chart
	Lanes            []Lane
	Tasks            []Task
	Omitted          []string // tasks beyond MaxTasks (the first 1,000 of them)
	OmittedMore      int      // and how many more
	Earlier          []string // tasks created before the records shown
	Live             bool     // served by serve at /ui: the page follows the WAL
	Expect           *Expectation
	Legend           []Mark
	AxisStart, AxisW int64    // unix ms, the axis the overview and the lanes share
	AsOf             string   // the time the states are shown at
	Attention        []Task   // FAILED, DEAD and lapsed tasks, listed first
	Undrawn          []string // tasks whose records do not replay alone, and why (a bug of leasewal's)
}

// Count is a number with its name.
type Count struct {
	Name  string
	N     int
	Class string
}

// Mark is a symbol of the legend.
type Mark struct{ Glyph, Name, Class string }

// Chart is throughput (completions per bucket) and depth (unfinished
// tasks at each bucket's end) over the axis, and the events marked on it.
type Chart struct {
	Bars   []Bar
	Depth  string // an SVG polyline's points
	Events []Event
	MaxBar int
	Ticks  []Tick
	YTicks []YTick // the scale of the bars and the line
	Bucket string  // how long each bar's interval is
}

// YTick is a labelled height on the chart's scale (Y in its units, 0 at
// the top, 100 at the axis).
type YTick struct {
	Y     float64
	Label string
}

// Bar is one bucket's completions.
type Bar struct {
	X, W, H float64
	N       int
	Label   string
}

// Event is a lapse, a cancelled late completion or a death on the axis.
type Event struct {
	X            float64
	Glyph, Class string
	Label        string
	Task         string
}

// Tick is a labelled time on the axis.
type Tick struct {
	X     float64
	Label string
}

// Lane is one worker's leases.
type Lane struct {
	Worker string
	Spans  []Span
	Marks  []Event // its late completions, cancelled (fenced)
}

// Span is one lease on the axis.
type Span struct {
	X, W         float64
	Task, Lease  string
	Glyph, Class string
	Label        string
}

// Task is one task's timeline and records.
type Task struct {
	ID, State, Queue, Payload, Reason, Result string
	Attempt, MaxAttempts                      int
	Spans                                     []Span
	Events                                    []Event
	DeadlineX                                 float64
	DeadlineOn                                bool
	Deadline                                  string // "" for none
	Records                                   []api.Record
	Ticks                                     []Tick      // its own axis: from its creation to its last event
	Lapsed                                    int         // leases of it that lapsed
	After                                     []string    // the tasks it was submitted to wait for
	Dependents                                *namedTasks // the tasks submitted to wait for it
}

// width is the drawings' width in SVG units.
const width = 1000.0

// Build reads the records o names through svc and lays the page out,
// streaming: it keeps the drawn tasks' records and, of the others, only
// those of tasks not yet ended.
func Build(ctx context.Context, svc api.Service, o Options) (Page, error) {
	c := newCollector(o)
	end, err := svc.Log(ctx, o.Log, func(r api.Record) error { c.add(r); return nil })
	if err != nil {
		return Page{}, err
	}
	for _, id := range o.Tasks {
		if _, seen := c.kept[id]; !seen && !c.isEarlier[id] && c.open[id] == nil && !c.counted[id] {
			return Page{}, &state.Error{Kind: state.NotFound, Subject: "task", Msg: fmt.Sprintf("no record of task %q among those the report reads", id)}
		}
	}
	return c.page(end.LastSeq), nil
}

// FromRecords lays out the page of recs, the WAL's last seq being last. A
// task whose creation is not among recs began before them: it is named,
// not drawn.
func FromRecords(recs []api.Record, last int64, o Options) Page {
	c := newCollector(o)
	for _, r := range recs {
		c.add(r)
	}
	return c.page(last)
}

// maxNamed is how many tasks a page names that it does not draw.
const maxNamed = 1000

// collector takes the records one at a time.
type collector struct {
	o             Options
	records       int
	first, lastAt int64
	firstSeq      int64
	points        []point // for the chart: a record's time and what it did
	drawn         []string
	kept          map[string][]api.Record   // the drawn tasks' records
	open          map[string][]state.Record // the other tasks not yet ended
	states        map[string]int            // the other tasks ended, by state
	queues        map[string]int
	omitted       int
	named         []string        // of the omitted, the first maxNamed
	counted       map[string]bool // the other tasks ended and counted
	earlier       []string
	isEarlier     map[string]bool
	// dependents is, for a drawn task, the tasks submitted to wait for it
	// (the first maxNamed) and how many there are.
	dependents map[string]*namedTasks
}

// namedTasks is the first namedDependents of some tasks, and how many there
// are.
type namedTasks struct {
	IDs   []string
	Count int
}

// More is how many of the tasks are not named.
func (n *namedTasks) More() int { return n.Count - len(n.IDs) }

// namedDependents is how many of the tasks waiting for one a task's
// section names.
const namedDependents = 20

// point is what one record did to the chart: a task created (+1), ended
// (-1), completed.
type point struct {
	at        int64
	delta     int8
	completed bool
}

func newCollector(o Options) *collector {
	return &collector{o: o, kept: map[string][]api.Record{}, open: map[string][]state.Record{}, states: map[string]int{}, queues: map[string]int{},
		counted: map[string]bool{}, isEarlier: map[string]bool{}, dependents: map[string]*namedTasks{}}
}

func (c *collector) add(r api.Record) {
	if len(c.o.Tasks) > 0 && !slices.Contains(c.o.Tasks, r.TaskID) {
		return // the page is of those tasks alone: their records, their chart
	}
	if c.records == 0 {
		c.first, c.firstSeq = r.AtMs(), r.Seq
	}
	c.records++
	c.lastAt = r.AtMs()
	pt := point{at: r.AtMs()}
	switch r.Type {
	case string(state.TaskCreated):
		pt.delta = 1
	case string(state.TaskCompleted):
		pt.completed = true
	}
	id := r.TaskID
	if id == "" {
		c.points = append(c.points, pt)
		return
	}
	for _, up := range slices.Concat(r.After, r.AfterEnded) {
		if _, drawn := c.kept[up]; drawn {
			d := c.dependents[up]
			if d == nil {
				d = &namedTasks{}
				c.dependents[up] = d
			}
			if d.Count++; len(d.IDs) < namedDependents {
				d.IDs = append(d.IDs, id)
			}
		}
	}
	if _, drawn := c.kept[id]; drawn {
		c.kept[id] = append(c.kept[id], r)
		c.points = append(c.points, c.ended(pt, c.recordsOf(id)))
		return
	}
	if c.counted[id] || c.isEarlier[id] { // a late record of a task counted already, or of one begun before
		c.points = append(c.points, pt)
		return
	}
	own, open := c.open[id]
	if !open && r.Type == string(state.TaskCreated) && len(c.drawn) < MaxTasks {
		c.drawn = append(c.drawn, id)
		c.kept[id] = []api.Record{r}
		c.points = append(c.points, pt)
		return
	}
	if !open && r.Type != string(state.TaskCreated) {
		c.earlier, c.isEarlier[id] = append(c.earlier, id), true
		c.points = append(c.points, pt)
		return
	}
	own = append(own, answers.StateRecord(r))
	c.open[id] = own
	pt = c.ended(pt, own)
	c.points = append(c.points, pt)
	if pt.delta < 0 { // ended: counted now, its records let go
		t, _ := state.TaskOf(own)
		c.count(t, id, c.lastAt) // ended by this record: nothing later changes it
		delete(c.open, id)
		c.counted[id] = true
	}
}

// recordsOf is a drawn task's records, for replay.
func (c *collector) recordsOf(id string) []state.Record {
	own := make([]state.Record, len(c.kept[id]))
	for i, r := range c.kept[id] {
		own[i] = answers.StateRecord(r)
	}
	return own
}

// ended marks pt as ending its task when the task's records so far leave
// it finished (a completion, a final failure, a death, an abort).
func (c *collector) ended(pt point, own []state.Record) point {
	switch own[len(own)-1].Type {
	case state.TaskCompleted, state.TaskFailed, state.TaskDead, state.TaskAborted:
		if t, err := state.TaskOf(own); err == nil && t.State.Terminal() {
			pt.delta = -1
		}
	}
	return pt
}

// count counts a task that is not drawn, as it stands at asOf.
func (c *collector) count(t *state.Task, id string, asOf int64) {
	if t == nil {
		return
	}
	c.states[string(t.At(asOf).State)]++
	c.queues[t.Queue]++
	if c.omitted++; len(c.named) < maxNamed {
		c.named = append(c.named, id)
	}
}

// page lays out what the records gave, the WAL's last seq being last.
func (c *collector) page(last int64) Page {
	p := Page{Title: cmp.Or(c.o.Title, "leasewal report"), Records: c.records, Last: last, Expect: c.o.Expect, Earlier: c.earlier}
	if x := c.o.Expect; x != nil {
		for i := range x.Steps {
			if !x.Steps[i].Held {
				x.Steps[i].First = true
				break
			}
		}
	}
	if c.records == 0 {
		return p
	}
	p.From, p.To, p.FirstSeq = api.FormatTime(c.first), api.FormatTime(c.lastAt), c.firstSeq
	asOf := c.lastAt
	if c.o.Now != nil && c.o.Log.To == 0 && c.o.Log.Until == "" {
		asOf = max(asOf, c.o.Now(c.lastAt))
	}
	p.AsOf = api.FormatTime(asOf)
	for id, own := range c.open { // not ended by a record: as time leaves them
		t, err := state.TaskOf(own)
		if err != nil {
			continue
		}
		c.count(t, id, asOf)
	}
	p.Omitted, p.OmittedMore = c.named, c.omitted-len(c.named)
	ax := axis{start: c.first, span: max(c.lastAt-c.first, 1000)}
	p.AxisStart, p.AxisW = ax.start, ax.span
	lanes, fenced := map[string][]Span{}, map[string][]Event{}
	var events []Event
	for _, id := range c.drawn {
		recs := c.recordsOf(id)
		t, err := state.TaskOf(recs)
		if err != nil { // named, never left out in silence
			p.Undrawn = append(p.Undrawn, fmt.Sprintf("%s (%v)", id, err))
			continue
		}
		tc := t.At(asOf)
		c.states[string(tc.State)]++
		c.queues[tc.Queue]++
		payload, _ := tc.Payload.Text() // a task replayed from its records alone holds its payload (TaskOf)
		tv := Task{ID: tc.ID, State: string(tc.State), Queue: tc.Queue, Payload: payload, Reason: tc.EndReason, Result: tc.Result,
			Attempt: tc.Attempt, MaxAttempts: tc.Policy.MaxAttempts, Records: c.kept[id], Dependents: c.dependents[id]}
		for _, d := range tc.Deps {
			tv.After = append(tv.After, d.ID)
		}
		tax := taskAxis(tc, recs)
		for _, a := range tc.Attempts {
			to, glyph, class := a.EndedAt, answers.EndMarks[a.End], endClass(a.End)
			if a.End == "" {
				to, glyph, class = a.Expiry, answers.MarkCurrent, "current"
			}
			label := fmt.Sprintf("%s %s attempt %d: %s", a.LeaseID, a.Worker, a.Number, cmp.Or(a.End, "current"))
			tv.Spans = append(tv.Spans, Span{X: tax.x(a.GrantedAt), W: max(tax.x(to)-tax.x(a.GrantedAt), 2), Task: tc.ID, Lease: a.LeaseID, Glyph: glyph, Class: class, Label: label})
			lanes[a.Worker] = append(lanes[a.Worker], Span{X: ax.x(a.GrantedAt), W: max(ax.x(to)-ax.x(a.GrantedAt), 2), Task: tc.ID, Lease: a.LeaseID, Glyph: glyph, Class: class, Label: label})
			if a.End == state.EndExpired {
				tv.Lapsed++
			}
		}
		tv.Events = eventsOf(tc, recs, tax)
		events = append(events, eventsOf(tc, recs, ax)...)
		for _, r := range recs {
			if a := tc.AttemptOf(r.LeaseID); r.Type == state.TaskCancelled && a != nil {
				fenced[a.Worker] = append(fenced[a.Worker], Event{X: ax.x(r.At), Task: tc.ID, Glyph: answers.MarkCancelled, Class: "cancelled",
					Label: fmt.Sprintf("%s finished %s under %s too late: cancelled", a.Worker, tc.ID, r.LeaseID)})
			}
		}
		if d := tc.DeadlineAt(asOf); d != state.NoDeadline {
			tv.Deadline = api.FormatTime(d)
			if d <= tax.start+tax.span {
				tv.DeadlineX, tv.DeadlineOn = tax.x(d), true
			}
		}
		tv.Ticks = tax.ticks()
		p.Tasks = append(p.Tasks, tv)
		if tv.State == string(state.Failed) || tv.State == string(state.Dead) || tv.Lapsed > 0 {
			seen := tv
			if seen.Reason == "" {
				seen.Reason = fmt.Sprintf("%d of its leases lapsed", tv.Lapsed)
			}
			p.Attention = append(p.Attention, seen)
		}
	}
	for _, st := range []state.TaskState{state.Waiting, state.Leased, state.Completed, state.Failed, state.Dead} {
		p.Counts = append(p.Counts, Count{Name: string(st), N: c.states[string(st)], Class: stateClass(st)})
	}
	for _, q := range slices.Sorted(maps.Keys(c.queues)) {
		p.Queues = append(p.Queues, Count{Name: q, N: c.queues[q]})
	}
	for _, w := range slices.Sorted(maps.Keys(lanes)) {
		p.Lanes = append(p.Lanes, Lane{Worker: w, Spans: lanes[w], Marks: fenced[w]})
	}
	p.Chart = chart(c.points, ax, events)
	p.Legend = legend()
	return p
}

// axis maps times onto the drawings' width.
type axis struct{ start, span int64 }

func (a axis) x(at int64) float64 {
	return max(0, min(width, float64(at-a.start)*width/float64(a.span)))
}

// taskAxis is a task's own axis: from its creation to the last thing that
// happened to it (a grant, an end, an expiry, a record), at least a second,
// so that a task of two seconds in a day's report is drawn whole.
func taskAxis(t *state.Task, recs []state.Record) axis {
	end := t.CreatedAt
	for _, a := range t.Attempts {
		end = max(end, a.GrantedAt, a.EndedAt)
		if a.End == "" {
			end = max(end, a.Expiry)
		}
	}
	for _, r := range recs {
		end = max(end, r.At)
	}
	if t.State.Terminal() { // a death of time alone has no record: at its deadline, or a lapse
		end = max(end, t.Ended)
	}
	span := max(end-t.CreatedAt, 1000)
	return axis{start: t.CreatedAt, span: span + span/20} // a margin for the last mark
}

// ticks label an axis at its start (a time) and at four offsets after it.
func (a axis) ticks() []Tick {
	out := []Tick{{X: 0, Label: time.UnixMilli(a.start).UTC().Format("15:04:05")}}
	for i := 1; i <= 4; i++ {
		d := time.Duration(a.span*int64(i)/4) * time.Millisecond
		out = append(out, Tick{X: a.x(a.start + a.span*int64(i)/4), Label: "+" + api.Age(d.Milliseconds())})
	}
	return out
}

// eventsOf is what the time axis marks of task c: each lease that lapsed
// (recorded or not: a lapse needs no record), each cancelled late
// completion, and its death.
func eventsOf(c *state.Task, recs []state.Record, ax axis) []Event {
	var out []Event
	for _, a := range c.Attempts {
		if a.End == state.EndExpired {
			out = append(out, Event{X: ax.x(a.EndedAt), Task: c.ID, Glyph: answers.EndMarks[state.EndExpired], Class: "expired",
				Label: fmt.Sprintf("%s: lease %s of %s lapsed at %s", c.ID, a.LeaseID, a.Worker, api.FormatTime(a.EndedAt))})
		}
	}
	died := int64(0)
	for _, r := range recs {
		switch r.Type {
		case state.TaskCancelled:
			out = append(out, Event{X: ax.x(r.At), Task: c.ID, Glyph: answers.MarkCancelled, Class: "cancelled",
				Label: fmt.Sprintf("%s: a late completion under %s was cancelled at %s", c.ID, r.LeaseID, api.FormatTime(r.At))})
		case state.TaskDead, state.TaskAborted:
			died = r.At
		}
	}
	if c.State == state.Dead {
		switch {
		case died == 0 && c.EndCause == state.BecauseDependency: // when what it waited for ended
			died = c.DeadAt
		case died == 0: // it died of time alone: at its deadline, or when its last lease lapsed
			died = c.Deadline()
			if n := len(c.Attempts); n > 0 && c.Attempts[n-1].End == state.EndExpired {
				died = min(died, c.Attempts[n-1].EndedAt)
			}
		}
		out = append(out, Event{X: ax.x(died), Task: c.ID, Glyph: answers.EndMarks[state.EndDead], Class: "dead",
			Label: fmt.Sprintf("%s died: %s", c.ID, c.EndReason)})
	}
	return out
}

// chart buckets completions and follows the number of unfinished tasks.
func chart(points []point, ax axis, events []Event) Chart {
	const buckets = 40
	c := Chart{Events: events}
	counts := make([]int, buckets)
	depth := make([]int, buckets)
	seen := make([]bool, buckets)
	open := 0
	bucket := func(at int64) int { return min(buckets-1, int(float64(at-ax.start)*buckets/float64(ax.span))) }
	for _, pt := range points {
		b := bucket(pt.at)
		if pt.completed {
			counts[b]++
		}
		open += int(pt.delta)
		depth[b], seen[b] = open, true
	}
	for i := 1; i < buckets; i++ { // a bucket with no record keeps the depth before it
		if !seen[i] {
			depth[i] = depth[i-1]
		}
	}
	c.MaxBar = max(1, slices.Max(counts), slices.Max(depth))
	bw := width / buckets
	line := ""
	for i, n := range counts {
		c.Bars = append(c.Bars, Bar{X: float64(i) * bw, W: bw - 1, H: float64(n) * 100 / float64(c.MaxBar), N: n,
			Label: fmt.Sprintf("%d completed from %s", n, api.FormatTime(ax.start+int64(i)*ax.span/buckets))})
		line += fmt.Sprintf("%.1f,%.1f ", float64(i)*bw+bw/2, 100-float64(depth[i])*100/float64(c.MaxBar))
	}
	c.Depth = line
	for i := 0; i <= 4; i++ {
		at := ax.start + int64(i)*ax.span/4
		c.Ticks = append(c.Ticks, Tick{X: ax.x(at), Label: time.UnixMilli(at).UTC().Format("15:04:05")})
	}
	for _, n := range slices.Compact([]int{0, c.MaxBar / 2, c.MaxBar}) {
		c.YTicks = append(c.YTicks, YTick{Y: 100 - float64(n)*100/float64(c.MaxBar), Label: fmt.Sprint(n)})
	}
	c.Bucket = api.Age(max(ax.span/buckets, 1))
	return c
}

func endClass(end string) string {
	switch end {
	case state.EndCompleted:
		return "completed"
	case state.EndRetry, state.EndReleased:
		return "retry"
	}
	return "failed"
}

func stateClass(st state.TaskState) string {
	switch st {
	case state.Completed:
		return "completed"
	case state.Leased:
		return "current"
	case state.Waiting:
		return "waiting"
	}
	return "failed"
}

// legend is the terminal timeline's legend, with its symbols.
func legend() []Mark {
	m := answers.EndMarks
	return []Mark{{m[state.EndCompleted], "completed", "completed"}, {m[state.EndExpired], "expired (lapsed)", "failed"},
		{m[state.EndRetry], "failed, retried", "retry"}, {m[state.EndFailed], "failed", "failed"}, {m[state.EndDead], "dead", "failed"},
		{m[state.EndAborted], "aborted", "failed"}, {m[state.EndReleased], "released", "retry"}, {answers.MarkCurrent, "current until expiry", "current"},
		{answers.MarkCancelled, "late completion cancelled", "cancelled"}, {answers.MarkDeadline, "deadline", "deadline"}}
}

//go:embed report.html.tmpl
var pageTemplate string

// tmpl is parsed on the first page drawn, not at every command's start
// (a third of a millisecond, which most commands never need).
var tmpl = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("report").Funcs(template.FuncMap{
		"pct":      func(x float64) string { return fmt.Sprintf("%.2f", x) },
		"add":      func(a, b float64) float64 { return a + b },
		"sub":      func(a, b float64) float64 { return a - b },
		"row":      func(i int) int { return 4 + 18*i },
		"row1":     func(i int) int { return 14 + 18*i },
		"height":   func(t Task) int { return 22 + 18*len(t.Spans) },
		"maxTasks": func() int { return MaxTasks },
		"add0":     func(a, b int) int { return a + b },
	}).Parse(pageTemplate))
})

// Render writes the page as one self-contained HTML document: whole, or
// nothing when it cannot be drawn.
func Render(w io.Writer, p Page) error {
	var b bytes.Buffer
	if err := tmpl().Execute(&b, p); err != nil {
		return fmt.Errorf("drawing the report: %w", err)
	}
	_, err := b.WriteTo(w)
	return err
}
