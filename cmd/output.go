package cmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"unicode/utf8"

	"github.com/fatih/color"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
	"golang.org/x/sys/unix"

	"leasewal/state"
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

// writeJSON prints one compact JSON document and a newline.
func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // a failed write to stdout has nowhere better to be reported
}

// palette colors words for the table output only; JSON is never colored.
type palette struct{ on bool }

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

// newTable returns a table in leasewal's style.
func newTable(w io.Writer, header ...any) *tablewriter.Table {
	t := tablewriter.NewTable(w, tablewriter.WithHeaderAutoFormat(tw.Off), tablewriter.WithRowAutoWrap(tw.WrapNone))
	if len(header) > 0 {
		t.Header(header...)
	}
	return t
}

// fields prints name/value pairs as a two-column table, skipping empty values.
// Values are escaped (they may come from the WAL), then a result or a state
// is colored.
func fields(w io.Writer, p palette, pairs ...string) error {
	t := newTable(w)
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
	err  error
}

const spoolInMemory = 1 << 20

func (s *spool) Write(p []byte) (int, error) {
	if s.file == nil && s.mem.Len()+len(p) > spoolInMemory && s.err == nil {
		if s.file, s.err = os.CreateTemp("", "leasewal-out-*"); s.err == nil {
			_ = os.Remove(s.file.Name()) // unlinked: gone when closed, or when the process dies
			_, s.err = s.mem.WriteTo(s.file)
		}
	}
	if s.file != nil && s.err == nil {
		_, s.err = s.file.Write(p)
		return len(p), s.err
	}
	return s.mem.Write(p)
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
	if s.err != nil {
		return fmt.Errorf("holding the output in a temporary file: %w", s.err)
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err := io.Copy(w, s.file)
	return err
}

// discard drops everything held.
func (s *spool) discard() {
	if s.file != nil {
		s.file.Close()
	}
	s.mem.Reset()
}
