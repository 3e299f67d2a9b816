package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/fatih/color"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/pkg/twwidth"
	"github.com/olekukonko/tablewriter/tw"
	"golang.org/x/sys/unix"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/state"
)

// isTerminal reports whether w is a terminal: only then is output colored.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// readerGone is closed when w is a pipe or a socket whose reader went away,
// watched until ctx ends (and never closed for another writer): a command
// that waits for more to print stops then, not at its next line
// ('leasewal log --follow | head -3' once head has its three).
func readerGone(ctx context.Context, w io.Writer) <-chan struct{} {
	gone := make(chan struct{})
	f, ok := w.(*os.File)
	if !ok {
		return gone
	}
	if info, err := f.Stat(); err != nil || info.Mode()&(os.ModeNamedPipe|os.ModeSocket) == 0 {
		return gone
	}
	fd := int32(f.Fd())
	go func() {
		for ctx.Err() == nil {
			fds := []unix.PollFd{{Fd: fd}} // no event asked: POLLERR (a pipe without readers) and POLLHUP come anyway
			if n, err := unix.Poll(fds, 250); err == nil && n > 0 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
				close(gone)
				return
			}
		}
	}()
	return gone
}

// writeJSON prints one compact JSON document and a newline.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // a failed write to stdout has nowhere better to be reported
}

// palette is how human output is drawn: colored (on a terminal only; JSON
// and TSV never are), fitted to a width (0: wide, every cell whole), as TSV,
// with or without headers.
type palette struct {
	on        bool
	width     int
	tsv       bool
	noHeaders bool
}

func (p palette) paint(s string, attrs ...color.Attribute) string {
	if !p.on || s == "" {
		return s
	}
	c := color.New(attrs...)
	c.EnableColor()
	return c.Sprint(s)
}

// word colors a state or a result by what it means to the reader.
func (p palette) word(s string) string {
	switch s {
	case string(state.Waiting), string(state.ResultEmpty), string(state.ResultRetry):
		return p.paint(s, color.FgYellow)
	case string(state.Leased), string(state.ResultExtended):
		return p.paint(s, color.FgCyan)
	case string(state.Completed), string(state.ResultCommitted), string(state.ResultAck), string(state.ResultOK):
		return p.paint(s, color.FgGreen)
	case string(state.Failed), string(state.Dead), string(state.ResultCancelled), string(state.ResultTimeout), string(state.ResultUnreachable):
		return p.paint(s, color.FgRed, color.Bold)
	}
	return s
}

// sheet is a table as the output format draws it: a box table fitted to the
// width, its longest cells cut with "…" (whole with -o wide), or tab-separated
// rows. A box table is drawn once every row is in, since its columns are as
// wide as their widest cell: it measures each row as it comes and keeps the
// first rows in memory, the rest in a spool (a MiB more in memory, then an
// unlinked temporary file),
// so that a listing of a million tasks holds its widths, not its rows.
type sheet struct {
	w        io.Writer
	p        palette
	header   []string
	rows     [][]string // for a box table, the first rows, drawn at Render
	inMemory int        // how many: sheetInMemory
	spill    *spool     // the rows after them, a line of JSON each
	widths   []int      // each column's widest cell so far, header included
	filled   []bool     // which columns have a cell that is not empty
	err      error      // for TSV, the first write error
	// keep names more columns that give way last, as the key ones do:
	// timestamps a reader asked for (log --absolute).
	keep map[string]bool
}

// sheetInMemory is how many rows a box table keeps in memory.
const sheetInMemory = 4096

// newTable returns a sheet in leasewal's style with these column headers
// (none for a name/value listing); --no-headers drops them.
func newTable(w io.Writer, p palette, header ...string) *sheet {
	s := &sheet{w: w, p: p, inMemory: sheetInMemory}
	if !p.noHeaders {
		s.header = header
	}
	if p.tsv && len(s.header) > 0 {
		s.writeTSV(s.header)
	}
	s.measure(s.header, false)
	return s
}

// Append adds a row of cells, already escaped where they come from the WAL.
func (s *sheet) Append(cells ...string) error {
	if s.p.tsv {
		return s.writeTSV(cells)
	}
	if s.p.width <= 0 {
		cells = capWideCells(cells)
	}
	s.measure(cells, true)
	if len(s.rows) < s.inMemory {
		s.rows = append(s.rows, cells)
		return nil
	}
	if s.spill == nil {
		s.spill = &spool{}
	}
	writeJSON(s.spill, cells)
	return nil
}

func (s *sheet) writeTSV(cells []string) error {
	if s.err == nil {
		escaped := make([]string, len(cells))
		for i, c := range cells {
			escaped[i] = tsvCell(c)
		}
		_, s.err = io.WriteString(s.w, strings.Join(escaped, "\t")+"\n")
	}
	return s.err
}

// measure widens the columns to these cells' widths, and notes which of
// them a row fills.
func (s *sheet) measure(cells []string, row bool) {
	for len(s.widths) < len(cells) {
		s.widths, s.filled = append(s.widths, 0), append(s.filled, false)
	}
	for i, c := range cells {
		s.widths[i] = max(s.widths[i], displayWidth(c))
		s.filled[i] = s.filled[i] || row && c != ""
	}
}

// eachRow hands fn every row, in order.
func (s *sheet) eachRow(fn func([]string) error) error {
	for _, row := range s.rows {
		if err := fn(row); err != nil {
			return err
		}
	}
	if s.spill == nil {
		return nil
	}
	return s.spill.eachRow(fn)
}

// Render draws the table (TSV rows are written as they come).
func (s *sheet) Render() error {
	if s.p.tsv {
		return s.err
	}
	if s.spill != nil {
		defer s.spill.discard()
	}
	shape := func(cells []string) []string { return cells }
	if s.p.width > 0 {
		kept := s.keptColumns()
		widths := s.fit(pick(s.widths, kept), pick(s.header, kept))
		shape = func(cells []string) []string {
			out := pick(cells, kept)
			for i, c := range out {
				out[i] = cutTo(c, widths[i])
			}
			return out
		}
	}
	header := shape(slices.Clone(s.header))
	// A stream draws rows as they come, so it is told each column's width:
	// its widest cell once fitted (a colored word is never cut, so fitting
	// may leave a column wider than it asked).
	drawn := make([]int, len(shape(make([]string, len(s.widths)))))
	widen := func(cells []string) error {
		for i, c := range cells {
			if i < len(drawn) {
				drawn[i] = max(drawn[i], displayWidth(c))
			}
		}
		return nil
	}
	widen(header)
	if err := s.eachRow(func(row []string) error { return widen(shape(slices.Clone(row))) }); err != nil {
		return err
	}
	cols := tw.Mapper[int, int]{}
	for i, w := range drawn {
		cols[i] = w + 2 // a cell's padding, one blank each side
	}
	t := tablewriter.NewTable(s.w, tablewriter.WithHeaderAutoFormat(tw.Off), tablewriter.WithRowAutoWrap(tw.WrapNone),
		tablewriter.WithStreaming(tw.StreamConfig{Enable: true}), tablewriter.WithColumnWidths(cols))
	if err := t.Start(); err != nil {
		return err
	}
	if len(header) > 0 {
		t.Header(anys(header)...)
	}
	if err := s.eachRow(func(row []string) error { return t.Append(anys(shape(row))...) }); err != nil {
		return err
	}
	return t.Close()
}

// wideCellCap is the most of a cell -o wide shows: a 64 KiB payload drawn
// whole in a box is mostly borders. JSON has every byte.
const wideCellCap = 256

// capWideCells cuts every cell longer than wideCellCap, saying in the cell
// how long it was and where to read it whole.
func capWideCells(cells []string) []string {
	for i, c := range cells {
		if utf8.RuneCountInString(c) > wideCellCap && !strings.Contains(c, "\x1b[") {
			cells[i] = string([]rune(c)[:wideCellCap]) + fmt.Sprintf("… (%s bytes; -o json for all)", thousands(len(c)))
		}
	}
	return cells
}

// thousands writes n with commas: 65,536.
func thousands(n int) string {
	digits := strconv.Itoa(n)
	var b strings.Builder
	for i, d := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}

// keptColumns are the columns a table too wide for its width draws: before
// any cell is cut, a column empty in every row gives its room to the ones
// that say something. nil keeps every column.
func (s *sheet) keptColumns() []int {
	if !s.hasRows() || s.tableWidth(s.widths) <= s.p.width {
		return nil
	}
	kept := []int{}
	for i, filled := range s.filled {
		if filled {
			kept = append(kept, i)
		}
	}
	return kept
}

func (s *sheet) hasRows() bool { return len(s.rows) > 0 }

// pick keeps the cells of the kept columns (all of them for nil).
func pick[T any](cells []T, kept []int) []T {
	if kept == nil {
		return slices.Clone(cells)
	}
	out := make([]T, 0, len(kept))
	for _, i := range kept {
		if i < len(cells) {
			out = append(out, cells[i])
		}
	}
	return out
}

// tableWidth is how wide a box table of these column widths is drawn: "│
// cell " per column, then the closing "│".
func (s *sheet) tableWidth(widths []int) int {
	sum := 1
	for _, w := range widths {
		sum += w + 3
	}
	return sum
}

func anys(cells []string) []any {
	out := make([]any, len(cells))
	for i, c := range cells {
		out[i] = c
	}
	return out
}

// textColumns are the columns of free text: they give way first.
var textColumns = map[string]bool{"DETAILS": true, "PAYLOAD": true, "REASON": true, "ACTOR": true, "CURRENT LEASES": true,
	"BACKLOG (FIFO)": true, "PROCESSED": true, "FAILED": true}

// keyColumns are read first: they give way last.
var keyColumns = map[string]bool{"TASK": true, "STATE": true, "SEQ": true, "TYPE": true, "DOMAIN": true}

// fit narrows the columns of these widths (with this header) so that the
// table is no wider than the width: the widest column of free text gives way
// first, down to 12 cells; then the widest other column but the key ones,
// then any, down to 3 cells ("ab…"), and on a very narrow terminal down to 1
// ("…"). It returns the widths the cells are cut to.
func (s *sheet) fit(widths []int, header []string) []int {
	total := func() int { return s.tableWidth(widths) }
	named := func(i int, set map[string]bool) bool { return i < len(header) && set[header[i]] }
	isKey := func(i int) bool { return named(i, keyColumns) || named(i, s.keep) }
	widestOf := func(keep func(i int) bool, floor int) int {
		widest := -1
		for i, w := range widths {
			if w > floor && keep(i) && (widest < 0 || w > widths[widest]) {
				widest = i
			}
		}
		return widest
	}
	for total() > s.p.width {
		widest := widestOf(func(i int) bool { return named(i, textColumns) }, 12)
		if widest < 0 {
			widest = widestOf(func(i int) bool { return !isKey(i) }, 3)
		}
		if widest < 0 && len(s.keep) > 0 { // what the reader asked to see goes after the rest is at "x…"
			widest = widestOf(func(i int) bool { return !isKey(i) }, 2)
		}
		if widest < 0 {
			widest = widestOf(func(int) bool { return true }, 3)
		}
		if widest < 0 { // a very narrow terminal: down to "…"
			widest = widestOf(func(int) bool { return true }, 1)
		}
		if widest < 0 {
			break // as narrow as it goes
		}
		widths[widest]--
	}
	return widths
}

// displayWidth is how many terminal cells s takes, as tablewriter draws it:
// a wide (East Asian) character takes two, the palette's color escapes none.
// Printable ASCII, most of what a table holds, is counted here.
func displayWidth(s string) int {
	n := plainPrefix(s)
	if n == len(s) {
		return n
	}
	return n + twwidth.Width(s[n:])
}

// plainPrefix is the length of s's leading run of printable ASCII.
func plainPrefix(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return i
		}
	}
	return len(s)
}

// cutTo shortens s to width cells, its last one "…". A colored word is left
// whole: cutting it would cut its color codes.
func cutTo(s string, width int) string {
	switch {
	case displayWidth(s) <= width || strings.Contains(s, "\x1b["):
		return s
	case plainPrefix(s) >= width-1:
		return s[:max(0, width-1)] + "…"
	}
	return twwidth.Truncate(s, max(0, width-1)) + "…"
}

// tsvEscapes are the escapes tsvCell makes first: built once, since a
// Replacer's first use builds its tables (a third of a long TSV's time).
var tsvEscapes = strings.NewReplacer("\\", "\\\\", "\t", "\\t", "\n", "\\n", "\r", "\\r")

// tsvCell escapes what would break a TSV row: tabs, newlines and backslashes
// (as \t, \n, \\), and control characters as escape does.
func tsvCell(c string) string {
	return escape(tsvEscapes.Replace(c))
}

// fields prints name/value pairs as a two-column table, skipping empty values.
// Values are escaped (they may come from the WAL), then a result or a state
// is colored.
func fields(w io.Writer, p palette, pairs ...string) error {
	t := newTable(w, p)
	for i := 0; i+1 < len(pairs); i += 2 {
		key, value := pairs[i], escape(pairs[i+1])
		if value == "" {
			continue
		}
		if key == "result" || key == "state" {
			value = p.word(value)
		}
		_ = t.Append(key, value)
	}
	return t.Render()
}

// escape makes a string from the WAL safe for a terminal: control characters
// (ESC, BEL, CR, newlines, C1 codes) and invalid UTF-8 are written as Go
// escapes, so that a payload can never move the cursor, recolor the screen or
// retitle the window. Color added by the palette is added after escaping.
func escape(s string) string {
	clean := true
	for _, r := range s {
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// spool holds output that must not be printed until the command is known to
// succeed (log -o json, which may meet a damaged record after a million good
// ones): the first MiB in memory, the rest in an unlinked temporary file, so
// that holding it costs no more than a MiB of memory.
type spool struct {
	mem  bytes.Buffer
	file *os.File
	// buf is the file's writes gathered: a write a record was a system
	// call a record (a quarter of a log of a million records' time).
	buf *bufio.Writer
	err error
}

const spoolInMemory = 1 << 20

func (s *spool) Write(p []byte) (int, error) {
	if s.file == nil && s.mem.Len()+len(p) > spoolInMemory && s.err == nil {
		if s.file, s.err = os.CreateTemp("", "leasewal-out-*"); s.err == nil {
			_ = os.Remove(s.file.Name()) // unlinked: gone when closed, or when the process dies
			s.buf = bufio.NewWriterSize(s.file, 64<<10)
			_, s.err = s.mem.WriteTo(s.buf)
		}
	}
	if s.file != nil && s.err == nil {
		_, s.err = s.buf.Write(p)
		return len(p), s.err
	}
	return s.mem.Write(p)
}

// rewind makes the file hold every write, and reads it from its start.
func (s *spool) rewind() error {
	if s.err == nil {
		s.err = s.buf.Flush()
	}
	if s.err != nil {
		return fmt.Errorf("holding the output in a temporary file: %w", s.err)
	}
	_, err := s.file.Seek(0, io.SeekStart)
	return err
}

// streamJSON writes everything held to w: the spool is a JSON document
// (lines) held until the command stands.
func (s *spool) streamJSON(w io.Writer) error { return s.copyTo(w) }

// copyTo writes everything held to w and releases it.
func (s *spool) copyTo(w io.Writer) error {
	if s.file == nil {
		_, err := s.mem.WriteTo(w)
		return err
	}
	defer s.file.Close()
	if err := s.rewind(); err != nil {
		return err
	}
	_, err := io.Copy(w, s.file)
	return err
}

// eachLine hands fn each line held, without its newline.
func (s *spool) eachLine(fn func([]byte) error) error {
	var from io.Reader = bytes.NewReader(s.mem.Bytes())
	if s.file != nil {
		if err := s.rewind(); err != nil {
			return err
		}
		from = s.file
	}
	lines := bufio.NewScanner(from)
	lines.Buffer(nil, 64<<20)
	for lines.Scan() {
		if err := fn(lines.Bytes()); err != nil {
			return err
		}
	}
	return lines.Err()
}

// eachRow hands fn each line held as the cells it encodes (a JSON array of
// strings, as a table's or the log's rows are held).
func (s *spool) eachRow(fn func([]string) error) error {
	return s.eachLine(func(line []byte) error {
		var cells []string
		if err := json.Unmarshal(line, &cells); err != nil {
			return fmt.Errorf("reading held rows back: %w", err)
		}
		return fn(cells)
	})
}

// discard drops everything held.
func (s *spool) discard() {
	if s.file != nil {
		s.file.Close()
	}
	s.mem.Reset()
}

// when renders a timestamp of a view for a table: as it is in a wide table
// or TSV, relative to at in a fitted one ("in 25s", "3m ago", "now").
func (p palette) when(stamp string, at int64) string {
	if p.width == 0 || stamp == "" {
		return stamp
	}
	ms := api.ParseTime(stamp)
	if ms == 0 {
		return stamp
	}
	switch d := ms - at; {
	case d > 0:
		return "in " + api.Age(d)
	case d < 0:
		return api.Age(-d) + " ago"
	}
	return "now"
}

// line fits one line of prose to a fitted table's width.
func (p palette) line(s string) string {
	if p.width == 0 {
		return s
	}
	return cutLine(s, p.width)
}
