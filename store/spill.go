package store

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"math"
	"path/filepath"

	"leasewal/state"
)

// A replay from the WAL's start (the first command on a WAL, or one whose
// checkpoint is gone) would otherwise hold every task in memory until it
// writes the checkpoint: a backlog of a million tasks is most of a GiB. A
// spiller moves the tasks in memory out as the replay goes, into an archive
// and a cold set of its own (state.Compact, the same move a checkpoint
// makes), each a temporary file beside the WAL that is mapped and unlinked at
// once, so that nothing is left behind whatever becomes of the command. The
// records after that find those tasks there as they would in a checkpoint's.
//
// It spills when the tasks in memory reach max(Options.SpillAfter (65,536),
// an eighth of those already spilled), or when the records read since the
// last spill reach max(Options.SpillAfterBytes (64 MiB), an eighth of the
// bytes of the files spilled): a spill copies the files before it, so the
// copies grow geometrically, by count and by bytes alike (about nine times
// the final files in all), and memory holds at most an eighth of the backlog
// (the share a resident handle keeps, see coldDue): about 30 MB a million
// tasks of 100-byte payloads, and, whatever the payloads' size, about the
// bytes of the records read since the last spill (the tasks those records
// created or touched are what memory holds).
type spiller struct {
	h          *Handle
	least      int   // Options.SpillAfter
	leastBytes int64 // Options.SpillAfterBytes
	next       int
	read       int64 // the record bytes read since the last spill
	nextBytes  int64
}

const (
	defaultSpillAfter      = 1 << 16
	defaultSpillAfterBytes = 64 << 20
)

// newSpiller is the spiller of a replay from the WAL's start, its files
// mapped by h.
func newSpiller(h *Handle) *spiller {
	least, leastBytes := cmp.Or(h.opts.SpillAfter, defaultSpillAfter), h.spillBytes()
	return &spiller{h: h, least: least, leastBytes: leastBytes, next: least, nextBytes: leastBytes}
}

// check spills the tasks in memory once they are many, or once the records
// read since the last spill are many bytes; size is the bytes of the record
// just applied.
func (sp *spiller) check(st *state.State, size int) {
	if sp == nil {
		return
	}
	sp.read += int64(size)
	if st.InMemoryCount() < sp.next && sp.read < sp.nextBytes {
		return
	}
	sp.read = 0
	inMemory, finished := st.InMemory()
	if inMemory == 0 {
		return
	}
	err := st.Compact(finished > 0, inMemory > finished, sp.h.spillSink)
	sp.h.keepMapped(st)
	if err != nil {
		sp.h.warn("could not move tasks out of memory during the replay (%v); it holds them in memory", err)
		sp.next, sp.nextBytes = math.MaxInt, math.MaxInt64
		return
	}
	archive, cold := st.Archives()
	sp.next = max(sp.least, (archive.Len()+cold.Len())/8)
	sp.nextBytes = max(sp.leastBytes, int64(archive.Size()+cold.Size())/8)
}

// spillSink writes a new archive or cold set to a temporary file beside the
// WAL, unlinked (FS.Spill), and maps it: the mapping keeps it for as long as
// the state reads it (the handle unmaps it, keepMapped, forget).
func (h *Handle) spillSink(_ bool, write func(io.Writer) error) (*state.Archive, error) {
	f, err := h.opts.FS.Spill(filepath.Clean(h.opts.Path))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buffered := bufio.NewWriterSize(f, 1<<20)
	if err = write(buffered); err == nil {
		err = buffered.Flush()
	}
	if err != nil {
		return nil, fmt.Errorf("could not write %s: %w", f.Name(), err)
	}
	m, err := mapArchiveFile(f)
	if err != nil {
		return nil, fmt.Errorf("could not map %s: %w", f.Name(), err)
	}
	m.spilled = true
	h.mapped = append(h.mapped, m)
	return m.Archive, nil
}

// spillInfix names a spill's temporary file: <wal>.spill-<random>.
const spillInfix = ".spill-"
