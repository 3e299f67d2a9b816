package cmd

import (
	"errors"
	"fmt"
	"io/fs"

	"leasewal/state"
	"leasewal/wal"
)

// usageError is bad input found by the command line itself: a flag, a time, a
// duration, a file argument.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usageErr(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// damageError is a WAL that cannot be trusted: a record that does not decode
// or breaks a rule. seq names the record.
type damageError struct {
	seq    int64
	offset int64
	err    error
}

func (e *damageError) Error() string {
	return fmt.Sprintf("the WAL is damaged at record %d (byte offset %d): %v; nothing was changed: restore the WAL from a copy, since leasewal never drops acknowledged records", e.seq, e.offset, e.err)
}

func (e *damageError) Unwrap() error { return e.err }

// class is how an error is reported: its exit code, its JSON "error" kind, and
// the record it concerns, if any.
type class struct {
	code int
	kind string
	seq  *int64
}

// classify maps every error a command can return to its documented exit code.
// It is the only place exit codes for errors are chosen.
func classify(err error) class {
	var (
		refusal  *state.Refusal
		recErr   *state.RecordError
		dmg      *damageError
		walDmg   *wal.DamageError
		format   *wal.FormatError
		locked   *wal.LockTimeoutError
		appendE  *wal.AppendError
		usage    *usageError
		notFile  *wal.NotRegularError
		mismatch *expectMismatch
		contract *state.ContractError
	)
	switch {
	case errors.As(err, &usage):
		return class{code: ExitUsage, kind: "Usage"}
	case errors.As(err, &refusal):
		switch refusal.Kind {
		case state.NotFound:
			return class{code: ExitNotFound, kind: string(refusal.Kind)}
		default:
			return class{code: ExitUsage, kind: string(refusal.Kind)}
		}
	case errors.As(err, &contract):
		return class{code: ExitContract, kind: string(contract.Kind)}
	case errors.As(err, &walDmg):
		seq := int64(walDmg.Index)
		return class{code: ExitDamaged, kind: "DamagedWAL", seq: &seq}
	case errors.As(err, &dmg):
		c := class{code: ExitDamaged, kind: "DamagedWAL", seq: &dmg.seq}
		if errors.As(err, &recErr) && recErr.Invariant != "" {
			c.kind = "InvariantViolation"
		}
		return c
	case errors.As(err, &mismatch):
		return class{code: ExitDamaged, kind: "ExpectMismatch"}
	case errors.As(err, &format), errors.Is(err, wal.ErrEmptyFile):
		return class{code: ExitDamaged, kind: "NotAWAL"}
	case errors.As(err, &locked):
		return class{code: ExitLocked, kind: "LockTimeout"}
	case errors.As(err, &appendE):
		return class{code: ExitInternal, kind: "WriteFailed"}
	case errors.As(err, &notFile), errors.Is(err, fs.ErrPermission):
		return class{code: ExitUsage, kind: "BadWALPath"}
	}
	return class{code: ExitInternal, kind: "Internal"}
}

// errorView is the JSON shape of every error.
type errorView struct {
	Result  string `json:"result"`
	Error   string `json:"error"`
	Message string `json:"message"`
	Seq     *int64 `json:"seq,omitempty"`
}
