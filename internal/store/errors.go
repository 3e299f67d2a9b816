package store

import (
	"errors"
	"fmt"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// DamageError is a WAL that cannot be trusted: a record that does not decode
// or breaks a rule. Seq names the record.
type DamageError struct {
	Seq    int64
	Offset int64
	Err    error
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("the WAL is damaged at record %d (byte offset %d): %v; nothing was changed: restore the WAL from a copy, since leasewal never drops acknowledged records", e.Seq, e.Offset, e.Err)
}

func (e *DamageError) Unwrap() error { return e.Err }

// damageAt is err, about the record of frame f.
func damageAt(f wal.Frame, err error) error {
	return &DamageError{Seq: int64(f.Index), Offset: f.Offset, Err: err}
}

// The wal package's errors, as callers of store meet them (cmd maps each to
// its exit code without reaching below store).
type (
	// FrameDamageError is damage before the last record of the WAL.
	FrameDamageError = wal.DamageError
	// FormatError is a file that is not a WAL this version reads.
	FormatError = wal.FormatError
	// LockTimeoutError is a lock not had within the lock timeout.
	LockTimeoutError = wal.LockTimeoutError
	// AppendError is a failed append, rolled back or not.
	AppendError = wal.AppendError
	// NotRegularError is a WAL path that is not a regular file.
	NotRegularError = wal.NotRegularError
	// CutResult is what a cut of a torn tail removed.
	CutResult = wal.CutResult
)

// PermissionError is a WAL this process may not open (as it must: to
// read, or to write). Its message says it once, with what to do.
type PermissionError struct {
	Path string
	Err  error // wraps fs.ErrPermission
}

func (e *PermissionError) Error() string {
	return fmt.Sprintf("cannot open the WAL %s: permission denied; check the file's permissions or --wal", e.Path)
}

func (e *PermissionError) Unwrap() error { return e.Err }

// ErrEmptyFile is a zero-length WAL (see wal.ErrEmptyFile).
var ErrEmptyFile = wal.ErrEmptyFile

// ErrStop, returned by Options.OnRecord, ends a replay early: the command has
// read what it needs.
var ErrStop = errors.New("replay stopped")

// errIndexDamaged stops an operation whose state read a damaged index
// before it wrote anything; the handle runs it again from a full replay.
var errIndexDamaged = errors.New("the index is damaged")

// RefusedRecordError is a record refused before anything of its operation
// was written: by the gate (state.CheckRecord, the WAL's largest record, the
// decoder: one that replay would refuse, or read back as another), or by the
// state's rules. The request that decided it is at fault alone; for a
// request the service checked first it is a bug of leasewal's. The refusal
// depends on the record and the WAL only, so every node of a cluster
// refuses a committed entry that holds one alike.
type RefusedRecordError struct {
	Seq  int64
	Type state.RecordType
	Err  error
}

func (e *RefusedRecordError) Error() string {
	return fmt.Sprintf("record %d (%s) was refused before it was written (%v); nothing of its operation was written", e.Seq, e.Type, e.Err)
}

func (e *RefusedRecordError) Unwrap() error { return e.Err }

// ErrNotDecided answers a request of a batch that was never decided: an
// operation before it in the batch left the state unusable (a decided
// record that the state refused, a bug). It may be decided again.
var ErrNotDecided = errors.New("the request was not decided: an earlier request of its batch failed; it may be sent again")

// PoisonedError refuses a write on a handle whose earlier append could not
// be rolled back: the WAL may hold records that were never acknowledged
// (their requests were told the outcome is unknown). Nothing is written
// until the process starts again; its first writer reads the WAL as it is.
type PoisonedError struct{ Cause error }

func (e *PoisonedError) Error() string {
	return fmt.Sprintf("nothing was written: an earlier write failed and could not be undone (%v); restart the server, then run 'leasewal verify'", e.Cause)
}

func (e *PoisonedError) Unwrap() error { return e.Cause }

// ErrNotOpen is returned for an operation on a closed handle.
var ErrNotOpen = errors.New("the store handle is closed")

// Fault is a failure injected into appends, for the crash tests (wal.Fault).
type Fault = wal.Fault

// ParseFault reads a LEASEWAL_FAILPOINT specification (wal.ParseFault).
func ParseFault(spec string) (*Fault, error) { return wal.ParseFault(spec) }

// hookError carries an error of the caller's record hooks through the
// replay, so that it reaches the caller as the caller made it.
type hookError struct{ err error }

func (e *hookError) Error() string { return e.err.Error() }
func (e *hookError) Unwrap() error { return e.err }
