package state

import (
	"cmp"
	"encoding/binary"
	"hash/crc32"
	"runtime/debug"
	"slices"
)

// The cold set keeps a backlog out of memory. Compact writes every unfinished
// task to an archive of its own (the cold set) with its lease order; from then
// on a state holds in memory only the tasks a record has touched since (hot:
// s.tasks, s.order, s.live), and a hot copy shadows the cold one. A lease
// reads the cold set's order from the front and decodes the first tasks that
// can be leased, so that it costs what it touches, not the backlog. Lookups
// look in memory, then in the archive of finished tasks, then in the cold set:
// Compact writes both together, so no task is in both.
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
	to       int64  // nor from its deadline on
	queue    uint64 // keyHash of its queue
	priority int32
	leased   bool
}

const orderEntrySize = 48

func orderOf(t *Task, offset uint64) orderEntry {
	e := orderEntry{offset: offset, seq0: t.Seqs[0], from: t.NotBefore, to: t.Deadline(),
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

// eachOrder hands fn the order entries in lease order until fn returns
// false, checking each block as it reads it.
func (a *Archive) eachOrder(fn func(orderEntry) bool) {
	if a == nil || a.err != nil {
		return
	}
	defer a.guard(debug.SetPanicOnFault(true))
	const blockSize = archiveBlockLen*orderEntrySize + 4
	for i := 0; i*archiveBlockLen < a.orders; i++ {
		start := i * blockSize
		n := min(archiveBlockLen, a.orders-i*archiveBlockLen) * orderEntrySize
		block := a.order[start : start+n]
		if crc32.Checksum(block, archiveCRC) != binary.LittleEndian.Uint32(a.order[start+n:]) {
			a.damaged("order block %d checksum mismatch", i)
			return
		}
		for j := 0; j < n; j += orderEntrySize {
			if !fn(readOrderEntry(block[j:])) {
				return
			}
		}
	}
}

// coldTasks hands fn, in lease order, each cold task that no hot copy
// shadows and that keep accepts (without decoding it), until fn returns
// false.
func (s *State) coldTasks(keep func(orderEntry) bool, fn func(*Task) bool) {
	s.cold.eachOrder(func(e orderEntry) bool {
		if s.shadow[e.offset] || !keep(e) {
			return true
		}
		t, _ := s.cold.taskAt(e.offset)
		if t == nil {
			return false // damage: the archive reports it (Damage)
		}
		return fn(t)
	})
}

func everyEntry(orderEntry) bool { return true }

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
func (s *State) coldPick(queues []string, now int64) (pick *Task) {
	hashes := make([]uint64, len(queues))
	for i, q := range queues {
		hashes[i] = keyHash(keyQueue, q)
	}
	keep := func(e orderEntry) bool {
		return now >= e.from && now < e.to && (len(hashes) == 0 || slices.Contains(hashes, e.queue))
	}
	s.coldTasks(keep, func(t *Task) bool {
		if inQueues(t, queues) && t.At(now).leasable(now) {
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

// Cold is how many tasks the cold set holds (0 for none).
func (s *State) Cold() int { return s.cold.Len() }

// Compact moves the tasks in memory out to side files: with archive set,
// the finished ones into a new archive over the old one; always, every
// unfinished one (in memory or in the cold set) into a new cold set. It
// returns the new archive's bytes (nil without archive) and the new cold
// set's, for the caller to store beside the snapshot that will name them.
func (s *State) Compact(archive bool) (archiveBytes, coldBytes []byte, err error) {
	if err := s.Damage(); err != nil {
		return nil, nil, err
	}
	s.keySubmits()
	s.keyLeases()
	live := s.coldLive()
	if err := s.cold.Err(); err != nil {
		return nil, nil, err
	}
	var finished []*Task
	for _, t := range s.order {
		switch {
		case !t.State.Terminal():
			live = append(live, t)
		case archive:
			finished = append(finished, t)
		}
	}
	slices.SortFunc(live, byCreation)
	var newArchive *Archive
	if archive {
		if archiveBytes, err = buildArchive(s.archive, finished); err != nil {
			return nil, nil, err
		}
		if newArchive, err = OpenArchive(archiveBytes); err != nil {
			return nil, nil, err
		}
	}
	coldBytes, err = buildOver(nil, live, true)
	if err == nil {
		var c *Archive
		if c, err = OpenArchive(coldBytes); err == nil {
			c.cold = true
			s.moveOut(archive, c)
			if archive {
				s.archive = newArchive
			}
		}
	}
	return archiveBytes, coldBytes, err
}

// moveOut drops from memory every task Compact wrote out: the unfinished
// ones, and the finished ones too when they were archived.
func (s *State) moveOut(archived bool, cold *Archive) {
	var kept []*Task
	for _, t := range s.order {
		if t.State.Terminal() && !archived {
			t.coldAt = 0 // the new cold set does not hold it
			kept = append(kept, t)
			continue
		}
		delete(s.tasks, t.ID)
		delete(s.submits, t.RequestID)
		for _, a := range t.Attempts {
			delete(s.leaseTask, a.LeaseID)
			delete(s.leaseRequests, a.RequestID)
		}
	}
	s.order, s.live, s.ended, s.cold, s.shadow = kept, nil, 0, cold, nil
}
