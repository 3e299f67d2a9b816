package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/service"
)

// session is one invocation's service: the server's (--server) through the
// Go client, or the local one on --wal; written are the records a local
// write appended (an answer that cannot be printed after them is exit 8).
type session struct {
	svc     api.Service
	written written
}

// session opens this invocation's service.
func (e env) session() (*session, error) {
	s := &session{}
	if e.Server != "" {
		c, err := e.client(false)
		if err != nil {
			return nil, err
		}
		s.svc = c
		return s, nil
	}
	s.svc = service.New(service.Options{WAL: e.wal(), MaxRetries: e.MaxRetries,
		Committed: s.written.add})
	return s, nil
}

// call runs one operation of the service and presents its answer: with
// -o json the typed answer as JSON, else table draws it. consequence is
// what a CANCELLED caller is told became of its call.
func call[A any](e env, op func(context.Context, api.Service) (A, error), table func(A) func(io.Writer, palette) error, recovery, consequence string) error {
	s, err := e.session()
	if err != nil {
		return err
	}
	v, err := op(e.context(), s.svc)
	return present(e, s, v, e.remoteError(err), table, recovery, consequence)
}

// present prints an answer (or the EMPTY or CANCELLED in its place) with
// its exit code, or returns the error.
func present[A any](e env, s *session, v A, err error, table func(A) func(io.Writer, palette) error, recovery, consequence string) error {
	var (
		empty     *api.Empty
		cancelled *api.Cancelled
	)
	switch {
	case errors.As(err, &empty):
		return e.print(answer{doc: empty, outcome: empty.Result, table: emptyTable(empty)}, s.written)
	case errors.As(err, &cancelled):
		return e.print(answer{doc: cancelled, outcome: cancelled.Result, table: cancelledTable(cancelled),
			advice:   "CANCELLED: " + escape(cancelled.Reason) + "; " + consequence,
			recovery: "'leasewal inspect " + cancelled.TaskID + "' shows who holds the task now; stop working on it"}, s.written)
	case err != nil:
		return err
	}
	if ack, ok := any(v).(api.Ack); ok && recovery == "" { // the request id the task was given
		recovery = ackRecovery(ack.RequestID)
	}
	return e.print(answer{doc: v, outcome: api.OutcomeOf(v), table: table(v), recovery: recovery}, s.written)
}

func emptyTable(v *api.Empty) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "reason", v.Reason, "next eligible at", deref(v.NextEligibleAt), "live tasks", fmt.Sprint(v.Live))
	}
}

func cancelledTable(v *api.Cancelled) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		return fields(w, p, append([]string{"result", string(v.Result), "task", v.TaskID, "lease", v.LeaseID, "reason", v.Reason}, nextCells(v.Next)...)...)
	}
}

// interrupts catches SIGINT and SIGTERM for a command that waits, from
// before its wait begins (a signal then is kept, not fatal): the context
// it gives ends at the first one, which caught then names.
type interrupts struct {
	sigs   chan os.Signal
	caught os.Signal
	done   chan struct{}
}

func (e env) catchInterrupts() (*interrupts, context.Context, context.CancelFunc) {
	i := &interrupts{sigs: make(chan os.Signal, 1), done: make(chan struct{})}
	signal.Notify(i.sigs, syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithCancel(e.context())
	go func() {
		defer close(i.done)
		select {
		case i.caught = <-i.sigs:
			cancel()
		case <-ctx.Done():
		}
	}()
	return i, ctx, func() {
		cancel()
		<-i.done
		signal.Stop(i.sigs)
	}
}

// signal is the signal that ended the context; call it only once the
// context is done.
func (i *interrupts) signal() os.Signal {
	<-i.done
	return i.caught
}

// exitAfter is the exit status of a shell after the signal: 130 for
// SIGINT, 143 for SIGTERM.
func exitAfter(sig os.Signal) error {
	if sig == syscall.SIGINT {
		return &exitStatus{code: 130}
	}
	return &exitStatus{code: 143}
}

// signalName is a signal as a shell names it (SIGINT).
func signalName(sig os.Signal) string { return unix.SignalName(sig.(syscall.Signal)) }

// remoteError says what a client's error means for this command line.
func (e env) remoteError(err error) error {
	var (
		untrusted *client.UntrustedError
		none      *client.NoServerError
		removed   *client.RemovedError
		refused   *api.Error
	)
	switch {
	case errors.As(err, &refused) && refused.Kind == "Unauthorized":
		msg := "the server refused the token: give the file holding its token with --token-file F (or LEASEWAL_TOKEN_FILE)"
		if e.TokenFile == "" {
			msg = "the server needs a token: give the file holding it with --token-file F (or LEASEWAL_TOKEN_FILE)"
		}
		return &api.Error{Result: "ERROR", Kind: refused.Kind, Message: msg, Exit: refused.Exit}
	case errors.As(err, &untrusted):
		return usageErr("%v: give the certificate that signs it with --ca FILE (or LEASEWAL_CA)", untrusted)
	case errors.As(err, &removed):
		return removed
	case errors.As(err, &none):
		return fmt.Errorf("%v: check --server (or LEASEWAL_SERVER) and that 'leasewal serve' runs", none)
	}
	return err
}
