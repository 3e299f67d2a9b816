package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/internal/index"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/trace"
	"github.com/leasewal/leasewal/state"
)

// The operations below work on the WAL's own file, on its own machine:
// the local service has them, the client does not, and a command that
// needs one refuses --server (or, for compact, asks the server's own
// compaction: api.Service.Compact).

// CompactOptions say what a compaction keeps; Compaction is what it did.
type (
	CompactOptions = store.CompactOptions
	Compaction     = store.Compaction
)

// ErrNothingToCompact is a compaction with nothing after the last one.
var ErrNothingToCompact = store.ErrNothingToCompact

// HistoryDir is where a WAL's sealed history segments are.
func HistoryDir(walPath string) string { return store.HistoryDir(walPath) }

// exists refuses an operation on a WAL that is not there, as what the
// command says it needs.
func (l *Local) exists(what string) error {
	if _, err := os.Stat(l.store.Path); err != nil {
		var path *fs.PathError
		if errors.As(err, &path) {
			err = path.Err
		}
		return api.Usage("no WAL to %s at %s: %v; check --wal", what, l.store.Path, err)
	}
	return nil
}

// Verified is what verify found.
type Verified struct {
	Result    api.Outcome    `json:"result"`
	Records   int            `json:"records"`
	Tasks     int            `json:"tasks"`
	Counts    map[string]int `json:"counts"`
	TornBytes int64          `json:"torn_tail_bytes"`
	Expect    string         `json:"expect,omitempty"`
	Base      string         `json:"base,omitempty"`
	History   string         `json:"history,omitempty"`
}

// Verify replays every record through every rule and invariant, checks
// want (if any: an expectation read from expectFile) against the story,
// and with history every sealed segment of the history too.
func (l *Local) Verify(ctx context.Context, want *trace.Expectation, expectFile string, history bool) (Verified, error) {
	if err := l.exists("verify"); err != nil {
		return Verified{}, err
	}
	opts := l.store
	opts.Verifier = state.NewVerifier()
	if want != nil {
		if err := checkedBy(&opts, want); err != nil {
			return Verified{}, err
		}
	}
	h := store.Open(opts)
	var out Verified
	err := h.Run(false, func(tx *store.Tx) error {
		counts, tasks := map[string]int{}, 0
		err := tx.State.EachTaskInAnyOrder(false, func(t *state.Task) bool {
			counts[string(t.At(tx.Now).State)]++
			tasks++
			return true
		})
		if err != nil {
			return err
		}
		out = Verified{Result: api.ResultOK, Records: opts.Verifier.Records, Tasks: tasks, Counts: counts, TornBytes: tx.TornBytes()}
		if b := tx.State.Base(); b != nil {
			out.Base = b.Compacted()
		}
		if want != nil {
			if err := want.Check(tx, tx.Now); err != nil {
				return err
			}
			out.Expect = "matched " + expectFile
			if want.IsTrace() {
				out.Expect = fmt.Sprintf("matched %s (%d steps)", expectFile, want.Steps())
			}
		}
		return nil
	})
	h.Close() // the WAL's own replay is let go first: the history's holds a state of its own, one segment at a time
	if err != nil || !history {
		return out, err
	}
	h = store.Open(l.store)
	defer h.Close()
	check, err := h.VerifyHistory()
	if err != nil {
		return out, err
	}
	out.History = fmt.Sprintf("%d segments from seq %d, %d bases checked against the records before them", check.Segments, check.First, check.Derived)
	if check.First > 1 {
		out.History += fmt.Sprintf(" (the records before seq %d are no longer kept)", check.First)
	}
	return out, nil
}

// CheckTrace checks the WAL against a trace as Verify does, without the
// rules: the *trace.MismatchError says which steps did not hold.
func (l *Local) CheckTrace(ctx context.Context, want *trace.Expectation) error {
	opts := l.store
	if err := checkedBy(&opts, want); err != nil {
		return err
	}
	h := store.Open(opts)
	defer h.Close()
	return h.Read(func(tx *store.Tx) error { return want.Check(tx, tx.Now) })
}

// checkedBy has the replay opts drives check want as it goes. A trace is
// checked against the whole story: the records a compaction sealed are read
// from their segments first.
func checkedBy(opts *store.Options, want *trace.Expectation) error {
	want.Hooks(opts)
	last, _, err := store.ReadSegments(*opts, 1, nil)
	if err != nil {
		return err
	}
	store.SkipThrough(opts, last)
	return nil
}

// Repaired is what repair cut.
type Repaired struct {
	Result   api.Outcome `json:"result"`
	CutBytes int64       `json:"cut_bytes"`
	Offset   int64       `json:"offset,omitempty"`
	SavedAs  string      `json:"saved_as,omitempty"`
	Records  int         `json:"records"`
}

// Repair cuts a torn tail off the WAL, keeping the cut bytes beside it.
func (l *Local) Repair(ctx context.Context) (Repaired, error) {
	if err := l.exists("repair"); err != nil {
		return Repaired{}, err
	}
	h := store.Open(l.store)
	defer h.Close()
	var v Repaired
	err := h.Write(func(tx *store.Tx) error {
		cut, err := tx.CutTorn()
		if err != nil {
			return err
		}
		v = Repaired{Result: api.ResultOK, Records: tx.Records()}
		if cut != nil {
			v.CutBytes, v.Offset, v.SavedAs = cut.Length, cut.Offset, cut.SavedAs
		}
		return nil
	})
	return v, err
}

// BackedUp is what backup copied.
type BackedUp struct {
	Result  api.Outcome `json:"result"`
	Path    string      `json:"path"`
	Records int         `json:"records"`
	Bytes   int64       `json:"bytes"`
	Index   string      `json:"index"` // the index copied beside it ("": none)
}

// Backup copies the WAL (and with withIndex its index) to dest under the
// shared lock: whole, or not at all.
func (l *Local) Backup(ctx context.Context, dest string, withIndex bool) (BackedUp, error) {
	if err := l.exists("back up"); err != nil {
		return BackedUp{}, err
	}
	h := store.Open(l.store)
	defer h.Close()
	b, err := h.Backup(dest, withIndex)
	switch {
	case errors.Is(err, store.ErrBackupExists):
		return BackedUp{}, api.Usage("%s exists: a backup never overwrites; give a new path", dest)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		cause := errors.Unwrap(err)
		var path *fs.PathError
		if errors.As(cause, &path) {
			cause = path.Err
		}
		return BackedUp{}, api.Usage("cannot write the backup %s: %v", dest, cause)
	case err != nil:
		return BackedUp{}, err
	}
	return BackedUp{Result: api.ResultOK, Path: b.Path, Records: b.Records, Bytes: b.Bytes, Index: b.Index}, nil
}

// CompactOptionsOf reads a compact request's retention (defaults 7d and
// 30d).
func CompactOptionsOf(r api.CompactRequest) (CompactOptions, error) {
	finished, err := api.ParseDuration("keep-finished", cmp.Or(r.KeepFinished, DefaultKeepFinished))
	if err != nil {
		return CompactOptions{}, err
	}
	history, err := api.ParseDuration("keep-history", cmp.Or(r.KeepHistory, DefaultKeepHistory))
	if err != nil {
		return CompactOptions{}, err
	}
	if finished < 0 || history < 0 {
		return CompactOptions{}, api.Usage("--keep-finished and --keep-history are durations of 0 or more, e.g. 7d")
	}
	return CompactOptions{KeepFinished: finished, KeepHistory: history, Drop: r.Drop}, nil
}

// The retention a compaction keeps unless told otherwise.
const (
	DefaultKeepFinished = "7d"
	DefaultKeepHistory  = "30d"
)

// Compact compacts the WAL: on a handle of its own, or inside a server
// through the server's own compaction (Options.Compact), which a cluster
// proposes so that every node compacts at the same record. Nothing
// following the last compaction is an answer with records 0.
func (l *Local) Compact(ctx context.Context, r api.CompactRequest) (api.Compacted, error) {
	keep, err := CompactOptionsOf(r)
	if err != nil {
		return api.Compacted{}, err
	}
	if err := limitsActor(l.actorOf(r.Actor)); err != nil {
		return api.Compacted{}, err
	}
	var c Compaction
	switch {
	case l.o.Compact != nil:
		c, err = l.o.Compact(keep)
	default:
		if err := l.exists("compact"); err != nil {
			return api.Compacted{}, err
		}
		h := store.Open(l.store)
		defer h.Close()
		c, err = h.Compact(keep)
	}
	if errors.Is(err, ErrNothingToCompact) {
		err = nil
	}
	if err != nil {
		return api.Compacted{}, err
	}
	v := api.Compacted{Result: api.ResultOK, Seq: c.Seq, At: answers.Stamp(c.At), KeptFrom: answers.Stamp(c.KeptFrom), Records: c.Records,
		BytesBefore: c.BytesBefore, BytesAfter: c.BytesAfter, TasksKept: c.TasksKept, TasksDropped: c.TasksDropped,
		Segment: c.Segment, Expired: c.Expired, HistoryFrom: c.HistoryFrom, Redacted: c.Redacted}
	if v.Expired == nil {
		v.Expired = []string{}
	}
	return v, nil
}

// Reindexed is what reindex built.
type Reindexed struct {
	Result  api.Outcome `json:"result"`
	Index   string      `json:"index"` // the index's path ("": a WAL of no record has none)
	Records int         `json:"records"`
	Bytes   int64       `json:"bytes"`
}

// Reindex builds the WAL's index again from the WAL, in place of the one
// beside it, under the exclusive lock.
func (l *Local) Reindex(ctx context.Context) (Reindexed, error) {
	if err := l.exists("reindex"); err != nil {
		return Reindexed{}, err
	}
	h := store.Open(l.store)
	defer h.Close()
	r, err := h.Reindex()
	if err != nil {
		return Reindexed{}, err
	}
	v := Reindexed{Result: api.ResultOK, Records: r.Records, Bytes: r.Bytes}
	if r.Records > 0 {
		v.Index = filepath.Clean(l.store.Path) + index.Suffix
	}
	return v, nil
}
