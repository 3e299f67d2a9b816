package cmd

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/service"

	"github.com/leasewal/leasewal/state"
)

// answer is what a verb decided: its JSON document, how a table draws it, and
// the outcome that picks its exit code (outcomeExit). It is printed after the
// lock is released.
type answer struct {
	doc     any                                // the JSON document; a jsonStreamer is streamed
	table   func(w io.Writer, p palette) error // the human form
	outcome api.Outcome
	advice  string // one stderr line after the answer (what a CANCELLED caller should do)
	// recovery says how to get the answer again if it cannot be printed after
	// its records were written (exit 8).
	recovery string
	// prom is the Prometheus text form (-o prom), for stats.
	prom func(w io.Writer) error
}

// jsonStreamer is a document too large to build whole (a listing of every task).
type jsonStreamer interface{ streamJSON(w io.Writer) error }

// wal is where and how every operation of this invocation works on the
// WAL.
func (e env) wal() service.WAL {
	return service.WAL{
		Path:        e.WAL,
		LockTimeout: e.LockTimeout,
		Actor:       e.Actor,
		Clock:       e.clock,
		Fault:       e.Fault,
		Warn:        func(msg string) { fmt.Fprintf(e.stderr, "leasewal: warning: %s\n", msg) },
		Progress:    e.progress("reading " + e.WAL),
	}
}

// local is the local service on this invocation's WAL, for the operations
// that work on the WAL's own file (verify, repair, backup, report's trace).
func (e env) local() *service.Local {
	return service.New(service.Options{WAL: e.wal(), MaxRetries: e.MaxRetries})
}

// resultInterrupted is the answer of a wait ended by SIGINT or SIGTERM.
const resultInterrupted api.Outcome = "INTERRUPTED"

// interrupted prints a's answer as INTERRUPTED and exits as a shell does
// after the signal: 130 for SIGINT, 143 for SIGTERM.
func (e env) interrupted(a answer, sig os.Signal) error {
	if err := e.print(a, written{}); err != nil {
		return err
	}
	return exitAfter(sig)
}

// needsWallClock refuses an explicit --now for a verb that waits in real time.
func (e env) needsWallClock(what string) error {
	if e.Now != "" {
		return usageErr("%s waits in real time, so it needs the wall clock: drop --now (or LEASEWAL_NOW)", what)
	}
	return nil
}

// written is the range of records an operation appended (none: first 0),
// and the time it wrote them at.
type written struct{ first, last, at int64 }

// add notes records appended.
func (w *written) add(recs []state.Record) {
	if len(recs) == 0 {
		return
	}
	if w.first == 0 {
		w.first = recs[0].Seq
	}
	w.last, w.at = recs[len(recs)-1].Seq, recs[len(recs)-1].At
}

// warnAhead warns when a write's --now was ahead of the wall clock: every
// later command of the WAL counts from that time (time never runs backwards
// in a WAL), so tasks die and leases lapse early. --now is for stories and
// tests.
func (e env) warnAhead(w written) {
	if w.first == 0 || e.Now == "" {
		return
	}
	if wall, err := e.wallClock(); err == nil && w.at-wall > 1000 {
		fmt.Fprintf(e.stderr, "leasewal: warning: written at --now %s, %s ahead of the clock: every later command of this WAL counts from that time; --now is for stories and tests, not a WAL in use\n",
			formatTime(w.at), api.Age(w.at-wall))
	}
}

// print writes the answer to stdout and returns its exit status. A failed
// write is exit 8 when records were written (the caller must learn that they
// were), quiet when stdout was closed on a command that wrote nothing
// ('leasewal log | head -1'), and exit 1 otherwise.
func (e env) print(a answer, w written) error {
	out := &stickyWriter{w: bufio.NewWriterSize(e.stdout, 8<<10)}
	var err error
	switch s, streams := a.doc.(jsonStreamer); {
	case e.Output == "json" && streams:
		err = s.streamJSON(out)
	case e.Output == "json":
		writeJSON(out, a.doc)
	case e.Output == "prom" && a.prom != nil:
		err = a.prom(out)
	default:
		err = a.table(out, e.palette())
	}
	if err == nil {
		err = out.flush()
	}
	if err != nil {
		if !out.failed() {
			return err // not about stdout: a command's own failure
		}
		switch {
		case w.first > 0:
			return &answerLostError{first: w.first, last: w.last, hint: a.recoveryHint(), err: err}
		case !errors.Is(err, syscall.EPIPE):
			return fmt.Errorf("writing the answer to stdout: %w", err)
		}
		// The reader went away ('leasewal wait … | head -1'): a command that
		// wrote nothing exits with its outcome's code, quietly.
	} else if a.advice != "" {
		fmt.Fprintf(e.stderr, "leasewal: %s\n", a.advice)
	}
	e.warnAhead(w)
	if code := api.OutcomeExit(a.outcome); code != ExitOK {
		return &exitStatus{code: code}
	}
	return nil
}

func (a answer) recoveryHint() string {
	if a.recovery != "" {
		return a.recovery
	}
	return "'leasewal log --from SEQ' shows what was recorded"
}

// palette is how this invocation draws human output.
func (e env) palette() palette {
	p := palette{on: e.Color && e.Output != "tsv", tsv: e.Output == "tsv", noHeaders: e.NoHeaders}
	if e.Output == "table" {
		p.width = e.terminalWidth()
	}
	return p
}

// stickyWriter keeps the first write error and drops everything after it, so
// that a renderer need not check each write.
type stickyWriter struct {
	w   *bufio.Writer
	err error
}

func (s *stickyWriter) Write(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.w.Write(p)
	s.err = err
	return n, err
}

func (s *stickyWriter) flush() error {
	if s.err == nil {
		s.err = s.w.Flush()
	}
	return s.err
}

func (s *stickyWriter) failed() bool { return s.err != nil }

// clock resolves --now against the last record's time: time never runs
// backwards inside a WAL. The wall clock behind the last record is taken as
// the last record's time, with a warning when it is behind by over a second.
func (e env) clock(lastAt int64) (int64, error) {
	wall, err := e.wallClock()
	if err != nil {
		return 0, err
	}
	if e.Now == "" {
		if lastAt-wall > 1000 {
			fmt.Fprintf(e.stderr, "leasewal: warning: the clock (%s) is %s behind the last record's time (%s); using that time, so no lease expires until the clock catches up: check the clock, or the time of the records written with --now\n",
				formatTime(wall), api.Age(lastAt-wall), formatTime(lastAt))
		}
		return max(wall, lastAt), nil
	}
	now, err := api.ParseTimeFlag("--now", e.Now, lastAt, wall)
	if err != nil {
		return 0, err
	}
	if now < lastAt {
		return 0, usageErr("--now %s is before the last record's time %s; time never runs backwards in a WAL: give a later time or +DURATION", e.Now, formatTime(lastAt))
	}
	return now, nil
}

// wallClock is the time now in unix ms: the machine's, or what the test
// clock file says: +D or -D moves the machine's clock by D (a node whose
// clock runs fast), a time stands in for it (a clock that stands still).
// The file is read at every call, so that a test can move a running
// server's clock.
func (e env) wallClock() (int64, error) {
	wall := time.Now().UnixMilli()
	if e.TestClock == "" {
		return wall, nil
	}
	b, err := os.ReadFile(e.TestClock)
	if err != nil {
		return 0, fmt.Errorf("LEASEWAL_TEST_CLOCK: %w", err)
	}
	text := strings.TrimSpace(string(b))
	if rest, ok := strings.CutPrefix(text, "-"); ok {
		d, err := api.ParseSpan(rest)
		if err != nil {
			return 0, usageErr("LEASEWAL_TEST_CLOCK %s holds %q: give +D, -D or a time", e.TestClock, text)
		}
		return wall - d.Milliseconds(), nil
	}
	return api.ParseTimeFlag("LEASEWAL_TEST_CLOCK "+e.TestClock, text, 0, wall)
}
