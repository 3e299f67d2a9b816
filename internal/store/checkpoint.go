package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// The checkpoint is derived state cached beside the WAL so that a command
// replays only the records after it. It is a cache, never the truth: safe to
// delete, checked against the WAL before use (the WAL must still hold, at the
// recorded offset, a frame with the recorded chained checksum), ignored when
// missing, stale or damaged, and rewritten atomically by writers
// (checkpointDue and archiveDue say when). verify, log and inspect with
// records always replay from scratch.
//
// <wal>.checkpoint holds the WAL position and the snapshot of the tasks in
// memory (those a record touched since the tasks were last moved out); it is
// small and read whole. The finished tasks moved out are in runs of the
// archive, <wal>.archive-<name>, and the unfinished ones in runs of the cold
// set, <wal>.cold-<name>, each with its lease order (state.Archive,
// state.MoveOut); they are mapped, and a command reads only the few pages its
// lookups and its lease touch, so a command's start-up cost follows neither
// the history nor the backlog. A run's name is a random number, never used
// twice, so a file once named by a checkpoint never changes: a writer writes
// new runs, then the checkpoint naming them, then removes the runs no longer
// named (removeUnnamedRuns), which the processes that mapped them read on.
//
// Layout of <wal>.checkpoint: the line "leasewal-checkpoint v5\n", the CRC32C
// of the rest (4 bytes, little endian), the WAL position as uvarints (count,
// end, seed of the next frame, offset of the last frame, generation), the
// names of the archive's runs and of the cold set's (each a count, then the
// names, uvarints, oldest first), then the state snapshot, which checks each
// run by its checksum and task count. The generation ties it to one
// compaction of the WAL.

// The side files a writer keeps beside the WAL: the checkpoint, and the runs
// of the archive and of the cold set, <wal><suffix>-<16 hex digits>.
const (
	CheckpointSuffix = ".checkpoint"
	ArchiveSuffix    = ".archive"
	ColdSuffix       = ".cold"
)

const (
	checkpointMagic = "leasewal-checkpoint v5\n"
	// minCheckpointTail is the least number of records a checkpoint may lag
	// behind before a writer rewrites it (see checkpointDue).
	minCheckpointTail = 100
	// archiveBatch is how many finished tasks may wait in the checkpoint
	// before a writer moves them to a new archive (see archiveDue), and the
	// least number of unfinished ones before it writes a new cold set (see
	// coldDue).
	archiveBatch = 256
)

// checkpointDue is the refresh rule: a writing command rewrites the checkpoint,
// after its own append, once max(100, tasks in memory/50) records follow it.
// Writing it costs O(tasks in memory), so rewriting every tasks/50 records
// keeps that cost constant per command, and the tail a command replays stays
// short.
func checkpointDue(tail, tasksInMemory int) bool {
	return tail >= max(minCheckpointTail, tasksInMemory/50)
}

// archiveDue is the archive rule: when a checkpoint is rewritten and 256 or
// more finished tasks are in memory, they move out of memory first. A
// one-shot writer rewrites the archive, O(history), so this happens once per
// 256 finished tasks, and what a command loads eagerly stays under 256
// finished tasks plus the unfinished ones. A resident handle adds a run
// instead (saveCheckpoint), and waits for an eighth of the archived tasks,
// at most Options.SpillAfter (residentBatch): a run and the merges it brings cost about
// log2(archive/batch) copies of each task it moves, and a server loads
// nothing per operation, while the commands beside it load those tasks.
func (h *Handle) archiveDue(finishedInMemory, archived int) bool {
	if h.opts.Resident {
		return finishedInMemory >= residentBatch(archived, h.spillAfter())
	}
	return finishedInMemory >= archiveBatch
}

// residentBatch is how many tasks a resident handle lets wait in memory for
// a new run of a shelf of n tasks: an eighth of them, at least 256, and at
// most most, so that what it holds is bounded however large the backlog.
func residentBatch(n, most int) int {
	return min(max(archiveBatch, n/8), most)
}

// coldDue is the cold set's count rule: when a checkpoint is rewritten, the
// unfinished tasks in memory move out once max(256, cold tasks/256) of them
// are there. A one-shot writer rewrites the cold set, copying its live
// records as they are and adding those in memory (about 25 ms and 15 MB
// written for 100,000 waiting tasks), so it waits longer as the backlog
// grows: what memory holds costs every one-shot command about what the copy
// costs once per that many tasks. A resident handle adds a run of
// residentBatch(cold tasks) instead, at most an eighth of
// Options.SpillAfter (8,192): every lease reads each unfinished task in
// memory (State.best), so a server that let 65,536 wait leased at about a
// hundred a second; a run of fewer costs a merge or two more per task.
func (h *Handle) coldDue(unfinishedInMemory, cold int) bool {
	if h.opts.Resident {
		return unfinishedInMemory >= residentBatch(cold, max(1, h.spillAfter()/8))
	}
	return unfinishedInMemory >= max(archiveBatch, cold/256)
}

// supersededDue is the cold set's other rule: once max(256, cold tasks/16)
// of its copies are superseded, it is rewritten without them, so that a
// lease skips at most cold/16 superseded copies at the front of the order.
// (They are in the oldest runs, which tasks leased in order came from.)
func supersededDue(superseded, cold int) bool {
	return superseded >= max(archiveBatch, cold/16)
}

var checkpointCRC = crc32.MakeTable(crc32.Castagnoli)

// runNames are the names of the runs of the archive and of the cold set,
// oldest first, as a checkpoint lists them.
type runNames struct{ archive, cold []uint64 }

// each calls fn with each run named, the archive's first, until it fails.
func (r runNames) each(fn func(cold bool, name uint64) error) error {
	for _, name := range r.archive {
		if err := fn(false, name); err != nil {
			return err
		}
	}
	for _, name := range r.cold {
		if err := fn(true, name); err != nil {
			return err
		}
	}
	return nil
}

func encodeCheckpoint(st *state.State, pos wal.Position, runs runNames) []byte {
	var body []byte
	for _, v := range []uint64{uint64(pos.Count), uint64(pos.End), uint64(pos.LastSum), uint64(pos.LastOffset), uint64(pos.Generation)} {
		body = binary.AppendUvarint(body, v)
	}
	for _, names := range [][]uint64{runs.archive, runs.cold} {
		body = binary.AppendUvarint(body, uint64(len(names)))
		for _, name := range names {
			body = binary.AppendUvarint(body, name)
		}
	}
	body = append(body, st.Snapshot()...)
	out := append([]byte(checkpointMagic), binary.LittleEndian.AppendUint32(nil, crc32.Checksum(body, checkpointCRC))...)
	return append(out, body...)
}

// decodeCheckpoint returns the WAL position a checkpoint holds, the runs it
// names and its snapshot, or false for anything that is not an intact
// checkpoint.
func decodeCheckpoint(data []byte) (pos wal.Position, runs runNames, snapshot []byte, ok bool) {
	rest, ok := bytes.CutPrefix(data, []byte(checkpointMagic))
	if !ok || len(rest) < 4 {
		return pos, runs, nil, false
	}
	body := rest[4:]
	if binary.LittleEndian.Uint32(rest) != crc32.Checksum(body, checkpointCRC) {
		return pos, runs, nil, false
	}
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(body)
		if n <= 0 {
			return 0, false
		}
		body = body[n:]
		return v, true
	}
	var fields [5]uint64
	for i := range fields {
		if fields[i], ok = next(); !ok {
			return pos, runs, nil, false
		}
	}
	for _, names := range []*[]uint64{&runs.archive, &runs.cold} {
		n, ok := next()
		if !ok || n > uint64(len(body)) {
			return pos, runs, nil, false
		}
		for range n {
			name, ok := next()
			if !ok {
				return pos, runs, nil, false
			}
			*names = append(*names, name)
		}
	}
	if fields[0] == 0 {
		return pos, runs, nil, false
	}
	pos = wal.Position{Count: int(fields[0]), End: int64(fields[1]), LastSum: uint32(fields[2]), LastOffset: int64(fields[3]), Generation: uint32(fields[4])}
	return pos, runs, body, true
}

// loadCheckpoint reads the checkpoint beside the WAL, if there is a good one,
// with the runs it names mapped (maps; the state must not be used once they
// are released). It reads without the lock, as a writer may replace the
// checkpoint and remove the runs the old one named: a run found missing
// sends it back to read the checkpoint again.
func (h *Handle) loadCheckpoint() (st *state.State, pos wal.Position, maps []mapping, ok bool) {
	for range 3 {
		data, err := os.ReadFile(h.side(CheckpointSuffix))
		if err != nil {
			return nil, wal.Position{}, nil, false
		}
		pos, runs, snapshot, ok := decodeCheckpoint(data)
		if !ok {
			return nil, wal.Position{}, nil, false
		}
		archive, cold, maps, err := h.mapRuns(runs)
		if err == nil {
			if st, err = state.LoadSnapshot(snapshot, archive, cold); err == nil {
				return st, pos, maps, true
			}
		}
		for _, m := range maps {
			m.release()
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return nil, wal.Position{}, nil, false
		}
	}
	return nil, wal.Position{}, nil, false
}

// mapRuns maps the runs a checkpoint names.
func (h *Handle) mapRuns(runs runNames) (archive, cold []*state.Archive, maps []mapping, err error) {
	err = runs.each(func(isCold bool, name uint64) error {
		m, err := mapArchive(h.runPath(isCold, name))
		if err != nil {
			return err
		}
		m.name, m.cold = name, isCold
		maps = append(maps, m)
		if isCold {
			cold = append(cold, m.Archive)
		} else {
			archive = append(archive, m.Archive)
		}
		return nil
	})
	return archive, cold, maps, err
}

// mapping is a run of an archive or cold set a state reads from a mapped
// file.
type mapping struct {
	*state.Archive
	unmap func()
	// name is the run's beside the WAL (runPath); 0 for a reader's replay's
	// own file (spill.go), which a checkpoint cannot name.
	name uint64
	cold bool // a run of the cold set, not of the archive
	// fresh marks a run this handle wrote that no checkpoint names yet:
	// no other process reads it, so it is removed once let go of (letGo).
	// unsynced marks one not yet durable (runSink).
	fresh, unsynced bool
}

func (m mapping) release() {
	if m.unmap != nil {
		m.unmap()
	}
}

// mapArchive maps the archive or cold set at path read-only; a missing or
// unreadable one is none (a checkpoint that names one is then not used).
func mapArchive(path string) (mapping, error) {
	f, err := os.Open(path)
	if err != nil {
		return mapping{}, err
	}
	defer f.Close()
	return mapArchiveFile(f)
}

func mapArchiveFile(f *os.File) (mapping, error) {
	info, err := f.Stat()
	switch {
	case err != nil:
		return mapping{}, err
	case info.Size() == 0 || !info.Mode().IsRegular() || int64(int(info.Size())) != info.Size():
		return mapping{}, fmt.Errorf("%w: %s is empty or not a regular file", state.ErrArchive, f.Name())
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(info.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return mapping{}, err
	}
	unmap := func() { _ = unix.Munmap(data) }
	// A read that sweeps through the file lets its pages go behind it: they
	// stay in the page cache, and count no more against this process.
	evict := func(from, to int) {
		from &^= pageSize - 1
		if to = min(to, len(data)) &^ (pageSize - 1); from < to {
			_ = unix.Madvise(data[from:to], unix.MADV_DONTNEED)
		}
	}
	archive, err := state.OpenArchive(data, evict)
	if err != nil {
		unmap()
		return mapping{}, err
	}
	return mapping{Archive: archive, unmap: unmap}, nil
}

var pageSize = os.Getpagesize()

// keepMapped unmaps the files the handle has mapped that st reads no more.
func (h *Handle) keepMapped(st *state.State) {
	archive, cold := st.Archives()
	kept := h.mapped[:0]
	for _, m := range h.mapped {
		if m.Archive != nil && (slices.Contains(archive, m.Archive) || slices.Contains(cold, m.Archive)) {
			kept = append(kept, m)
		} else {
			h.letGo(m)
		}
	}
	clear(h.mapped[len(kept):])
	h.mapped = kept
}

// letGo unmaps a run, and removes it if no checkpoint names it (fresh).
func (h *Handle) letGo(m mapping) {
	m.release()
	if m.fresh {
		_ = h.opts.FS.Remove(h.runPath(m.cold, m.name))
	}
}

// syncRuns makes durable the runs a writer's replay spilled that st reads,
// before a checkpoint names them.
func (h *Handle) syncRuns() error {
	synced := false
	for i, m := range h.mapped {
		if !m.unsynced {
			continue
		}
		path := h.runPath(m.cold, m.name)
		f, err := os.Open(path)
		if err == nil {
			err = f.Sync()
			f.Close()
		}
		if err != nil {
			return fmt.Errorf("could not sync %s: %w", path, err)
		}
		h.mapped[i].unsynced, synced = false, true
	}
	if synced {
		return wal.SyncDir(filepath.Dir(h.opts.Path))
	}
	return nil
}

// runNamesOf names the runs st reads, oldest first; archive or cold is
// false when a run of that shelf has no name beside the WAL that a
// checkpoint could give: a replay spilled it (spill.go), or another writer
// removed it since (the state reads it on, mapped).
func (h *Handle) runNamesOf(st *state.State) (names runNames, archive, cold bool) {
	a, c := st.Archives()
	named := func(runs []*state.Archive) (out []uint64, ok bool) {
		for _, r := range runs {
			i := slices.IndexFunc(h.mapped, func(m mapping) bool { return m.Archive == r })
			if i < 0 || h.mapped[i].name == 0 {
				return nil, false
			}
			if _, err := os.Stat(h.runPath(h.mapped[i].cold, h.mapped[i].name)); err != nil {
				return nil, false
			}
			out = append(out, h.mapped[i].name)
		}
		return out, true
	}
	names.archive, archive = named(a)
	names.cold, cold = named(c)
	return names, archive, cold
}

// sizeOf is how many bytes files take (state.Archive.Size).
func sizeOf(files []*state.Archive) (n int) {
	for _, f := range files {
		n += f.Size()
	}
	return n
}

// lenOf is how many tasks the files of an archive or a cold set hold.
func lenOf(files []*state.Archive) (n int) {
	for _, f := range files {
		n += f.Len()
	}
	return n
}

// sideSink writes a new run of the archive or cold set durably beside the
// WAL, under a new name, where the checkpoint written next names it, and
// maps it.
func (h *Handle) sideSink(cold bool, write func(io.Writer) error) (*state.Archive, error) {
	what := "archive"
	if cold {
		what = "cold set"
	}
	name := newRunName()
	path := h.runPath(cold, name)
	if err := h.opts.FS.WriteStream(path, write); err != nil {
		return nil, fmt.Errorf("could not write the %s %s: %w", what, path, err)
	}
	m, err := mapArchive(path)
	if err != nil {
		return nil, fmt.Errorf("could not read back the %s %s: %w", what, path, err)
	}
	m.name, m.cold, m.fresh = name, cold, true
	h.mapped = append(h.mapped, m)
	return m.Archive, nil
}

// newRunName is a run's name: random, never 0 (which names no run).
func newRunName() uint64 { return rand.Uint64() | 1 }

// side names a file kept beside the WAL.
func (h *Handle) side(suffix string) string { return filepath.Clean(h.opts.Path) + suffix }

// runPath names a run of the archive (or of the cold set) beside the WAL.
func (h *Handle) runPath(cold bool, name uint64) string { return runPath(h.opts.Path, cold, name) }

func runPath(walPath string, cold bool, name uint64) string {
	suffix := ArchiveSuffix
	if cold {
		suffix = ColdSuffix
	}
	return fmt.Sprintf("%s%s-%016x", filepath.Clean(walPath), suffix, name)
}

// runFile matches the base name of a run beside a WAL (after the WAL's own
// name), or of one being written (WriteStream's temporary file), or the one
// file of each an older leasewal kept (<wal>.archive, <wal>.cold) and
// its temporary files.
var runFile = regexp.MustCompile(`^\.(archive|cold)(-[0-9a-f]{16})?(\.tmp-[0-9]+)?$`)

// Caches lists the cache files beside the WAL at walPath: its checkpoint
// and the runs of its archive and cold set (those a checkpoint names, and
// any left by a crash).
func Caches(walPath string) []string {
	walPath = filepath.Clean(walPath)
	found, _ := filepath.Glob(globEscape(walPath) + ".*")
	var out []string
	for _, path := range found {
		rest := strings.TrimPrefix(path, walPath)
		if rest == CheckpointSuffix || runFile.MatchString(rest) {
			out = append(out, path)
		}
	}
	return out
}

// removeCaches removes every cache beside the WAL (Caches): they describe a
// WAL that is being replaced.
func (h *Handle) removeCaches() error {
	for _, path := range Caches(h.opts.Path) {
		if err := h.opts.FS.Remove(path); err != nil {
			return fmt.Errorf("could not remove the cache %s: %w", path, err)
		}
	}
	return nil
}

// removeUnnamedRuns removes the runs beside the WAL that the checkpoint
// just written does not name (those it replaced, and any left by a crash or
// a failed write): the processes that mapped them read on.
func (h *Handle) removeUnnamedRuns(names runNames) {
	keep := map[string]bool{}
	_ = names.each(func(cold bool, name uint64) error {
		keep[h.runPath(cold, name)] = true
		return nil
	})
	for _, path := range Caches(h.opts.Path) {
		if !keep[path] && path != h.side(CheckpointSuffix) {
			if err := h.opts.FS.Remove(path); err != nil {
				h.warnCache(fmt.Errorf("could not remove the cache %s, which no checkpoint names: %w", path, err))
			}
		}
	}
}

// refreshCheckpoint applies the checkpoint rule after a writing operation,
// still under the exclusive lock. A replay that read a base (a compacted
// WAL, no checkpoint) writes one whatever the rule says: a base is a few
// records that may hold a million tasks, which every command would replay.
//
// Both rules count tasks; large payloads would let a resident handle hold
// many bytes of them, so a checkpoint is also due once Options.SpillAfterBytes
// (64 MiB) of records follow it, and a cold set once that many, or an eighth
// of the cold set's bytes, follow the last one.
func (h *Handle) refreshCheckpoint(tx *Tx) {
	if h.checkpointDueAt(tx.State, tx.log.Position) {
		if h.saveCheckpoint(tx.State, tx.log.Position) {
			h.checkpointed, h.checkpointedEnd = tx.log.Count, tx.log.End
		}
	}
}

// checkpointDueAt is whether refreshCheckpoint writes one for st at pos.
func (h *Handle) checkpointDueAt(st *state.State, pos wal.Position) bool {
	readBase := h.checkpointed == 0 && st.Base() != nil
	return readBase || checkpointDue(pos.Count-h.checkpointed, st.InMemoryCount()) || pos.End-h.checkpointedEnd >= h.spillBytes()
}

func (h *Handle) spillBytes() int64 { return cmp.Or(h.opts.SpillAfterBytes, defaultSpillAfterBytes) }

// saveCheckpoint applies the archive and cold set rules, then writes the
// checkpoint, then removes the runs it no longer names. A failure costs
// speed, not correctness, so it is only a warning; a new run that could not
// be written leaves the checkpoint as it was, since a checkpoint must never
// name a file that is not on disk.
//
// A one-shot writer rewrites the archive or the cold set into one file when
// due (Rewrite): the commands after it read one run of each. A resident
// handle adds a run (AddRun), merged with the last as they pile up, so that
// what it holds in memory and what it copies at a time stay bounded however
// large the backlog; it rewrites the cold set when many of its copies are
// superseded, since those are in the oldest runs. Runs a checkpoint cannot
// name (spill.go: a replay's own files; or removed since by another writer)
// are rewritten into new ones.
func (h *Handle) saveCheckpoint(st *state.State, pos wal.Position) bool {
	h.removeLeftovers()
	_, archiveNamed, coldNamed := h.runNamesOf(st)
	archive, cold := h.movesDue(st, pos)
	if !archiveNamed {
		archive = state.Rewrite
	}
	if !coldNamed {
		cold = state.Rewrite
	}
	if archive != state.Stay || cold != state.Stay {
		err := st.MoveOut(archive, cold, h.sideSink)
		h.keepMapped(st)
		if errors.Is(err, state.ErrArchive) {
			h.dropCheckpoint() // a run is damaged: the next command replays the WAL and writes new ones
		}
		if err != nil {
			h.warnCache(err)
			return false
		}
		if cold != state.Stay {
			h.coldEnd = pos.End
		}
	}
	if err := h.syncRuns(); err != nil {
		h.warnCache(err)
		return false
	}
	names, archiveNamed, coldNamed := h.runNamesOf(st)
	if !archiveNamed || !coldNamed { // a run just written is gone: someone removes files beside the WAL
		h.warnCache(errors.New("a run of the archive or cold set written for the checkpoint is gone"))
		return false
	}
	if err := h.opts.FS.WriteFile(h.side(CheckpointSuffix), encodeCheckpoint(st, pos, names)); err != nil {
		h.warnCache(fmt.Errorf("could not write the checkpoint %s: %w", h.side(CheckpointSuffix), err))
		return false
	}
	for i := range h.mapped {
		h.mapped[i].fresh = false // named now, or removed next
	}
	h.removeUnnamedRuns(names)
	return true
}

// movesDue is how a checkpoint of st at pos moves tasks out of memory by
// the archive and cold set rules.
func (h *Handle) movesDue(st *state.State, pos wal.Position) (archive, cold state.Move) {
	inMemory, finished := st.InMemory()
	coldTasks, superseded := st.Cold()
	archived, coldSet := st.Archives()
	// A writer's replay that spilled runs beside the WAL moves what it
	// still holds out too, as one more run of each, rather than leave up
	// to a spill's worth of tasks for every command to load.
	spilled := slices.ContainsFunc(h.mapped, func(m mapping) bool { return m.unsynced })
	archive, cold = state.Stay, state.Stay
	if spilled && finished > 0 || h.archiveDue(finished, lenOf(archived)) {
		archive = h.moveBy(spilled)
	}
	if spilled && inMemory > finished || h.coldDue(inMemory-finished, coldTasks) || inMemory > finished && pos.End-h.coldEnd >= h.coldBytes(coldSet) {
		cold = h.moveBy(spilled)
	}
	if supersededDue(superseded, coldTasks) {
		cold = state.Rewrite
	}
	return archive, cold
}

// moveBy is how this handle moves tasks out of memory when a rule says to:
// a new run for a resident handle, or after a replay that spilled runs
// (those are named as they are), one file of each for the others.
func (h *Handle) moveBy(spilled bool) state.Move {
	if h.opts.Resident || spilled {
		return state.AddRun
	}
	return state.Rewrite
}

// coldBytes is how many bytes of records may follow the last new cold set
// before the next, whatever the count of tasks: Options.SpillAfterBytes
// (64 MiB), or an eighth of the cold set's bytes for a one-shot writer,
// which rewrites it whole.
func (h *Handle) coldBytes(coldSet []*state.Archive) int64 {
	if h.opts.Resident {
		return h.spillBytes()
	}
	return max(h.spillBytes(), int64(sizeOf(coldSet))/8)
}

func (h *Handle) warnCache(err error) {
	h.warn("%v; commands stay correct but replay more of the WAL", err)
}

// dropCheckpoint removes a checkpoint found damaged, so that the commands
// after this one replay the WAL until a writer writes a new one.
func (h *Handle) dropCheckpoint() {
	if err := h.opts.FS.Remove(h.side(CheckpointSuffix)); err != nil {
		h.warnCache(fmt.Errorf("could not remove the damaged checkpoint: %w", err))
	}
}

// removeLeftovers removes the temporary files of checkpoints and
// compactions that a crash interrupted. Only a writer, under the exclusive
// lock, writes those files, so every one found then is a leftover. (Runs a
// crash left are removed once a checkpoint is written: removeUnnamedRuns.)
func (h *Handle) removeLeftovers() {
	leftovers, _ := filepath.Glob(globEscape(h.side(CheckpointSuffix)) + ".tmp-*")
	for _, path := range leftovers {
		_ = h.opts.FS.Remove(path)
	}
	// A replay's spills are unlinked as soon as created: one left was left
	// by a crash. (A compaction's new WAL is not: it is written before the
	// lock is taken, and the next compaction removes those left.)
	leftovers, _ = filepath.Glob(globEscape(h.side("")) + spillInfix + "*")
	for _, path := range leftovers {
		_ = h.opts.FS.Remove(path)
	}
}

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
