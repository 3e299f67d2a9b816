package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
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
// tasks plus the unfinished ones.
func archiveDue(finishedInMemory int) bool { return finishedInMemory >= archiveBatch }

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

func encodeCheckpoint(st *state.State, pos wal.Position) []byte {
	var body []byte
	for _, v := range []uint64{uint64(pos.Count), uint64(pos.End), uint64(pos.LastSum), uint64(pos.LastOffset), uint64(pos.Generation)} {
		body = binary.AppendUvarint(body, v)
	}
	body = append(body, st.Snapshot()...)
	out := append([]byte(checkpointMagic), binary.LittleEndian.AppendUint32(nil, crc32.Checksum(body, checkpointCRC))...)
	return append(out, body...)
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

// loadCheckpoint reads the checkpoint beside the WAL, if there is a good one.
// The archive stays mapped until release is called; the state must not be
// used after that.
func (h *Handle) loadCheckpoint() (st *state.State, pos wal.Position, release func(), ok bool) {
	data, err := os.ReadFile(h.side(CheckpointSuffix))
	if err != nil {
		return nil, wal.Position{}, nil, false
	}
	archive, releaseArchive := h.mapArchive(ArchiveSuffix)
	cold, releaseCold := h.mapArchive(ColdSuffix)
	release = func() { releaseArchive(); releaseCold() }
	if st, pos, ok = decodeCheckpoint(data, archive, cold); !ok {
		release()
		return nil, wal.Position{}, nil, false
	}
	return st, pos, release, true
}

// mapArchive maps <wal>.archive or <wal>.cold read-only; a missing or
// unreadable one is none (a checkpoint that names one is then not used).
func (h *Handle) mapArchive(suffix string) (*state.Archive, func()) {
	f, err := os.Open(h.side(suffix))
	if err != nil {
		return nil, func() {}
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil || info.Size() == 0 || !info.Mode().IsRegular() || int64(int(info.Size())) != info.Size() {
		return nil, func() {}
	}
	data, err := unix.Mmap(int(f.Fd()), 0, int(info.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, func() {}
	}
	release := func() { _ = unix.Munmap(data) }
	archive, err := state.OpenArchive(data)
	if err != nil {
		release()
		return nil, func() {}
	}
	return archive, release
}

// side names a file kept beside the WAL.
func (h *Handle) side(suffix string) string { return filepath.Clean(h.opts.Path) + suffix }

// refreshCheckpoint applies the checkpoint rule after a writing operation,
// still under the exclusive lock.
func (h *Handle) refreshCheckpoint(tx *Tx) {
	if inMemory, _ := tx.State.InMemory(); checkpointDue(tx.log.Count-h.checkpointed, inMemory) {
		if h.saveCheckpoint(tx.State, tx.log.Position) {
			h.checkpointed = tx.log.Count
		}
	}
}

// saveCheckpoint applies the archive and cold set rules, then writes the
// checkpoint. A failure costs speed, not correctness, so it is only a
// warning; a new archive or cold set that could not be written leaves the
// checkpoint as it was, since a checkpoint must never name one that is not on
// disk.
func (h *Handle) saveCheckpoint(st *state.State, pos wal.Position) bool {
	h.removeLeftovers()
	inMemory, finished := st.InMemory()
	coldTasks, superseded := st.Cold()
	archive, cold := archiveDue(finished), coldDue(inMemory-finished, superseded, coldTasks, h.opts.Resident)
	if archive || cold {
		archiveBytes, coldBytes, err := st.Compact(archive, cold)
		if errors.Is(err, state.ErrArchive) {
			h.dropCheckpoint() // the old archive or cold set is damaged: the next command replays the WAL and writes new ones
		}
		if err == nil && archiveBytes != nil {
			if err = h.opts.FS.WriteFile(h.side(ArchiveSuffix), archiveBytes); err != nil {
				err = fmt.Errorf("could not write the archive %s: %w", h.side(ArchiveSuffix), err)
			}
		}
		if err == nil && coldBytes != nil {
			if err = h.opts.FS.WriteFile(h.side(ColdSuffix), coldBytes); err != nil {
				err = fmt.Errorf("could not write the cold set %s: %w", h.side(ColdSuffix), err)
			}
		}
		if err != nil {
			h.warnCache(err)
			return false
		}
	}
	if err := h.opts.FS.WriteFile(h.side(CheckpointSuffix), encodeCheckpoint(st, pos)); err != nil {
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
	leftovers, _ := filepath.Glob(globEscape(h.side("")) + ".compacting-*") // a compaction writes its new WAL under the lock too
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
