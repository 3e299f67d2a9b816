package store

import (
	"bufio"
	"cmp"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/leasewal/leasewal/state"
)

// A replay from the WAL's start (the first command on a WAL, or one whose
// checkpoint is gone) would otherwise hold every task in memory until it
// writes the checkpoint: a backlog of a million tasks is most of a GiB. A
// spiller moves the tasks in memory out as the replay goes (state.Spill),
// into runs of an archive and a cold set of its own, each a temporary file
// beside the WAL that is mapped and unlinked at once, so that nothing is
// left behind whatever becomes of the command. The records after that find
// those tasks there as they would in a checkpoint's. A writer's replay,
// which holds the exclusive lock and writes the checkpoint at its end,
// spills to runs beside the WAL instead (<wal>.cold-<name>, runSink), which
// that checkpoint names as they are, once synced, rather than copying
// every task once more into new files; the runs it merges away on the way
// are removed as it lets go of them, and a crash leaves runs that the next
// checkpoint removes.
//
// It spills when the tasks in memory reach Options.SpillAfter (65,536), or
// when the records read since the last spill reach Options.SpillAfterBytes
// (64 MiB): what memory holds is at most that many tasks, or the tasks those
// bytes of records created or touched (about 30 MB for 65,536 tasks of
// 100-byte payloads), however large the backlog. A spill writes what it
// moves and merges the last runs as they pile up, so each task is copied
// about log2(backlog/65,536) times.
type spiller struct {
	h         *Handle
	tasks     int   // Options.SpillAfter
	bytes     int64 // Options.SpillAfterBytes
	read      int64 // the record bytes read since the last spill
	abandoned bool  // a spill failed: the replay holds its tasks in memory
	named     bool  // a writer's replay: spill to runs beside the WAL
}

const (
	defaultSpillAfter      = 1 << 16
	defaultSpillAfterBytes = 64 << 20
)

// newSpiller is the spiller of a replay from the WAL's start, its files
// mapped by h; named, for a writer's replay whose state the checkpoint
// written after it describes.
func newSpiller(h *Handle, named bool) *spiller {
	return &spiller{h: h, tasks: h.spillAfter(), bytes: h.spillBytes(), named: named}
}

func (h *Handle) spillAfter() int { return cmp.Or(h.opts.SpillAfter, defaultSpillAfter) }

// check spills the tasks in memory once they are many, or once the records
// read since the last spill are many bytes; size is the bytes of the record
// just applied.
func (sp *spiller) check(st *state.State, size int) {
	if sp == nil || sp.abandoned {
		return
	}
	sp.read += int64(size)
	if st.InMemoryCount() < sp.tasks && sp.read < sp.bytes {
		return
	}
	sp.read = 0
	if st.InMemoryCount() == 0 {
		return
	}
	sink := sp.h.spillSink
	if sp.named {
		sink = sp.h.runSink
	}
	err := st.Spill(sink)
	if err != nil && sp.named { // the directory takes no new file: spill where a reader would
		sp.named = false
		err = st.Spill(sp.h.spillSink)
	}
	sp.h.keepMapped(st)
	if err != nil {
		sp.h.warn("could not move tasks out of memory during the replay (%v); it holds them in memory", err)
		sp.abandoned = true
	}
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
	m, err := writeAndMap(f, write)
	if err != nil {
		return nil, err
	}
	h.mapped = append(h.mapped, m)
	return m.Archive, nil
}

// writeAndMap streams what write writes to f, then maps it.
func writeAndMap(f *os.File, write func(io.Writer) error) (mapping, error) {
	buffered := bufio.NewWriterSize(f, 1<<20)
	err := write(buffered)
	if err == nil {
		err = buffered.Flush()
	}
	if err != nil {
		return mapping{}, fmt.Errorf("could not write %s: %w", f.Name(), err)
	}
	m, err := mapArchiveFile(f)
	if err != nil {
		return mapping{}, fmt.Errorf("could not map %s: %w", f.Name(), err)
	}
	return m, nil
}

// runSink writes a run a writer's replay spills beside the WAL, where the
// checkpoint written at the replay's end will name it, and maps it; it is
// synced only if that checkpoint names it (syncRuns).
func (h *Handle) runSink(cold bool, write func(io.Writer) error) (*state.Archive, error) {
	name := newRunName()
	path := h.runPath(cold, name)
	f, err := h.opts.FS.Run(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := writeAndMap(f, write)
	if err != nil {
		_ = h.opts.FS.Remove(path)
		return nil, err
	}
	m.name, m.cold, m.fresh, m.unsynced = name, cold, true, true
	h.mapped = append(h.mapped, m)
	return m.Archive, nil
}

// spillInfix names a spill's temporary file: <wal>.spill-<random>.
const spillInfix = ".spill-"
