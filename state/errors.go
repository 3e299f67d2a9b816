package state

import "fmt"

// Kind classifies why a command was refused; the CLI maps each kind to one
// documented exit code.
type Kind string

// The kinds of refusal.
const (
	// InvalidInput: the command's arguments are unusable.
	InvalidInput Kind = "InvalidInput"
	// RequestConflict: a request id was reused for a different request.
	RequestConflict Kind = "RequestConflict"
	// NotFound: the task, lease or domain named does not exist.
	NotFound Kind = "NotFound"
	// NotAllowed: the task is in a state where the command means nothing.
	NotAllowed Kind = "NotAllowed"
	// BacklogOrdering, TokenMismatch, LeaseNotFound: a work-lease caller
	// broke the work lease's contract (its exceptions).
	BacklogOrdering Kind = "BacklogOrdering"
	TokenMismatch   Kind = "TokenMismatch"
	LeaseNotFound   Kind = "LeaseNotFound"
)

// Error is a command the current state does not allow, naming the fact; the
// caller adds what to do. Nothing is written.
type Error struct {
	Kind Kind
	// Subject is what the refusal is about, named as the request's field
	// that gives it ("task", "lease", "request_id", "queue", "max_attempts",
	// …); empty when it is no one field.
	Subject string
	Msg     string
}

func (e *Error) Error() string { return e.Msg }

func refuse(kind Kind, subject, format string, args ...any) error {
	return &Error{Kind: kind, Subject: subject, Msg: fmt.Sprintf(format, args...)}
}

// RecordError is a record that breaks a rule: a precondition of its type, the
// sequence, or an invariant. In a WAL it means the WAL is corrupt or was
// written by a buggy coordinator; nothing after it can be trusted.
type RecordError struct {
	Seq       int64
	Type      RecordType
	Invariant string // the invariant the record would break, when it is one of docs/guarantees.md's
	Msg       string
}

func (e *RecordError) Error() string {
	s := fmt.Sprintf("record %d (%s): %s", e.Seq, e.Type, e.Msg)
	if e.Invariant != "" {
		s += " [" + e.Invariant + "]"
	}
	return s
}

// The invariants of a task (docs/guarantees.md#task-semantics), named as RecordError reports them.
const (
	InvOneLease     = "invariant 1: a task has at most one current lease; a lease refers to exactly one task"
	InvLeaseByState = "invariant 2: WAITING has no lease, LEASED has exactly one"
	InvTerminal     = "invariant 3: terminal tasks never transition again"
	InvAttempts     = "invariant 4: attempt counts LeaseGranted records and never exceeds max_attempts"
	InvSequence     = "invariant 5: seq without gaps, at never decreasing, lease ids strictly increasing"
)

// violation builds the error for a record that breaks a precondition.
type violation struct {
	invariant string
	msg       string
}

func (v *violation) Error() string { return v.msg }

func breaks(invariant, format string, args ...any) error {
	return &violation{invariant: invariant, msg: fmt.Sprintf(format, args...)}
}

func invalid(format string, args ...any) error {
	return &violation{msg: fmt.Sprintf(format, args...)}
}

// firstErr is err if there is one, else alt: a lookup's damage wins over
// what its answer would have meant.
func firstErr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}
