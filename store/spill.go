package store

import (
	"bufio"
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
// an eighth of those already spilled): a spill copies the files before it, so the copies grow
// geometrically (about nine times the final files in all), and memory holds
// at most an eighth of the backlog (the share a resident handle keeps, see
// coldDue), about 30 MB a million tasks of 100-byte payloads.
type spiller struct {
	h     *Handle
	least int // Options.SpillAfter
	next  int
}

const defaultSpillAfter = 1 << 16

// check spills the tasks in memory once they are many.
func (sp *spiller) check(st *state.State) {
	if sp == nil || st.InMemoryCount() < sp.next {
		return
	}
	inMemory, finished := st.InMemory()
	err := st.Compact(finished > 0, inMemory > finished, sp.h.spillSink)
	sp.h.keepMapped(st)
	if err != nil {
		sp.h.warn("could not move tasks out of memory during the replay (%v); it holds them in memory", err)
		sp.next = math.MaxInt
		return
	}
	archive, cold := st.Archives()
	sp.next = max(sp.least, (archive.Len()+cold.Len())/8)
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
