package store

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasewal/leasewal/internal/index"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// Compaction keeps a WAL bounded. It replaces the records up to some seq
// with a base (the state they lead to, less the finished tasks older than the
// retention: state.WriteBase) in a WAL of format version 3, and seals the
// records it replaced in <wal>.history/ unless told to drop them.
//
// It works in two steps so that writers wait only for the second. First,
// without the lock (as every reader reads), it replays and verifies the WAL
// as it stands, up to its last record N, copies it to a new history segment
// and fsyncs it, and writes the new WAL beside the old one: the base at N,
// fsynced. Then, under the exclusive lock, it checks the records appended
// meanwhile (by the chained checksum and the WAL's generation it continues
// exactly what it read, and through the Verifier), seals the segment (a
// rename), appends those records' frames to the new WAL as they are (the
// base's last record re-seeds the checksum chain they continue), fsyncs it
// and renames it over the old one, the directory fsynced (wal.Log.Replace).
// A crash leaves the old WAL or the new one; a segment sealed before a crash
// that kept the old WAL holds records the WAL still holds, and the next
// compaction's segment replaces it.
//
// A segment is the WAL it sealed, as it was at N: a WAL of its own that
// verify reads like any other, starting with the base before it (or with the
// first record), its last record the seq the next base stands at. Its name
// says which records it holds and when the last one was written:
// <first seq>-<last seq>-<unix ms>.wal.

// HistorySuffix names the directory of sealed history segments beside a WAL.
const HistorySuffix = ".history"

// HistoryDir is the directory of the sealed segments of the WAL at path.
func HistoryDir(path string) string { return filepath.Clean(path) + HistorySuffix }

// CompactOptions say what a compaction keeps.
type CompactOptions struct {
	// KeepFinished keeps the finished tasks that ended within it (and with
	// them their request ids and leases, so that a retry within it still
	// answers as before).
	KeepFinished time.Duration
	// KeepHistory deletes the sealed segments whose last record is older.
	KeepHistory time.Duration
	// Drop seals nothing: the records replaced are gone.
	Drop bool
	// Through, if set, is the last record the base replaces (a raft node
	// compacts at the seq the cluster decided, whatever it has applied
	// since); 0: the WAL's last record when the first step reads it.
	Through int64
}

// Compaction is what a compaction did.
type Compaction struct {
	Seq          int64 // the last record the base replaces
	At           int64 // the compaction's time
	KeptFrom     int64 // finished tasks that ended before were dropped
	Records      int   // the records replaced (bases not counted)
	BytesBefore  int64
	BytesAfter   int64
	TasksKept    int
	TasksDropped int
	Segment      string // the sealed history ("" when dropped)
	// Redacted is how many redacted tasks' payloads the history segments
	// may still hold (the records are sealed as they were written).
	Redacted int
	Expired  []string // segments deleted, older than KeepHistory
	// HistoryFrom is the first record the history holds now that the
	// retention was applied (0: it holds none).
	HistoryFrom int64
}

// ErrNothingToCompact means no record follows the WAL's base.
var ErrNothingToCompact = errors.New("nothing to compact: no record follows the last compaction")

// ErrCompactedMeanwhile means the WAL was compacted or replaced while a
// compaction read it.
var ErrCompactedMeanwhile = errors.New("the WAL was compacted or replaced while this compaction read it; nothing was changed: run compact again")

// historyReader replays frames through a Verifier (a compaction trusts the
// WAL no more than verify does) and keeps the SHA-256 chain of the records'
// bodies, continuing from the hash the WAL's base carries. Like any replay
// from the start it writes its tasks into an index of its own as it goes
// (index.go), which its scratch handle holds: the state it leaves reads
// them until close.
type historyReader struct {
	v       *state.Verifier
	hash    [sha256.Size]byte
	records int // the records read, not counting a base
	// begin and end are the first and last records of the base read, if the
	// file starts with one (a part is checked against the digest as it is
	// read, and need not be kept).
	begin, end state.Record
	// baseBodies are the base's first and last records as the file holds
	// them, and afterBase where the records after it start: a tail segment
	// keeps those two and copies the rest.
	baseBodies [2][]byte
	afterBase  int64
	scratch    *Handle
	build      *builder
}

func (h *Handle) newHistoryReader() *historyReader {
	scratch := Open(h.opts)
	return &historyReader{v: state.NewVerifier(), scratch: scratch, build: scratch.newBuilder(true)}
}

// close lets go of the files the reader's state read.
func (c *historyReader) close() { c.scratch.Close() }

func (c *historyReader) read(f wal.Frame) error {
	r, err := decodeFrame(f)
	if err == nil {
		err = c.v.Step(r)
	}
	if err != nil {
		return damageAt(f, err)
	}
	c.build.check(c.v.State, len(f.Body), f.After)
	r.Frame = 0 // begin and end are compared with a base as built, which is in no file
	switch r.Type {
	case state.BaseBegin:
		c.begin, c.baseBodies[0] = r, slices.Clone(f.Body)
	case state.BaseEnd:
		c.end, c.baseBodies[1], c.afterBase = r, slices.Clone(f.Body), f.Offset+wal.FrameSize(f.Body)
		hash, err := hex.DecodeString(r.Hash)
		if err != nil || len(hash) != sha256.Size {
			return damageAt(f, fmt.Errorf("the base's hash %q is not SHA-256 hex", r.Hash))
		}
		copy(c.hash[:], hash)
	case state.BasePart:
	default:
		c.hash = chainHash(c.hash, f.Body)
		c.records++
	}
	return nil
}

// chainHash is the history hash after body: SHA-256 of the hash before and
// the record's body as the WAL holds it.
func chainHash(prev [sha256.Size]byte, body []byte) [sha256.Size]byte {
	h := sha256.New()
	h.Write(prev[:])
	h.Write(body)
	var out [sha256.Size]byte
	h.Sum(out[:0])
	return out
}

// Compact compacts the WAL (see above): Prepare, then Finish.
func (h *Handle) Compact(opts CompactOptions) (Compaction, error) {
	p, err := h.PrepareCompaction(opts)
	if err != nil {
		return Compaction{}, err
	}
	return p.Finish()
}

// PreparedCompaction is a compaction's first step done: the WAL read and
// verified up to read, its copy in segment (nil with Drop), and the new WAL
// holding the base of the state there in replacement.
type PreparedCompaction struct {
	h       *Handle
	opts    CompactOptions
	history *historyReader // closed by Abandon
	read    wal.Position
	first   int64 // the seq of the first record the segment holds
	lastAt  int64 // the time of its last one
	segment *os.File
	// rebased is the oldest segment the compaction's expiry keeps, cut where
	// the retention starts (see rebase), to be named rebasedAs in place of
	// rebaseOf before the segments before it go.
	rebased, rebasedAs, rebaseOf string
	replacement                  *wal.Replacement
	based                        string     // the new WAL's index, built from its base
	out                          Compaction // what Finish reports, as far as the first step knows
}

// PrepareCompaction is the first step, without the lock: it replays and
// verifies the WAL as it stands, copies it to a new segment, and writes the
// new WAL's base beside it. Finish or Abandon the result.
func (h *Handle) PrepareCompaction(opts CompactOptions) (*PreparedCompaction, error) {
	if h.closed {
		return nil, ErrNotOpen
	}
	if mark, err := h.ownedBy(); !h.opts.Node && (err != nil || mark != nil) { // a node compacts as the cluster decides
		if err == nil {
			err = &NodeOwnedError{Path: h.opts.Path, Mark: *mark}
		}
		return nil, err
	}
	p := &PreparedCompaction{h: h, opts: opts, history: h.newHistoryReader(), first: 1}
	if err := p.prepare(); err != nil {
		p.Abandon()
		return nil, err
	}
	return p, nil
}

func (p *PreparedCompaction) prepare() error {
	h, c := p.h, p.history
	report := h.progress(true)
	defer report.end()
	log, err := wal.OpenAt(h.opts.Path, wal.Read, h.opts.LockTimeout, wal.Position{}, func(f wal.Frame) error {
		report.at(f.Offset)
		if err := c.read(f); err != nil {
			return err
		}
		if through := p.opts.Through; through > 0 && c.records > 0 && c.v.State.LastSeq() == through {
			return wal.ErrStopAfter
		}
		return nil
	})
	if err != nil {
		return h.openError(err)
	}
	defer log.Close()
	st := c.v.State
	if b := st.Base(); b != nil {
		p.first = b.Seq + 1
	}
	switch {
	case c.records == 0 || (p.opts.Through > 0 && st.Base() != nil && st.Base().Seq >= p.opts.Through):
		return ErrNothingToCompact
	case p.opts.Through > 0 && st.LastSeq() != p.opts.Through:
		return fmt.Errorf("a compaction through seq %d, but the WAL ends at seq %d", p.opts.Through, st.LastSeq())
	}
	p.read, p.lastAt = log.Position, st.LastAt()
	now, err := h.opts.Clock(st.LastAt())
	if err != nil {
		return err
	}
	out := &p.out
	*out = Compaction{Seq: st.LastSeq(), At: now, KeptFrom: max(state.MinTime, now-p.opts.KeepFinished.Milliseconds()), Records: c.records}
	history := state.HistoryDropped
	segs := Segments(h.side(HistorySuffix))
	cut := out.At - p.opts.KeepHistory.Milliseconds()
	kept := len(segs) // the oldest segment the expiry keeps
	for kept > 0 && segs[kept-1].LastAt >= cut {
		kept--
	}
	if !p.opts.Drop {
		history, out.Redacted = state.HistoryKept, len(st.Redacted())
		// The segment leaves its base out when the one before it, kept,
		// leads to it.
		tail := c.afterBase > 0 && p.first > 1 && kept < len(segs) && segs[len(segs)-1].Last == p.first-1
		if p.segment, err = h.startSegment(log, p.read, c, tail); err != nil {
			return err
		}
	}
	if kept < len(segs) {
		if p.rebased, p.rebasedAs, err = h.rebase(segs, kept, cut, now); err != nil {
			h.warn("%v; the history is kept as it is", err)
		}
		p.rebaseOf = segs[kept].Path
	}
	p.replacement, err = wal.StartReplacement(h.opts.Path, max(wal.BaseVersion, log.Version, st.FormatVersion()), h.opts.Fault, func(write func([]byte) error) error {
		var err error
		read := newPayloadSource(log.Section(0, log.End), h.opts.Path).read
		spec := baseSpec{at: now, keptFrom: out.KeptFrom, history: history, hash: hex.EncodeToString(c.hash[:]), chainFrom: log.LastSum}
		out.TasksKept, out.TasksDropped, err = h.writeBase(st, read, spec, func(r state.Record) error {
			body, err := state.EncodeRecord(r)
			if err != nil {
				return err
			}
			return write(body)
		})
		return err
	})
	if err == nil {
		p.based = p.replacement.Name() + index.Suffix
		h.indexBase(p.replacement.Name())
	}
	return err
}

// indexBase builds the index of the new WAL a compaction wrote, beside it,
// by reading its base as a replay would (the frames keep their offsets once
// the WAL is replaced, and the records appended meanwhile are the index's
// tail): Finish puts it in place, so that the command after a compaction
// reads an index, not the base. A base of few tasks gets none, as a short
// WAL does. Without the lock: nothing but this compaction knows the file.
func (h *Handle) indexBase(path string) {
	opts := h.opts
	opts.Path, opts.FullReplay, opts.Verifier, opts.ReplayFrom, opts.Resident = path, false, nil, 0, false
	opts.OnRecord, opts.BeforeRecord, opts.Progress = nil, nil, nil
	based := Open(opts)
	defer based.Close()
	if err := based.Read(func(*Tx) error { return nil }); err != nil {
		h.warn("could not index the compacted WAL (%v); the next command builds its index", err)
	}
}

// Abandon drops a prepared compaction: the WAL is as it was.
func (p *PreparedCompaction) Abandon() {
	p.history.close()
	if p.based != "" {
		_ = os.Remove(p.based)
	}
	p.replacement.Abandon()
	if p.rebased != "" {
		os.Remove(p.rebased)
		p.rebased = ""
	}
	if p.segment != nil {
		p.segment.Close()
		os.Remove(p.segment.Name()) // nothing once sealed
		p.segment = nil
	}
}

// Finish is the second step, under the exclusive lock: the records appended
// since the first checked, the segment sealed, and the WAL replaced by the
// base followed by those records, their frames as they were.
func (p *PreparedCompaction) Finish() (Compaction, error) {
	defer p.Abandon()
	h, c := p.h, p.history
	defer h.forget() // the WAL it knew is gone
	log, err := wal.OpenAt(h.opts.Path, wal.Write, h.opts.LockTimeout, p.read, c.read)
	if errors.Is(err, wal.ErrStalePosition) || errors.Is(err, wal.ErrReplaced) || errors.Is(err, fs.ErrNotExist) {
		return Compaction{}, ErrCompactedMeanwhile
	}
	if err != nil {
		return Compaction{}, h.openError(err)
	}
	defer log.Close()
	log.Inject(h.opts.Fault)
	if log.Torn != nil {
		if _, err := log.CutTorn(); err != nil {
			return Compaction{}, err
		}
	}
	out := p.out
	if p.segment != nil {
		if out.Segment, err = h.sealSegment(p.segment, p.first, out.Seq, p.lastAt); err != nil {
			return Compaction{}, err
		}
	}
	h.removeLeftovers()
	h.removeReplacementsBut(p.replacement.Name())
	out.BytesBefore, out.BytesAfter = log.End, p.replacement.Size()+log.End-p.read.End
	if err := log.Replace(p.replacement, p.read.End); err != nil {
		return Compaction{}, err
	}
	h.placeIndex(p.based)
	p.based = ""
	if p.rebased != "" {
		err := os.Rename(p.rebased, p.rebasedAs)
		if err == nil {
			p.rebased = ""
			err = wal.SyncDir(filepath.Dir(p.rebasedAs))
		}
		if err == nil && p.rebasedAs != p.rebaseOf {
			err = os.Remove(p.rebaseOf) // the records it held from the cut on are in the new one
		}
		if err != nil {
			h.warn("could not cut the history segment %s where its retention starts (%v); the history is kept as it is", p.rebaseOf, err)
		}
	}
	out.Expired = h.expireHistory(out.At - p.opts.KeepHistory.Milliseconds())
	if segs := Segments(h.side(HistorySuffix)); len(segs) > 0 {
		out.HistoryFrom = segs[0].First
	}
	return out, nil
}

// placeIndex puts the index built for the WAL that replaced the old one in
// place of the old one's (which the next command would find of another WAL,
// and drop), or removes the old one when none was built.
func (h *Handle) placeIndex(built string) {
	err := os.Rename(built, h.indexPath())
	if err == nil {
		err = wal.SyncDir(filepath.Dir(h.indexPath()))
	} else if errors.Is(err, fs.ErrNotExist) {
		err = h.opts.FS.Remove(h.indexPath())
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		h.warn("could not put the compacted WAL's index in place (%v); the next command builds it", err)
	}
}

// removeReplacementsBut removes the new WALs that compactions which never
// finished left beside the WAL (a writer must not: a compaction writes its
// own before it takes the lock), and their indexes, all but the one named
// and its index.
func (h *Handle) removeReplacementsBut(name string) {
	leftovers, _ := filepath.Glob(globEscape(h.side("")) + ".compacting-*")
	for _, path := range leftovers {
		if base := strings.TrimSuffix(filepath.Base(path), index.Suffix); base != filepath.Base(name) { // both beside the WAL, named as it was given
			_ = h.opts.FS.Remove(path)
		}
	}
}

// baseSpec says how a base is made: at a compaction's time, keeping the
// finished tasks that ended from keptFrom on, saying where the history
// before it went, carrying the hash chain head of the records it replaces
// and continuing the checksum chain from chainFrom; cut, if it cuts a
// history segment (state.Record.Cut).
type baseSpec struct {
	at, keptFrom  int64
	history, hash string
	chainFrom     uint32
	cut           bool
}

// writeBase hands emit the records of the base of st (see state.WriteBase):
// its tasks wait in a temporary file while the head and the digest are
// worked out, so that a base of millions is built in the memory st holds.
func (h *Handle) writeBase(st *state.State, read func(*state.PayloadRef) (string, error), spec baseSpec, emit func(state.Record) error) (kept, dropped int, err error) {
	f, err := h.opts.FS.Scratch(filepath.Clean(h.opts.Path))
	if err != nil {
		return 0, 0, fmt.Errorf("a file for the base's tasks: %w", err)
	}
	defer f.Close()
	buffered := bufio.NewWriterSize(f, 1<<20)
	snap, err := st.WriteBase(buffered, spec.keptFrom, read)
	if err == nil {
		err = buffered.Flush()
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("writing the base's tasks to %s: %w", f.Name(), err)
	}
	snap.Cut = spec.cut
	err = snap.Records(spec.at, spec.history, spec.hash, spec.chainFrom, bufio.NewReaderSize(f, 1<<20), emit)
	return snap.Kept, snap.Dropped, err
}

// startSegment copies what the first step read to a new segment file in
// the history directory, not yet sealed: whole, or as a tail (c's base's
// first and last records, then the records after it).
func (h *Handle) startSegment(log *wal.Log, read wal.Position, c *historyReader, tail bool) (*os.File, error) {
	dir := h.side(HistorySuffix)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating the history directory: %w", err)
	}
	f, err := os.CreateTemp(dir, "sealing-*")
	if err != nil {
		return nil, fmt.Errorf("creating a history segment: %w", err)
	}
	if tail {
		out := bufio.NewWriterSize(f, 1<<20)
		frames := wal.NewFrameWriter(out, max(wal.BaseVersion, log.Version))
		if err = frames.Write(c.baseBodies[0]); err == nil {
			err = frames.Write(c.baseBodies[1])
		}
		if err == nil {
			_, err = io.Copy(out, log.Section(c.afterBase, read.End))
		}
		if err == nil {
			err = out.Flush()
		}
	} else {
		_, err = io.Copy(f, log.Section(0, read.End))
	}
	if err == nil {
		err = f.Sync() // now, without the lock: the last step then flushes only what was appended since
	}
	if err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("writing the history segment %s: %w", f.Name(), err)
	}
	return f, nil
}

// sealSegment makes the segment (written and fsynced by the first step)
// durable under its name, and removes the segments a crashed compaction left
// that it holds too.
func (h *Handle) sealSegment(f *os.File, first, last, lastAt int64) (string, error) {
	dir := filepath.Dir(f.Name())
	for _, s := range allSegments(dir) {
		if s.First >= first {
			os.Remove(s.Path)
		}
	}
	name := filepath.Join(dir, segmentName(first, last, lastAt))
	if err := os.Rename(f.Name(), name); err != nil {
		return "", fmt.Errorf("sealing the history segment %s: %w; the WAL is unchanged", name, err)
	}
	if err := wal.SyncDir(dir); err != nil {
		return "", fmt.Errorf("sealing the history segment %s (fsync of %s): %w; the WAL is unchanged", name, dir, err)
	}
	return name, nil
}

// expireHistory deletes the segments whose last record is older than
// before, but never those a tail left needs (its base is derived from them),
// and the leftovers of crashed sealing and reading. It deletes oldest first,
// so that a crash leaves a history that starts with a segment that holds
// its base and goes on without a gap; or, when the oldest segment kept was
// cut where the retention starts (a gap before it, which readers take as a
// new start), newest first, so that what a crash leaves before the cut is
// still a history that reads.
func (h *Handle) expireHistory(before int64) []string {
	dir := h.side(HistorySuffix)
	var gone []string
	all, segs := allSegments(dir), Segments(dir)
	for i := 0; i+1 < len(all); i++ {
		if all[i].Last == all[i+1].Last && os.Remove(all[i].Path) == nil { // covered (Segments)
			gone = append(gone, all[i].Path)
		}
	}
	n := 0
	for n < len(segs) && segs[n].LastAt < before {
		n++
	}
	cut := false // the oldest segment kept was cut where the retention starts
	for ; n < len(segs); n-- {
		first, s, err := startOf(segs[n].Path, h.opts.LockTimeout)
		if cut = err == nil && first.Cut; n == 0 || (err == nil && s == nil) {
			break
		}
	}
	expired := segs[:n]
	if cut {
		expired = slices.Clone(expired)
		slices.Reverse(expired)
	}
	for _, s := range expired {
		if os.Remove(s.Path) != nil {
			break // the rest must stay: they or what follows them need it
		}
		gone = append(gone, s.Path)
	}
	leftovers, _ := filepath.Glob(filepath.Join(globEscape(dir), "sealing-*"))
	for _, path := range leftovers {
		os.Remove(path)
	}
	reading, _ := filepath.Glob(filepath.Join(globEscape(dir), readingPrefix+"*"))
	for _, path := range reading {
		if info, err := os.Stat(path); err == nil && time.Since(info.ModTime()) > time.Hour {
			os.Remove(path) // a reader that crashed; one still reading is younger
		}
	}
	return gone
}

// segmentName names the segment of the records first to last, the last
// one written at lastAt.
func segmentName(first, last, lastAt int64) string {
	return fmt.Sprintf("%012d-%012d-%d.wal", first, last, lastAt)
}

// Segment is one sealed history segment.
type Segment struct {
	Path        string
	First, Last int64 // the seqs of its first and last records
	LastAt      int64 // the time of its last record
}

// Segments lists the sealed segments in dir, oldest first; files that are
// not named as segments are not listed, nor is a segment that a later one
// ending at the same record covers (a crash between cutting it where the
// retention starts and removing it: see rebase).
func Segments(dir string) []Segment {
	all := allSegments(dir)
	out := all[:0:0]
	for i, s := range all {
		if i+1 == len(all) || all[i+1].Last != s.Last {
			out = append(out, s)
		}
	}
	return out
}

// allSegments lists every file in dir named as a segment, oldest first.
func allSegments(dir string) []Segment {
	entries, _ := os.ReadDir(dir)
	var out []Segment
	for _, e := range entries {
		name, ok := strings.CutSuffix(e.Name(), ".wal")
		fields := strings.SplitN(name, "-", 3) // the time may be negative
		if !ok || len(fields) != 3 || !e.Type().IsRegular() {
			continue
		}
		var n [3]int64
		valid := true
		for i, f := range fields {
			v, err := strconv.ParseInt(f, 10, 64)
			n[i], valid = v, valid && err == nil
		}
		if valid && n[0] >= 1 && n[1] >= n[0] {
			out = append(out, Segment{Path: filepath.Join(dir, e.Name()), First: n[0], Last: n[1], LastAt: n[2]})
		}
	}
	return out // ReadDir sorts by name, and the zero-padded first seq leads it
}
