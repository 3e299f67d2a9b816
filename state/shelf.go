package state

import (
	"cmp"
	"encoding/binary"
	"hash/crc32"
	"runtime/debug"
	"slices"
	"sort"
)

// A shelf is where a state reads the tasks it moved out of memory: the
// archive of finished tasks, or the cold set. It is runs, each file the
// tasks one move took out of memory (MoveOut): a replay that spills as it
// goes (Spill), and a resident server, add a run each time and merge the
// last runs as they pile up (mergeFrom), so that a move costs what it moves
// and a share of merges, never a copy of the whole backlog, and can come
// every few thousand tasks however large the backlog grows; a Rewrite
// writes every run into one file. A checkpoint names the runs.
//
// The records of the runs are numbered on from one run to the next: an
// offset names one record of the whole shelf (Task.coldAt, the superseded
// copies), and merging the last runs leaves the offsets of the runs before
// them as they were. A task has at most one copy in a run; a later run's
// copy is the newer, so lookups read the runs from the last.
type shelf struct {
	runs   []*Archive
	starts []uint64 // where each run's records start among the shelf's
	reads  int      // reads out of order (touched) since the runs' pages were last let go of
	// superseded[i] is how many entries at the start of run i's lease order
	// are known superseded (a copy is superseded for good, and a shelf is
	// replaced by a new one whenever its runs change): a resident server
	// picks leases from the front of the lease order, and would otherwise
	// read past every copy it leased before, a read that grows with each.
	superseded []int
}

// evictEvery is how many reads out of order (touched) come before the pages
// of every run are let go of. A lookup, or a task read in lease order,
// reads a page or two of a run, but the system maps the pages around a
// page read from a file too (fault-around, 64 KiB), and those stay with the
// process: a replay that touches old tasks all over the runs, or an expire
// that reads the tasks of every run in lease order, would hold as much of
// them as it touched, growing with the backlog. Letting go costs a system
// call a run, and the reads after it a minor fault each.
const evictEvery = 128

// touched notes a read of a run out of the order it was written in.
func (sh *shelf) touched() {
	if sh.reads++; sh.reads%evictEvery == 0 {
		for _, r := range sh.runs {
			r.evictAll()
		}
	}
}

// shelfOfRuns is the shelf of runs, oldest first (none for none): each
// run's records are numbered on from the run before's, as the shelf that
// laid them numbered them (replaceFrom).
func shelfOfRuns(runs []*Archive) *shelf {
	if len(runs) == 0 {
		return nil
	}
	sh := &shelf{runs: slices.Clone(runs), starts: make([]uint64, len(runs))}
	for i := 1; i < len(runs); i++ {
		sh.starts[i] = sh.starts[i-1] + uint64(runs[i-1].recordsLen())
	}
	return sh
}

// Err reports the first damage found in a run (nil for none).
func (sh *shelf) Err() error {
	if sh == nil {
		return nil
	}
	for _, r := range sh.runs {
		if r.err != nil {
			return r.err
		}
	}
	return nil
}

// Len is how many tasks the shelf holds: for the cold set, its copies.
func (sh *shelf) Len() (n int) {
	if sh != nil {
		for _, r := range sh.runs {
			n += r.Len()
		}
	}
	return n
}

// end is the offset just past the shelf's last record.
func (sh *shelf) end() uint64 {
	if sh == nil {
		return 0
	}
	last := len(sh.runs) - 1
	return sh.starts[last] + uint64(sh.runs[last].recordsLen())
}

// startOf is where run i's records start (the shelf's end for i past the
// last run).
func (sh *shelf) startOf(i int) uint64 {
	if sh == nil || i >= len(sh.runs) {
		return sh.end()
	}
	return sh.starts[i]
}

// guard turns a fault while reading any run into damage of every run (see
// Archive.guard): a shelf that faulted is read no more.
func (sh *shelf) guard(wasOn bool) {
	if r := recover(); r != nil {
		for _, run := range sh.runs {
			run.damaged("reading it faulted (the file was truncated or replaced while in use): %v", r)
		}
	}
	debug.SetPanicOnFault(wasOn)
}

// find returns the task that has key of kind, as match confirms, from the
// last run that holds one; damage found on the way is the error.
func (sh *shelf) find(kind byte, key string, match func(*Task) bool) (*Task, error) {
	if sh == nil {
		return nil, nil
	}
	h := keyHash(kind, key)
	for i := len(sh.runs) - 1; i >= 0; i-- {
		if !sh.runs[i].filter.mayHold(h) {
			continue
		}
		sh.touched()
		t, err := sh.runs[i].find(h, match)
		if err != nil {
			return nil, err
		}
		if t != nil {
			sh.place(t, i)
			return t, nil
		}
	}
	return nil, nil
}

// search is find without the error: damage stays in the run (Err).
func (sh *shelf) search(kind byte, key string, match func(*Task) bool) *Task {
	t, _ := sh.find(kind, key, match)
	return t
}

// place moves where a task read from run i says its copy is (Task.coldAt)
// to the shelf's offsets.
func (sh *shelf) place(t *Task, i int) {
	if t.coldAt != 0 {
		t.coldAt += sh.starts[i]
	}
}

// taskAt reads the record at a shelf offset: its task and the offset of the
// next record.
func (sh *shelf) taskAt(offset uint64) (*Task, uint64) {
	i := sh.runOf(offset)
	t, next := sh.runs[i].taskAt(offset - sh.starts[i])
	if t == nil {
		return nil, 0
	}
	sh.place(t, i)
	return t, next + sh.starts[i]
}

// eachOrder hands fn the order entries of every run, merged in lease order,
// with shelf offsets, until fn returns false or a run is found damaged; but
// not those at the front of a run that superseded says are, which it
// remembers so as not to read them again.
func (sh *shelf) eachOrder(superseded func(offset uint64) bool, fn func(orderEntry) bool) {
	if sh == nil || sh.Err() != nil {
		return
	}
	defer sh.guard(debug.SetPanicOnFault(true))
	if len(sh.superseded) != len(sh.runs) {
		sh.superseded = make([]int, len(sh.runs))
	}
	streams := make([]func() (orderEntry, bool), len(sh.runs))
	for i, r := range sh.runs {
		c := r.cursor(partOrder)
		defer c.sweep.end()
		c.skip(sh.superseded[i])
		front := true // every entry read so far is superseded
		streams[i] = stream(c, func(b []byte) (orderEntry, bool) {
			e := readOrderEntry(b)
			e.offset += sh.starts[i]
			if front && superseded(e.offset) {
				sh.superseded[i]++
				return e, false
			}
			front = false
			return e, true
		})
	}
	merge(streams, compareOrder, fn)
}

// An archived is a task read from a shelf and where: its shelf offset.
type archived struct {
	t      *Task
	offset uint64
}

// batchOrder hands out the shelf's tasks by creation, then offset: a merge
// of its batches (see State.archivedInCreationOrder), each read in turn and
// let go of behind the read.
func (sh *shelf) batchOrder() func() (archived, bool) {
	return mergeRuns(sh, func(i int, r *Archive, start uint64) (streams []func() (archived, bool)) {
		for _, b := range r.batches() {
			w := &sweep{evict: r.evict, at: r.at[partRecords], size: int(b[1]), done: int(b[0])}
			off := b[0]
			streams = append(streams, func() (archived, bool) {
				if off >= b[1] {
					w.end()
					return archived{}, false
				}
				t, next := r.taskAt(off)
				if t == nil {
					return archived{}, false
				}
				sh.place(t, i)
				a := archived{t, start + off}
				off = next
				w.passed(int(off))
				return a, true
			})
		}
		return streams
	}, func(x, y archived) int {
		return cmp.Or(cmp.Compare(x.t.Seqs[0], y.t.Seqs[0]), cmp.Compare(x.offset, y.offset))
	})
}

// mergeRuns hands out, in order, the entries of the streams each run of the
// shelf makes (given the run's number, the run and where its records start
// among the shelf's): reads of a run that fault are its damage.
func mergeRuns[E any](sh *shelf, streamsOf func(i int, r *Archive, start uint64) []func() (E, bool), compare func(E, E) int) func() (E, bool) {
	if sh == nil {
		return listStream[E](nil)
	}
	defer sh.guard(debug.SetPanicOnFault(true))
	var streams []func() (E, bool)
	for i, r := range sh.runs {
		streams = append(streams, streamsOf(i, r, sh.starts[i])...)
	}
	m := newMerger(streams, compare)
	return func() (_ E, _ bool) {
		defer sh.guard(debug.SetPanicOnFault(true))
		return m.next()
	}
}

// batches is where each stretch of the run's records in creation order
// starts and ends: a new one where creation goes back. None past damage.
func (a *Archive) batches() (out [][2]uint64) {
	sweep := a.sweep(partRecords, len(a.records))
	defer sweep.end()
	from, last := uint64(0), int64(0)
	for off := uint64(0); off < uint64(len(a.records)); {
		t, next := a.taskAt(off)
		if t == nil {
			return out
		}
		if t.Seqs[0] < last {
			out = append(out, [2]uint64{from, off})
			from = off
		}
		last = t.Seqs[0]
		off = next
		sweep.passed(int(off))
	}
	if from < uint64(len(a.records)) {
		out = append(out, [2]uint64{from, uint64(len(a.records))})
	}
	return out
}

// all reads every archived task, in the order they were first archived,
// each as its last record has it.
func (sh *shelf) all() ([]*Task, error) {
	if sh == nil {
		return nil, nil
	}
	var out []*Task
	at := map[string]int{}
	for _, r := range sh.runs {
		if !r.readInto(&out, at) {
			return nil, r.err
		}
	}
	return out, nil
}

// A recordsSweep lets go of each run's records behind the furthest record
// read in it. A read in lease order or in creation order goes through the
// records of each run about in the order they were written, but from one
// run to another and back: the furthest read of the whole shelf would be in
// the last run, and leave what is read of the others behind it.
type recordsSweep struct {
	sh   *shelf
	runs []*sweep
}

func (sh *shelf) recordsSweep() *recordsSweep {
	w := &recordsSweep{sh: sh}
	if sh != nil {
		for _, r := range sh.runs {
			w.runs = append(w.runs, r.sweep(partRecords, len(r.records)))
		}
	}
	return w
}

// read notes that the record at a shelf offset was read.
func (w *recordsSweep) read(offset uint64) {
	i := w.sh.runOf(offset)
	run := w.runs[i]
	run.passed(max(run.read, int(offset-w.sh.starts[i])))
}

func (w *recordsSweep) end() {
	for _, run := range w.runs {
		run.end()
	}
}

// runOf is the run whose records hold a shelf offset.
func (sh *shelf) runOf(offset uint64) int {
	return max(sort.Search(len(sh.runs), func(i int) bool { return sh.starts[i] > offset })-1, 0)
}

// mergeFrom is the first of the last runs that a spill adding n tasks
// merges into its new run: while the run before is no larger than what is
// merged, it joins. Like a binary counter, each task is copied about
// log2(shelf/spill) times in all, and the shelf holds about as many runs.
func (sh *shelf) mergeFrom(n int) int {
	if sh == nil {
		return 0
	}
	i, merged := len(sh.runs), n
	for i > 0 && sh.runs[i-1].Len() <= merged {
		i--
		merged += sh.runs[i].Len()
	}
	return i
}

// replaceFrom is the shelf with the runs from i on replaced by a, the run
// written from them.
func (sh *shelf) replaceFrom(i int, a *Archive) *shelf {
	if sh == nil {
		return shelfOfRuns([]*Archive{a})
	}
	return &shelf{runs: append(slices.Clone(sh.runs[:i]), a), starts: append(slices.Clone(sh.starts[:i]), sh.startOf(i))}
}

// files is the runs' files, oldest first.
func (sh *shelf) files() []*Archive {
	if sh == nil {
		return nil
	}
	return slices.Clone(sh.runs)
}

// creationOrder hands out the order entries of every run, with shelf
// offsets, in creation order: a run's lease order goes by priority, then
// creation, so the entries of one priority in one run are in creation
// order, and merging those streams is the shelf's creation order, holding a
// cursor per stream (at most one per priority, 2,001, of each run), not a
// reference per task. A damaged run ends it early (Err says).
func (sh *shelf) creationOrder() func() (orderEntry, bool) {
	return mergeRuns(sh, func(_ int, r *Archive, start uint64) (streams []func() (orderEntry, bool)) {
		for _, g := range r.priorityGroups() {
			streams = append(streams, stream(r.orderCursor(g[0], g[1]), func(b []byte) (orderEntry, bool) {
				e := readOrderEntry(b)
				e.offset += start
				return e, true
			}))
		}
		return streams
	}, func(x, y orderEntry) int {
		return cmp.Or(cmp.Compare(x.seq0, y.seq0), cmp.Compare(x.offset, y.offset))
	})
}

// priorityGroups is where the entries of each priority start and end in
// the run's lease order, found by bisection; none past a damaged block.
func (a *Archive) priorityGroups() (groups [][2]int) {
	probe := &cursor{a: a, part: a.order, entrySize: orderEntrySize, count: a.orders}
	priorityAt := func(i int) (int32, bool) {
		block, ok := probe.blockOf(i)
		if !ok {
			return 0, false
		}
		return readOrderEntry(block[i%archiveBlockLen*orderEntrySize:]).priority, true
	}
	for from := 0; from < a.orders; {
		first, ok := priorityAt(from)
		if !ok {
			return groups
		}
		to := from + sort.Search(a.orders-from, func(k int) bool {
			p, ok := priorityAt(from + k)
			return !ok || p != first
		})
		if a.err != nil {
			return groups
		}
		groups = append(groups, [2]int{from, to})
		from = to
	}
	return groups
}

// merge hands fn the entries of sorted streams in order until fn returns
// false or every stream has ended.
func merge[E any](streams []func() (E, bool), compare func(E, E) int, fn func(E) bool) {
	m := newMerger(streams, compare)
	for e, ok := m.next(); ok && fn(e); e, ok = m.next() {
	}
}

// A merger hands out the entries of sorted streams in order, one at a time:
// a heap of the streams by their heads, of equal heads the earlier stream's
// first, so that the streams may be many (a creation order merges one per
// priority of each run).
type merger[E any] struct {
	streams []func() (E, bool)
	heads   []E
	heap    []int // streams not yet ended, by head
	compare func(E, E) int
}

func newMerger[E any](streams []func() (E, bool), compare func(E, E) int) *merger[E] {
	m := &merger[E]{streams: streams, heads: make([]E, len(streams)), compare: compare}
	for i, next := range streams {
		if head, ok := next(); ok {
			m.heads[i] = head
			m.heap = append(m.heap, i)
		}
	}
	for i := len(m.heap)/2 - 1; i >= 0; i-- {
		m.down(i)
	}
	return m
}

// next is the least head, or false when every stream has ended.
func (m *merger[E]) next() (E, bool) {
	if len(m.heap) == 0 {
		var none E
		return none, false
	}
	top := m.heap[0]
	e := m.heads[top]
	if head, ok := m.streams[top](); ok {
		m.heads[top] = head
	} else {
		last := len(m.heap) - 1
		m.heap[0] = m.heap[last]
		m.heap = m.heap[:last]
	}
	m.down(0)
	return e, true
}

func (m *merger[E]) less(i, j int) bool {
	a, b := m.heap[i], m.heap[j]
	c := m.compare(m.heads[a], m.heads[b])
	return c < 0 || c == 0 && a < b
}

func (m *merger[E]) down(i int) {
	for {
		least := i
		for _, child := range []int{2*i + 1, 2*i + 2} {
			if child < len(m.heap) && m.less(child, least) {
				least = child
			}
		}
		if least == i {
			return
		}
		m.heap[i], m.heap[least] = m.heap[least], m.heap[i]
		i = least
	}
}

// stream hands out the entries of a cursor one at a time (see merge), each
// as read gives it, leaving out those read says not to keep.
func stream[E any](c *cursor, read func([]byte) (E, bool)) func() (E, bool) {
	return func() (E, bool) {
		for {
			b, ok := c.next()
			if !ok {
				var none E
				return none, false
			}
			if e, keep := read(b); keep {
				return e, true
			}
		}
	}
}

// A cursor reads the entries of an archive's index or order one at a time,
// a block at a time: it checks each block's checksum as it comes to it, and
// lets go of the blocks it has passed.
type cursor struct {
	a         *Archive
	part      []byte
	entrySize int
	count     int // entries in the part
	i         int // the next entry
	end       int // the entry it stops before
	block     []byte
	sweep     *sweep
}

func (a *Archive) cursor(part int) *cursor {
	c := &cursor{a: a, part: a.index, entrySize: archiveEntrySize, count: a.entries}
	if part == partOrder {
		c.part, c.entrySize, c.count = a.order, orderEntrySize, a.orders
	}
	c.end = c.count
	c.sweep = a.sweep(part, len(c.part))
	return c
}

// orderCursor reads the entries from to to of the archive's order, and lets
// go of the blocks it passes between them only.
func (a *Archive) orderCursor(from, to int) *cursor {
	c := a.cursor(partOrder)
	c.end = to
	c.sweep.done = c.blockStart(from)
	c.sweep.size = min(c.blockStart(to+archiveBlockLen-1), len(c.part))
	c.skip(from)
	return c
}

// blockStart is where the block that holds entry i starts in the part.
func (c *cursor) blockStart(i int) int {
	return i / archiveBlockLen * (archiveBlockLen*c.entrySize + 4)
}

// blockOf is the block that holds entry i, its checksum checked.
func (c *cursor) blockOf(i int) ([]byte, bool) {
	start := c.blockStart(i)
	n := min(archiveBlockLen, c.count-i+i%archiveBlockLen) * c.entrySize
	block := c.part[start : start+n]
	if crc32.Checksum(block, archiveCRC) != binary.LittleEndian.Uint32(c.part[start+n:]) {
		c.a.damaged("%s block %d checksum mismatch", c.name(), i/archiveBlockLen)
		return nil, false
	}
	return block, true
}

// skip moves the cursor past its first n entries: only the block it then
// stands in is read (and checked).
func (c *cursor) skip(n int) {
	n = min(n, c.end)
	c.i = n - n%archiveBlockLen
	for c.i < n {
		if _, ok := c.next(); !ok {
			return
		}
	}
}

// next is the next entry's bytes, or false at the end or on damage.
func (c *cursor) next() ([]byte, bool) {
	if c.i >= c.end || c.a.err != nil {
		return nil, false
	}
	j := c.i % archiveBlockLen
	if j == 0 {
		block, ok := c.blockOf(c.i)
		if !ok {
			return nil, false
		}
		c.sweep.passed(c.blockStart(c.i))
		c.block = block
	}
	c.i++
	if c.i == c.end {
		c.sweep.passed(len(c.part))
	}
	return c.block[j*c.entrySize : (j+1)*c.entrySize], true
}

func (c *cursor) name() string {
	if c.entrySize == orderEntrySize {
		return "order"
	}
	return "index"
}
