package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/leasewal/leasewal/internal/index"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// The index (internal/index, <wal>.index) is the state the WAL's records
// build, derived and disposable: a command loads its head, reads the few
// tasks it needs from it, and replays the records after what it holds
// (checked against the WAL's chained checksum there: a position of another
// WAL, or past its end, is never trusted) into memory. A writer writes what
// memory holds into it once it lags indexTail records (a resident handle
// residentIndexTail), in one bbolt transaction with the position it now
// holds. A replay from the WAL's start (no index, or one that cannot be
// trusted) writes the tasks it holds into a new index every
// Options.SpillAfter tasks or Options.SpillAfterBytes bytes of records, so
// that memory stays bounded, and puts it in place of the old when done; a
// replay that must see every record itself (verify, log, a past state)
// writes into one of its own, unlinked, that nothing keeps.

const (
	// indexAfter is how many records a WAL holds before its index is
	// built: a shorter one is replayed whole, in memory (up to about a
	// millisecond a command), rather than kept beside an index that would
	// take more room than it (a bbolt file of a few hundred tasks: about
	// 250 KB).
	indexAfter = 512
	// indexTail is how many records a one-shot writer lets the index lag
	// before it writes them into it; residentIndexTail a resident
	// handle's, which holds them in memory between operations. Each
	// command replays the tail (about 2 us a record), and one in
	// indexTail writes it (a write that costs little more for 32 tasks
	// than for one): docs/performance.md.
	indexTail         = 32
	residentIndexTail = 16384
	// writeLockWait is how long a writer waits for the index's own lock
	// (readers hold it shared while they read): it writes next time.
	writeLockWait = 50 * time.Millisecond

	defaultSpillAfter      = 1 << 12
	defaultSpillAfterBytes = 64 << 20
)

// openIndex is the index a state reads its tasks from.
type openIndex struct {
	db *index.DB
	r  *index.Reader
	// target is where a new index goes once built (the WAL's index path);
	// "" for one in place, or a replay's own.
	target string
	// own is a replay's own index, unlinked: nothing keeps it.
	own bool
	// writable: db is open for writing (a build, or a spill's).
	writable bool
}

// closeReader ends the read transaction, which a write of the index needs.
func (o *openIndex) closeReader() {
	if o != nil && o.r != nil {
		o.r.Close()
		o.r = nil
	}
}

func (o *openIndex) close() {
	if o == nil {
		return
	}
	o.closeReader()
	path := o.db.Path()
	_ = o.db.Close()
	if o.target != "" || o.own { // never put in place: a build that did not finish
		_ = os.Remove(path)
	}
}

func (h *Handle) indexPath() string { return filepath.Clean(h.opts.Path) + index.Suffix }

func (h *Handle) spillAfter() int {
	if h.opts.SpillAfter > 0 {
		return h.opts.SpillAfter
	}
	return defaultSpillAfter
}

func (h *Handle) spillBytes() int64 {
	if h.opts.SpillAfterBytes > 0 {
		return h.opts.SpillAfterBytes
	}
	return defaultSpillAfterBytes
}

// loadIndex loads the state the index holds, with the position after the
// records it holds, if there is a usable index. It reads without the WAL's
// lock: catchUp checks the position against the WAL under it.
func (h *Handle) loadIndex() bool {
	o, meta, head, ok := h.openIndex(false)
	if !ok {
		return false
	}
	if h.opts.ReplayFrom != 0 && meta.Seq >= h.opts.ReplayFrom {
		o.close() // the records from ReplayFrom on must be seen
		return false
	}
	st, err := state.LoadHead(head, o.r)
	if err != nil {
		o.close()
		h.warn("the index %s does not load (%v); replaying the WAL and building it again", h.indexPath(), err)
		return false
	}
	h.cache, h.pos, h.indexed, h.idx = st, meta.Position, meta.Position, o
	return true
}

// openIndex opens the index beside the WAL, with its meta and head and a
// read transaction; false when there is none usable (one damaged is said).
func (h *Handle) openIndex(writing bool) (*openIndex, index.Meta, []byte, bool) {
	wait := h.opts.LockTimeout
	if writing {
		wait = writeLockWait
	}
	db, err := index.Open(h.indexPath(), writing, wait)
	if err != nil {
		if !errors.Is(err, index.ErrNoIndex) && !writing {
			h.warn("%v; replaying the WAL instead", err)
		}
		return nil, index.Meta{}, nil, false
	}
	meta, head, err := db.Meta()
	switch {
	case err != nil:
	case meta.Partial:
		err = fmt.Errorf("the index %s holds part of a write that did not end", h.indexPath())
	case !meta.Synced && meta.Boot != bootID():
		err = fmt.Errorf("the index %s was written without sync before the machine restarted, and may be half on disk", h.indexPath())
	case meta.Boot != bootID():
		// Synced before the machine restarted, and not written since: a
		// crash of the machine (or of a hypervisor under it) can leave
		// pages that name each other in a loop, which bbolt would follow
		// for ever. The first writer of this boot says this boot's.
		err = db.CheckPages()
	}
	if err == nil {
		var r *index.Reader
		if r, err = db.Read(); err == nil {
			return &openIndex{db: db, r: r}, meta, head, true
		}
	}
	_ = db.Close()
	if !errors.Is(err, index.ErrNoIndex) {
		h.warn("%v; replaying the WAL instead", err)
	}
	return nil, index.Meta{}, nil, false
}

// reopenIndex gives the cached state, which read tasks from the index
// before, a new read transaction of it between two operations: only when
// the index still holds what the state was built on and none of what it
// replayed since (another writer may have written it further meanwhile,
// with the same tasks as the state's own for the records between).
func (h *Handle) reopenIndex() bool {
	o, meta, _, ok := h.openIndex(false)
	if !ok {
		return false
	}
	p := meta.Position
	if p.Generation != h.indexed.Generation || p.Count < h.indexed.Count || p.Count > h.pos.Count {
		o.close()
		return false
	}
	h.cache.Reattach(o.r)
	h.idx = o
	return true
}

// Reindexed is what Reindex built.
type Reindexed struct {
	Records int   // the records the index holds: every record of the WAL
	Bytes   int64 // the index's size
}

// Reindex builds the index again from the WAL and puts it in place of the
// one beside it (which it does not read), under the WAL's exclusive lock:
// writers wait for it, readers read on.
func (h *Handle) Reindex() (Reindexed, error) {
	h.forget()
	h.reindexing = true
	defer func() { h.reindexing = false }()
	var out Reindexed
	err := h.Write(func(tx *Tx) error {
		out.Records = tx.Records()
		return nil
	})
	if err != nil {
		return Reindexed{}, err
	}
	switch {
	case out.Records == 0: // nothing to index
		if err := h.opts.FS.Remove(h.indexPath()); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return out, err
		}
	case h.indexed.Count != out.Records:
		return out, fmt.Errorf("the index of %s could not be built (the warning above says why); the WAL is unchanged", h.opts.Path)
	}
	if info, err := os.Stat(h.indexPath()); err == nil {
		out.Bytes = info.Size()
	}
	return out, nil
}

// builder writes the tasks a replay from the WAL's start holds into an
// index as it goes, so that memory holds at most a spill's worth.
type builder struct {
	h     *Handle
	own   bool  // a replay's own index, never kept
	read  int64 // record bytes read since the last flush
	built bool  // a flush happened
	err   error // a flush failed: the replay holds its tasks in memory
}

// newBuilder starts a replay's index: own for a replay that must see every
// record (its state is not the WAL's as a whole, or not kept).
func (h *Handle) newBuilder(own bool) *builder { return &builder{h: h, own: own} }

// check writes the tasks memory holds into the index once they are many,
// or once the records read since are many bytes; size is the bytes of the
// record just applied, after the position after it. Inside a base too: its
// tasks load as its parts come, so that a base of millions is read in
// bounded memory (the index is put in place only once the base has ended).
func (b *builder) check(st *state.State, size int, after wal.Position) {
	if b == nil || b.err != nil {
		return
	}
	b.read += int64(size)
	b.h.peakHot = max(b.h.peakHot, st.HotCount())
	if st.HotCount() < b.h.spillAfter() && b.read < b.h.spillBytes() {
		return
	}
	b.flush(st, after, false)
}

// flush writes what memory holds into the index being built (made at the
// first flush) and reads on from it; the last flush syncs what every flush
// wrote, before the index is put in place.
func (b *builder) flush(st *state.State, after wal.Position, last bool) {
	b.read = 0
	h := b.h
	if h.idx == nil {
		o, err := b.create()
		if err != nil {
			b.err = err
			h.warn("could not write an index of the WAL during the replay (%v); it holds its tasks in memory", err)
			return
		}
		h.idx = o
	}
	if err := h.writeIndex(st, index.Meta{Position: after, Synced: true}, last && !b.own); err != nil {
		b.err = err
		h.warn("could not write the index during the replay (%v); it holds its tasks in memory", err)
		return
	}
	b.built = true
}

// create makes the new index: beside the WAL, put in its place once built,
// or the replay's own, unlinked at once.
func (b *builder) create() (*openIndex, error) {
	var f *os.File
	var err error
	if b.own {
		f, err = scratchFile(b.h.opts.Path)
	} else {
		f, err = os.CreateTemp(filepath.Dir(b.h.opts.Path), filepath.Base(b.h.opts.Path)+index.Suffix+".build-*")
	}
	if err != nil {
		return nil, err
	}
	path := f.Name()
	f.Close()
	db, err := index.Open(path, true, 0)
	if err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	o := &openIndex{db: db, own: b.own, writable: true}
	if b.own {
		_ = os.Remove(path) // the file lives as long as it is open
		o.own = false
	} else {
		o.target = b.h.indexPath()
	}
	return o, nil
}

// finish ends a replay from the WAL's start at pos: a built index that is
// the WAL's own takes every task memory still holds and is put in place of
// the old; a WAL of indexAfter records or more gets one built now.
func (b *builder) finish(st *state.State, pos wal.Position) {
	if b == nil || b.err != nil || b.own || st.Loading() {
		return
	}
	h := b.h
	if !b.built && pos.Count < indexAfter && st.HotCount() < indexAfter && !h.reindexing {
		return // a short history, and no base of many tasks: replayed faster than an index is made
	}
	b.flush(st, pos, true)
	if b.err != nil {
		return
	}
	o := h.idx
	if err := os.Rename(o.db.Path(), o.target); err != nil {
		h.warn("could not put the index built in place (%v); the next command replays the WAL again", err)
		return
	}
	if err := wal.SyncDir(filepath.Dir(o.target)); err != nil {
		h.warn("could not make the index built durable (%v)", err)
	}
	o.target = ""
	h.indexed = pos
}

// writeIndex writes what st holds in memory into the open index, as of
// meta's position, and reads every task from it from then on. Past
// writeChunk tasks, the first are written a chunk a transaction, each
// marking the index partial (WriteTasks) until the last says what it holds.
func (h *Handle) writeIndex(st *state.State, meta index.Meta, sync bool) error {
	o := h.idx
	o.closeReader()
	meta.Seq, meta.At, meta.Boot = st.LastSeq(), st.LastAt(), bootID()
	hot := st.Hot()
	for len(hot) > writeChunk {
		if err := o.db.WriteTasks(hot[:writeChunk], meta.Seq, meta.At, meta.Boot); err != nil {
			return err
		}
		hot = hot[writeChunk:]
	}
	if err := o.db.Write(hot, st.Head(), meta, sync); err != nil {
		return err
	}
	h.spilled = false
	r, err := o.db.Read()
	if err != nil {
		return err
	}
	o.r = r
	st.Flushed(r)
	return nil
}

// writeChunk is the most tasks writeIndex writes in one transaction: bbolt
// holds a bucket's new keys in one node until the commit splits it, and
// grows the node's list a key at a time, copying it as it grows. A batch
// of a million new tasks in one transaction spent a third of its time
// there.
var writeChunk = 1 << 17

// spillFor is the Spill of a state an operation of mode catches up or
// decides on: it writes what an end settles into the index the state reads
// (WriteTasks, which marks it partial until writeIndex says it holds the
// record), opening it for writing in a writer's operation; a reader's
// leaves them to memory, unless it builds the index. A writer that spilled
// writes the index at its operation's end (indexDue); one that does not
// (it failed) leaves it partial, and the next operation builds it again.
func (h *Handle) spillFor(mode wal.Mode) state.Spill {
	return func(tasks []*state.Task, seq, at int64) (state.Source, bool, error) {
		o := h.idx
		if o == nil || !o.writable && mode != wal.Write {
			return nil, false, nil
		}
		if !o.writable {
			if o = h.openToSpill(len(tasks)); o == nil {
				return nil, false, fmt.Errorf("%w: the index could not be read again", state.ErrSource)
			} else if !o.writable {
				return o.r, false, nil
			}
		}
		src, written, err := spillInto(o.db, &o.r)(tasks, seq, at)
		if written {
			h.opts.Fault.Reach("index-partial")
			h.spilled = h.spilled || o.target == "" && !h.fullReplay() // a build's flushes end it; a replay's own index is never written on
		}
		return src, written, err
	}
}

// spillInto is the Spill of a state that reads db through *r: it writes
// the tasks into db (WriteTasks), and *r becomes a read that holds them.
func spillInto(db *index.DB, r **index.Reader) state.Spill {
	return func(tasks []*state.Task, seq, at int64) (state.Source, bool, error) {
		if *r != nil {
			(*r).Close() // a write that grows the file past its mapping waits for every read
			*r = nil
		}
		if err := db.WriteTasks(tasks, seq, at, bootID()); err != nil {
			return nil, false, err
		}
		next, err := db.Read()
		if err != nil {
			return nil, false, err
		}
		*r = next
		return next, true, nil
	}
}

// openToSpill opens the index a writer's state reads for writing, in place
// of its read (the same file: no other writer can have written it under the
// WAL's exclusive lock); when readers hold it past writeLockWait, it reads
// it again instead (then memory takes the tasks). nil: neither.
func (h *Handle) openToSpill(tasks int) *openIndex {
	h.idx.close()
	h.idx = nil
	if db, err := index.OpenToWrite(h.indexPath(), writeLockWait, tasks); err == nil {
		h.idx = &openIndex{db: db, writable: true} // the spill's write gives it a read
		return h.idx
	}
	if o, meta, _, ok := h.openIndex(false); ok && meta.Position == h.indexed {
		h.idx = o
		return o
	} else if ok {
		o.close()
	}
	return nil
}

// indexDue is whether a writer writes st into the index after an
// operation that left the WAL at pos.
func (h *Handle) indexDue(st *state.State, pos wal.Position) bool {
	if h.fullReplay() || st.Loading() || st.Damage() != nil {
		return false
	}
	if st.HotCount() >= h.spillAfter() || h.spilled {
		return true
	}
	if h.indexed.Count == 0 {
		return pos.Count >= indexAfter || st.HotCount() >= indexAfter
	}
	tail := indexTail
	if h.opts.Resident {
		tail = residentIndexTail
	}
	return pos.Count-h.indexed.Count >= tail || pos.End-h.indexed.End >= h.spillBytes()
}

// commitIndex writes what memory holds into the index beside the WAL,
// under the WAL's exclusive lock, when indexDue says so. It opens the index
// for writing for a moment (waiting writeLockWait at most for readers), and
// writes only onto an index that holds no record the state does not and
// none it was not built on: else it leaves it for a replay to build again.
// A failure costs speed, not correctness: it is a warning.
func (h *Handle) commitIndex(st *state.State, pos wal.Position) {
	if !h.indexDue(st, pos) {
		return
	}
	h.idx.close()
	h.idx = nil
	db, err := index.OpenToWrite(h.indexPath(), writeLockWait, st.HotCount())
	if err != nil {
		h.unwritable(err)
		return
	}
	meta, _, err := db.Meta()
	switch {
	case errors.Is(err, index.ErrNoIndex) && h.indexed.Count == 0: // a new index: every task is in memory
	case err != nil:
		_ = db.Close()
		h.dropIndex(err)
		return
	case meta.Position.Generation != h.indexed.Generation || meta.Position.Count < h.indexed.Count || meta.Position.Count > pos.Count,
		meta.Partial && !h.spilled:
		_ = db.Close() // not what the state was built on: a replay builds it again
		return
	}
	// A resident handle writes without sync (the index needs none to be
	// right: the WAL is), once its first write, synced, has said so: a
	// crash of the machine may leave any of them half on disk, and the
	// index is built again after it. Close syncs it and says so.
	unsynced := h.opts.Resident && bootID() != ""
	h.idx = &openIndex{db: db}
	if err := h.writeIndex(st, index.Meta{Position: pos, Synced: !unsynced}, !unsynced || err != nil || meta.Synced); err != nil {
		h.idx.close()
		h.idx = nil
		h.dropIndex(fmt.Errorf("could not write the index: %w", err))
		return
	}
	h.indexed, h.unsynced = pos, unsynced
}

// markSynced syncs the index a resident handle wrote without sync, at its
// clean end, so that it is trusted after the machine restarts.
func (h *Handle) markSynced() {
	if !h.unsynced {
		return
	}
	h.unsynced = false
	db, err := index.Open(h.indexPath(), true, h.opts.LockTimeout)
	if err != nil {
		h.warn("could not sync the index (%v); it is built again if the machine restarts first", err)
		return
	}
	defer db.Close()
	if err := db.MarkSynced(); err != nil {
		h.warn("could not sync the index (%v); it is built again if the machine restarts first", err)
	}
}

// bootID names this boot of the machine ("" where the system does not say:
// then every write of the index is synced).
// Read when first asked: a command that writes no index and finds one
// synced never asks.
var bootID = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// isLockWait is an index held by another process past the wait.
func isLockWait(err error) bool { return errors.Is(err, index.ErrLocked) }

// unwritable drops the index an open for writing failed on, unless it is
// missing or a reader held it past the wait (it is written next time).
func (h *Handle) unwritable(err error) {
	if !errors.Is(err, index.ErrNoIndex) && !isLockWait(err) {
		h.dropIndex(fmt.Errorf("the index could not be opened for writing: %w", err))
	}
}

// dropIndex removes an index found damaged or unwritable, so that the
// next command replays the WAL and builds it again.
func (h *Handle) dropIndex(cause error) {
	h.warn("%v; the next command replays the WAL and builds the index again", cause)
	if err := h.opts.FS.Remove(h.indexPath()); err != nil {
		h.warn("could not remove the index %s: %v", h.indexPath(), err)
	}
}

// removeLeftovers removes the indexes a crash left half built, and the
// caches older versions kept beside the WAL. Only a writer, under the
// exclusive lock, calls it.
func (h *Handle) removeLeftovers() {
	for _, pattern := range []string{index.Suffix + ".build-*", scratchInfix + "*", ".checkpoint", ".checkpoint.tmp-*", ".archive*", ".cold*", ".spill-*"} {
		found, _ := filepath.Glob(globEscape(filepath.Clean(h.opts.Path)) + pattern)
		for _, path := range found {
			_ = h.opts.FS.Remove(path)
		}
	}
}

// Beside lists the files the store keeps beside the WAL at walPath: its
// index, and one being built.
func Beside(walPath string) []string {
	found, _ := filepath.Glob(globEscape(filepath.Clean(walPath)) + index.Suffix + "*")
	return found
}

// side names a file kept beside the WAL.
func (h *Handle) side(suffix string) string { return filepath.Clean(h.opts.Path) + suffix }

// globEscape quotes the characters filepath.Match treats specially.
func globEscape(path string) string {
	var b strings.Builder
	for _, r := range path {
		if strings.ContainsRune(`*?[\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
