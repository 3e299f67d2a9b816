package store

import (
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"time"

	"leasewal/state"
	"leasewal/wal"
)

// HistoryCheck is what VerifyHistory found.
type HistoryCheck struct {
	Segments int   // the sealed segments read
	First    int64 // the seq of the first record the history holds (1: all of it)
	// Derived says that each base (the WAL's and the segments') was checked
	// to be exactly the base of the state the records before it lead to.
	Derived int
}

// HistoryError is a history that does not hold: a segment that does not
// verify, or that does not lead to the base after it.
type HistoryError struct {
	Path string
	Err  error
}

func (e *HistoryError) Error() string {
	return fmt.Sprintf("the history segment %s: %v; the WAL itself is not affected", e.Path, e.Err)
}

func (e *HistoryError) Unwrap() error { return e.Err }

// VerifyHistory checks the WAL's sealed history: every segment verifies as
// a WAL of its own (chained checksums, every rule and invariant), each one
// starts where the one before ended, and the base each one (and the WAL)
// starts with is exactly the base of the state the segment before leads to,
// with the same hash chain head and checksum seed. The oldest segment left
// (after --keep-history deleted older ones) is checked alone.
//
// One segment's state is held at a time: the base a segment leads to is
// worked out from the next file's BaseBegin before that file is replayed.
func (h *Handle) VerifyHistory() (HistoryCheck, error) {
	var check HistoryCheck
	paths := []string{}
	for _, s := range Segments(h.side(HistorySuffix)) {
		paths = append(paths, s.Path)
	}
	paths = append(paths, h.opts.Path)
	var prevPath string
	var want []state.Record // the BaseBegin and BaseEnd the file at path must start with (nil: the first file)
	for i, path := range paths {
		c := h.newHistoryReader()
		log, err := wal.OpenAt(path, wal.Read, h.opts.LockTimeout, wal.Position{}, c.read)
		if err != nil {
			c.close()
			return check, &HistoryError{Path: path, Err: h.openError(err)}
		}
		log.Close()
		base := c.v.State.Base()
		switch {
		case i == 0 && base != nil:
			check.First = base.Seq + 1
		case i == 0:
			check.First = 1
		case base == nil:
			c.close()
			return check, &HistoryError{Path: path, Err: fmt.Errorf("it follows the segment %s but does not start with a base", prevPath)}
		case !reflect.DeepEqual(want, []state.Record{c.begin, c.end}):
			c.close()
			return check, &HistoryError{Path: path, Err: fmt.Errorf("its base is not the state %s leads to (digest %s, hash %s; want %s, %s)",
				prevPath, c.end.Digest, c.end.Hash, want[1].Digest, want[1].Hash)}
		default:
			check.Derived++
		}
		if i < len(paths)-1 {
			check.Segments++
			want, err = h.baseAfter(c, log.LastSum, paths[i], paths[i+1])
		}
		c.close()
		if err != nil {
			return check, &HistoryError{Path: paths[i+1], Err: err}
		}
		prevPath = path
	}
	return check, nil
}

// baseAfter is the BaseBegin and BaseEnd of the base of the state c read
// from the segment at path, as the file next, which must follow it, says the
// compaction made it: at its time, with its retention.
func (h *Handle) baseAfter(c *historyReader, seed uint32, path, next string) ([]state.Record, error) {
	begin, err := firstRecord(next, h.opts.LockTimeout)
	switch {
	case err != nil:
		return nil, h.openError(err)
	case begin.Type != state.BaseBegin || begin.KeptFrom == nil:
		return nil, fmt.Errorf("it follows the segment %s but does not start with a base", path)
	case c.v.State.LastSeq() != begin.Seq:
		return nil, fmt.Errorf("its base stands for the records up to seq %d, but %s ends at seq %d", begin.Seq, path, c.v.State.LastSeq())
	}
	var want []state.Record
	segment := payloadFile{path: path}
	defer segment.close()
	_, _, err = h.writeBase(c.v.State, segment.read, begin.At, *begin.KeptFrom, begin.History, hex.EncodeToString(c.hash[:]), seed, func(r state.Record) error {
		if r.Type != state.BasePart {
			want = append(want, r)
		}
		return nil
	})
	return want, err
}

// firstRecord is the first record of the WAL at path.
func firstRecord(path string, lockTimeout time.Duration) (state.Record, error) {
	var first state.Record
	log, err := wal.OpenAt(path, wal.Read, lockTimeout, wal.Position{}, func(f wal.Frame) error {
		r, err := decodeFrame(f)
		if err != nil {
			return &DamageError{Seq: int64(f.Index), Offset: f.Offset, Err: err}
		}
		first = r
		return wal.ErrStopAfter
	})
	if err != nil {
		return first, err
	}
	log.Close()
	return first, nil
}

// ReadSegments replays the sealed segments beside the WAL (see Compact)
// through opts' hooks, oldest first, each record once: every segment is a WAL
// of its own, replayed from its start (the base of the records before it, or
// the first record), and only its records after the last one handed on reach
// OnRecord and BeforeRecord, with the segment's state. Segments that end
// before from are skipped. When a hook returns ErrStop, stopped is called
// with the state there (while the segment is still open: the state may read
// files its replay spilled) and its error returned, with halted set; else
// last is the seq of the last record handed on (0: none), and the WAL's
// replay goes on after it (SkipThrough).
func ReadSegments(opts Options, from int64, stopped func(*Tx) error) (last int64, halted bool, err error) {
	onRecord, beforeRecord := opts.OnRecord, opts.BeforeRecord
	for _, seg := range Segments(HistoryDir(opts.Path)) {
		if seg.Last < from || seg.Last <= last {
			continue
		}
		o := opts
		o.Path, o.FullReplay, o.ReplayFrom, o.Verifier = seg.Path, true, 0, nil
		o.Clock = func(lastAt int64) (int64, error) { return lastAt, nil } // a segment is read, never decided on
		o.BeforeRecord = nil
		if beforeRecord != nil {
			o.BeforeRecord = func(rec state.Record, tx *Tx) error {
				if rec.Seq <= last {
					return nil
				}
				return beforeRecord(rec, tx)
			}
		}
		o.OnRecord = func(rec state.Record, tx *Tx) error {
			if rec.Seq <= last {
				return nil
			}
			last = rec.Seq
			var err error
			if onRecord != nil {
				err = onRecord(rec, tx)
			}
			halted = errors.Is(err, ErrStop)
			return err
		}
		h := Open(o)
		var stopErr error
		err := h.Read(func(tx *Tx) error {
			if halted && stopped != nil {
				stopErr = stopped(tx)
			}
			return nil
		})
		h.Close()
		if err != nil {
			return last, false, &HistoryError{Path: seg.Path, Err: err}
		}
		if halted {
			return last, true, stopErr
		}
	}
	return last, false, nil
}

// SkipThrough has opts' hooks skip the records up to last, which
// ReadSegments handed them already.
func SkipThrough(opts *Options, last int64) {
	if last == 0 {
		return
	}
	if on := opts.OnRecord; on != nil {
		opts.OnRecord = func(rec state.Record, tx *Tx) error {
			if rec.Seq <= last {
				return nil
			}
			return on(rec, tx)
		}
	}
	if before := opts.BeforeRecord; before != nil {
		opts.BeforeRecord = func(rec state.Record, tx *Tx) error {
			if rec.Seq <= last {
				return nil
			}
			return before(rec, tx)
		}
	}
}
