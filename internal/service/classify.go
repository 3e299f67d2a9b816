package service

import (
	"errors"
	"io/fs"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/cluster"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/trace"
	"github.com/leasewal/leasewal/state"
)

// Class is how an error is reported: its exit code, its kind (the JSON
// "error"), and the record it concerns, if any.
type Class struct {
	Code int
	Kind string
	Seq  *int64
}

// Classify maps an error of the local service (its rules, its WAL, its
// cluster, a trace it checked) to its documented exit code and kind; false
// for an error it does not know. With the command line's own (cmd's
// classify), it is the only place exit codes for errors are chosen: the
// server answers with the same.
func Classify(err error) (Class, bool) {
	var (
		refusal  *state.Error
		recErr   *state.RecordError
		dmg      *store.DamageError
		walDmg   *store.FrameDamageError
		format   *store.FormatError
		locked   *store.LockTimeoutError
		appendE  *store.AppendError
		usage    *api.UsageError
		notFile  *store.NotRegularError
		mismatch *trace.MismatchError
		badTrace *trace.Error
		proposal *cluster.UnknownOutcomeError
		owned    *store.NodeOwnedError
		history  *store.HistoryError
		poisoned *store.PoisonedError
	)
	switch {
	case errors.As(err, &usage), errors.As(err, &badTrace):
		return Class{Code: api.ExitUsage, Kind: "Usage"}, true
	case errors.As(err, &proposal):
		return Class{Code: api.ExitUnknownSent, Kind: "OutcomeUnknown"}, true
	case errors.Is(err, cluster.ErrNotLeader):
		return Class{Code: api.ExitUnknownSent, Kind: "NotLeader"}, true
	case errors.Is(err, ErrStopping):
		return Class{Code: api.ExitUnknownSent, Kind: "Stopping"}, true
	case errors.As(err, &owned):
		return Class{Code: api.ExitUsage, Kind: "NodeOwned"}, true
	case errors.As(err, &refusal):
		switch refusal.Kind {
		case state.NotFound:
			return Class{Code: api.ExitNotFound, Kind: string(refusal.Kind)}, true
		case state.BacklogOrdering, state.TokenMismatch, state.LeaseNotFound:
			return Class{Code: api.ExitContract, Kind: string(refusal.Kind)}, true
		}
		return Class{Code: api.ExitUsage, Kind: string(refusal.Kind)}, true
	case errors.As(err, &history):
		return Class{Code: api.ExitDamaged, Kind: "DamagedHistory"}, true
	case errors.Is(err, store.ErrCompactedMeanwhile):
		return Class{Code: api.ExitLocked, Kind: "CompactedMeanwhile"}, true
	case errors.As(err, &walDmg):
		seq := int64(walDmg.Index)
		return Class{Code: api.ExitDamaged, Kind: "DamagedWAL", Seq: &seq}, true
	case errors.As(err, &dmg):
		c := Class{Code: api.ExitDamaged, Kind: "DamagedWAL", Seq: &dmg.Seq}
		if errors.As(err, &recErr) && recErr.Invariant != "" {
			c.Kind = "InvariantViolation"
		}
		return c, true
	case errors.As(err, &mismatch):
		return Class{Code: api.ExitDamaged, Kind: "ExpectMismatch"}, true
	case errors.As(err, &format), errors.Is(err, store.ErrEmptyFile):
		return Class{Code: api.ExitDamaged, Kind: "NotAWAL"}, true
	case errors.As(err, &locked):
		return Class{Code: api.ExitLocked, Kind: "LockTimeout"}, true
	case errors.As(err, &poisoned):
		return Class{Code: api.ExitInternal, Kind: "WriteFailed"}, true
	case errors.As(err, &appendE) && !appendE.RolledBack: // its records may be in the WAL, or not
		return Class{Code: api.ExitUnknownSent, Kind: "OutcomeUnknown"}, true
	case errors.As(err, &appendE):
		return Class{Code: api.ExitInternal, Kind: "WriteFailed"}, true
	case errors.As(err, &notFile), errors.Is(err, fs.ErrPermission):
		return Class{Code: api.ExitUsage, Kind: "BadWALPath"}, true
	}
	return Class{}, false
}

// RefusedAtTheGate says whether err is a record the request path let
// through and the gate did not (a bug of leasewal's, answered for its
// request alone): a server logs it.
func RefusedAtTheGate(err error) bool {
	var refused *store.RefusedRecordError
	return errors.As(err, &refused)
}
