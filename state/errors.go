package state

import "fmt"

// RefusalKind classifies why a command was refused; the CLI maps each kind to
// one documented exit code.
type RefusalKind string

// Refusal kinds.
const (
	// InvalidInput: the command's arguments are unusable (exit 2).
	InvalidInput RefusalKind = "InvalidInput"
	// RequestConflict: a request id was reused for a different request (exit 2).
	RequestConflict RefusalKind = "RequestConflict"
	// NotFound: the task or lease named does not exist (exit 4).
	NotFound RefusalKind = "NotFound"
)

// Refusal is a command the current state does not allow. Nothing is written.
type Refusal struct {
	Kind RefusalKind
	Msg  string
}

func (e *Refusal) Error() string { return e.Msg }

func refuse(kind RefusalKind, format string, args ...any) error {
	return &Refusal{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// RecordError is a record that breaks a rule: a precondition of its type, the
// sequence, or an invariant. In a WAL it means the WAL is corrupt or was
// written by a buggy coordinator; nothing after it can be trusted.
type RecordError struct {
	Seq       int64
	Type      RecordType
	Invariant string // the invariant the record would break, when it is one of SPEC's
	Msg       string
}

func (e *RecordError) Error() string {
	s := fmt.Sprintf("record %d (%s): %s", e.Seq, e.Type, e.Msg)
	if e.Invariant != "" {
		s += " [" + e.Invariant + "]"
	}
	return s
}

// The invariants of SPEC §2, named as RecordError reports them.
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
