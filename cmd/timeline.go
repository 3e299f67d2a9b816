package cmd

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fatih/color"
	"golang.org/x/sys/unix"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/state"
)

// glyphs are the characters a timeline is drawn with: plain ASCII when the
// output is not a colored terminal, box-drawing characters when it is.
type glyphs struct {
	start, fill, ext, rest, current, mark, deadline, rule, tick string
	end                                                         map[string]string
}

var asciiGlyphs = glyphs{start: "[", fill: "=", ext: "+", rest: "-", current: ">", mark: "!", deadline: "|", rule: "-", tick: "|",
	end: map[string]string{state.EndCompleted: "]", state.EndExpired: "x", state.EndFailed: "F", state.EndRetry: "R", state.EndDead: "D", state.EndAborted: "A", state.EndReleased: "<"}}

// Every mark is distinct, as in the ASCII form: an expiry (✕), a failure
// (✘), a death (†) and a cancelled late completion (!) read apart.
var unicodeGlyphs = glyphs{start: "├", fill: "━", ext: "╋", rest: "┄", current: answers.MarkCurrent, mark: answers.MarkCancelled, deadline: answers.MarkDeadline,
	rule: "─", tick: "┼", end: answers.EndMarks}

// timeline draws one task's life on a time axis.
type timeline struct {
	w          io.Writer
	p          palette
	g          glyphs
	start, end int64 // the axis, unix ms
	bar        int   // width of the drawing area
}

const (
	labelWidth = 14
	noteWidth  = 24
)

// terminalWidth is COLUMNS, else the terminal's width, else 80.
func (e env) terminalWidth() int {
	if n, err := strconv.Atoi(e.getenv("COLUMNS")); err == nil && n > 0 {
		return n
	}
	if f, ok := e.stdout.(*os.File); ok && isTerminal(f) {
		if ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ); err == nil && ws.Col > 0 {
			return int(ws.Col)
		}
	}
	return 80
}

func (tl *timeline) col(at int64) int {
	c := int((at - tl.start) * int64(tl.bar-1) / (tl.end - tl.start))
	return max(0, min(tl.bar-1, c))
}

func (tl *timeline) offset(at int64) string { return offset(at - tl.start) }

// row prints a label, a drawing area and a note.
func (tl *timeline) row(label string, cells []string, note string) {
	label = escape(label)
	if len(label) > labelWidth-1 {
		label = label[:labelWidth-1]
	}
	line := fmt.Sprintf("%-*s%s  %s", labelWidth, label, strings.Join(cells, ""), note)
	fmt.Fprintln(tl.w, strings.TrimRight(line, " "))
}

func (tl *timeline) blank() []string {
	cells := make([]string, tl.bar)
	for i := range cells {
		cells[i] = " "
	}
	return cells
}

// endColor colors an attempt by how it ended.
func endColor(end string) []color.Attribute {
	switch end {
	case state.EndCompleted:
		return []color.Attribute{color.FgGreen}
	case "":
		return []color.Attribute{color.FgCyan}
	case state.EndRetry, state.EndReleased:
		return []color.Attribute{color.FgYellow}
	}
	return []color.Attribute{color.FgRed}
}

// renderTimeline draws task t as it stands at now; cancelled lists the
// TaskCancelled records about it. t is replayed from its own records, which
// know nothing of its queue's pauses: its state and deadline are as the
// view (the service's answer at now) gives them.
func renderTimeline(out io.Writer, p palette, width int, t *state.Task, view api.Task, cancelled []state.Record, now int64) {
	w := &lineCutter{w: out, width: width}
	defer w.flush()
	c := t.At(now)
	c.State = state.TaskState(view.State)
	g := asciiGlyphs
	if p.on {
		g = unicodeGlyphs
	}
	last := c.CreatedAt
	for _, a := range c.Attempts {
		if a.End == "" {
			last = max(last, a.Expiry)
		} else {
			last = max(last, a.EndedAt)
		}
	}
	for _, r := range cancelled {
		last = max(last, r.At)
	}
	if !c.State.Terminal() {
		last = max(last, now)
	}
	deadline := state.NoDeadline
	if view.Deadline != nil {
		deadline = api.ParseTime(*view.Deadline)
	}
	if deadline <= last+(last-c.CreatedAt)/2 {
		last = max(last, deadline)
	}
	tl := &timeline{w: w, p: p, g: g, start: c.CreatedAt, end: max(last, c.CreatedAt+1000), bar: max(20, width-labelWidth-noteWidth-2)}

	dl := "no deadline"
	switch {
	case view.Deadline == nil:
	case deadline > tl.end:
		dl = "deadline " + tl.offset(deadline) + " (beyond the axis)"
	default:
		dl = "deadline " + tl.offset(deadline)
	}
	fmt.Fprintf(w, "%s %s%s · attempt %d/%d · created %s · %s\n", c.ID, p.word(string(c.State)), tl.since(c, now), c.Attempt, c.Policy.MaxAttempts, formatTime(c.CreatedAt), dl)
	tl.axis()
	for _, a := range c.Attempts {
		tl.attempt(a, now)
	}
	tl.cancellations(cancelled)
	if deadline <= tl.end {
		cells := tl.blank()
		cells[tl.col(deadline)] = p.paint(g.deadline, color.FgMagenta)
		tl.row("deadline", cells, tl.offset(deadline))
	}
	for i, line := range wrap(tl.legend(), max(40, width-labelWidth)) {
		label := ""
		if i == 0 {
			label = "legend"
		}
		fmt.Fprintf(w, "%-*s%s\n", labelWidth, label, line)
	}
}

// wrap joins items into lines of at most width cells.
func wrap(items []string, width int) []string {
	var lines []string
	line := ""
	for _, it := range items {
		if line != "" && displayWidth(line)+2+displayWidth(it) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += "  "
		}
		line += it
	}
	return append(lines, line)
}

func (tl *timeline) axis() {
	left, right := tl.offset(tl.start), tl.offset(tl.end)
	fmt.Fprintf(tl.w, "%-*s%s%*s\n", labelWidth, "", left, tl.bar-len(left), right)
	cells := make([]string, tl.bar)
	for i := range cells {
		cells[i] = tl.g.rule
	}
	cells[0], cells[tl.bar-1], cells[tl.bar/2] = tl.g.tick, tl.g.tick, tl.g.tick
	tl.row("", cells, "")
}

func (tl *timeline) attempt(a state.Attempt, now int64) {
	cells := tl.blank()
	from := tl.col(a.GrantedAt)
	paint := func(s string) string { return tl.p.paint(s, endColor(a.End)...) }
	var note string
	// The bar, then the extension marks, then the start and the end, so that
	// an end or start mark is never hidden by an extension in the same column.
	end, endMark := tl.col(a.Expiry), paint(tl.g.current)
	if a.End == "" { // current: held until now, then the rest of the lease
		upto := tl.col(now)
		for i := from; i <= end; i++ {
			cells[i] = paint(tl.g.rest)
			if i <= upto {
				cells[i] = paint(tl.g.fill)
			}
		}
		note = "current, expires " + tl.offset(a.Expiry)
	} else {
		end, endMark = tl.col(a.EndedAt), paint(tl.g.end[a.End])
		for i := from; i <= end; i++ {
			cells[i] = paint(tl.g.fill)
		}
		note = a.End + " " + tl.offset(a.EndedAt)
	}
	for _, at := range a.Extended {
		cells[tl.col(at)] = paint(tl.g.ext)
	}
	cells[from], cells[end] = paint(tl.g.start), endMark
	if len(a.Extended) > 0 {
		note += fmt.Sprintf(", extended %d×", len(a.Extended))
	}
	tl.row(a.LeaseID+" "+a.Worker, cells, note)
}

func (tl *timeline) cancellations(cancelled []state.Record) {
	if len(cancelled) == 0 {
		return
	}
	cells := tl.blank()
	var notes []string
	for _, r := range cancelled {
		cells[tl.col(r.At)] = tl.p.paint(tl.g.mark, color.FgRed, color.Bold)
		notes = append(notes, escape(r.LeaseID)+" cancelled "+tl.offset(r.At))
	}
	tl.row("late", cells, strings.Join(notes, ", "))
}

func (tl *timeline) legend() []string {
	g := tl.g
	return []string{
		g.start + " granted", g.fill + " held", g.ext + " extended", g.end[state.EndCompleted] + " completed",
		g.end[state.EndExpired] + " expired", g.end[state.EndRetry] + " failed, retried", g.end[state.EndFailed] + " failed",
		g.end[state.EndAborted] + " aborted", g.end[state.EndReleased] + " released", g.current + " current until expiry", g.mark + " late completion cancelled", g.deadline + " deadline",
	}
}

// since says how long a WAITING task has waited, and when a DEAD one died.
func (tl *timeline) since(c *state.Task, now int64) string {
	var last *state.Attempt
	if len(c.Attempts) > 0 {
		last = &c.Attempts[len(c.Attempts)-1]
	}
	switch c.State {
	case state.Waiting:
		from := c.AvailableAt
		if last != nil {
			from = last.EndedAt
		}
		return fmt.Sprintf(" for %s", api.Age(now-from))
	case state.Dead:
		at := c.Deadline()
		switch {
		case c.EndCause == state.BecauseDependency:
			at = c.DeadAt
		case c.EndCause != state.BecauseWindowClosed && last != nil:
			at = last.EndedAt
		}
		return fmt.Sprintf(" at %s (%s)", tl.offset(at), c.EndReason)
	}
	return ""
}

// lineCutter writes lines no wider than width terminal cells, cutting a
// longer one with "…" (color escapes pass through and count for nothing).
type lineCutter struct {
	w     io.Writer
	width int
	buf   []byte
}

func (l *lineCutter) Write(p []byte) (int, error) {
	l.buf = append(l.buf, p...)
	for {
		nl := bytes.IndexByte(l.buf, '\n')
		if nl < 0 {
			return len(p), nil
		}
		if _, err := io.WriteString(l.w, cutLine(string(l.buf[:nl]), l.width)+"\n"); err != nil {
			return 0, err
		}
		l.buf = l.buf[nl+1:]
	}
}

func (l *lineCutter) flush() {
	if len(l.buf) > 0 {
		_, _ = io.WriteString(l.w, cutLine(string(l.buf), l.width))
	}
}

// cutLine cuts s to width visible cells, keeping its color escapes.
func cutLine(s string, width int) string {
	if displayWidth(s) <= width {
		return s
	}
	var b strings.Builder
	visible, colored := 0, false
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "\x1b[") {
			if end := strings.IndexByte(s[i:], 'm'); end > 0 {
				b.WriteString(s[i : i+end+1])
				i += end + 1
				colored = true
				continue
			}
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		w := displayWidth(s[i : i+size])
		if visible+w > width-1 {
			break
		}
		b.WriteRune(r)
		i += size
		visible += w
	}
	b.WriteString("…")
	if colored {
		b.WriteString("\x1b[0m")
	}
	return b.String()
}
