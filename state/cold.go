package state

import (
	"cmp"
	"encoding/binary"
	"io"
	"slices"
)

// The cold set keeps a backlog out of memory. MoveOut writes the unfinished
// tasks to an archive of its own (the cold set) with its lease order; from then
// on a state holds in memory only the tasks a record has touched since (hot:
// s.tasks, s.order, s.live), and a hot copy shadows the cold one. A lease
// reads the cold set's order from the front and decodes the first tasks that
// can be leased, so that it costs what it touches, not the backlog. Lookups
// look in memory, then in the archive of finished tasks, then in the cold set:
// a task the archive holds finished after the cold set was written, so its
// cold copy is superseded, and every key of that copy is a key of the
// archived task.
//
// What must see every unfinished task (expire, NextEventAt, Live, Explain,
// the listing) reads the whole cold set: those cost the backlog, as they did.

// orderEntry is one cold task in the lease order: enough to skip, without
// decoding it, a task that cannot be leased or lapse at a given time. The
// bounds are loose, never wrong: a lease still decides on the decoded task.
type orderEntry struct {
	offset   uint64 // of the task's record in the cold set
	seq0     int64  // its creation record: the order after priority
	from     int64  // not leasable before: its not_before, or its lease's expiry
	to       int64  // nor from its deadline on, pauses not counted (a pause only moves it later)
	queue    uint64 // keyHash of its queue
	priority int32
	leased   bool
}

const orderEntrySize = 48

func orderOf(t *Task, offset uint64) orderEntry {
	e := orderEntry{offset: offset, seq0: t.Seqs[0], from: t.NotBefore, to: t.windowEnd(),
		queue: keyHash(keyQueue, t.Queue), priority: int32(t.Priority)}
	if t.State == Leased {
		e.from, e.leased = t.Lease.Expiry, true
	}
	return e
}

// keyQueue is the kind of key a queue name is hashed as, in order entries.
const keyQueue byte = 'q'

func (e orderEntry) append(b []byte) []byte {
	for _, v := range []uint64{e.offset, uint64(e.seq0), uint64(e.from), uint64(e.to), e.queue} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(e.priority))
	var flags uint32
	if e.leased {
		flags = 1
	}
	return binary.LittleEndian.AppendUint32(b, flags)
}

func readOrderEntry(b []byte) orderEntry {
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[i*8:]) }
	return orderEntry{offset: u(0), seq0: int64(u(1)), from: int64(u(2)), to: int64(u(3)), queue: u(4),
		priority: int32(binary.LittleEndian.Uint32(b[40:])), leased: binary.LittleEndian.Uint32(b[44:])&1 == 1}
}

// compareOrder is the lease order: higher priority first, then older (ahead).
func compareOrder(x, y orderEntry) int {
	if x.priority != y.priority {
		return cmp.Compare(y.priority, x.priority)
	}
	return cmp.Compare(x.seq0, y.seq0)
}

// coldTasks hands fn, in lease order, each cold task that no hot copy
// shadows and that keep accepts (without decoding it), until fn returns
// false.
func (s *State) coldTasks(keep func(orderEntry) bool, fn func(*Task) bool) {
	s.cold.eachOrder(s.isSuperseded, func(e orderEntry) bool {
		if !keep(e) || s.isSuperseded(e.offset) {
			return true
		}
		t, _ := s.cold.taskAt(e.offset)
		s.cold.touched() // the lease order goes by priority first
		if t == nil {
			return false // damage: the archive reports it (Damage)
		}
		s.attach(t)
		return fn(t)
	})
}

func everyEntry(orderEntry) bool { return true }

// EachTask hands fn every task (only those Live lists, with live set) in
// creation order, as Tasks lists them, until fn returns false. It holds in
// memory a cursor per priority in each run of the cold set and one per batch
// of the archive, not the tasks nor where each is: a listing of a backlog or
// a history of millions decodes one task at a time.
func (s *State) EachTask(live bool, fn func(*Task) bool) error {
	if err := s.Damage(); err != nil {
		return err
	}
	hot := slices.Clone(s.order)
	if live {
		hot = slices.Clone(s.live)
	}
	slices.SortFunc(hot, byCreation)
	archived := func() *Task { return nil }
	if !live {
		archived = s.archivedInCreationOrder()
	}
	cold := s.coldInCreationOrder()
	if err := s.Damage(); err != nil {
		return err
	}
	coldTasks := s.readAt(cold, s.cold)
	defer coldTasks.end()
	a, c := archived(), coldTasks.next()
	for {
		t := a
		for _, other := range []*Task{c, firstOf(hot)} {
			if other != nil && (t == nil || other.Seqs[0] < t.Seqs[0]) {
				t = other
			}
		}
		switch {
		case t == nil:
			return s.Damage()
		case !fn(t):
			return s.Damage()
		case t == a:
			a = archived()
		case t == c:
			c = coldTasks.next()
		default:
			hot = hot[1:]
		}
	}
}

// EachTaskInAnyOrder hands fn the tasks EachTask does, in no particular
// order, until fn returns false: the cold set in its lease order, the
// archive in creation order, which tells the later copy of a task archived
// twice.
func (s *State) EachTaskInAnyOrder(live bool, fn func(*Task) bool) error {
	if err := s.Damage(); err != nil {
		return err
	}
	hot := s.order
	if live {
		hot = s.live
	}
	for _, t := range hot {
		if !fn(t) {
			return s.Damage()
		}
	}
	if !live {
		archived := s.archivedInCreationOrder()
		for t := archived(); t != nil; t = archived() {
			if !fn(t) {
				return s.Damage()
			}
		}
	}
	s.coldTasks(everyEntry, func(t *Task) bool {
		if _, adopted := s.tasks[t.ID]; adopted { // the copy in memory is the task
			return true
		}
		return fn(t)
	})
	return s.Damage()
}

// refReader reads the tasks of a shelf at refs in turn, leaving out those
// memory holds (the copy in memory is the task). References in creation
// order are about the order the tasks were written in, so each read lets go
// of the pages before the furthest one it has read (recordsSweep).
type refReader struct {
	s     *State
	refs  func() (offset uint64, ok bool)
	from  *shelf
	sweep *recordsSweep
}

func (s *State) readAt(refs func() (uint64, bool), from *shelf) *refReader {
	return &refReader{s: s, refs: refs, from: from, sweep: from.recordsSweep()}
}

// next is the next task, or nil at the end and on damage (Damage says).
func (rr *refReader) next() *Task {
	for offset, ok := rr.refs(); ok; offset, ok = rr.refs() {
		t, _ := rr.from.taskAt(offset)
		rr.sweep.read(offset)
		if t == nil {
			return nil
		}
		if _, adopted := rr.s.tasks[t.ID]; !adopted {
			rr.s.attach(t)
			return t
		}
	}
	return nil
}

func (rr *refReader) end() { rr.sweep.end() }

// coldInCreationOrder hands out the offsets of the cold copies that are
// the tasks (no record superseded them), in creation order, as the cold
// set's lease order merges into it (shelf.creationOrder).
func (s *State) coldInCreationOrder() func() (uint64, bool) {
	entries := s.cold.creationOrder()
	return func() (uint64, bool) {
		for e, ok := entries(); ok; e, ok = entries() {
			if !s.isSuperseded(e.offset) {
				return e.offset, true
			}
		}
		return 0, false
	}
}

func firstOf(tasks []*Task) *Task {
	if len(tasks) == 0 {
		return nil
	}
	return tasks[0]
}

// archivedInCreationOrder hands out the archive's tasks in creation order,
// of a task archived twice the later copy, but not those memory holds (the
// copy in memory is the task); nil after the last, and on damage (Damage
// says). Each spill or rewrite of the archive adds the tasks that finished
// since in creation order after the records it copies, so a run is batches
// in creation order, found by one read through it (shelf.batches), and
// merging them is the archive's creation order: a cursor and a task per
// batch, not a reference per task.
func (s *State) archivedInCreationOrder() func() *Task {
	next := s.archive.batchOrder()
	head, more := next()
	return func() *Task {
		for more {
			current := head
			if head, more = next(); more && head.t.Seqs[0] == current.t.Seqs[0] {
				continue // a later copy of the same task
			}
			if _, adopted := s.tasks[current.t.ID]; !adopted {
				s.attach(current.t)
				return current.t
			}
		}
		return nil
	}
}

// supersede records that the cold copy at offset is no longer the task.
func (s *State) supersede(offset uint64) {
	if s.shadow == nil {
		s.shadow = map[uint64]bool{}
	}
	s.shadow[offset] = true
}

func (s *State) isSuperseded(offset uint64) bool {
	if s.shadow[offset] {
		return true
	}
	_, found := slices.BinarySearch(s.superseded, offset)
	return found
}

// supersededSorted is every superseded offset, ascending. The copies
// superseded since it was last asked are sorted and merged into the list,
// which it keeps (a new list: one handed out before stays as it was), so
// that a server's checkpoints sort what changed since the last, not the
// whole list each time.
func (s *State) supersededSorted() []uint64 {
	if len(s.shadow) == 0 {
		return s.superseded
	}
	fresh := make([]uint64, 0, len(s.shadow))
	for off := range s.shadow {
		fresh = append(fresh, off)
	}
	slices.Sort(fresh)
	merged := make([]uint64, 0, len(s.superseded)+len(fresh))
	old := s.superseded
	for len(old) > 0 || len(fresh) > 0 {
		var next uint64
		switch {
		case len(fresh) == 0 || (len(old) > 0 && old[0] <= fresh[0]):
			next, old = old[0], old[1:]
		default:
			next, fresh = fresh[0], fresh[1:]
		}
		if n := len(merged); n == 0 || merged[n-1] != next {
			merged = append(merged, next)
		}
	}
	s.superseded, s.shadow = merged, nil
	return merged
}

// coldLive is every cold task that no hot copy shadows, in creation order.
func (s *State) coldLive() []*Task {
	var out []*Task
	s.coldTasks(everyEntry, func(t *Task) bool { out = append(out, t); return true })
	slices.SortFunc(out, byCreation)
	return out
}

func byCreation(a, b *Task) int { return cmp.Compare(a.Seqs[0], b.Seqs[0]) }

// coldPick is the cold task a lease among queues takes at now (nil for
// none): the first in lease order that can be leased.
func (s *State) coldPick(queues []string, full map[string]bool, now int64) (pick *Task) {
	hashes := make([]uint64, len(queues))
	for i, q := range queues {
		hashes[i] = keyHash(keyQueue, q)
	}
	var skipped []uint64
	for q := range full {
		skipped = append(skipped, keyHash(keyQueue, q))
	}
	var stretched []uint64 // queues whose deadlines pauses moved past their entries' bound
	for q := range s.pauses {
		stretched = append(stretched, keyHash(keyQueue, q))
	}
	keep := func(e orderEntry) bool {
		return now >= e.from && (now < e.to || slices.Contains(stretched, e.queue)) &&
			(len(hashes) == 0 || slices.Contains(hashes, e.queue)) && !slices.Contains(skipped, e.queue)
	}
	s.coldTasks(keep, func(t *Task) bool {
		if inQueues(t, queues) && !full[t.Queue] && t.At(now).leasable(now) {
			pick = t
			return false
		}
		return true
	})
	return pick
}

// coldLapsing is every cold task that time alone has changed by now (a lease
// lapsed, a window closed), in creation order.
func (s *State) coldLapsing(now int64) []*Task {
	var out []*Task
	keep := func(e orderEntry) bool { return e.to <= now || (e.leased && e.from <= now) }
	s.coldTasks(keep, func(t *Task) bool {
		if t.lapsesBy(now) {
			out = append(out, t)
		}
		return true
	})
	slices.SortFunc(out, byCreation)
	return out
}

// Cold is how many tasks the cold set holds (0 for none), and how many of
// those copies are superseded.
func (s *State) Cold() (tasks, superseded int) {
	return s.cold.Len(), len(s.supersededSorted())
}

// A Sink stores a new archive (cold false) or cold set: it calls write with
// where to stream the bytes, and returns the archive opened again from where
// they were stored (see OpenArchive). An error leaves the state as it was.
type Sink func(cold bool, write func(io.Writer) error) (*Archive, error)

// A Move says where tasks moved out of memory go, for the archive (the
// finished ones) or the cold set (the others).
type Move uint8

const (
	// Stay leaves them in memory.
	Stay Move = iota
	// AddRun writes them to a new run, merged with the last runs as they
	// pile up (shelf.mergeFrom): what it writes is about what it moves.
	AddRun
	// Rewrite writes them with every run to one new file (for the cold
	// set, without the copies superseded).
	Rewrite
)

// Spill moves every task in memory out to a new run of the archive (the
// finished ones) or of the cold set (the others). A replay from the WAL's
// start spills every few thousand tasks: what a spill writes is about what
// it moves, so it can, however many it moved before.
func (s *State) Spill(sink Sink) error {
	inMemory, finished := s.InMemory()
	archive, cold := Stay, Stay
	if finished > 0 {
		archive = AddRun
	}
	if inMemory > finished {
		cold = AddRun
	}
	return s.MoveOut(archive, cold, sink)
}

// MoveOut writes the tasks in memory (the finished ones unless archive is
// Stay, the others unless cold is) to a new file streamed to sink, with the
// runs it merges (see Move), and drops them from memory; the snapshot taken
// next names the runs. An error leaves the state as it was.
func (s *State) MoveOut(archive, cold Move, sink Sink) error {
	if err := s.Damage(); err != nil {
		return err
	}
	s.keySubmits()
	s.keyLeases()
	var finished, unfinished []*Task
	for _, t := range s.order {
		if t.State.Terminal() {
			finished = append(finished, t)
		} else {
			unfinished = append(unfinished, t)
		}
	}
	// Each batch of the archive in creation order (tasks read back from it
	// or the cold set come after those created since): see archivedInCreationOrder.
	slices.SortFunc(finished, byCreation)
	coldFrom, archiveFrom := cold.mergeFrom(s.cold, len(unfinished)), archive.mergeFrom(s.archive, len(finished))
	var newCold, newArchive *Archive
	if cold != Stay {
		keep := func(offset uint64) bool { return !s.isSuperseded(offset) } // the cold copies no record has touched, copied as they are
		var f *filter
		var err error
		if newCold, err = sink(true, func(w io.Writer) (err error) {
			f, err = s.cold.buildOver(w, coldFrom, keep, unfinished, true)
			return err
		}); err != nil {
			return err
		}
		newCold.cold, newCold.filter = true, f
	}
	if archive != Stay {
		var f *filter
		var err error
		if newArchive, err = sink(false, func(w io.Writer) (err error) {
			f, err = s.archive.buildOver(w, archiveFrom, nil, finished, false)
			return err
		}); err != nil {
			return err
		}
		newArchive.filter = f
	}
	s.forget(func(t *Task) bool {
		if t.State.Terminal() {
			return archive != Stay
		}
		return cold != Stay
	})
	if cold != Stay {
		// The superseded copies of the runs merged are gone; those of the
		// runs before stay superseded.
		merged := s.cold.startOf(coldFrom)
		s.superseded = slices.DeleteFunc(s.supersededSorted(), func(offset uint64) bool { return offset >= merged })
		s.shadow = nil
		s.cold = s.cold.replaceFrom(coldFrom, newCold)
		for _, t := range s.order {
			t.coldAt = 0 // the new cold set holds no copy of a finished task
		}
	}
	if archive != Stay {
		s.archive = s.archive.replaceFrom(archiveFrom, newArchive)
	}
	return nil
}

// mergeFrom is the first run of sh that a move adding n tasks rewrites.
func (m Move) mergeFrom(sh *shelf, n int) int {
	if m == AddRun {
		return sh.mergeFrom(n)
	}
	return 0
}

// Archives are the runs of the archive and of the cold set the state reads,
// oldest first (one each after a Rewrite, none for none): a caller that maps
// them keeps those mapped, and may let go of others; a snapshot names them.
func (s *State) Archives() (archive, cold []*Archive) { return s.archive.files(), s.cold.files() }

// InMemoryCount is how many tasks memory holds (InMemory without counting
// the finished ones): cheap enough to ask after every record.
func (s *State) InMemoryCount() int { return len(s.order) }

// forget drops from memory the tasks moveOut wrote out.
func (s *State) forget(written func(*Task) bool) {
	var kept, live []*Task
	for _, t := range s.order {
		if !written(t) {
			kept = append(kept, t)
			if !t.State.Terminal() {
				live = append(live, t)
			}
			continue
		}
		delete(s.tasks, t.ID)
		delete(s.submits, t.RequestID)
		for _, a := range t.Attempts {
			delete(s.leaseTask, a.LeaseID)
			delete(s.leaseRequests, a.RequestID)
		}
	}
	slices.SortFunc(live, byCreation)
	s.order, s.live, s.ended = kept, live, 0
}
