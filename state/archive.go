package state

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
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
// bytes the caller provides (the checkpoint code maps its files).
//
// Layout, integers little endian:
//
//	"leasewal-archive v3\n"
//	header: records length, entries, tasks, order entries (uint64 each), CRC32C of the records (uint32)
//	CRC32C of the header and the fence (uint32)
//	records: one per task, in the order they were archived: uvarint length, CRC32C (uint32), the task as a snapshot encodes it
//	index: blocks of up to 128 entries {key hash, record offset} (uint64 each), each block followed by its CRC32C
//	order: blocks of up to 128 entries (orderEntry, 48 bytes each), each block followed by its CRC32C
//	fence: the first key hash of each index block (uint64 each)
//
// Each part is checked where it is read: the header and fence when the
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
	id   uint32 // the CRC32C of header and fence, which names this archive
	sum  uint32 // the CRC32C of the records, checked before they are copied
	err  error
}

const (
	archiveMagic       = "leasewal-archive v3\n"
	archiveHeaderSize  = 4*8 + 4
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

// OpenArchive checks an archive's header and fence and returns it; the index
// blocks and records are checked as lookups read them.
func OpenArchive(b []byte) (*Archive, error) {
	rest, ok := bytes.CutPrefix(b, []byte(archiveMagic))
	if !ok || len(rest) < archiveHeaderSize+4 {
		return nil, fmt.Errorf("%w: no archive header", ErrArchive)
	}
	header := rest[:archiveHeaderSize]
	recordsLen, entries, tasks := binary.LittleEndian.Uint64(header), binary.LittleEndian.Uint64(header[8:]), binary.LittleEndian.Uint64(header[16:])
	orders := binary.LittleEndian.Uint64(header[24:])
	id := binary.LittleEndian.Uint32(rest[archiveHeaderSize:])
	rest = rest[archiveHeaderSize+4:]
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
	if crc32.Update(crc32.Checksum(header, archiveCRC), archiveCRC, fence) != id {
		return nil, fmt.Errorf("%w: header checksum mismatch", ErrArchive)
	}
	return &Archive{records: rest[:recordsLen], index: rest[recordsLen : recordsLen+indexLen],
		order: rest[recordsLen+indexLen : recordsLen+indexLen+orderLen], fence: fence,
		entries: int(entries), orders: int(orders), tasks: int(tasks), id: id, sum: binary.LittleEndian.Uint32(header[32:])}, nil
}

// Err reports damage found by a lookup so far (nil for none, and for no archive).
func (a *Archive) Err() error {
	if a == nil {
		return nil
	}
	return a.err
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
	if crc32.Checksum(entries, archiveCRC) != binary.LittleEndian.Uint32(a.index[start+n:]) {
		a.damaged("index block %d checksum mismatch", i)
		return nil, false
	}
	return entries, true
}

// find returns the archived task that has key of kind, as match confirms:
// entries hold only hashes, so every candidate is read and checked. A task
// archived again (a late TaskCancelled added a seq after it was archived)
// has two records; the later one, with the higher offset, is the task.
// Damage found on the way is the error; (nil, nil) means no such task.
func (a *Archive) find(kind byte, key string, match func(*Task) bool) (*Task, error) {
	if a == nil {
		return nil, nil
	}
	found := a.search(kind, key, match)
	if a.err != nil {
		return nil, a.err
	}
	return found, nil
}

func (a *Archive) search(kind byte, key string, match func(*Task) bool) (found *Task) {
	if a == nil || a.err != nil || a.entries == 0 {
		return nil
	}
	defer a.guard(debug.SetPanicOnFault(true))
	h := keyHash(kind, key)
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
	d := &snapDecoder{b: body, all: string(body)}
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

// all reads every archived task, in the order they were first archived,
// each as its last record has it.
func (a *Archive) all() ([]*Task, error) {
	if a == nil {
		return nil, nil
	}
	out := a.readAll()
	if a.err != nil {
		return nil, a.err
	}
	return out, nil
}

func (a *Archive) readAll() []*Task {
	if a.err != nil {
		return nil
	}
	defer a.guard(debug.SetPanicOnFault(true))
	out := make([]*Task, 0, a.tasks)
	at := make(map[string]int, a.tasks)
	for off := uint64(0); off < uint64(len(a.records)); {
		var t *Task
		if t, off = a.taskAt(off); t == nil {
			return nil
		}
		if i, again := at[t.ID]; again {
			out[i] = t
			continue
		}
		at[t.ID] = len(out)
		out = append(out, t)
	}
	if len(out) != a.tasks {
		a.damaged("it holds %d tasks, its header says %d", len(out), a.tasks)
		return nil
	}
	return out
}

// entriesAll reads every index entry, checking each block.
func (a *Archive) entriesAll() ([]archiveEntry, bool) {
	if a == nil {
		return nil, true
	}
	out := make([]archiveEntry, 0, a.entries)
	for i := range a.blocks() {
		entries, ok := a.block(i)
		if !ok {
			return nil, false
		}
		for j := 0; j < len(entries); j += archiveEntrySize {
			out = append(out, archiveEntry{binary.LittleEndian.Uint64(entries[j:]), binary.LittleEndian.Uint64(entries[j+8:])})
		}
	}
	return out, true
}

// buildArchive returns a new archive holding old's tasks (their records
// copied as they are, after checking them against old's header) and add. It
// builds the archive in one buffer, records first, so that at most one copy
// of the history is in memory beside the state.
func buildArchive(old *Archive, add []*Task) ([]byte, error) {
	if old == nil {
		return buildOver(nil, nil, add, false)
	}
	var b []byte
	var err error
	func() {
		defer old.guard(debug.SetPanicOnFault(true))
		b, err = buildOver(old, nil, add, false)
	}()
	if old.err != nil {
		return nil, old.err
	}
	return b, err
}

// buildOver builds an archive of old's records and add's. With keep nil it
// copies every old record as a block (the archive: a task archived again has
// two records, the later one wins); with keep set, only the records at the
// offsets keep accepts, each checked as it is copied, with their index and
// order entries moved to the new offsets (the cold set, whose superseded
// copies are dropped). withOrder gives add's tasks order entries too.
func buildOver(old *Archive, keep func(offset uint64) bool, add []*Task, withOrder bool) ([]byte, error) {
	if err := old.Err(); err != nil {
		return nil, err
	}
	oldEntries, ok := old.entriesAll()
	var oldRecords []byte
	if old != nil {
		oldRecords = old.records
		if !ok || keep == nil && crc32.Checksum(oldRecords, archiveCRC) != old.sum {
			old.damaged("its records do not match its checksum")
			return nil, old.err
		}
	}
	const recordGuess = 512 // bytes per task, record and index, to size the buffer
	out := make([]byte, 0, len(archiveMagic)+archiveHeaderSize+4+len(oldRecords)+archiveEntrySize*len(oldEntries)+recordGuess*len(add))
	out = append(out, archiveMagic...)
	headerAt := len(out)
	out = append(out, make([]byte, archiveHeaderSize+4)...)
	recordsAt := len(out)
	var added []archiveEntry
	var order []orderEntry
	tasks := old.Len()
	if keep == nil {
		out = append(out, oldRecords...)
	} else {
		var err error
		if out, oldEntries, order, tasks, err = copyKept(out, old, keep, oldEntries); err != nil {
			return nil, err
		}
	}
	oldOrder := len(order)
	e := &encoder{}
	for _, t := range add {
		if keep != nil || old.search(keyTask, t.ID, func(old *Task) bool { return old.ID == t.ID }) == nil { // a kept copy is never add's task
			tasks++
		}
		offset := uint64(len(out) - recordsAt)
		e.b = e.b[:0]
		e.task(t)
		out = binary.AppendUvarint(out, uint64(len(e.b)))
		out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(e.b, archiveCRC))
		out = append(out, e.b...)
		keysOf(t, func(kind byte, key string) { added = append(added, archiveEntry{keyHash(kind, key), offset}) })
		if withOrder {
			order = append(order, orderOf(t, offset))
		}
	}
	records := out[recordsAt:]
	header := binary.LittleEndian.AppendUint64(nil, uint64(len(records)))
	slices.SortFunc(added, compareEntries)
	entries := merge(oldEntries, added, compareEntries)
	header = binary.LittleEndian.AppendUint64(header, uint64(len(entries)))
	header = binary.LittleEndian.AppendUint64(header, uint64(tasks))
	header = binary.LittleEndian.AppendUint64(header, uint64(len(order)))
	header = binary.LittleEndian.AppendUint32(header, crc32.Checksum(records, archiveCRC))
	var fence []byte
	for start := 0; start < len(entries); start += archiveBlockLen {
		fence = binary.LittleEndian.AppendUint64(fence, entries[start].hash)
		blockStart := len(out)
		for _, e := range entries[start:min(start+archiveBlockLen, len(entries))] {
			out = binary.LittleEndian.AppendUint64(out, e.hash)
			out = binary.LittleEndian.AppendUint64(out, e.offset)
		}
		out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(out[blockStart:], archiveCRC))
	}
	slices.SortFunc(order[oldOrder:], compareOrder)
	order = merge(order[:oldOrder], order[oldOrder:], compareOrder)
	for start := 0; start < len(order); start += archiveBlockLen {
		blockStart := len(out)
		for _, e := range order[start:min(start+archiveBlockLen, len(order))] {
			out = e.append(out)
		}
		out = binary.LittleEndian.AppendUint32(out, crc32.Checksum(out[blockStart:], archiveCRC))
	}
	out = append(out, fence...)
	copy(out[headerAt:], header)
	binary.LittleEndian.PutUint32(out[headerAt+archiveHeaderSize:], crc32.Update(crc32.Checksum(header, archiveCRC), archiveCRC, fence))
	return out, nil
}

// copyKept appends to out the records of old that keep accepts, checking
// each, and returns old's index and order entries for them at their new
// offsets (in their order: moving offsets keeps it), and how many there are.
func copyKept(out []byte, old *Archive, keep func(uint64) bool, entries []archiveEntry) ([]byte, []archiveEntry, []orderEntry, int, error) {
	recordsAt := len(out)
	var from, to []uint64 // each kept record's old offset and new one, ascending
	for off := uint64(0); off < uint64(len(old.records)); {
		b := old.records[off:]
		n, w := binary.Uvarint(b)
		if w <= 0 || n > archiveRecordLimit || uint64(len(b)-w) < 4+n {
			old.damaged("the record at %d is cut short", off)
			return nil, nil, nil, 0, old.err
		}
		size := uint64(w) + 4 + n
		if keep(off) {
			if crc32.Checksum(b[w+4:size], archiveCRC) != binary.LittleEndian.Uint32(b[w:]) {
				old.damaged("record at %d: checksum mismatch", off)
				return nil, nil, nil, 0, old.err
			}
			from, to = append(from, off), append(to, uint64(len(out)-recordsAt))
			out = append(out, b[:size]...)
		}
		off += size
	}
	moved := func(off uint64) (uint64, bool) {
		i, found := slices.BinarySearch(from, off)
		if !found {
			return 0, false
		}
		return to[i], true
	}
	kept := entries[:0]
	for _, e := range entries {
		if off, ok := moved(e.offset); ok {
			kept = append(kept, archiveEntry{e.hash, off})
		}
	}
	var order []orderEntry
	old.eachOrder(func(e orderEntry) bool {
		if off, ok := moved(e.offset); ok {
			e.offset = off
			order = append(order, e)
		}
		return true
	})
	if old.err != nil {
		return nil, nil, nil, 0, old.err
	}
	return out, kept, order, len(from), nil
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

// merge merges two runs sorted by compare.
func merge[T any](x, y []T, compare func(T, T) int) []T {
	out := make([]T, 0, len(x)+len(y))
	for len(x) > 0 && len(y) > 0 {
		if compare(x[0], y[0]) <= 0 {
			out, x = append(out, x[0]), x[1:]
		} else {
			out, y = append(out, y[0]), y[1:]
		}
	}
	return append(append(out, x...), y...)
}

// InMemory counts the tasks held in memory, and how many of them are finished
// (Compact with archive would move those).
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
// memory shadows, and which the next Compact supersedes.
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
