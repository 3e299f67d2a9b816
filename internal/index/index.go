// Package index keeps the state the WAL's records build, derived and
// disposable, in a bbolt database beside the WAL (<wal>.index), so that a
// command reads the few tasks it needs instead of replaying the WAL: the
// way etcd keeps its applied state in bbolt beside its raft log. The WAL
// stays the only truth: the index says which of its records it holds (meta:
// the position after them, checked against the WAL's chained checksum
// there), a command replays the records after that into memory, and an
// index that cannot be trusted is built again from the WAL.
//
// Buckets, each a reader can name:
//
//	meta        schema, position, seq, the file's own id, whether a write is half done; the head
//	            (state.Head: counters, base, domains, redactions, limits, record counts, pauses,
//	            schedules)
//	tasks       number (8 bytes, big-endian: creation order) -> the task
//	live        number -> nothing, for each task unfinished as recorded
//	submits     request id -> number
//	leases      lease id -> number
//	lease_reqs  lease request id -> number
//	order       queue, 0, 1000-priority (2 bytes), number -> from, to, leased:
//	            each queue's unfinished tasks in lease order, but those a
//	            dependency keeps from running
//	lapse       time, number: when time alone ends a task's lease or window
//	wake        time, number: when a waiting task becomes eligible, for the
//	            times after the last record the index holds (every caller
//	            asks from a later now)
//	after       number, number: a task an unfinished task waits for (as
//	            recorded), then that task: what an end settles
//	queued      queue, 0, number -> nothing, for each task unfinished as
//	            recorded: a queue's unfinished tasks counted without a
//	            decode (a lease that finds nothing says how many wait)
//	held        worker, 0, number -> nothing, for each task leased as
//	            recorded: a worker's leases (a heartbeat's answer) without
//	            reading every unfinished task
//
// Every value but meta's ends with a seal (a CRC32C): a task's of its
// number and encoding, any other entry's of its bucket's name, its key and
// its value ("nothing" above is the seal alone); meta's values are sealed
// together (kSum). bbolt keeps no checksum of its pages: a read checks
// the seals of what it meets and the keys' order (cursor), and so finds a
// flipped byte rather than answer from it.
//
// Finished tasks are not kept by end time: nothing reads them so (a
// compaction reads every task to write its base, and decides there which
// it keeps).
//
// state knows the rules and these keys' meaning (Task.Order, LapseAt,
// WakeAt); this package knows bytes and bbolt, never a rule.
package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// Schema is the layout's version: an index of another is built again,
// never misread.
const Schema = 6

// writeMapping is how much of the file OpenHeld maps at once, as etcd's
// backend does (10 GB there).
const writeMapping = 1 << 32

// Suffix is the index's name beside its WAL.
const Suffix = ".index"

var (
	bMeta      = []byte("meta")
	bTasks     = []byte("tasks")
	bLive      = []byte("live")
	bSubmits   = []byte("submits")
	bLeases    = []byte("leases")
	bLeaseReqs = []byte("lease_reqs")
	bOrder     = []byte("order")
	bLapse     = []byte("lapse")
	bWake      = []byte("wake")
	bAfter     = []byte("after")
	bQueued    = []byte("queued")
	bHeld      = []byte("held")
	buckets    = [][]byte{bMeta, bTasks, bLive, bSubmits, bLeases, bLeaseReqs, bOrder, bLapse, bWake, bAfter, bQueued, bHeld}

	kSchema   = []byte("schema")
	kPosition = []byte("position")
	kSeq      = []byte("seq")
	kHead     = []byte("head")
	kBoot     = []byte("boot")
	kSynced   = []byte("synced")
	kFile     = []byte("file")
	kPartial  = []byte("partial")
	kSum      = []byte("sum")
)

// ErrNoIndex is an index that is not there, or not one this version reads.
var ErrNoIndex = errors.New("no usable index")

// ErrLocked is an index another process held open for writing (or, to open
// it for writing, for reading) all the time given.
var ErrLocked = errors.New("the index is in use by another process")

// Meta is what an index says of the records it holds: those of the WAL
// before Position (checked there against the WAL's chained checksum), the
// last of them of seq Seq. Boot is the boot of the machine that last wrote
// it, and Synced whether every write of it was on disk at its end: an
// index written without sync is trusted in the boot that wrote it (a
// process killed leaves the page cache to the kernel), never after.
type Meta struct {
	Position wal.Position
	Seq      int64
	// At is the time of that last record, written and not kept: a waiting
	// task eligible at or before it is not put in wake.
	At     int64
	Boot   string
	Synced bool
	// Partial says that tasks of a record after Position were written
	// (WriteTasks), and no Write of a position that holds that record has
	// followed: the index holds part of what the WAL does not say up to
	// Position.
	Partial bool
}

// DB is an open index.
type DB struct {
	db   *bolt.DB
	file *os.File // bbolt's own, for the file's size
}

// Open opens the index at path, read-only or for writing (creating it), waiting
// at most timeout for the lock of a process that has it open for writing.
// A missing index read-only is ErrNoIndex; damage is an error of its own
// (the caller builds the index again). bbolt panics on some damage: that is
// caught and said as an error.
func Open(path string, writing bool, timeout time.Duration) (db *DB, err error) {
	return open(path, writing, timeout, 0)
}

// OpenHeld opens the index for writing for a while, during which read
// transactions run beside commits (a server's): it maps writeMapping of it
// at once, since a commit that grows the file past its mapping waits for
// every read transaction to end. Address space costs nothing until touched.
func OpenHeld(path string, timeout time.Duration) (*DB, error) {
	return open(path, true, timeout, writeMapping)
}

// OpenToWrite opens the index for writing about tasks tasks at once: it maps
// the file and room for them from the start, since each time a write
// transaction outgrows the mapping bbolt copies every node it has touched
// out of it and maps the file again (a batch of 100,000 tasks did so a dozen
// times, a tenth of its time).
func OpenToWrite(path string, timeout time.Duration, tasks int) (*DB, error) {
	mapping := tasks * roomPerTask
	if st, err := os.Stat(path); err == nil && mapping > 0 {
		mapping += int(st.Size())
	}
	return open(path, true, timeout, mapping)
}

// roomPerTask is what a task takes in the index, with room to spare: its
// value, its keys in the other buckets, and bbolt's half-full pages.
const roomPerTask = 1 << 10

func open(path string, writing bool, timeout time.Duration, mapping int) (db *DB, err error) {
	info, err := os.Stat(path)
	switch {
	case !writing && errors.Is(err, fs.ErrNotExist):
		return nil, ErrNoIndex
	case err == nil && damagedEarlier(info):
		return nil, fmt.Errorf("the index %s is damaged: an open of it for writing failed before", path)
	}
	var file *os.File
	defer func() {
		if p := recover(); p != nil {
			if file != nil {
				markDamaged(file)
				_ = file.Close()
			}
			db, err = nil, fmt.Errorf("the index %s is damaged: %v", path, p)
		}
	}()
	openFile := func(name string, flag int, perm os.FileMode) (*os.File, error) {
		f, err := os.OpenFile(name, flag, perm)
		file = f
		return f, err
	}
	// NoGrowSync: bbolt would truncate and fsync the file each time it
	// grows (and, on its first growth after an open, truncate it shorter
	// than it is, freeing blocks it then takes again). The index needs no
	// sync to be right; one that must survive the machine is synced with
	// fdatasync, and should a power loss leave it shorter than its pages
	// (a size the file system did not write with them), Meta says it is
	// damaged and it is built again.
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: timeout, ReadOnly: !writing, FreelistType: bolt.FreelistMapType, InitialMmapSize: mapping, NoGrowSync: true, OpenFile: openFile})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("opening the index %s: %w", path, ErrLocked)
	}
	if err != nil {
		return nil, fmt.Errorf("opening the index %s: %w", path, err)
	}
	if writing && !hasBuckets(b) { // a write transaction, synced: only for a new index
		if err := b.Update(func(tx *bolt.Tx) error {
			for _, name := range buckets {
				if _, err := tx.CreateBucketIfNotExists(name); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			b.Close()
			return nil, fmt.Errorf("preparing the index %s: %w", path, err)
		}
	}
	return &DB{db: b, file: file}, nil
}

// damaged lists the index files bbolt's open for writing panicked on in
// this process. Such a panic comes after bbolt has mapped the file and taken
// its lock, and leaves the mapping, which holds the lock until the process
// ends: any later open of that file would wait for it until its timeout.
var damaged struct {
	sync.Mutex
	files []os.FileInfo
}

func markDamaged(f *os.File) {
	if info, err := f.Stat(); err == nil {
		damaged.Lock()
		damaged.files = append(damaged.files, info)
		damaged.Unlock()
	}
}

func damagedEarlier(info os.FileInfo) bool {
	damaged.Lock()
	defer damaged.Unlock()
	return slices.ContainsFunc(damaged.files, func(d os.FileInfo) bool { return os.SameFile(d, info) })
}

// hasBuckets reports whether every bucket is there.
func hasBuckets(b *bolt.DB) bool {
	all := true
	_ = b.View(func(tx *bolt.Tx) error {
		for _, name := range buckets {
			all = all && tx.Bucket(name) != nil
		}
		return nil
	})
	return all
}

// CopyTo writes the whole index as one read transaction sees it (a backup).
func (d *DB) CopyTo(w io.Writer) error {
	return guard(func() error {
		return d.db.View(func(tx *bolt.Tx) error {
			_, err := tx.WriteTo(w)
			return err
		})
	})
}

// Close closes the index.
func (d *DB) Close() error { return d.db.Close() }

// Path is the index's file.
func (d *DB) Path() string { return d.db.Path() }

// Meta is what the index holds: its meta and head; ErrNoIndex for an
// empty index or one of another schema.
func (d *DB) Meta() (m Meta, head []byte, err error) {
	err = guard(func() error {
		return d.db.View(func(tx *bolt.Tx) error {
			if info, err := d.file.Stat(); err == nil && tx.Size() > info.Size() {
				return fmt.Errorf("the index %s is damaged: its pages run to byte %d, past the end of the file (%d bytes)", d.db.Path(), tx.Size(), info.Size())
			}
			b := tx.Bucket(bMeta)
			if b == nil {
				return ErrNoIndex
			}
			if s := b.Get(kSchema); len(s) != 8 || binary.BigEndian.Uint64(s) != Schema {
				return ErrNoIndex
			}
			if !bytes.Equal(b.Get(kSum), metaSum(b)) {
				return &damageError{what: "its meta does not match its checksum"}
			}
			var ok bool
			if m.Position, ok = decodePosition(b.Get(kPosition)); !ok {
				return ErrNoIndex
			}
			seq := b.Get(kSeq)
			if len(seq) != 8 {
				return ErrNoIndex
			}
			m.Seq = int64(binary.BigEndian.Uint64(seq))
			m.Boot = string(b.Get(kBoot))
			m.Synced = bytes.Equal(b.Get(kSynced), []byte{1})
			m.Partial = len(b.Get(kPartial)) > 0
			head = bytes.Clone(b.Get(kHead))
			return nil
		})
	})
	return m, head, err
}

// guard runs fn, saying a bbolt panic (a damaged file), or a fault on a
// page of its mapping gone (the file cut under it), as an error.
func guard(fn func() error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("the index is damaged: %v", p)
		}
	}()
	return fn()
}

func encodePosition(p wal.Position) []byte {
	var b []byte
	for _, v := range []uint64{uint64(p.Count), uint64(p.End), uint64(p.LastSum), uint64(p.LastOffset), uint64(p.Generation)} {
		b = binary.AppendUvarint(b, v)
	}
	return b
}

func decodePosition(b []byte) (wal.Position, bool) {
	var v [5]uint64
	for i := range v {
		x, n := binary.Uvarint(b)
		if n <= 0 {
			return wal.Position{}, false
		}
		v[i], b = x, b[n:]
	}
	return wal.Position{Count: int(v[0]), End: int64(v[1]), LastSum: uint32(v[2]), LastOffset: int64(v[3]), Generation: uint32(v[4])}, len(b) == 0
}

// sealed is a task's encoding with a CRC32C of its number and of it: a
// byte of the index flipped (bbolt checks no page of data) is found when
// the task is read, never taken for a task.
func sealed(n int64, body []byte) []byte {
	return binary.BigEndian.AppendUint32(body, taskSum(n, body))
}

// entrySum is the CRC32C of a bucket's name (bucketSum) and then of an
// entry's key and value, one after the other in kv: every entry but a
// task's (sealed) and meta's (metaSum) carries it after its value, so that
// a byte flipped in an entry, or an entry met in another bucket than its
// own (a branch page's pointer flipped), is found when it is read, never
// taken for a lease order's entry or a time. One call of the checksum an
// entry: a walk of a million entries checksums each.
func entrySum(bucketSum uint32, kv []byte) uint32 { return wal.UpdateCRC32C(bucketSum, kv) }

func bucketSum(bucket []byte) uint32 { return wal.UpdateCRC32C(0, bucket) }

// metaKeys are the keys of meta its checksum (kSum) covers, in its order.
var metaKeys = [][]byte{kSchema, kPosition, kSeq, kHead, kBoot, kSynced, kFile, kPartial}

// metaSum is the CRC32C of every value of meta, each with its key and
// length: a write of meta ends with it (putMeta), and Meta checks it, so
// that a flipped head or seq is damage, never a counter taken as it reads.
func metaSum(m *bolt.Bucket) []byte {
	var sum uint32
	var n [binary.MaxVarintLen64]byte
	for _, k := range metaKeys {
		v := m.Get(k)
		sum = wal.UpdateCRC32C(wal.UpdateCRC32C(sum, k), binary.AppendUvarint(n[:0], uint64(len(v))))
		sum = wal.UpdateCRC32C(sum, v)
	}
	return binary.BigEndian.AppendUint32(nil, sum)
}

// taskSum is the CRC32C of a task's number and then of its encoding.
func taskSum(n int64, body []byte) uint32 {
	return wal.UpdateCRC32C(wal.UpdateCRC32C(0, num(n)), body)
}

// unseal checks and decodes what sealed wrote for task number n.
func unseal(n int64, b []byte) (*state.Task, error) {
	if len(b) < 4 {
		return nil, &damageError{what: fmt.Sprintf("task %d is missing or cut short", n)}
	}
	body := b[:len(b)-4]
	if taskSum(n, body) != binary.BigEndian.Uint32(b[len(body):]) {
		return nil, &damageError{what: fmt.Sprintf("task %d does not match its checksum", n)}
	}
	return decodeTask(n, body)
}

// decodeTask decodes task number n's encoding, its seal checked.
func decodeTask(n int64, body []byte) (*state.Task, error) {
	t, err := state.DecodeTask(body)
	if err != nil {
		return nil, err
	}
	if state.Number(t.ID) != n {
		return nil, &damageError{what: fmt.Sprintf("the task kept as number %d is %s", n, t.ID)}
	}
	return t, nil
}

// num is a task number as a key: big-endian, so keys sort in creation order.
func num(n int64) []byte { return appendNum(nil, n) }

func appendNum(b []byte, n int64) []byte { return binary.BigEndian.AppendUint64(b, uint64(n)) }

// appendTimeKey appends a time and a task number as a key, in time order
// (negative times included: the years before 1970).
func appendTimeKey(b []byte, at, n int64) []byte {
	return appendNum(binary.BigEndian.AppendUint64(b, uint64(at)^(1<<63)), n)
}

// appendEdgeKey appends a dependency's key: the task waited for, then the
// task that waits.
func appendEdgeKey(b []byte, upstream, n int64) []byte { return appendNum(appendNum(b, upstream), n) }

func keyTime(k []byte) int64 { return int64(binary.BigEndian.Uint64(k) ^ (1 << 63)) }

// appendNamedKey appends a task's key among those of a name (its queue's
// unfinished tasks, its worker's leases): the name, a zero byte (no name
// holds one), the number.
func appendNamedKey(b []byte, name string, n int64) []byte {
	return appendNum(append(append(b, name...), 0), n)
}

// appendOrderKey appends a task's key in its queue's lease order: the
// queue, a zero byte (no name holds one), then higher priorities first,
// then older.
func appendOrderKey(b []byte, queue string, priority int, n int64) []byte {
	b = append(append(b, queue...), 0)
	b = binary.BigEndian.AppendUint16(b, uint16(state.MaxPriority-priority))
	return appendNum(b, n)
}

// orderValueLen is the length of what appendOrderValue appends.
const orderValueLen = 17

func appendOrderValue(b []byte, e state.OrderEntry) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(e.From))
	b = binary.BigEndian.AppendUint64(b, uint64(e.To))
	if e.Leased {
		return append(b, 1)
	}
	return append(b, 0)
}

var _ state.Source = (*Reader)(nil)
