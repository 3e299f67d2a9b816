package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"runtime/debug"
	"slices"
	"sort"
)

// An Archive holds tasks outside memory, read where a command looks. There are
// two. The archive of finished tasks: a finished task changes no more (but
// for a late TaskCancelled, see adopt), so a command needs one only when it
// names it (a task id, a request id, a lease id). The cold set (cold.go): the
// unfinished tasks as of its writing, with their lease order, so that a lease
// reads the few it picks from. An archive answers by reading a few kilobytes
// where it looks, so that loading a state costs what the tasks touched since
// cost, not the whole history nor the whole backlog. It is pure: it reads
// bytes the caller provides (the checkpoint code maps its files), and writes
// new ones as a stream (buildOver), so that neither needs a copy in memory.
//
// Layout, integers little endian; the sizes come last, so that a writer
// streams the parts without knowing them beforehand:
//
//	"leasewal-archive v6\n"
//	records: one per task, in the order they were archived, each batch archived at once in creation order (v6): uvarint length, CRC32C (uint32), the task as a snapshot encodes it
//	index: blocks of up to 128 entries {key hash, record offset} (uint64 each), each block followed by its CRC32C
//	order: blocks of up to 128 entries (orderEntry, 48 bytes each), each block followed by its CRC32C
//	fence: the first key hash of each index block (uint64 each)
//	trailer: records length, entries, tasks (of a run, those no earlier run of its shelf holds), order entries (uint64 each), CRC32C of the records (uint32)
//	CRC32C of the trailer and the fence (uint32)
//
// Each part is checked where it is read: the trailer and fence when the
// archive is opened, an index or order block or a record when a lookup reads
// it. A damaged part makes the archive answer nothing more and report the
// damage (Err), so that the caller can start again from the WAL.
type Archive struct {
	records []byte
	index   []byte
	order   []byte
	fence   []byte
	entries int
	orders  int
	tasks   int
	// cold marks the cold set: a task read from it remembers where (Task.coldAt).
	cold bool
	id   uint32 // the CRC32C of trailer and fence, which names this archive
	sum  uint32 // the CRC32C of the records, checked as they are copied
	// evict, if set, lets go of bytes a sequential read has passed (sweep),
	// given as offsets into the bytes the archive was opened over; at says
	// where records, index and order start there.
	evict func(from, to int)
	at    [3]int
	// checked marks the index blocks whose checksum held: the bytes under
	// an archive never change (a new one replaces the file), and a replay
	// from the start looks up every new task's keys.
	checked []uint64
	// filter, for an archive this process wrote, tells the keys it holds
	// none of without reading its index.
	filter *filter
	err    error
}

const (
	archiveMagic       = "leasewal-archive v6\n"
	archiveTrailerSize = 4*8 + 4
	archiveBlockLen    = 128
	archiveEntrySize   = 16
	archiveBlockSize   = archiveBlockLen*archiveEntrySize + 4
	archiveRecordLimit = 1 << 30
)

// ErrArchive means archive bytes are damaged or not an archive.
var ErrArchive = errors.New("a checkpoint's archive of tasks (<wal>.archive or <wal>.cold) is damaged")

var archiveCRC = crc32.MakeTable(crc32.Castagnoli)

// The kinds of key an archive finds tasks by.
const (
	keyTask         byte = 't'
	keySubmit       byte = 's'
	keyLease        byte = 'l'
	keyLeaseRequest byte = 'r'
)

// keyHash is FNV-1a over the kind and the key: stable across processes and
// versions, which the hash/maphash seeds are not.
func keyHash(kind byte, key string) uint64 {
	const prime = 1099511628211
	h := (14695981039346656037 ^ uint64(kind)) * prime
	for i := 0; i < len(key); i++ {
		h = (h ^ uint64(key[i])) * prime
	}
	return h
}

type archiveEntry struct{ hash, offset uint64 }

// keysOf lists every key a task is found by.
func keysOf(t *Task, each func(kind byte, key string)) {
	each(keyTask, t.ID)
	each(keySubmit, t.RequestID)
	for _, a := range t.Attempts {
		each(keyLease, a.LeaseID)
		if a.RequestID != "" {
			each(keyLeaseRequest, a.RequestID)
		}
	}
}

// OpenArchive checks an archive's trailer and fence and returns it; the index
// blocks and records are checked as lookups read them. evict, if not nil, is
// called with the parts of b (as offsets) that a sequential read has passed:
// when b is a mapped file, their pages need not stay in memory.
func OpenArchive(b []byte, evict func(from, to int)) (*Archive, error) {
	rest, ok := bytes.CutPrefix(b, []byte(archiveMagic))
	if !ok || len(rest) < archiveTrailerSize+4 {
		return nil, fmt.Errorf("%w: no archive trailer", ErrArchive)
	}
	trailer := rest[len(rest)-archiveTrailerSize-4 : len(rest)-4]
	recordsLen, entries, tasks := binary.LittleEndian.Uint64(trailer), binary.LittleEndian.Uint64(trailer[8:]), binary.LittleEndian.Uint64(trailer[16:])
	orders := binary.LittleEndian.Uint64(trailer[24:])
	id := binary.LittleEndian.Uint32(rest[len(rest)-4:])
	rest = rest[:len(rest)-archiveTrailerSize-4]
	size := uint64(len(rest))
	if entries > size/archiveEntrySize || tasks > entries || orders > tasks || recordsLen > size {
		return nil, fmt.Errorf("%w: its sizes do not fit the file", ErrArchive)
	}
	blocks := (entries + archiveBlockLen - 1) / archiveBlockLen
	indexLen := entries*archiveEntrySize + blocks*4
	orderLen := orders*orderEntrySize + (orders+archiveBlockLen-1)/archiveBlockLen*4
	if recordsLen+indexLen+orderLen+blocks*8 != size {
		return nil, fmt.Errorf("%w: its sizes do not fit the file", ErrArchive)
	}
	fence := rest[recordsLen+indexLen+orderLen:]
	if crc32.Update(crc32.Checksum(trailer, archiveCRC), archiveCRC, fence) != id {
		return nil, fmt.Errorf("%w: trailer checksum mismatch", ErrArchive)
	}
	return &Archive{records: rest[:recordsLen], index: rest[recordsLen : recordsLen+indexLen],
		order: rest[recordsLen+indexLen : recordsLen+indexLen+orderLen], fence: fence,
		entries: int(entries), orders: int(orders), tasks: int(tasks), id: id, sum: binary.LittleEndian.Uint32(trailer[32:]),
		evict: evict, at: [3]int{len(archiveMagic), len(archiveMagic) + int(recordsLen), len(archiveMagic) + int(recordsLen+indexLen)}}, nil
}

// Err reports damage found by a lookup so far (nil for none, and for no archive).
func (a *Archive) Err() error {
	if a == nil {
		return nil
	}
	return a.err
}

// Size is how many bytes the archive's records, index and order take (0
// for no archive).
func (a *Archive) Size() int {
	if a == nil {
		return 0
	}
	return len(a.records) + len(a.index) + len(a.order)
}

// Len is the number of tasks in the archive.
func (a *Archive) Len() int {
	if a == nil {
		return 0
	}
	return a.tasks
}

func (a *Archive) damaged(format string, args ...any) {
	if a.err == nil {
		a.err = fmt.Errorf("%w: %s", ErrArchive, fmt.Sprintf(format, args...))
	}
}

func (a *Archive) blocks() int { return len(a.fence) / 8 }

// guard turns a fault while reading the archive's bytes into damage. The
// bytes may be a mapped file that another process truncates in place; a read
// past its new end then faults (SIGBUS), which Go delivers as a panic to a
// goroutine that asked for it with SetPanicOnFault. Call as
// defer a.guard(debug.SetPanicOnFault(true)).
func (a *Archive) guard(wasOn bool) {
	if r := recover(); r != nil {
		a.damaged("reading it faulted (the file was truncated or replaced while in use): %v", r)
	}
	debug.SetPanicOnFault(wasOn)
}

// block returns the entries of index block i, after checking its checksum.
func (a *Archive) block(i int) ([]byte, bool) {
	start := i * archiveBlockSize
	n := min(archiveBlockLen, a.entries-i*archiveBlockLen) * archiveEntrySize
	entries := a.index[start : start+n]
	if a.checked == nil {
		a.checked = make([]uint64, (a.blocks()+63)/64)
	}
	if a.checked[i/64]&(1<<(i%64)) != 0 {
		return entries, true
	}
	if crc32.Checksum(entries, archiveCRC) != binary.LittleEndian.Uint32(a.index[start+n:]) {
		a.damaged("index block %d checksum mismatch", i)
		return nil, false
	}
	a.checked[i/64] |= 1 << (i % 64)
	return entries, true
}

// find returns the archived task whose key hashes to h (keyHash), as match
// confirms: entries hold only hashes, so every candidate is read and
// checked. A task archived again (a late TaskCancelled added a seq after it
// was archived) has two records; the later one, with the higher offset, is
// the task. Damage found on the way is the error; (nil, nil) means no such
// task. The shelf asks the run's filter first (shelf.find).
func (a *Archive) find(h uint64, match func(*Task) bool) (*Task, error) {
	found := a.search(h, match)
	if a.err != nil {
		return nil, a.err
	}
	return found, nil
}

func (a *Archive) search(h uint64, match func(*Task) bool) (found *Task) {
	if a.err != nil || a.entries == 0 {
		return nil
	}
	defer a.guard(debug.SetPanicOnFault(true))
	// Entries with hash h start in the last block whose first hash is below
	// h, or in the first block if there is none.
	i := max(sort.Search(a.blocks(), func(i int) bool { return binary.LittleEndian.Uint64(a.fence[i*8:]) >= h })-1, 0)
	for ; i < a.blocks(); i++ {
		entries, ok := a.block(i)
		if !ok {
			return nil
		}
		n := len(entries) / archiveEntrySize
		j := sort.Search(n, func(j int) bool { return binary.LittleEndian.Uint64(entries[j*archiveEntrySize:]) >= h })
		for ; j < n; j++ {
			e := entries[j*archiveEntrySize:]
			if binary.LittleEndian.Uint64(e) != h {
				return found
			}
			t, _ := a.taskAt(binary.LittleEndian.Uint64(e[8:]))
			if t == nil {
				return nil
			}
			if match(t) {
				found = t
			}
		}
	}
	return found
}

// taskAt reads the record at offset and returns its task and the offset of
// the next record.
func (a *Archive) taskAt(offset uint64) (*Task, uint64) {
	if offset >= uint64(len(a.records)) {
		a.damaged("record offset %d is past the records", offset)
		return nil, 0
	}
	b := a.records[offset:]
	n, w := binary.Uvarint(b)
	if w <= 0 || n > archiveRecordLimit || uint64(len(b)-w) < 4+n {
		a.damaged("the record at %d is cut short", offset)
		return nil, 0
	}
	sum, body := binary.LittleEndian.Uint32(b[w:]), b[w+4:w+4+int(n)]
	if crc32.Checksum(body, archiveCRC) != sum {
		a.damaged("record at %d: checksum mismatch", offset)
		return nil, 0
	}
	d := &snapDecoder{b: body, all: string(body), refs: true}
	t := &Task{}
	d.task(t)
	if d.err != nil || len(d.b) != 0 || len(t.Seqs) == 0 {
		a.damaged("record at %d is not a task", offset)
		return nil, 0
	}
	t.coldAt = 0 // as the state that wrote it knew it; here it is where this copy is
	if a.cold {
		t.coldAt = offset + 1
	}
	return t, offset + uint64(w) + 4 + n
}

// readInto appends the tasks of the archive to out, in the order they were
// first archived, each as its last record has it; at is where each task is
// in out, so that a later run's copy replaces an earlier one's. It reports
// false on damage, which includes a count of new tasks other than the
// archive's trailer says.
func (a *Archive) readInto(out *[]*Task, at map[string]int) bool {
	if a.err != nil {
		return false
	}
	defer a.guard(debug.SetPanicOnFault(true))
	before := len(*out)
	for off := uint64(0); off < uint64(len(a.records)); {
		var t *Task
		if t, off = a.taskAt(off); t == nil {
			return false
		}
		if i, again := at[t.ID]; again {
			(*out)[i] = t
			continue
		}
		at[t.ID] = len(*out)
		*out = append(*out, t)
	}
	if added := len(*out) - before; added != a.tasks {
		a.damaged("it holds %d tasks, its trailer says %d", added, a.tasks)
		return false
	}
	return true
}

// sweep lets go of a part of a mapped archive behind a sequential read of
// it, a few MiB at a time, so that reading or copying a whole archive never
// holds all of its pages at once.
type sweep struct {
	evict      func(from, to int)
	at         int // where the part starts in the archive's bytes
	size       int
	done, read int // bytes let go of, and read
}

const sweepStep = 1 << 20

// sweep starts a sweep of the part that starts at a.at[part] and is size
// bytes long (none for no archive).
func (a *Archive) sweep(part, size int) *sweep {
	if a == nil {
		return &sweep{}
	}
	return &sweep{evict: a.evict, at: a.at[part], size: size}
}

// evictAll lets go of the pages of the archive's records, index and order.
func (a *Archive) evictAll() {
	if a.evict != nil {
		a.evict(0, a.at[partOrder]+len(a.order))
	}
}

func (a *Archive) recordsLen() int {
	if a == nil {
		return 0
	}
	return len(a.records)
}

// passed notes that the read has finished with the part's first n bytes.
func (w *sweep) passed(n int) {
	n = min(n, w.size)
	w.read = n
	if w.evict != nil && n-w.done >= sweepStep {
		w.evict(w.at+w.done, w.at+n)
		w.done = n
	}
}

// end lets go of the rest of a part read to its end; a read that stopped
// early (a lease's few blocks) leaves it, to be read again.
func (w *sweep) end() {
	if w.evict != nil && w.read >= w.size && w.done < w.size {
		w.evict(w.at+w.done, w.at+w.size)
	}
}

// The parts of an archive a sweep passes through.
const (
	partRecords = iota
	partIndex
	partOrder
)

// archiveWriter streams an archive's parts to w in order, counting what its
// trailer says. The first write error stops it (err).
type archiveWriter struct {
	w                      io.Writer
	err                    error
	records                uint64 // bytes of records written
	sum                    uint32 // their CRC32C
	entries, orders, tasks uint64
	fence                  []byte
	block                  []byte // the index or order block being filled
	filter                 *filter
}

func (aw *archiveWriter) write(b []byte) {
	if aw.err == nil {
		_, aw.err = aw.w.Write(b)
	}
}

// record writes records as they are framed (length, checksum, body).
func (aw *archiveWriter) record(b []byte) {
	aw.write(b)
	aw.sum = crc32.Update(aw.sum, archiveCRC, b)
	aw.records += uint64(len(b))
}

func (aw *archiveWriter) indexEntry(e archiveEntry) {
	aw.filter.add(e.hash)
	if aw.entries%archiveBlockLen == 0 {
		aw.fence = binary.LittleEndian.AppendUint64(aw.fence, e.hash)
	}
	aw.block = binary.LittleEndian.AppendUint64(aw.block, e.hash)
	aw.block = binary.LittleEndian.AppendUint64(aw.block, e.offset)
	if aw.entries++; aw.entries%archiveBlockLen == 0 {
		aw.endBlock()
	}
}

func (aw *archiveWriter) orderEntry(e orderEntry) {
	aw.block = e.append(aw.block)
	if aw.orders++; aw.orders%archiveBlockLen == 0 {
		aw.endBlock()
	}
}

// endBlock writes the block being filled, followed by its checksum.
func (aw *archiveWriter) endBlock() {
	if len(aw.block) == 0 {
		return
	}
	aw.block = binary.LittleEndian.AppendUint32(aw.block, crc32.Checksum(aw.block, archiveCRC))
	aw.write(aw.block)
	aw.block = aw.block[:0]
}

// finish writes the fence and the trailer.
func (aw *archiveWriter) finish() error {
	aw.write(aw.fence)
	var trailer []byte
	for _, v := range []uint64{aw.records, aw.entries, aw.tasks, aw.orders} {
		trailer = binary.LittleEndian.AppendUint64(trailer, v)
	}
	trailer = binary.LittleEndian.AppendUint32(trailer, aw.sum)
	aw.write(binary.LittleEndian.AppendUint32(trailer, crc32.Update(crc32.Checksum(trailer, archiveCRC), archiveCRC, aw.fence)))
	return aw.err
}

// buildOver streams to w one archive of the records of the shelf's runs
// from the run at from on, and add's. With keep nil it copies every record
// (the archive: a task archived again has two records, the later one wins);
// with keep set, only the records at the (shelf) offsets keep accepts, with
// their index and order entries moved to the new offsets (the cold set,
// whose superseded copies are dropped); withOrder gives add's tasks order
// entries too. It returns the filter of the keys it wrote. Every record copied is checked (one by one, or all against
// its run's checksum), so damage is never carried into a new archive. What
// it holds in memory is add's entries and the offsets of the records it
// drops: never a copy of a run.
func (sh *shelf) buildOver(w io.Writer, from int, keep func(offset uint64) bool, add []*Task, withOrder bool) (_ *filter, err error) {
	if err := sh.Err(); err != nil {
		return nil, err
	}
	var runs []*Archive
	if sh != nil {
		runs = sh.runs[from:]
		defer func() {
			if err == nil {
				err = sh.Err()
			}
		}()
		defer sh.guard(debug.SetPanicOnFault(true)) // runs first: a fault is damage
	}
	keys := 2 * len(add)
	for _, r := range runs {
		keys += r.entries
	}
	aw := &archiveWriter{w: w, filter: newFilter(keys)}
	aw.write([]byte(archiveMagic))
	moved := func(offset uint64) (uint64, bool) { return offset - sh.startOf(from), true }
	if keep == nil {
		for _, r := range runs {
			if !copyAll(aw, r) {
				return nil, r.err
			}
			aw.tasks += uint64(r.Len())
		}
	} else if moved = sh.copyKept(aw, from, runs, keep); moved == nil {
		return nil, sh.Err()
	}
	added := make([]archiveEntry, 0, 2*len(add))
	var order []orderEntry
	if withOrder {
		order = make([]orderEntry, 0, len(add))
	}
	e := &encoder{refs: true}
	for _, t := range add {
		if keep != nil || sh.search(keyTask, t.ID, func(old *Task) bool { return old.ID == t.ID }) == nil { // a kept copy is never add's task
			aw.tasks++
		}
		offset := aw.records
		e.b = e.b[:0]
		e.task(t)
		framed := binary.AppendUvarint(nil, uint64(len(e.b)))
		framed = binary.LittleEndian.AppendUint32(framed, crc32.Checksum(e.b, archiveCRC))
		aw.record(append(framed, e.b...))
		keysOf(t, func(kind byte, key string) { added = append(added, archiveEntry{keyHash(kind, key), offset}) })
		if withOrder {
			order = append(order, orderOf(t, offset))
		}
	}
	slices.SortFunc(added, compareEntries)
	slices.SortFunc(order, compareOrder)
	indexes := make([]func() (archiveEntry, bool), 0, len(runs)+1)
	orders := make([]func() (orderEntry, bool), 0, len(runs)+1)
	for i, r := range runs {
		start := sh.starts[from+i]
		index, ord := r.cursor(partIndex), r.cursor(partOrder)
		defer index.sweep.end()
		defer ord.sweep.end()
		indexes = append(indexes, stream(index, func(b []byte) (archiveEntry, bool) {
			offset, kept := moved(binary.LittleEndian.Uint64(b[8:]) + start)
			return archiveEntry{binary.LittleEndian.Uint64(b), offset}, kept
		}))
		orders = append(orders, stream(ord, func(b []byte) (e orderEntry, kept bool) {
			e = readOrderEntry(b)
			e.offset, kept = moved(e.offset + start)
			return e, kept
		}))
	}
	merge(append(indexes, listStream(added)), compareEntries, func(e archiveEntry) bool { aw.indexEntry(e); return true })
	aw.endBlock()
	merge(append(orders, listStream(order)), compareOrder, func(e orderEntry) bool { aw.orderEntry(e); return true })
	aw.endBlock()
	if err := sh.Err(); err != nil {
		return nil, err
	}
	return aw.filter, aw.finish()
}

// listStream hands out a sorted list's entries one at a time (see merge).
func listStream[E any](list []E) func() (E, bool) {
	return func() (e E, ok bool) {
		if len(list) == 0 {
			return e, false
		}
		e, list = list[0], list[1:]
		return e, true
	}
}

// copyAll copies r's records as they are, and reports whether they match
// r's checksum.
func copyAll(aw *archiveWriter, r *Archive) bool {
	sweep := r.sweep(partRecords, len(r.records))
	defer sweep.end()
	sum := uint32(0)
	for off := 0; off < len(r.records); off += sweepStep {
		chunk := r.records[off:min(off+sweepStep, len(r.records))]
		sum = crc32.Update(sum, archiveCRC, chunk)
		aw.record(chunk)
		sweep.passed(off + len(chunk))
	}
	if sum != r.sum {
		r.damaged("its records do not match its checksum")
		return false
	}
	return true
}

// copyKept copies the records of runs, the shelf's from from on, that keep accepts
// (by shelf offset), checking each, and returns where each record moved in
// the new archive (nil on damage). It holds the offsets of the records it
// drops, and how many bytes were dropped up to each: a kept record moves
// back by the bytes dropped before it.
func (sh *shelf) copyKept(aw *archiveWriter, from int, runs []*Archive, keep func(uint64) bool) (moved func(uint64) (uint64, bool)) {
	var dropped, droppedBytes []uint64 // ascending; droppedBytes[i]: bytes dropped up to and including dropped[i]
	base, end := sh.startOf(from), sh.end()
	total := uint64(0)
	for i, r := range runs {
		start := sh.starts[from+i]
		sweep := r.sweep(partRecords, len(r.records))
		for off := uint64(0); off < uint64(len(r.records)); {
			b := r.records[off:]
			n, w := binary.Uvarint(b)
			if w <= 0 || n > archiveRecordLimit || uint64(len(b)-w) < 4+n {
				r.damaged("the record at %d is cut short", off)
				sweep.end()
				return nil
			}
			size := uint64(w) + 4 + n
			if keep(start + off) {
				if crc32.Checksum(b[w+4:size], archiveCRC) != binary.LittleEndian.Uint32(b[w:]) {
					r.damaged("record at %d: checksum mismatch", off)
					sweep.end()
					return nil
				}
				aw.record(b[:size])
				aw.tasks++
			} else {
				total += size
				dropped, droppedBytes = append(dropped, start+off), append(droppedBytes, total)
			}
			off += size
			sweep.passed(int(off))
		}
		sweep.end()
	}
	return func(offset uint64) (uint64, bool) {
		i, found := slices.BinarySearch(dropped, offset)
		if found || offset < base || offset >= end {
			return 0, false
		}
		before := uint64(0)
		if i > 0 {
			before = droppedBytes[i-1]
		}
		return offset - base - before, true
	}
}

func compareEntries(x, y archiveEntry) int {
	if x.hash != y.hash {
		if x.hash < y.hash {
			return -1
		}
		return 1
	}
	if x.offset < y.offset {
		return -1
	}
	if x.offset > y.offset {
		return 1
	}
	return 0
}

// InMemory counts the tasks held in memory, and how many of them are finished
// (MoveOut of the archive would move those).
func (s *State) InMemory() (tasks, finished int) {
	for _, t := range s.order {
		if t.State.Terminal() {
			finished++
		}
	}
	return len(s.order), finished
}

// adopt brings a task a record changed into memory, when it was read from
// the archive (only a late TaskCancelled changes a finished task: it adds a
// seq) or from the cold set. The file keeps the old copy, which the one in
// memory shadows, and which the next rewrite of the cold set supersedes.
func (s *State) adopt(t *Task) {
	if s.tasks[t.ID] == t {
		return
	}
	s.index(t)
	if t.coldAt != 0 {
		s.supersede(t.coldAt - 1)
		s.live = append(s.live, t) // it was unfinished when the cold set was written
	}
}
