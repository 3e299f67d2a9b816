// Package store is leasewal's unit of work. A Handle is opened once and used
// for one operation (a one-shot command) or many (a worker loop, a server).
// Each operation takes the WAL's lock, checks that the path still names the
// locked file, catches up (a full replay; the index and the tail after it;
// or only the records appended since the handle's own last position, checked
// by the chained checksum), runs the caller's decision, and commits its
// records: stamped with seq, time and actor in one place, applied to the
// state, appended in one write and made durable by one fsync.
//
// store knows files and caches, never how an answer looks; state knows the
// rules, never files; wal knows frames, never tasks.
package store

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"time"

	"github.com/leasewal/leasewal/internal/parallel"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// Clock resolves the operation's time from the last record's time: time
// never runs backwards inside a WAL, so a clock answers at least lastAt.
type Clock func(lastAt int64) (int64, error)

// Options say how a handle opens and writes the WAL. They are fixed when the
// handle is opened.
type Options struct {
	Path        string
	LockTimeout time.Duration
	Actor       string // stamped into every record, for audit only
	Clock       Clock  // nil: the wall clock
	Fault       *wal.Fault
	// FullReplay never starts from the index: every record is replayed.
	FullReplay bool
	// OnRecord, if set, sees each record the operation applies (all of them
	// with FullReplay; else those after the index or the handle's last
	// position) right after it is applied, with the operation: its State as
	// of that record, and its Payload.
	// Commands that read the records themselves (log, inspect of one task,
	// --until) set FullReplay too; log --follow does not. ErrStop ends the
	// replay there.
	OnRecord func(state.Record, *Tx) error
	// ReplayFrom, if set, is the first record OnRecord must see: the index
	// is used only when it ends before that record (log --from, and each
	// turn of a follow, need not replay the history before it).
	ReplayFrom int64
	// BeforeRecord, if set, sees each record of a full replay just before it
	// is applied, with the state as of the record before (verify --expect
	// checks its "at" steps there). It implies FullReplay.
	BeforeRecord func(state.Record, *Tx) error
	// Verifier, if set, replays through the verifier's own checks (verify).
	// It implies FullReplay.
	Verifier *state.Verifier
	// Warn receives one line for each thing worth a warning (a torn tail cut,
	// a cache that could not be written); nil drops them.
	Warn func(string)
	FS   FS // nil: OS
	// Node opens the handle as the raft node that owns the WAL: the one
	// handle that may write it (see NodeMark).
	Node bool
	// Progress, if set, hears how far a long read has come: bytes of the
	// WAL (or of what a backup copies) done, of total, every few MiB, and
	// once at its end (done == total) whatever became of it.
	Progress func(done, total int64)
	// Resident says the handle serves many operations and keeps its state
	// between them (a server, a worker loop): it writes the index less
	// often (residentIndexTail), without sync, and syncs it at Close.
	Resident bool
	// SpillAfter is how many tasks a replay from the WAL's start holds in
	// memory before it writes them into the index it builds, and the most a
	// writer holds before it writes the index; 0: 4,096. SpillAfterBytes
	// is how many bytes of records it reads before it does whatever the
	// count; 0: 64 MiB.
	SpillAfter      int
	SpillAfterBytes int64
}

// Handle is an open store. It is not safe for concurrent use; one process may
// hold several, and processes share the WAL through its lock.
type Handle struct {
	opts Options
	// cache is the state as of pos, kept between operations so that a long-lived
	// handle reads only what was appended since. nil: start over.
	cache *state.State
	pos   wal.Position
	// indexed is where the index that cache reads its tasks from ends
	// (Count 0: cache holds every task), and idx that index while an
	// operation runs (index.go).
	indexed   wal.Position
	idx       *openIndex
	forceFull bool // the index could not be trusted twice: replay the WAL
	rebuilt   bool // an index was dropped: the next one is built from the WAL
	// peakHot is the most tasks memory held during the last replay from the
	// WAL's start: what its builder bounds.
	peakHot int
	// unsynced: the handle wrote the index without sync (Close syncs it).
	unsynced bool
	// spilled: the operation wrote part of its records' tasks into the
	// index (spillFor), which holds them partially until writeIndex.
	spilled bool
	// reindexing: the next replay builds the index whatever it finds.
	reindexing bool
	closed     bool
	// payloads reads back the payloads the state holds as where the WAL has
	// them; it lets the file go when the handle forgets the state.
	payloads payloadFile
	// syncs counts the fsyncs that made records of this handle's writes
	// durable (a server's /metrics: requests per fsync is its grouping).
	syncs atomic.Int64
	// ahead is what a raft leader's DecideBatch decided, for the Replicate
	// of its entry (replica.go); the next operation drops it.
	ahead *decided
	// poisoned is an append whose rollback failed: the WAL may hold records
	// never acknowledged, so the handle writes nothing more (a server
	// refuses writes until it starts again, and its next writer cuts or
	// keeps them).
	poisoned error
}

// Open returns a handle; nothing is read until the first operation.
func Open(opts Options) *Handle {
	if opts.FS == nil {
		opts.FS = OS{}
	}
	if opts.Clock == nil {
		opts.Clock = func(lastAt int64) (int64, error) { return max(time.Now().UnixMilli(), lastAt), nil }
	}
	return &Handle{opts: opts, payloads: payloadFile{path: opts.Path}}
}

// Path is the WAL's path.
func (h *Handle) Path() string { return h.opts.Path }

// Close releases what the handle holds between operations.
func (h *Handle) Close() {
	h.forget()
	h.markSynced()
	h.closed = true
}

// forget drops the cached state: the next operation starts over.
func (h *Handle) forget() {
	h.idx.close()
	h.payloads.close()
	h.cache, h.pos, h.indexed, h.idx, h.spilled, h.ahead = nil, wal.Position{}, wal.Position{}, nil, false, nil
}

func (h *Handle) warn(format string, args ...any) {
	if h.opts.Warn != nil {
		h.opts.Warn(fmt.Sprintf(format, args...))
	}
}

// Tx is one operation under the lock.
type Tx struct {
	State *state.State
	Now   int64
	// Missing is true when the WAL does not exist yet: an empty history.
	Missing bool
	// Committed holds the records this operation appended, as stamped.
	Committed []state.Record
	// Actor, when set, is stamped into this operation's records instead of
	// the handle's: a server's request names its own caller.
	Actor string

	h   *Handle
	log *wal.Log
	// payloads reads through log, once a payload is read.
	payloads *payloadSource
	// staged holds the bodies a batch's commits appended to no file yet:
	// the batch writes them all at its end (WriteBatch).
	staging bool
	staged  [][]byte
	version int
	// tentative is set by CommitFirst: the operation's records are staged
	// and written at its end only if it succeeds.
	tentative bool
	// diverged is set when a record the gate passed was refused by the
	// state, which it may have half changed: nothing more is decided on it.
	diverged error
}

// CommitFirst applies recs ahead of what the operation decides, so that it
// decides on them, and writes them with the operation's own records in one
// append at its end; if the operation fails (a refusal, bad input), none of
// them is written and the handle forgets the state they changed. Within a
// batch (WriteBatch) they are staged with it like any commit.
func (tx *Tx) CommitFirst(recs []state.Record) error {
	if len(recs) == 0 {
		return nil
	}
	if !tx.staging {
		tx.staging, tx.tentative = true, true
	}
	return tx.Commit(recs)
}

// settleTentative ends what CommitFirst began: on success the staged records
// are written, on failure dropped with the state they changed.
func (tx *Tx) settleTentative(err error) error {
	if !tx.tentative {
		return err
	}
	tx.tentative = false
	if err != nil {
		tx.staging, tx.staged, tx.Committed = false, nil, nil
		tx.h.forget()
		return err
	}
	return tx.flushStaged()
}

// Records is how many records the WAL holds.
func (tx *Tx) Records() int {
	if tx.log == nil {
		return 0
	}
	return tx.log.Count
}

// TornBytes is the length of a torn tail the operation saw (0 for none).
func (tx *Tx) TornBytes() int64 {
	if tx.log == nil || tx.log.Torn == nil {
		return 0
	}
	return tx.log.Torn.Length
}

// Write runs fn under the exclusive lock; fn may Commit.
func (h *Handle) Write(fn func(*Tx) error) error { return h.do(wal.Write, fn) }

// Read runs fn under a shared lock; fn must not Commit.
func (h *Handle) Read(fn func(*Tx) error) error { return h.do(wal.Read, fn) }

// Run is Write when writing is set, else Read.
func (h *Handle) Run(writing bool, fn func(*Tx) error) error {
	if writing {
		return h.Write(fn)
	}
	return h.Read(fn)
}

// maxStartOvers bounds how often one operation starts over because the WAL
// was created or replaced under it; each start-over means another process
// made progress, so reaching it takes a storm of renames.
const maxStartOvers = 1000

func (h *Handle) do(mode wal.Mode, fn func(*Tx) error) error {
	if h.closed {
		return ErrNotOpen
	}
	h.ahead = nil
	if mode == wal.Write && h.poisoned != nil {
		return &PoisonedError{Cause: h.poisoned}
	}
	for range maxStartOvers {
		tx, err := h.begin(mode)
		if errors.Is(err, wal.ErrReplaced) {
			h.forget()
			continue
		}
		if errors.Is(err, state.ErrSource) && !h.forceFull {
			h.distrust(err)
			continue
		}
		if err != nil {
			h.forget()
			return err
		}
		err = tx.settleTentative(fn(tx))
		if damage := tx.State.Damage(); damage != nil {
			tx.end()
			if len(tx.Committed) == 0 && !h.forceFull {
				h.distrust(damage)
				continue
			}
			h.forget()
			return err
		}
		switch {
		case tx.diverged != nil:
			h.forget()
		case mode == wal.Write && err == nil && tx.log != nil:
			h.commitIndex(tx.State, tx.log.Position)
		}
		tx.end()
		if errors.Is(err, wal.ErrCreateRace) {
			h.forget()
			continue
		}
		return err
	}
	return fmt.Errorf("the WAL %s kept being created or replaced while this command waited; retry", h.opts.Path)
}

// distrust drops an index that gave damage, and the state read from it:
// the operation runs again on a replay of the WAL, which builds the index
// anew; damage once more, and it replays the WAL without one.
func (h *Handle) distrust(damage error) {
	h.forget()
	if h.rebuilt {
		h.forceFull = true
		h.warn("%v; replaying the whole WAL", damage)
		return
	}
	h.rebuilt = true
	h.dropIndex(damage)
}

// end closes what the operation held: the WAL, and the index (a resident
// handle's state reads it again at its next operation, reopenIndex).
func (tx *Tx) end() {
	if tx.log != nil {
		tx.log.Close()
	}
	tx.h.idx.close()
	tx.h.idx = nil
}

// fullReplay reports whether every operation must replay every record.
func (h *Handle) fullReplay() bool {
	return h.opts.FullReplay || h.opts.BeforeRecord != nil || h.opts.Verifier != nil || h.forceFull
}

// begin locks the WAL and catches the state up with it.
func (h *Handle) begin(mode wal.Mode) (*Tx, error) {
	if mode == wal.Write && !h.opts.Node {
		mark, err := h.ownedBy()
		if err != nil {
			return nil, err
		}
		if mark != nil {
			return nil, &NodeOwnedError{Path: h.opts.Path, Mark: *mark}
		}
	}
	if h.cache != nil && h.cache.HasSource() && h.idx == nil && !h.reopenIndex() {
		h.forget() // the index it read is gone, or is no longer what it was built on
	}
	if h.cache == nil && !h.fullReplay() && !h.reindexing {
		h.loadIndex()
	}
	tx, err := h.catchUp(mode)
	if errors.Is(err, wal.ErrStalePosition) {
		h.forget() // the index or the handle's position no longer describes the WAL
		if h.indexed.Count == 0 {
			h.rebuilt = true // an index of another WAL: the replay builds this one's
		}
		tx, err = h.catchUp(mode)
	}
	if err != nil {
		return nil, err
	}
	if tx.Now, err = h.opts.Clock(tx.State.LastAt()); err != nil {
		tx.end()
		return nil, err
	}
	return tx, nil
}

// catchUp opens and locks the WAL and applies the records after the cached
// position (all of them when nothing is cached, building the index as it
// goes).
func (h *Handle) catchUp(mode wal.Mode) (*Tx, error) {
	st, step := h.cache, (func(state.Record) error)(nil)
	var build *builder
	switch {
	case h.opts.Verifier != nil:
		st, step = h.opts.Verifier.State, h.opts.Verifier.Step
		h.pos = wal.Position{}
		build = h.newBuilder(true)
	case st == nil:
		st = state.New()
		h.pos, h.indexed = wal.Position{}, wal.Position{}
		build = h.newBuilder(h.fullReplay())
	}
	if step == nil {
		step = st.Apply
	}
	st.SpillTo(h.spillFor(mode), h.spillAfter())
	tx := &Tx{State: st, h: h}
	apply := func(d decoded) error {
		if d.r.Type.IsBase() { // the hooks see the records, not the base that stands for some
			if err := step(d.r); err != nil {
				return &DamageError{Seq: int64(d.index), Offset: d.offset, Err: err}
			}
			build.check(st, d.size, d.after)
			return nil
		}
		if h.opts.BeforeRecord != nil {
			if err := h.opts.BeforeRecord(d.r, tx); err != nil {
				return &hookError{err}
			}
		}
		if err := step(d.r); err != nil {
			return &DamageError{Seq: int64(d.index), Offset: d.offset, Err: err}
		}
		build.check(st, d.size, d.after)
		if h.opts.OnRecord != nil {
			if err := h.opts.OnRecord(d.r, tx); err != nil && !errors.Is(err, ErrStop) {
				return &hookError{err}
			} else if err != nil {
				return err
			}
		}
		return nil
	}
	// A replay from the start decodes on one core and applies on the other;
	// a catch-up from a position (the index's, or the handle's own) reads a
	// short tail, which is not worth a goroutine and its buffers.
	var p *pipeline
	add := apply
	if h.pos.Count == 0 {
		p = startPipeline(apply)
		add = p.add
	}
	report := h.progress(h.pos.Count == 0)
	defer report.end()
	log, err := wal.OpenAt(h.opts.Path, mode, h.opts.LockTimeout, h.pos, func(f wal.Frame) error {
		report.at(f.Offset)
		r, err := decodeFrame(f)
		if err != nil {
			return damageAt(f, err)
		}
		return add(decoded{r: r, index: f.Index, offset: f.Offset, size: len(f.Body), after: f.After})
	})
	if p != nil {
		if applyErr := p.finish(); applyErr != nil { // it is about an earlier record than any error of the scan
			if log != nil {
				log.Close()
			}
			log, err = nil, applyErr
		}
	}
	if err == nil && st.Damage() != nil {
		log.Close()
		log, err = nil, st.Damage()
	}
	switch {
	case errors.Is(err, ErrStop): // the caller has read what it needs; the file is closed
		h.cache = nil // the state stops mid-way: never reuse it
	case (errors.Is(err, fs.ErrNotExist) || errors.Is(err, wal.ErrEmptyFile)) && h.pos.Count > 0:
		return nil, wal.ErrStalePosition // the WAL that state describes is gone
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, wal.ErrEmptyFile): // an empty file: a WAL with no record yet
		tx.Missing = true
		h.cache = st
	case err != nil:
		h.cache = nil
		h.idx.close()
		h.idx = nil
		return nil, h.openError(err)
	default:
		tx.log = log
		log.Route(seamOf(h.opts.FS))
		log.Inject(h.opts.Fault)
		h.cache, h.pos = st, log.Position
		build.finish(st, log.Position)
		if log.Torn != nil && mode == wal.Read {
			h.warn("ignoring %d bytes at offset %d after the last complete record (an append that never finished, so never acknowledged); the next writing command cuts them and keeps them in %s.torn-%d",
				log.Torn.Length, log.Torn.Offset, h.opts.Path, log.Torn.Offset)
		}
	}
	if h.opts.Verifier != nil || h.opts.FullReplay || h.opts.BeforeRecord != nil {
		h.cache = nil // a verifier's, or a full replay's, state is its own
	}
	return tx, nil
}

// progress reports a read's progress to Options.Progress: only a read of
// the whole WAL (when whole is set) reports, and only every few MiB.
func (h *Handle) progress(whole bool) *progressReport {
	r := &progressReport{report: h.opts.Progress}
	if !whole || r.report == nil {
		r.report = nil
		return r
	}
	if info, err := os.Stat(h.opts.Path); err == nil {
		r.total = info.Size()
	}
	return r
}

// progressReport is one read's progress.
type progressReport struct {
	report func(done, total int64)
	total  int64
	next   int64 // the offset of the next report
}

const progressStep = 4 << 20

// at notes that the read has come to offset.
func (r *progressReport) at(offset int64) {
	if r.report != nil && offset >= r.next {
		r.report(offset, r.total)
		r.next = offset + progressStep
	}
}

// end reports the read done.
func (r *progressReport) end() {
	if r.report != nil {
		r.report(r.total, r.total)
	}
}

// decodeFrame reads a frame's record and checks that the file's version
// allows it.
func decodeFrame(f wal.Frame) (state.Record, error) {
	r, err := state.DecodeRecord(f.Body)
	r.Frame = f.Offset
	switch {
	case err != nil:
		return r, err
	case r.FormatVersion() > f.Version:
		return r, fmt.Errorf("a record of format version %d in a file of version %d", r.FormatVersion(), f.Version)
	}
	return r, nil
}

func (h *Handle) openError(err error) error {
	var hook *hookError
	if errors.As(err, &hook) {
		return hook.err // the caller's own error, as it made it
	}
	var (
		pathErr    *fs.PathError
		replayDmg  *DamageError
		dmg        *wal.DamageError
		format     *wal.FormatError
		notRegular *wal.NotRegularError
		locked     *wal.LockTimeoutError
	)
	switch {
	case errors.As(err, &replayDmg), errors.Is(err, wal.ErrReplaced), errors.As(err, &notRegular), errors.As(err, &locked):
		return err
	case errors.As(err, &pathErr) && errors.Is(err, fs.ErrPermission):
		return &PermissionError{Path: h.opts.Path, Err: err}
	case errors.As(err, &dmg):
		return fmt.Errorf("the WAL %s is damaged: %w; nothing was changed and 'leasewal repair' will refuse too: restore the file from a copy, or inspect it with a text editor", h.opts.Path, err)
	case errors.As(err, &format), errors.Is(err, wal.ErrEmptyFile):
		return fmt.Errorf("%s: %w", h.opts.Path, err)
	}
	return fmt.Errorf("opening the WAL %s: %w", h.opts.Path, err)
}

// Commit stamps each record with its seq, the operation's time and the
// actor, passes each through the gate (checkEncode), applies them, and
// appends all of them in one write made durable by one fsync. A record the
// gate refuses fails the operation alone, before anything of it was applied
// (a *RefusedRecordError). On any failure nothing was appended; after a
// failure to apply or write, the handle forgets its state, which no longer
// matches the WAL. The records are stamped where they are (a batch's are
// many, and large: no copy), and Committed holds them.
func (tx *Tx) Commit(recs []state.Record) error {
	if len(recs) == 0 {
		return nil
	}
	h := tx.h
	switch {
	case tx.diverged != nil:
		return ErrNotDecided
	case tx.State.Damage() != nil:
		return errIndexDamaged // decided on answers a damaged index gave: run again from the WAL
	}
	stamped := recs[:len(recs):len(recs)] // what Committed appends after them goes elsewhere
	seq := tx.State.LastSeq()
	for i := range stamped {
		seq++
		stamped[i].Seq, stamped[i].At, stamped[i].Actor = seq, tx.Now, cmp.Or(tx.Actor, h.opts.Actor)
	}
	bodies, version, err := tx.passGate(stamped)
	if err != nil {
		return err
	}
	if err := tx.applyAll(stamped); err != nil {
		return err
	}
	if tx.staging {
		tx.staged, tx.version = append(tx.staged, bodies...), max(tx.version, version)
		tx.committed(stamped)
		return nil
	}
	if err := tx.append(bodies, version); err != nil {
		h.forget()
		return err
	}
	h.pos = tx.log.Position
	tx.committed(stamped)
	return nil
}

// committed adds stamped to Committed, without a copy when it is the
// operation's first: a batch's records are many, and large.
func (tx *Tx) committed(stamped []state.Record) {
	if len(tx.Committed) == 0 {
		tx.Committed = stamped
		return
	}
	tx.Committed = append(tx.Committed, stamped...)
}

// passGate has recs pass the gate, in order, and returns their bodies and
// the WAL's format version they need; each record's Frame is set to where
// its frame is to start, after what the operation wrote or staged. The
// payloads a decision named where the WAL has them are read first, one
// after the other; the gate runs on every processor. The error is the
// first record's that failed, in order.
func (tx *Tx) passGate(recs []state.Record) ([][]byte, int, error) {
	unread, readErr := len(recs), error(nil)
	for i := range recs {
		if readErr = tx.readPayloadInto(&recs[i]); readErr != nil {
			unread = i
			break
		}
	}
	bodies, gateErrs := make([][]byte, len(recs)), make([]error, unread)
	parallel.Ranges(unread, func(_, from, to int) {
		for i := from; i < to; i++ {
			bodies[i], gateErrs[i] = gate(&recs[i])
		}
	})
	for _, err := range gateErrs {
		if err != nil {
			return nil, 0, err
		}
	}
	if readErr != nil {
		return nil, 0, readErr
	}
	version, frame := 1, tx.nextFrame()
	for i := range recs {
		recs[i].Frame = frame
		version = max(version, recs[i].FormatVersion())
		frame += wal.FrameSize(bodies[i])
	}
	return bodies, version, nil
}

// readPayloadInto reads into r a payload its decision named where the WAL
// has it (a requeue's), before r passes the gate.
func (tx *Tx) readPayloadInto(r *state.Record) error {
	ref := r.PayloadAt
	if ref == nil {
		return nil
	}
	text, err := tx.readPayload(ref)
	if err != nil {
		return fmt.Errorf("record %d: %w; nothing was written", r.Seq, err)
	}
	r.Payload, r.PayloadAt = text, nil
	return nil
}

// gate is what a stamped record passes before anything of its operation
// is applied: it is checked against the table of limits, encoded, and the
// body must fit the WAL and decode again (what replay would read). It
// reads nothing but r: a batch's records pass it on every processor.
func gate(r *state.Record) ([]byte, error) {
	refused := func(err error) error { return &RefusedRecordError{Seq: r.Seq, Type: r.Type, Err: err} }
	if err := state.CheckRecord(*r); err != nil {
		return nil, refused(err)
	}
	body, err := state.EncodeRecord(*r)
	if err != nil {
		return nil, refused(err)
	}
	if len(body) > wal.MaxBodySize {
		return nil, refused(fmt.Errorf("its body is %d bytes, over the WAL's limit of %d", len(body), wal.MaxBodySize))
	}
	if _, err := state.DecodeRecord(body); err != nil {
		return nil, refused(err)
	}
	return body, nil
}

// applyAll applies records that passed the gate. A record the state refuses
// (a decision that broke a rule: a bug) may leave it half changed: the
// operation, and every later one of its batch, ends (diverged), and the
// handle forgets the state.
func (tx *Tx) applyAll(recs []state.Record) error {
	for _, r := range recs {
		if err := tx.State.Apply(r); err != nil {
			tx.h.cache = nil
			tx.diverged = &RefusedRecordError{Seq: r.Seq, Type: r.Type, Err: err}
			return tx.diverged
		}
	}
	return nil
}

// nextFrame is where the frame of the next record the operation commits
// will start: after the WAL's last one and what the operation staged.
func (tx *Tx) nextFrame() int64 {
	end := int64(len(wal.HeaderLine(wal.NewVersion)))
	if tx.log != nil {
		end = tx.log.End
	}
	for _, body := range tx.staged {
		end += wal.FrameSize(body)
	}
	return end
}

// Payload is p's text, read back from the WAL when the state holds where
// it is there instead (state.InlinePayloadBytes); the hooks of a replay
// (Options.OnRecord, BeforeRecord) read their state's payloads so too.
func (tx *Tx) Payload(p state.Payload) (string, error) {
	if ref := p.Ref(); ref != nil {
		return tx.readPayload(ref)
	}
	return p.Text()
}

// readPayload reads the payload at ref: from the frames the operation has
// staged and not yet written (a task created earlier in the same batch),
// else through the locked log, else (a replay's hooks, before the log is
// at hand) from the WAL's path.
func (tx *Tx) readPayload(ref *state.PayloadRef) (string, error) {
	frame := tx.nextFrame()
	for i := len(tx.staged) - 1; i >= 0 && frame > ref.Frame; i-- {
		frame -= wal.FrameSize(tx.staged[i])
		if frame == ref.Frame {
			r, err := state.DecodeRecord(tx.staged[i])
			if err == nil {
				err = ref.Check(r.Payload)
			}
			return r.Payload, err
		}
	}
	if tx.log != nil {
		if tx.payloads == nil {
			tx.payloads = newPayloadSource(nil, tx.h.opts.Path)
		}
		tx.payloads.file = tx.log.Section(0, tx.log.End) // as far as the operation has appended (the parts read stay as they were)
		return tx.payloads.read(ref)
	}
	return tx.h.payloads.read(ref)
}

// WriteBatch runs fns one after the other in one operation under the
// exclusive lock, each deciding against the state that includes the
// decisions of those before it, and appends every record they committed in
// one write made durable by one fsync (group commit). It returns each fn's
// own error and, separately, the batch's: when the write or the fsync
// fails, nothing of the batch was written, and every fn's answer is void.
// Committed[i] are the records fns[i] committed, as stamped.
func (h *Handle) WriteBatch(fns []func(*Tx) error) (errs []error, committed [][]state.Record, err error) {
	errs, committed = make([]error, len(fns)), make([][]state.Record, len(fns))
	err = h.Write(func(tx *Tx) error {
		tx.staging = true
		if err := tx.decideEach(fns, errs, committed); err != nil {
			return err
		}
		return tx.flushStaged()
	})
	return errs, committed, err
}

// flushStaged ends staging: the records staged since it began are
// appended in one write made durable by one fsync.
func (tx *Tx) flushStaged() error {
	tx.staging = false
	if len(tx.staged) == 0 {
		return nil
	}
	staged := tx.staged
	tx.staged = nil
	if err := tx.append(staged, tx.version); err != nil {
		tx.h.forget()
		return err
	}
	tx.h.pos = tx.log.Position
	return nil
}

// decideEach runs a batch's fns in order, each deciding against the state
// that includes the decisions before it, with their commits staged. A fn
// that leaves the state diverged (applyAll) ends the batch: the fns after it
// are answered ErrNotDecided, and what was staged before it is kept.
func (tx *Tx) decideEach(fns []func(*Tx) error, errs []error, committed [][]state.Record) error {
	for i, fn := range fns {
		if tx.diverged != nil {
			errs[i] = ErrNotDecided
			continue
		}
		tx.Committed, tx.Actor = nil, ""
		errs[i] = fn(tx)
		committed[i] = tx.Committed
		if tx.State.Damage() != nil {
			tx.Committed = nil // nothing of the batch was written: it runs again from a full replay
			return errIndexDamaged
		}
	}
	return nil
}

// append writes the records' bodies; version is the format version they
// need. A new WAL is created at wal.NewVersion; an older one is upgraded
// only when a record needs it.
func (tx *Tx) append(bodies [][]byte, version int) error {
	tx.h.syncs.Add(1)
	if tx.log == nil {
		log, err := wal.CreateBatch(tx.h.opts.Path, bodies, max(wal.NewVersion, version), tx.h.opts.Fault, seamOf(tx.h.opts.FS))
		if err != nil {
			return err
		}
		tx.log, tx.Missing = log, false
		return nil
	}
	cut, err := tx.log.AppendBatch(bodies, version)
	if cut != nil {
		tx.h.warn("cut %d bytes of an unfinished append at offset %d (never acknowledged); they are kept in %s", cut.Length, cut.Offset, cut.SavedAs)
	}
	tx.h.poisonOn(err)
	return err
}

// Syncs is how many fsyncs made this handle's writes durable so far.
func (h *Handle) Syncs() int64 { return h.syncs.Load() }

// poisonOn stops the handle writing after an append whose rollback failed.
func (h *Handle) poisonOn(err error) {
	var failed *wal.AppendError
	if errors.As(err, &failed) && !failed.RolledBack && h.poisoned == nil {
		h.poisoned = err
	}
}

// CutTorn cuts a torn tail off the WAL (repair), keeping the cut bytes beside
// it; nil when there is none.
func (tx *Tx) CutTorn() (*CutResult, error) {
	if tx.log == nil {
		return nil, nil
	}
	return tx.log.CutTorn()
}
