package cmd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"leasewal/api"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"leasewal/server"
	"leasewal/state"
	"leasewal/store"
)

// answer is what a verb decided: its JSON document, how a table draws it, and
// the outcome that picks its exit code (outcomeExit). It is printed after the
// lock is released.
type answer struct {
	doc     any                                // the JSON document; a jsonStreamer is streamed
	table   func(w io.Writer, p palette) error // the human form
	outcome state.Outcome
	advice  string // one stderr line after the answer (what a CANCELLED caller should do)
	// recovery says how to get the answer again if it cannot be printed after
	// its records were written (exit 8).
	recovery string
}

// jsonStreamer is a document too large to build whole (a listing of every task).
type jsonStreamer interface{ streamJSON(w io.Writer) error }

// storeOptions are the store options every operation of this invocation uses.
func (e env) storeOptions() store.Options {
	return store.Options{
		Path:        e.WAL,
		LockTimeout: e.LockTimeout,
		Actor:       e.Actor,
		Clock:       e.clock,
		Fault:       e.Fault,
		Warn:        func(msg string) { fmt.Fprintf(e.stderr, "leasewal: warning: %s\n", msg) },
	}
}

// write runs decide as one writing operation and prints its answer.
func (e env) write(decide func(tx *store.Tx) (answer, error)) error {
	return e.operate(e.storeOptions(), true, decide)
}

// read runs decide under a shared lock and prints its answer.
func (e env) read(decide func(tx *store.Tx) (answer, error)) error {
	return e.operate(e.storeOptions(), false, decide)
}

// operate opens a handle with opts, runs decide once in it, and prints the
// answer once the lock is released (the handle stays open until then, since
// a listing draws from its state).
//
// Inside a server (serve), an operation on the plain options joins the
// server's next batch instead (group commit: one write and one fsync for the
// batch); one that reads the records itself runs on a handle of its own.
func (e env) operate(opts store.Options, writing bool, decide func(tx *store.Tx) (answer, error)) error {
	if e.batch != nil && opts.OnRecord == nil && opts.BeforeRecord == nil && opts.Verifier == nil && !opts.FullReplay {
		a, committed, err := e.inBatch(decide)
		if err != nil {
			return err
		}
		return e.print(a, committed)
	}
	h := store.Open(opts)
	defer h.Close()
	return e.operateOn(h, writing, decide)
}

// inBatch decides in the server's next batch (group commit), and returns
// once the batch is durable.
func (e env) inBatch(decide func(tx *store.Tx) (answer, error)) (answer, []state.Record, error) {
	var a answer
	committed, err := e.batch.Run(e.context(), func(tx *store.Tx) error {
		var err error
		a, err = decide(tx)
		return err
	})
	return a, committed, err
}

// committer commits in tx the records of the decision it is given, or passes
// its refusal on: committer(tx)(tx.State.DecideX(…)).
func committer(tx *store.Tx) func(state.Decision, error) (state.Decision, error) {
	return func(d state.Decision, err error) (state.Decision, error) {
		if err != nil {
			return d, err
		}
		return d, tx.Commit(d.Records)
	}
}

// runAck runs a verb that creates a task (submit, requeue): it commits the
// decision and answers ACK with the task.
func (e env) runAck(decide func(st *state.State, now int64) (state.Decision, error)) error {
	return e.write(func(tx *store.Tx) (answer, error) {
		d, err := committer(tx)(decide(tx.State, tx.Now))
		if err != nil {
			return answer{}, err
		}
		t, err := tx.State.Task(d.TaskID)
		if err != nil {
			return answer{}, err
		}
		return ackAnswer(d, t), nil
	})
}

// operateOn is operate on a handle the caller holds.
func (e env) operateOn(h *store.Handle, writing bool, decide func(tx *store.Tx) (answer, error)) error {
	a, committed, err := decideOn(h, writing, decide)
	if err != nil {
		return err
	}
	return e.print(a, committed)
}

// decideOn runs decide as one operation on h and returns its answer and the
// records it committed, unprinted: a verb that waits decides many times and
// prints once.
func decideOn(h *store.Handle, writing bool, decide func(tx *store.Tx) (answer, error)) (answer, []state.Record, error) {
	var a answer
	var committed []state.Record
	run := func(tx *store.Tx) error {
		var err error
		a, err = decide(tx)
		committed = tx.Committed
		return err
	}
	var err error
	if writing {
		err = h.Write(run)
	} else {
		err = h.Read(run)
	}
	return a, committed, err
}

// waitUntil is when a waiter next looks again: at the next time-based event
// (next, unix ms; 0 for none) or at its deadline, whichever comes first. A
// zero deadline is no deadline.
func waitUntil(next int64, deadline time.Time) time.Time {
	if next == 0 {
		return deadline
	}
	at := time.UnixMilli(next)
	if deadline.IsZero() || at.Before(deadline) {
		return at
	}
	return deadline
}

// resultInterrupted is the answer of a wait ended by SIGINT or SIGTERM.
const resultInterrupted state.Outcome = "INTERRUPTED"

// interrupter catches SIGINT and SIGTERM for a command that waits, from
// before its wait can begin (a signal then is kept, not fatal), and ends the
// wait of the watcher it is given.
type interrupter struct {
	sigs   chan os.Signal
	caught chan os.Signal
	done   chan struct{}
	got    os.Signal
}

func catchInterrupts() *interrupter {
	i := &interrupter{sigs: make(chan os.Signal, 1), caught: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(i.sigs, syscall.SIGINT, syscall.SIGTERM)
	return i
}

// watch ends w's waits at the first signal, caught already or to come.
func (i *interrupter) watch(w *store.Watcher) {
	if i == nil {
		return
	}
	go func() {
		select {
		case s := <-i.sigs:
			i.caught <- s
			w.Interrupt()
		case <-i.done:
		}
	}()
}

// signalled is the signal that came, nil while none has (or for no
// interrupter: a server's request ends with the request, not by a signal).
func (i *interrupter) signalled() os.Signal {
	if i == nil {
		return nil
	}
	select {
	case i.got = <-i.caught:
	default:
	}
	return i.got
}

// stop stops catching: the signals' default actions are back.
func (i *interrupter) stop() {
	if i == nil {
		return
	}
	signal.Stop(i.sigs)
	close(i.done)
}

// waiter is what a command that waits (wait, lease --wait) waits with: the
// WAL's watcher, whose waits end early at SIGINT or SIGTERM for a local
// command (caught from before the watch exists, so a signal is never
// fatal), or inside a server when the request's client goes or the server
// stops.
type waiter struct {
	watcher    *store.Watcher
	interrupts *interrupter // nil inside a server: a request ends with its request, not by a signal
	ctx        context.Context
	release    func()
}

func (e env) newWaiter(h *store.Handle) (*waiter, error) {
	var interrupts *interrupter
	if e.batch == nil {
		interrupts = catchInterrupts()
	}
	w, err := h.Watch()
	if err != nil {
		interrupts.stop()
		return nil, fmt.Errorf("watching %s for changes: %w", e.WAL, err)
	}
	interrupts.watch(w)
	return &waiter{watcher: w, interrupts: interrupts, ctx: e.context(), release: e.interruptWhenDone(w)}, nil
}

// wait blocks until the WAL may have changed, until is reached, or a
// signal came; server.ErrClientGone once the request's client has gone.
func (x *waiter) wait(until time.Time) error {
	if _, err := x.watcher.Wait(until); err != nil && !errors.Is(err, store.ErrInterrupted) {
		return err
	}
	if x.ctx.Err() != nil {
		return server.ErrClientGone
	}
	return nil
}

// signalled is the signal that came, nil while none has (and before the
// waiter exists).
func (x *waiter) signalled() os.Signal {
	if x == nil {
		return nil
	}
	return x.interrupts.signalled()
}

func (x *waiter) close() {
	x.release()
	x.interrupts.stop()
	x.watcher.Close()
}

// interrupted prints a's answer as INTERRUPTED and exits as a shell does
// after the signal: 130 for SIGINT, 143 for SIGTERM.
func (e env) interrupted(a answer, sig os.Signal) error {
	if err := e.print(a, nil); err != nil {
		return err
	}
	if sig == syscall.SIGINT {
		return &exitStatus{code: 130}
	}
	return &exitStatus{code: 143}
}

// needsWallClock refuses an explicit --now for a verb that waits in real time.
func (e env) needsWallClock(what string) error {
	if e.Now != "" {
		return usageErr("%s waits in real time, so it needs the wall clock: drop --now (or LEASEWAL_NOW)", what)
	}
	return nil
}

// print writes the answer to stdout and returns its exit status. A failed
// write is exit 8 when records were written (the caller must learn that they
// were), quiet when stdout was closed on a command that wrote nothing
// ('leasewal log | head -1'), and exit 1 otherwise.
func (e env) print(a answer, committed []state.Record) error {
	out := &stickyWriter{w: bufio.NewWriterSize(e.stdout, 8<<10)}
	var err error
	switch s, streams := a.doc.(jsonStreamer); {
	case e.Output == "json" && streams:
		err = s.streamJSON(out)
	case e.Output == "json":
		writeJSON(out, a.doc)
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
		case len(committed) > 0:
			return &answerLostError{first: committed[0].Seq, last: committed[len(committed)-1].Seq, hint: a.recoveryHint(), err: err}
		case errors.Is(err, syscall.EPIPE):
			return nil
		}
		return fmt.Errorf("writing the answer to stdout: %w", err)
	}
	if a.advice != "" {
		fmt.Fprintf(e.stderr, "leasewal: %s\n", a.advice)
	}
	if code := outcomeExit(a.outcome); code != ExitOK {
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
