package store

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"leasewal/state"
	"leasewal/wal"
)

// The checkpoint is derived state cached beside the WAL so that a command
// replays only the records after it. It is a cache, never the truth: safe to
// delete, checked against the WAL before use (the WAL must still hold, at the
// recorded offset, a frame with the recorded chained checksum), ignored when
// missing, stale or damaged, and rewritten atomically by writers
// (checkpointDue and archiveDue say when). verify, log and inspect with
// records always replay from scratch.
//
// It is three files. <wal>.checkpoint holds the WAL position and the
// snapshot of the tasks in memory (those a record touched since the last
// compaction); it is small and read whole. <wal>.archive holds the finished
// tasks and <wal>.cold the unfinished ones as of the last compaction, with
// their lease order (state.Archive, state.Compact); they are mapped, and a
// command reads only the few pages its lookups and its lease touch, so a
// command's start-up cost follows neither the history nor the backlog.
//
// Layout of <wal>.checkpoint: the line "leasewal-checkpoint v3\n", the CRC32C
// of the rest (4 bytes, little endian), the WAL position as uvarints (count,
// end, seed of the next frame, offset of the last frame, generation), then the
// state snapshot. The generation ties it to one compaction of the WAL.

// The side files a writer keeps beside the WAL.
const (
	CheckpointSuffix = ".checkpoint"
	ArchiveSuffix    = ".archive"
	ColdSuffix       = ".cold"
)

const (
	checkpointMagic = "leasewal-checkpoint v4\n"
	// minCheckpointTail is the least number of records a checkpoint may lag
	// behind before a writer rewrites it (see checkpointDue).
	minCheckpointTail = 100
	// archiveBatch is how many finished tasks may wait in the checkpoint
	// before a writer moves them to a new archive (see archiveDue), and the
	// least number of unfinished ones before it writes a new cold set (see
	// coldDue).
	archiveBatch = 256
	// residentArchiveBatch bounds the finished tasks a resident handle lets
	// wait in memory for a new archive (see archiveDue).
	residentArchiveBatch = 65536
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
// more finished tasks are in memory, they move to a new archive first. A new
// archive copies the old one, O(history), so this happens once per 256
// finished tasks, and what a command loads eagerly stays under 256 finished
// tasks plus the unfinished ones. A resident handle waits for an eighth of
// the archived tasks (at most 65,536), as it does for a cold set: the copy is
// its whole cost, which would otherwise be the whole archive per 256 tasks
// it finishes (a server over a million finished tasks spent most of its time
// copying archives); the commands beside it load those tasks in memory.
func archiveDue(finishedInMemory, archived int, resident bool) bool {
	if resident {
		return finishedInMemory >= max(archiveBatch, min(archived/8, residentArchiveBatch))
	}
	return finishedInMemory >= archiveBatch
}

// coldDue is the cold set's rule: when a checkpoint is rewritten, a new cold
// set takes the unfinished tasks in memory once max(256, cold tasks/256) of
// them are there (cold tasks/8 for a resident handle), or once max(256, cold
// tasks/16) of the cold set's copies are superseded. A new cold set copies the
// old one's live records as they are and adds those in memory (about 25 ms
// and 15 MB written for 100,000 waiting tasks), so it waits longer as the
// backlog grows: what memory holds costs every one-shot command about what
// the copy costs once per that many tasks. A resident handle loads nothing
// per operation, so for it the copy is the whole cost: per new task it is
// the copy of 8 (or 256) tasks; the commands beside it load at most
// cold/8 tasks. A lease skips at most cold/16 superseded copies at the front
// of the order.
func coldDue(unfinishedInMemory, superseded, cold int, resident bool) bool {
	divisor := 256
	if resident {
		divisor = 8
	}
	return unfinishedInMemory >= max(archiveBatch, cold/divisor) || superseded >= max(archiveBatch, cold/16)
}

var checkpointCRC = crc32.MakeTable(crc32.Castagnoli)

func encodeCheckpoint(st *state.State, pos wal.Position) ([]byte, error) {
	snapshot, err := st.Snapshot()
	if err != nil {
		return nil, err
	}
	var body []byte
	for _, v := range []uint64{uint64(pos.Count), uint64(pos.End), uint64(pos.LastSum), uint64(pos.LastOffset), uint64(pos.Generation)} {
		body = binary.AppendUvarint(body, v)
	}
	body = append(body, snapshot...)
	out := append([]byte(checkpointMagic), binary.LittleEndian.AppendUint32(nil, crc32.Checksum(body, checkpointCRC))...)
	return append(out, body...), nil
}

// decodeCheckpoint returns the state and the WAL position it holds, or false
// for anything that is not an intact checkpoint paired with archive and cold.
func decodeCheckpoint(data []byte, archive, cold *state.Archive) (*state.State, wal.Position, bool) {
	rest, ok := bytes.CutPrefix(data, []byte(checkpointMagic))
	if !ok || len(rest) < 4 {
		return nil, wal.Position{}, false
	}
	body := rest[4:]
	if binary.LittleEndian.Uint32(rest) != crc32.Checksum(body, checkpointCRC) {
		return nil, wal.Position{}, false
	}
	var fields [5]uint64
	for i := range fields {
		v, n := binary.Uvarint(body)
		if n <= 0 {
			return nil, wal.Position{}, false
		}
		fields[i], body = v, body[n:]
	}
	st, err := state.LoadSnapshot(body, archive, cold)
	if err != nil || fields[0] == 0 {
		return nil, wal.Position{}, false
	}
	return st, wal.Position{Count: int(fields[0]), End: int64(fields[1]), LastSum: uint32(fields[2]), LastOffset: int64(fields[3]), Generation: uint32(fields[4])}, true
}

// loadCheckpoint reads the checkpoint beside the WAL, if there is a good one,
// with the archive and cold set it names mapped (maps; the state must not be
// used once they are released).
func (h *Handle) loadCheckpoint() (st *state.State, pos wal.Position, maps []mapping, ok bool) {
	data, err := os.ReadFile(h.side(CheckpointSuffix))
	if err != nil {
		return nil, wal.Position{}, nil, false
	}
	archive, _ := mapArchive(h.side(ArchiveSuffix))
	cold, _ := mapArchive(h.side(ColdSuffix))
	if st, pos, ok = decodeCheckpoint(data, archive.Archive, cold.Archive); !ok {
		archive.release()
		cold.release()
		return nil, wal.Position{}, nil, false
	}
	return st, pos, []mapping{archive, cold}, true
}

// mapping is an archive or cold set a state reads from a mapped file.
type mapping struct {
	*state.Archive
	unmap func()
	// spilled marks a replay's own file (spill.go), which is not beside
	// the WAL: a checkpoint must not name it.
	spilled bool
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
			m.release()
		}
	}
	clear(h.mapped[len(kept):])
	h.mapped = kept
}

// spilled reports whether st reads an archive or a cold set that a replay
// spilled (runs of them), rather than one beside the WAL.
func (h *Handle) spilled(st *state.State) (archive, cold bool) {
	a, c := st.Archives()
	for _, m := range h.mapped {
		archive = archive || m.spilled && slices.Contains(a, m.Archive)
		cold = cold || m.spilled && slices.Contains(c, m.Archive)
	}
	return archive, cold
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

// sideSink writes a new archive or cold set durably beside the WAL, where
// the checkpoint written next names it, and maps it.
func (h *Handle) sideSink(cold bool, write func(io.Writer) error) (*state.Archive, error) {
	path, what := h.side(ArchiveSuffix), "archive"
	if cold {
		path, what = h.side(ColdSuffix), "cold set"
	}
	if err := h.opts.FS.WriteStream(path, write); err != nil {
		return nil, fmt.Errorf("could not write the %s %s: %w", what, path, err)
	}
	m, err := mapArchive(path)
	if err != nil {
		return nil, fmt.Errorf("could not read back the %s %s: %w", what, path, err)
	}
	h.mapped = append(h.mapped, m)
	return m.Archive, nil
}

// side names a file kept beside the WAL.
func (h *Handle) side(suffix string) string { return filepath.Clean(h.opts.Path) + suffix }

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
	inMemory, _ := tx.State.InMemory()
	readBase := h.checkpointed == 0 && tx.State.Base() != nil
	if readBase || checkpointDue(tx.log.Count-h.checkpointed, inMemory) || tx.log.End-h.checkpointedEnd >= h.spillBytes() {
		if h.saveCheckpoint(tx.State, tx.log.Position) {
			h.checkpointed, h.checkpointedEnd = tx.log.Count, tx.log.End
		}
	}
}

func (h *Handle) spillBytes() int64 { return cmp.Or(h.opts.SpillAfterBytes, defaultSpillAfterBytes) }

// saveCheckpoint applies the archive and cold set rules, then writes the
// checkpoint. A failure costs speed, not correctness, so it is only a
// warning; a new archive or cold set that could not be written leaves the
// checkpoint as it was, since a checkpoint must never name one that is not on
// disk.
func (h *Handle) saveCheckpoint(st *state.State, pos wal.Position) bool {
	h.removeLeftovers()
	inMemory, finished := st.InMemory()
	coldTasks, superseded := st.Cold()
	archived, coldSet := st.Archives()
	archive, cold := archiveDue(finished, lenOf(archived), h.opts.Resident), coldDue(inMemory-finished, superseded, coldTasks, h.opts.Resident)
	spilledArchive, spilledCold := h.spilled(st)
	manyBytes := inMemory > finished && pos.End-h.coldEnd >= max(h.spillBytes(), int64(sizeOf(coldSet))/8)
	archive, cold = archive || spilledArchive, cold || spilledCold || manyBytes
	if archive || cold {
		err := st.Compact(archive, cold, h.sideSink)
		h.keepMapped(st)
		if errors.Is(err, state.ErrArchive) {
			h.dropCheckpoint() // the old archive or cold set is damaged: the next command replays the WAL and writes new ones
		}
		if err != nil {
			h.warnCache(err)
			return false
		}
		if cold {
			h.coldEnd = pos.End
		}
	}
	checkpoint, err := encodeCheckpoint(st, pos)
	if err == nil {
		err = h.opts.FS.WriteFile(h.side(CheckpointSuffix), checkpoint)
	}
	if err != nil {
		h.warnCache(fmt.Errorf("could not write the checkpoint %s: %w", h.side(CheckpointSuffix), err))
		return false
	}
	return true
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

// removeLeftovers removes the temporary files of checkpoints, archives and
// compactions that a crash interrupted. Only a writer, under the exclusive lock, writes
// those files, so every one found then is a leftover.
func (h *Handle) removeLeftovers() {
	for _, suffix := range []string{CheckpointSuffix, ArchiveSuffix, ColdSuffix} {
		leftovers, _ := filepath.Glob(globEscape(h.side(suffix)) + ".tmp-*")
		for _, path := range leftovers {
			_ = h.opts.FS.Remove(path)
		}
	}
	// A replay's spills are unlinked as soon as created: one left was left
	// by a crash. (A compaction's new WAL is not: it is written before the
	// lock is taken, and the next compaction removes those left.)
	leftovers, _ := filepath.Glob(globEscape(h.side("")) + spillInfix + "*")
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
