package cmd

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/internal/trace"
	"github.com/leasewal/leasewal/state"
	"github.com/spf13/cobra"
)

// Exit codes: the scripting contract (docs/reference.md#exit-codes).
const (
	ExitOK          = api.ExitOK
	ExitInternal    = api.ExitInternal
	ExitUsage       = api.ExitUsage
	ExitCancelled   = api.ExitCancelled
	ExitNotFound    = api.ExitNotFound
	ExitDamaged     = api.ExitDamaged
	ExitLocked      = api.ExitLocked
	ExitContract    = api.ExitContract
	ExitAnswerLost  = api.ExitAnswerLost
	ExitWaitedOut   = api.ExitWaitedOut
	ExitUnknownSent = api.ExitUnknownSent
	ExitTasksFailed = api.ExitTasksFailed
)

// usageErr is bad input found by the command line itself: a flag, a time, a
// duration, a file argument.
func usageErr(format string, args ...any) error { return api.Usage(format, args...) }

// answerLostError is an operation that was recorded but whose answer could
// not be written to stdout.
type answerLostError struct {
	first, last int64
	hint        string
	err         error
}

func (e *answerLostError) Error() string {
	if e.first == 0 { // run: many operations
		return fmt.Sprintf("the worker's operations WERE recorded but its lines could not be written (%v); %s", e.err, e.hint)
	}
	recs := fmt.Sprintf("record %d", e.first)
	if e.last != e.first {
		recs = fmt.Sprintf("records %d to %d", e.first, e.last)
	}
	return fmt.Sprintf("the operation WAS recorded (%s) but its answer could not be written (%v); %s", recs, e.err, e.hint)
}

func (e *answerLostError) Unwrap() error { return e.err }

// advice is what a person should do about a refusal: state names the fact,
// the command line says which flag or command helps. c is the command that
// was refused (nil: a server's answer, whose fields are the flags' names).
func advice(e *state.Error, c *cobra.Command) string {
	switch {
	case e.Kind == state.NotFound && e.Subject == "task":
		return "'leasewal inspect' lists the tasks"
	case e.Kind == state.NotFound && e.Subject == "lease":
		return "check --task and --lease ('leasewal inspect T' lists a task's leases)"
	case e.Kind == state.RequestConflict && e.Subject == "result":
		return "'leasewal inspect T -o json' shows the result kept"
	case e.Kind == state.RequestConflict:
		return "use a new --request-id for a new request"
	case e.Subject == "payload" && strings.Contains(e.Msg, "empty"):
		return "give --payload or --payload-file with some content"
	case e.Subject == "payload" && strings.Contains(e.Msg, "over the limit"):
		return "store large data elsewhere and submit a reference to it"
	case e.Subject == "payload":
		return "encode binary data (e.g. base64) before submitting it"
	case e.Subject == "lease" || e.Subject == "token":
		return "pass the id the lease or acquire answer printed"
	case e.Subject != "" && e.Kind == state.InvalidInput:
		return fixField(e.Subject, c)
	}
	return ""
}

// fixField names what to fix for a refused field: c's flag of that name, or
// its argument (pause QUEUE); nothing rather than a flag c does not have.
func fixField(field string, c *cobra.Command) string {
	flag := strings.ReplaceAll(field, "_", "-")
	if c == nil || c.Flags().Lookup(flag) != nil {
		return "fix --" + flag
	}
	if arg := strings.ToUpper(field); slices.Contains(positionals(c), arg) {
		return "fix " + arg
	}
	return ""
}

// withAdvice is err's message with the advice for a refusal appended.
func withAdvice(err error, c *cobra.Command) string {
	msg := err.Error()
	var remote *api.Error
	if errors.As(err, &remote) && remote.Error() == msg { // the server's message says it all
		msg = remote.Message
	}
	var (
		refusal *state.Error
		unknown *client.UnknownOutcomeError
	)
	if errors.As(err, &refusal) {
		if a := advice(refusal, c); a != "" && !strings.Contains(msg, a) {
			msg += "; " + a
		}
	}
	if errors.As(err, &unknown) {
		msg += " (--request-id), or look with 'leasewal inspect'"
	}
	return strings.ReplaceAll(msg, "\n", " ")
}

// class is how an error is reported: its exit code, its JSON "error" kind, and
// the record it concerns, if any.
type class struct {
	code int
	kind string
	seq  *int64
}

// classify maps every error a command can return to its documented exit
// code: a server's answer, the client's and the command line's own errors
// here, the local service's by service.Classify. The two are the only
// places exit codes for errors are chosen.
func classify(err error) class {
	var (
		remote  *api.Error
		badFile *client.FileError
		lost    *answerLostError
		unknown *client.UnknownOutcomeError
		removed *client.RemovedError
	)
	switch {
	case errors.As(err, &remote): // a server's answer: its kind and exit code
		return class{code: remote.Exit, kind: remote.Kind, seq: remote.Seq}
	case errors.As(err, &badFile):
		return class{code: ExitUsage, kind: "Usage"}
	case errors.As(err, &removed):
		return class{code: ExitUnknownSent, kind: "NodeRemoved"}
	case errors.As(err, &unknown):
		return class{code: ExitUnknownSent, kind: "OutcomeUnknown"}
	case errors.As(err, &lost):
		return class{code: ExitAnswerLost, kind: "AnswerLost", seq: &lost.first}
	}
	if c, ok := service.Classify(err); ok {
		return class{code: c.Code, kind: c.Kind, seq: c.Seq}
	}
	return class{code: ExitInternal, kind: "Internal"}
}

// errorView is the JSON shape of every error.
type errorView struct {
	api.Error
	Mismatches []trace.Mismatch `json:"mismatches,omitempty"`
}
