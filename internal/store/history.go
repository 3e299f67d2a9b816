package store

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
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
// with the same hash chain head and checksum seed; a tail segment's base,
// which it leaves out, is derived so and checked against the two records it
// keeps. The oldest segment left (after --keep-history deleted older ones)
// is checked alone.
//
// Two files' states are held at a time: the base a file starts with is
// worked out from the state the file before leads to.
func (h *Handle) VerifyHistory() (HistoryCheck, error) {
	var check HistoryCheck
	paths := []string{}
	for _, s := range Segments(h.side(HistorySuffix)) {
		paths = append(paths, s.Path)
	}
	paths = append(paths, h.opts.Path)
	var prev *historyFile
	defer func() { prev.close() }()
	for i, path := range paths {
		first, s, err := startOf(path, h.opts.LockTimeout)
		if err != nil {
			return check, &HistoryError{Path: path, Err: h.openError(err)}
		}
		var want []state.Record // the BaseBegin and BaseEnd a whole file after the first must start with
		if prev != nil && s == nil {
			if want, err = h.baseAfter(prev, first); err != nil {
				return check, &HistoryError{Path: path, Err: err}
			}
		}
		cur, err := h.readHistoryFile(path, s, prev, 0)
		prev.close()
		if prev = cur; err != nil {
			return check, &HistoryError{Path: path, Err: err}
		}
		based := cur.c.begin.Type == state.BaseBegin // (a cut base's state names the base before it)
		switch {
		case (i == 0 || cur.c.begin.Cut) && based: // (a cut after others: a crash before they expired, the cut's last step)
			check.First = cur.c.begin.Seq + 1
		case i == 0:
			check.First = 1
		case !based:
			return check, &HistoryError{Path: path, Err: fmt.Errorf("it follows the segment %s but does not start with a base", paths[i-1])}
		case want != nil && !reflect.DeepEqual(want, []state.Record{cur.c.begin, cur.c.end}):
			return check, &HistoryError{Path: path, Err: fmt.Errorf("its base is not the state %s leads to (digest %s, hash %s; want %s, %s)",
				paths[i-1], cur.c.end.Digest, cur.c.end.Hash, want[1].Digest, want[1].Hash)}
		default:
			check.Derived++
		}
		if i < len(paths)-1 {
			check.Segments++
		}
	}
	return check, nil
}

// historyFile is a segment (or the WAL) read through a historyReader: from
// its whole copy when it is a tail, which it removes when closed.
type historyFile struct {
	path    string // the segment's
	read    string // the file read: path, or the whole copy
	c       *historyReader
	lastSum uint32 // the checksum of its last frame read
	end     int64  // where that frame ends
}

// readHistoryFile reads the segment at path, a tail if s is its stub, from
// the whole copy materialised from prev (the file before it, which must be
// read) if it is; through record seq through, if not 0, else to its end.
func (h *Handle) readHistoryFile(path string, s *stub, prev *historyFile, through int64) (*historyFile, error) {
	f := &historyFile{path: path, read: path, c: h.newHistoryReader()}
	if s != nil {
		if prev == nil {
			return f, errors.New("it leaves its base out, and the segment before it, which leads to that base, is gone")
		}
		from := payloadFile{path: prev.read}
		name, err := h.materialise(prev.c.v.State, from.read, path, s, hex.EncodeToString(prev.c.hash[:]), prev.lastSum, readingPrefix)
		if from.close(); err != nil {
			return f, err
		}
		f.read = name
	}
	log, err := wal.OpenAt(f.read, wal.Read, h.opts.LockTimeout, wal.Position{}, func(fr wal.Frame) error {
		if err := f.c.read(fr); err != nil {
			return err
		}
		if through != 0 && f.c.records > 0 && f.c.v.State.LastSeq() == through {
			return wal.ErrStopAfter
		}
		return nil
	})
	if err != nil {
		return f, h.openError(err)
	}
	f.lastSum, f.end = log.LastSum, log.End
	log.Close()
	return f, nil
}

// close lets go of the file's state, and of its whole copy; nil is closed.
func (f *historyFile) close() {
	if f == nil {
		return
	}
	f.c.close()
	if f.read != f.path {
		os.Remove(f.read)
	}
}

// baseAfter is the BaseBegin and BaseEnd of the base of the state the file
// prev read leads to, as begin, the first record of the file that must
// follow it, says the compaction made it: at its time, with its retention.
// A segment cut where the retention starts follows none (nil): those before
// it are expiring.
func (h *Handle) baseAfter(prev *historyFile, begin state.Record) ([]state.Record, error) {
	st := prev.c.v.State
	var err error
	switch {
	case begin.Cut:
		return nil, nil
	case begin.Type != state.BaseBegin || begin.KeptFrom == nil:
		return nil, fmt.Errorf("it follows the segment %s but does not start with a base", prev.path)
	case st.LastSeq() != begin.Seq:
		return nil, fmt.Errorf("its base stands for the records up to seq %d, but %s ends at seq %d", begin.Seq, prev.path, st.LastSeq())
	}
	var want []state.Record
	segment := payloadFile{path: prev.read}
	defer segment.close()
	spec := baseSpec{at: begin.At, keptFrom: *begin.KeptFrom, history: begin.History, hash: hex.EncodeToString(prev.c.hash[:]), chainFrom: prev.lastSum, cut: begin.Cut}
	_, _, err = h.writeBase(st, segment.read, spec, func(r state.Record) error {
		if r.Type != state.BasePart {
			want = append(want, r)
		}
		return nil
	})
	return want, err
}

// ReadSegments replays the sealed segments beside the WAL (see Compact)
// through opts' hooks, oldest first, each record once: every segment is a WAL
// of its own, replayed from its start (the base of the records before it, or
// the first record; a tail segment from its whole copy, materialised from
// the state the segment before leads to), and only its records after the
// last one handed on reach OnRecord and BeforeRecord, with the segment's
// state. Segments that end before from are not handed on (they are read
// only when a tail needed after them leaves its base out). When a hook
// returns ErrStop, stopped is called with the state there (while the
// segment is still open: the state may read files its replay spilled) and
// its error returned, with halted set; else last is the seq of the last
// record handed on (0: none), and the WAL's replay goes on after it
// (SkipThrough).
//
// A compaction may remove or replace segments meanwhile (it holds no lock a
// reader takes): when one is gone, the reading starts over from a new
// listing, after the last record handed on.
func ReadSegments(opts Options, from int64, stopped func(*Tx) error) (last int64, halted bool, err error) {
	for attempt := 0; ; attempt++ {
		var gone bool
		gone, halted, err = readSegments(opts, max(from, last+1), stopped, &last)
		if !gone || attempt == maxStartOvers {
			return last, halted, err
		}
	}
}

// readSegments is one attempt of ReadSegments, reporting gone when a
// segment it listed was not there when it came to read it.
func readSegments(opts Options, from int64, stopped func(*Tx) error, lastHanded *int64) (gone, halted bool, err error) {
	onRecord, beforeRecord := opts.OnRecord, opts.BeforeRecord
	last := *lastHanded
	defer func() { *lastHanded = last }()
	segs := Segments(HistoryDir(opts.Path))
	stubs := make([]*stub, len(segs))
	start := len(segs) // the first segment read: the first needed, or the whole one its tail starts from
	for i := len(segs) - 1; i >= 0 && (segs[i].Last >= from || (start < len(segs) && stubs[start] != nil)); i-- {
		if _, stubs[i], err = startOf(segs[i].Path, opts.LockTimeout); err != nil {
			return errors.Is(err, fs.ErrNotExist), false, &HistoryError{Path: segs[i].Path, Err: err}
		}
		start = i
	}
	whole := "" // the whole copy of the segment read next, when it is a tail
	defer func() {
		if whole != "" {
			os.Remove(whole)
		}
	}()
	for i := start; i < len(segs); i++ {
		seg, handed := segs[i], segs[i].Last >= from
		o := opts
		o.Path, o.FullReplay, o.ReplayFrom, o.Verifier = seg.Path, true, 0, nil
		if stubs[i] != nil {
			if whole == "" {
				return false, false, &HistoryError{Path: seg.Path, Err: errors.New("it leaves its base out, and the segment before it, which leads to that base, is gone")}
			}
			o.Path = whole
		}
		o.Clock = func(lastAt int64) (int64, error) { return lastAt, nil } // a segment is read, never decided on
		o.BeforeRecord, o.OnRecord = nil, nil
		if beforeRecord != nil && handed {
			o.BeforeRecord = func(rec state.Record, tx *Tx) error {
				if rec.Seq <= last {
					return nil
				}
				return beforeRecord(rec, tx)
			}
		}
		if handed {
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
		}
		h := Open(o)
		var stopErr, nextErr error
		next, missing := "", false
		err := h.Read(func(tx *Tx) error {
			switch {
			case tx.Missing:
				missing = true
			case halted && stopped != nil:
				stopErr = stopped(tx)
			case !halted && i+1 < len(segs) && stubs[i+1] != nil:
				s := stubs[i+1]
				seed, err := stubSeed(s)
				if err == nil {
					next, err = h.materialise(tx.State, tx.readPayload, segs[i+1].Path, s, s.end.Hash, seed, readingPrefix)
				}
				nextErr = err
			}
			return nil
		})
		h.Close()
		if whole != "" {
			os.Remove(whole)
		}
		whole = next
		switch {
		case missing:
			return true, false, &HistoryError{Path: seg.Path, Err: fs.ErrNotExist}
		case err != nil:
			return false, false, &HistoryError{Path: seg.Path, Err: err}
		case halted:
			return false, true, stopErr
		case nextErr != nil:
			return errors.Is(nextErr, fs.ErrNotExist), false, &HistoryError{Path: segs[i+1].Path, Err: nextErr}
		}
	}
	return false, false, nil
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
