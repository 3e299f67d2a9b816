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
	"time"

	"leasewal/api"
	"leasewal/state"
	"leasewal/view"
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
	Omitted          []string // tasks beyond MaxTasks
	Earlier          []string // tasks created before the records shown
	Live             bool     // served by serve at /ui: the page follows the WAL
	Expect           *Expectation
	Legend           []Mark
	AxisStart, AxisW int64 // unix ms, the axis every drawing shares
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
	Records                                   []api.Record
}

// width is the drawings' width in SVG units.
const width = 1000.0

// Build reads the records o names through svc and lays the page out.
func Build(ctx context.Context, svc api.Service, o Options) (Page, error) {
	var recs []api.Record
	end, err := svc.Log(ctx, o.Log, func(r api.Record) error { recs = append(recs, r); return nil })
	if err != nil {
		return Page{}, err
	}
	return FromRecords(recs, end.LastSeq, o), nil
}

// FromRecords lays out the page of recs, the WAL's last seq being last. A
// task whose creation is not among recs began before them: it is named,
// not drawn.
func FromRecords(recs []api.Record, last int64, o Options) Page {
	p := Page{Title: cmp.Or(o.Title, "leasewal report"), Records: len(recs), Last: last, Expect: o.Expect}
	if x := o.Expect; x != nil {
		for i := range x.Steps {
			if !x.Steps[i].Held {
				x.Steps[i].First = true
				break
			}
		}
	}
	if len(recs) == 0 {
		return p
	}
	first, lastAt := recs[0].Record.At, recs[len(recs)-1].Record.At
	p.From, p.To, p.FirstSeq = api.FormatTime(first), api.FormatTime(lastAt), recs[0].Seq
	byTask := map[string][]int{} // each task's records, as indexes into recs
	var order []string
	for i, r := range recs {
		if r.TaskID == "" {
			continue
		}
		if _, seen := byTask[r.TaskID]; !seen {
			order = append(order, r.TaskID)
		}
		byTask[r.TaskID] = append(byTask[r.TaskID], i)
	}
	if len(o.Tasks) > 0 {
		order = slices.DeleteFunc(order, func(id string) bool { return !slices.Contains(o.Tasks, id) })
	}
	ax := axis{start: first, span: max(lastAt-first, 1000)}
	p.AxisStart, p.AxisW = ax.start, ax.span
	states, queues := map[string]int{}, map[string]int{}
	lanes, fenced := map[string][]Span{}, map[string][]Event{}
	var events []Event
	for i, id := range order {
		own := make([]state.Record, len(byTask[id]))
		for j, k := range byTask[id] {
			own[j] = recs[k].Record
		}
		t, err := state.TaskOf(own)
		if err != nil { // its first records are not among these: it began before them
			p.Earlier = append(p.Earlier, id)
			continue
		}
		c := t.At(lastAt)
		states[string(c.State)]++
		queues[c.Queue]++
		if i >= MaxTasks { // counted, not drawn: nor on the lanes and the axis
			p.Omitted = append(p.Omitted, id)
			continue
		}
		tv := Task{ID: c.ID, State: string(c.State), Queue: c.Queue, Payload: c.Payload, Reason: c.EndReason, Result: c.Result,
			Attempt: c.Attempt, MaxAttempts: c.Policy.MaxAttempts}
		for _, a := range c.Attempts {
			to, glyph, class := a.EndedAt, view.EndMarks[a.End], endClass(a.End)
			if a.End == "" {
				to, glyph, class = a.Expiry, view.MarkCurrent, "current"
			}
			sp := Span{X: ax.x(a.GrantedAt), W: max(ax.x(to)-ax.x(a.GrantedAt), 2), Task: c.ID, Lease: a.LeaseID, Glyph: glyph, Class: class,
				Label: fmt.Sprintf("%s %s attempt %d: %s", a.LeaseID, a.Worker, a.Number, cmp.Or(a.End, "current"))}
			tv.Spans = append(tv.Spans, sp)
			lanes[a.Worker] = append(lanes[a.Worker], sp)
		}
		tv.Events = eventsOf(c, own, ax)
		events = append(events, tv.Events...)
		for _, r := range own {
			if a := c.AttemptOf(r.LeaseID); r.Type == state.TaskCancelled && a != nil {
				fenced[a.Worker] = append(fenced[a.Worker], Event{X: ax.x(r.At), Task: c.ID, Glyph: view.MarkCancelled, Class: "cancelled",
					Label: fmt.Sprintf("%s finished %s under %s too late: cancelled", a.Worker, c.ID, r.LeaseID)})
			}
		}
		if d := c.Deadline(); d <= ax.start+ax.span {
			tv.DeadlineX, tv.DeadlineOn = ax.x(d), true
		}
		for _, k := range byTask[id] {
			tv.Records = append(tv.Records, recs[k])
		}
		p.Tasks = append(p.Tasks, tv)
	}
	for _, st := range []state.TaskState{state.Waiting, state.Leased, state.Completed, state.Failed, state.Dead} {
		p.Counts = append(p.Counts, Count{Name: string(st), N: states[string(st)], Class: stateClass(st)})
	}
	for _, q := range slices.Sorted(maps.Keys(queues)) {
		p.Queues = append(p.Queues, Count{Name: q, N: queues[q]})
	}
	for _, w := range slices.Sorted(maps.Keys(lanes)) {
		p.Lanes = append(p.Lanes, Lane{Worker: w, Spans: lanes[w], Marks: fenced[w]})
	}
	p.Chart = chart(recs, ax, events)
	p.Legend = legend()
	return p
}

// axis maps times onto the drawings' width.
type axis struct{ start, span int64 }

func (a axis) x(at int64) float64 {
	return max(0, min(width, float64(at-a.start)*width/float64(a.span)))
}

// eventsOf is what the time axis marks of task c: each lease that lapsed
// (recorded or not: a lapse needs no record), each cancelled late
// completion, and its death.
func eventsOf(c *state.Task, recs []state.Record, ax axis) []Event {
	var out []Event
	for _, a := range c.Attempts {
		if a.End == state.EndExpired {
			out = append(out, Event{X: ax.x(a.EndedAt), Task: c.ID, Glyph: view.EndMarks[state.EndExpired], Class: "expired",
				Label: fmt.Sprintf("%s: lease %s of %s lapsed at %s", c.ID, a.LeaseID, a.Worker, api.FormatTime(a.EndedAt))})
		}
	}
	died := int64(0)
	for _, r := range recs {
		switch r.Type {
		case state.TaskCancelled:
			out = append(out, Event{X: ax.x(r.At), Task: c.ID, Glyph: view.MarkCancelled, Class: "cancelled",
				Label: fmt.Sprintf("%s: a late completion under %s was cancelled at %s", c.ID, r.LeaseID, api.FormatTime(r.At))})
		case state.TaskDead, state.TaskAborted:
			died = r.At
		}
	}
	if c.State == state.Dead {
		if died == 0 { // it died of time alone: at its deadline, or when its last lease lapsed
			died = c.Deadline()
			if n := len(c.Attempts); n > 0 && c.Attempts[n-1].End == state.EndExpired {
				died = min(died, c.Attempts[n-1].EndedAt)
			}
		}
		out = append(out, Event{X: ax.x(died), Task: c.ID, Glyph: view.EndMarks[state.EndDead], Class: "dead",
			Label: fmt.Sprintf("%s died: %s", c.ID, c.EndReason)})
	}
	return out
}

// chart buckets completions and follows the number of unfinished tasks.
func chart(recs []api.Record, ax axis, events []Event) Chart {
	const buckets = 40
	c := Chart{Events: events}
	counts := make([]int, buckets)
	depth := make([]int, buckets)
	open := 0
	bucket := func(at int64) int { return min(buckets-1, int(float64(at-ax.start)*buckets/float64(ax.span))) }
	for _, r := range recs {
		b := bucket(r.Record.At)
		switch r.Type {
		case state.TaskCreated:
			open++
		case state.TaskCompleted:
			counts[b]++
			open--
		case state.TaskDead, state.TaskAborted:
			open--
		case state.TaskFailed:
			if r.Permanent {
				open--
			}
		}
		for i := b; i < buckets; i++ {
			depth[i] = open
		}
	}
	c.MaxBar = max(1, slices.Max(counts), slices.Max(depth))
	bw := width / buckets
	points := ""
	for i, n := range counts {
		c.Bars = append(c.Bars, Bar{X: float64(i) * bw, W: bw - 1, H: float64(n) * 100 / float64(c.MaxBar), N: n,
			Label: fmt.Sprintf("%d completed from %s", n, api.FormatTime(ax.start+int64(i)*ax.span/buckets))})
		points += fmt.Sprintf("%.1f,%.1f ", float64(i)*bw+bw/2, 100-float64(depth[i])*100/float64(c.MaxBar))
	}
	c.Depth = points
	for i := 0; i <= 4; i++ {
		at := ax.start + int64(i)*ax.span/4
		c.Ticks = append(c.Ticks, Tick{X: ax.x(at), Label: time.UnixMilli(at).UTC().Format("15:04:05")})
	}
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
	m := view.EndMarks
	return []Mark{{m[state.EndCompleted], "completed", "completed"}, {m[state.EndExpired], "expired (lapsed)", "failed"},
		{m[state.EndRetry], "failed, retried", "retry"}, {m[state.EndFailed], "failed", "failed"}, {m[state.EndDead], "dead", "failed"},
		{m[state.EndAborted], "aborted", "failed"}, {m[state.EndReleased], "released", "retry"}, {view.MarkCurrent, "current until expiry", "current"},
		{view.MarkCancelled, "late completion cancelled", "cancelled"}, {view.MarkDeadline, "deadline", "deadline"}}
}

//go:embed report.html.tmpl
var pageTemplate string

var tmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"pct":      func(x float64) string { return fmt.Sprintf("%.2f", x) },
	"add":      func(a, b float64) float64 { return a + b },
	"sub":      func(a, b float64) float64 { return a - b },
	"row":      func(i int) int { return 4 + 18*i },
	"row1":     func(i int) int { return 14 + 18*i },
	"height":   func(t Task) int { return 22 + 18*len(t.Spans) },
	"maxTasks": func() int { return MaxTasks },
}).Parse(pageTemplate))

// Render writes the page as one self-contained HTML document: whole, or
// nothing when it cannot be drawn.
func Render(w io.Writer, p Page) error {
	var b bytes.Buffer
	if err := tmpl.Execute(&b, p); err != nil {
		return fmt.Errorf("drawing the report: %w", err)
	}
	_, err := b.WriteTo(w)
	return err
}
