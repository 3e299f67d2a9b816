package store

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"time"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// A segment sealed right after the one before it need not carry its base:
// the segment before leads to it. Such a tail segment keeps its base's first
// and last records only (the BaseBegin, which says how many parts were left
// out, and the BaseEnd, which carries the snapshot's digest and re-seeds the
// checksum chain), then its records exactly as the WAL held them. To read
// it, the base is derived again from the state the segment before leads to,
// checked against those two records, and written with the records to a
// whole segment (materialise), which is read as any other. Each segment's
// base but the oldest's is then on disk once, in the WAL or not at all,
// instead of once per segment.
//
// Expiry keeps the records of the retention and no more: the oldest segment
// kept is rewritten (rebase) to start at the first record of the retention,
// with a base of the state at the record before (marked cut: its state keeps
// the base its snapshot names, so the bases after it derive as they did),
// or, when it is a tail all of whose records are kept, whole; so the oldest
// segment left always starts with its base or with the first record.

// readingPrefix names the whole copies of tail segments that a reader
// writes in the history directory and removes when done; expireHistory
// removes those a crash left, once they are an hour old.
const readingPrefix = "reading-"

// stub is the start of a tail segment: its base's first and last records.
type stub struct {
	begin, end state.Record // their Frame zeroed, as a base built in no file has it
	records    int64        // where the records after the base start in the file
}

// startOf reads the start of the segment (or WAL) at path: its first
// record, and its stub if it is a tail segment (nil if it is whole).
func startOf(path string, lockTimeout time.Duration) (first state.Record, _ *stub, err error) {
	var s stub
	var second state.Record
	log, err := wal.OpenAt(path, wal.Read, lockTimeout, wal.Position{}, func(f wal.Frame) error {
		r, err := decodeFrame(f)
		if err != nil {
			return damageAt(f, err)
		}
		r.Frame = 0
		if f.Index == 1 {
			first = r
			return nil
		}
		second, s.records = r, f.Offset+wal.FrameSize(f.Body)
		return wal.ErrStopAfter
	})
	if err != nil {
		return first, nil, err
	}
	log.Close()
	if first.Type != state.BaseBegin || second.Type != state.BaseEnd || first.KeptFrom == nil {
		return first, nil, nil
	}
	s.begin, s.end = first, second
	return first, &s, nil
}

// materialise writes the tail segment at path whole to a new file named
// with prefix beside it: the base of st (the state the segment before leads
// to, whose payloads read reads), built as the stub says the compaction
// built it, with the history hash chain head hash and continuing the
// checksum chain from seed, which must be the stub's own two records, and
// then the segment's records as they are. The caller removes or renames it.
func (h *Handle) materialise(st *state.State, read func(*state.PayloadRef) (string, error), path string, s *stub, hash string, seed uint32, prefix string) (string, error) {
	if st.LastSeq() != s.begin.Seq {
		return "", fmt.Errorf("it leaves its base out, and the segment before it, which leads to that base (the records up to seq %d), is gone: the one before it ends at seq %d",
			s.begin.Seq, st.LastSeq())
	}
	spec := baseSpec{at: s.begin.At, keptFrom: *s.begin.KeptFrom, history: s.begin.History, hash: hash, chainFrom: seed, cut: s.begin.Cut}
	return h.writeSegment(st, read, spec, path, s.records, prefix, func(derived []state.Record) error {
		if !reflect.DeepEqual(derived, []state.Record{s.begin, s.end}) {
			return fmt.Errorf("its base is not the state the segment before leads to (digest %s, hash %s; want %s, %s)",
				s.end.Digest, s.end.Hash, derived[len(derived)-1].Digest, derived[len(derived)-1].Hash)
		}
		return nil
	})
}

// writeSegment writes a whole segment to a new file named with prefix
// beside path, fsynced: the base of st (see Handle.writeBase), whose first
// and last records check must accept, then the frames of the file at path
// from offset records on, as they are.
func (h *Handle) writeSegment(st *state.State, read func(*state.PayloadRef) (string, error), spec baseSpec,
	path string, records int64, prefix string, check func(derived []state.Record) error) (name string, err error) {
	src, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer src.Close()
	version, err := wal.ReadVersion(src)
	if err != nil {
		return "", fmt.Errorf("the history segment %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), prefix+"*")
	if err != nil {
		return "", fmt.Errorf("a whole copy of the history segment %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	out := bufio.NewWriterSize(f, 1<<20)
	frames := wal.NewFrameWriter(out, max(wal.BaseVersion, version, st.FormatVersion()))
	var derived []state.Record
	_, _, err = h.writeBase(st, read, spec, func(r state.Record) error {
		if r.Type != state.BasePart {
			derived = append(derived, r)
		}
		body, err := state.EncodeRecord(r)
		if err != nil {
			return err
		}
		return frames.Write(body)
	})
	if err == nil {
		err = check(derived)
	}
	if err != nil {
		return "", err
	}
	if _, err = io.Copy(out, io.NewSectionReader(src, records, 1<<62)); err == nil {
		err = out.Flush()
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("a whole copy of the history segment %s: %w", path, err)
	}
	return f.Name(), nil
}

// stubSeed is the checksum a tail's records continue from, as its stub says.
func stubSeed(s *stub) (uint32, error) {
	seed, err := strconv.ParseUint(s.end.ChainFrom, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("its base's chain_from %q is not a checksum", s.end.ChainFrom)
	}
	return uint32(seed), nil
}

// rebase cuts the history where its expiry at cut leaves it: the oldest
// segment kept, segs[kept], is rewritten (to a new file, for the
// compaction's last step to put in its place) to start with the base of the
// state at its last record older than cut, made at now; or, when none of its
// records is older and it is a tail, whole. The state comes from the
// segments before it, back to the last whole one, each verified as verify
// --history does. The history then keeps the records of its retention and
// no more, and its oldest segment starts with its base. It returns the new
// file and the name it takes ("" when the segment is kept as it is).
func (h *Handle) rebase(segs []Segment, kept int, cut, now int64) (file, name string, err error) {
	seg := segs[kept]
	through, err := lastBefore(seg.Path, cut, h.opts.LockTimeout)
	if err != nil {
		return "", "", &HistoryError{Path: seg.Path, Err: h.openError(err)}
	}
	stubs := make([]*stub, kept+1)
	from := kept
	for ; from >= 0; from-- {
		_, s, err := startOf(segs[from].Path, h.opts.LockTimeout)
		if err != nil {
			return "", "", &HistoryError{Path: segs[from].Path, Err: h.openError(err)}
		}
		if stubs[from] = s; s == nil {
			break
		}
	}
	if stubs[kept] == nil && through == 0 {
		return "", "", nil
	}
	var prev *historyFile
	defer func() { prev.close() }()
	for i := max(from, 0); i < kept; i++ {
		cur, err := h.readHistoryFile(segs[i].Path, stubs[i], prev, 0)
		prev.close()
		if prev = cur; err != nil {
			return "", "", &HistoryError{Path: segs[i].Path, Err: err}
		}
	}
	if through == 0 {
		if prev == nil {
			return "", "", &HistoryError{Path: seg.Path, Err: errors.New("it leaves its base out, and the segment before it, which leads to that base, is gone")}
		}
		before := payloadFile{path: prev.read}
		defer before.close()
		file, err := h.materialise(prev.c.v.State, before.read, seg.Path, stubs[kept], hex.EncodeToString(prev.c.hash[:]), prev.lastSum, "sealing-")
		if err != nil {
			return "", "", &HistoryError{Path: seg.Path, Err: err}
		}
		return file, seg.Path, nil
	}
	cur, err := h.readHistoryFile(seg.Path, stubs[kept], prev, through)
	prev.close()
	if prev = cur; err != nil {
		return "", "", &HistoryError{Path: seg.Path, Err: err}
	}
	st := cur.c.v.State
	keptFrom, history := int64(state.MinTime), state.HistoryKept
	if b := st.Base(); b != nil {
		keptFrom, history = b.KeptFrom, b.History
	}
	read := payloadFile{path: cur.read}
	defer read.close()
	spec := baseSpec{at: now, keptFrom: keptFrom, history: history, hash: hex.EncodeToString(cur.c.hash[:]), chainFrom: cur.lastSum, cut: true}
	file, err = h.writeSegment(st, read.read, spec, cur.read, cur.end, "sealing-", func([]state.Record) error { return nil })
	if err != nil {
		return "", "", &HistoryError{Path: seg.Path, Err: err}
	}
	return file, filepath.Join(filepath.Dir(seg.Path), segmentName(through+1, seg.Last, seg.LastAt)), nil
}

// errPastCut ends lastBefore's read at the first record it does not take.
var errPastCut = errors.New("a record at or after the cut")

// lastBefore is the seq of the last record (not of a base) of the segment
// at path written before cut; 0 if none was.
func lastBefore(path string, cut int64, lockTimeout time.Duration) (int64, error) {
	last := int64(0)
	log, err := wal.OpenAt(path, wal.Read, lockTimeout, wal.Position{}, func(f wal.Frame) error {
		r, err := decodeFrame(f)
		switch {
		case err != nil:
			return damageAt(f, err)
		case r.Type.IsBase():
		case r.At >= cut:
			return errPastCut
		default:
			last = r.Seq
		}
		return nil
	})
	if errors.Is(err, errPastCut) {
		return last, nil
	}
	if err == nil {
		log.Close()
	}
	return last, err
}
