package index

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/leasewal/leasewal/internal/parallel"
	"github.com/leasewal/leasewal/state"
)

// Write makes the index hold the state whose hot tasks are tasks and whose
// head is head, as of meta, in one transaction: each task replaces its
// copy and the keys that copy had, and meta and head say what the index
// now holds. sync waits for the transaction to be on disk; without it the
// kernel writes it back when it will.
func (d *DB) Write(tasks []*state.Task, head []byte, meta Meta, sync bool) error {
	return d.update(tasks, meta.At, sync, func(m *bolt.Bucket) error {
		if p := m.Get(kPartial); len(p) != 8 || int64(binary.BigEndian.Uint64(p)) <= meta.Seq { // a part of a later record stays partial
			if err := m.Delete(kPartial); err != nil {
				return err
			}
		}
		return putMeta(m, map[string][]byte{string(kSchema): binary.BigEndian.AppendUint64(nil, Schema), string(kPosition): encodePosition(meta.Position),
			string(kSeq): binary.BigEndian.AppendUint64(nil, uint64(meta.Seq)), string(kHead): head, string(kBoot): []byte(meta.Boot), string(kSynced): synced(meta.Synced)})
	})
}

// WriteTasks writes tasks, changed by the record of seq seq, which the
// index's meta does not hold yet, over their copies, as of at, in a
// transaction of their own that marks the index partial up to that record
// (Meta.Partial): a record that changes more tasks than memory should hold
// (an end that many tasks wait for) is written a part at a time, and the
// first Write of a position that holds it says the index holds it. Never
// synced: an index left partial is built again, and so is one unsynced in
// an earlier boot of the machine (boot is this one's).
func (d *DB) WriteTasks(tasks []*state.Task, seq, at int64, boot string) error {
	return d.update(tasks, at, false, func(m *bolt.Bucket) error {
		if p := m.Get(kPartial); len(p) == 8 {
			seq = max(seq, int64(binary.BigEndian.Uint64(p)))
		}
		return putMeta(m, map[string][]byte{string(kPartial): binary.BigEndian.AppendUint64(nil, uint64(seq)), string(kBoot): []byte(boot), string(kSynced): synced(false)})
	})
}

// update writes tasks over their copies in one transaction, each key of a
// task as of at, then has meta say what the index holds; sync waits for
// the transaction to be on disk. The copies to replace are read first, in
// the transaction; each part of the tasks then works out its changes on a
// processor of its own from bytes alone (a bbolt transaction is one
// goroutine's), and the puts run in key order on this one.
func (d *DB) update(tasks []*state.Task, at int64, sync bool, meta func(*bolt.Bucket) error) error {
	return guard(func() error {
		return d.db.Update(func(tx *bolt.Tx) error {
			syncs(tx, sync)
			byNumber := tx.Bucket(bTasks)
			newest := int64(0) // tasks numbered after it have no copy to replace
			if k, _ := byNumber.Cursor().Last(); len(k) == 8 {
				newest = int64(binary.BigEndian.Uint64(k))
			}
			file, err := fileID(tx)
			if err != nil {
				return err
			}
			noted := tx.ID() - 1 // the transaction a Reader's note must be of (stored)
			var copies [][]byte  // by task: its copy's bytes, when its keys must be read from them
			for i, t := range tasks {
				if n := state.Number(t.ID); n <= newest && notedKeys(t, n, file, noted) == nil {
					if copies == nil {
						copies = make([][]byte, len(tasks))
					}
					copies[i] = byNumber.Get(num(n))
				}
			}
			parts := make([]changes, runtime.GOMAXPROCS(0))
			failed := make([]error, len(parts))
			parallel.Ranges(len(tasks), func(p, from, to int) {
				// A copy's bytes are the index's mapped pages: guarded on
				// this goroutine too, as damage, not a crash.
				failed[p] = guard(func() error {
					c := &parts[p]
					c.tasks = to - from
					for i := from; i < to; i++ {
						t := tasks[i]
						n := state.Number(t.ID)
						var raw []byte
						if copies != nil {
							raw = copies[i]
						}
						if err := c.oldKeys(n, raw, notedKeys(t, n, file, noted)); err != nil {
							return err
						}
						c.key(t, n, at)
					}
					return nil
				})
			})
			if err := errors.Join(failed...); err != nil {
				return err
			}
			if err := apply(tx, parts); err != nil {
				return err
			}
			return meta(tx.Bucket(bMeta))
		})
	})
}

// MarkSynced syncs the index and then says so in its meta: what every
// write before holds is on disk (fsync covers every write of the file).
func (d *DB) MarkSynced() error {
	return guard(func() error {
		return d.db.Update(func(tx *bolt.Tx) error {
			syncs(tx, true)
			if err := tx.DB().Sync(); err != nil {
				return err
			}
			return putMeta(tx.Bucket(bMeta), map[string][]byte{string(kSynced): synced(true)})
		})
	})
}

// syncs says whether the commit of tx, a write transaction, waits for it
// to be on disk. bbolt reads NoSync, a field of the database, as it
// commits: set within the transaction, it is set under the lock that
// orders writers, so that one database shared by goroutines (a server's
// pipe and its committer) never commits another's transaction as it asked
// for its own.
func syncs(tx *bolt.Tx, sync bool) {
	tx.DB().NoSync = !sync
}

// putMeta writes values into meta, and then meta's checksum.
func putMeta(m *bolt.Bucket, values map[string][]byte) error {
	for k, v := range values {
		if err := m.Put([]byte(k), v); err != nil {
			return err
		}
	}
	return m.Put(kSum, metaSum(m))
}

func synced(yes bool) []byte {
	if yes {
		return []byte{1}
	}
	return []byte{0}
}

// changes are the deletes and puts of a part of one write, by bucket:
// applied in key order (deletes first: a task's new keys may be its old
// copy's), so that each bucket is walked once, leaf after leaf, however
// the tasks' ids and times are ordered. The bytes of what they write are
// copied into chunks (kept): a transaction holds them until it commits,
// and a write of many tasks would otherwise allocate a few small slices
// for each.
type changes struct {
	dels map[string][][]byte
	puts map[string][]kv
	// tasks is how many tasks the part holds: the room a bucket's list
	// of changes starts with (grown a doubling at a time, a list of
	// 100,000 was a tenth of a write).
	tasks int
	kept  []byte
	// old and new are a task's keys before and after, reused task after
	// task, and task its encoding.
	old, new keySet
	task     []byte
}

type kv struct{ k, v []byte }

// keep copies b into the current chunk.
func (c *changes) keep(b []byte) []byte {
	if cap(c.kept)-len(c.kept) < len(b) {
		c.kept = make([]byte, 0, max(64<<10, len(b)))
	}
	c.kept = append(c.kept, b...)
	return c.kept[len(c.kept)-len(b) : len(c.kept) : len(c.kept)]
}

func (c *changes) del(bucket []byte, key []byte) {
	if c.dels == nil {
		c.dels = map[string][][]byte{}
	}
	keys, ok := c.dels[string(bucket)]
	if !ok {
		keys = make([][]byte, 0, c.tasks)
	}
	c.dels[string(bucket)] = append(keys, c.keep(key))
}

func (c *changes) put(bucket []byte, key, value []byte) {
	if c.puts == nil {
		c.puts = map[string][]kv{}
	}
	kvs, ok := c.puts[string(bucket)]
	if !ok {
		kvs = make([]kv, 0, c.tasks)
	}
	c.puts[string(bucket)] = append(kvs, kv{c.keep(key), c.keep(value)})
}

// keySet is a task's keys outside the tasks bucket (keysOf), their bytes
// in one buffer.
type keySet struct {
	buf  []byte
	keys []span
}

// span is one key of a keySet: in bucket, buf[from:mid] and its value
// buf[mid:to].
type span struct {
	bucket        []byte
	from, mid, to int
}

func (s *keySet) reset() { s.buf, s.keys = s.buf[:0], s.keys[:0] }

// add takes the key and value b holds after s.buf's end: b is s.buf with
// them appended, the value's length vlen.
func (s *keySet) add(bucket []byte, b []byte, vlen int) {
	s.keys = append(s.keys, span{bucket: bucket, from: len(s.buf), mid: len(b) - vlen, to: len(b)})
	s.buf = b
}

// seal is add for a key and value keysOf makes: it appends their seal
// (entrySum) to the value first.
func (s *keySet) seal(bucket []byte, b []byte, vlen int) {
	s.add(bucket, binary.BigEndian.AppendUint32(b, entrySum(bucketSum(bucket), b[len(s.buf):])), vlen+4) // the key, then the value
}

func (s *keySet) key(i int) []byte   { return s.buf[s.keys[i].from:s.keys[i].mid] }
func (s *keySet) value(i int) []byte { return s.buf[s.keys[i].mid:s.keys[i].to] }

// stored is what a Reader notes of a task's copy it decoded (Task.Stored):
// the index file and the read transaction it was read in, and the copy's
// keys outside the tasks bucket, packed. The next write transaction of that
// file (its id one more) finds the copy as it was read, and takes its keys
// from here rather than decoding it again.
type stored struct {
	file string
	tx   int
	n    int64 // the task's number: a copy of the Task under another id is not its note's
	keys []byte
}

// pack is s as one slice: for each key its bucket (its place in buckets),
// its key's and value's lengths, then their bytes.
func (s *keySet) pack() []byte {
	b := make([]byte, 0, len(s.buf)+len(s.keys)*3)
	for _, k := range s.keys {
		b = append(b, byte(slices.IndexFunc(buckets, func(name []byte) bool { return bytes.Equal(name, k.bucket) })))
		b = binary.AppendUvarint(b, uint64(k.mid-k.from))
		b = binary.AppendUvarint(b, uint64(k.to-k.mid))
		b = append(b, s.buf[k.from:k.to]...)
	}
	return b
}

// unpack sets s to what pack wrote; false when b is not that.
func (s *keySet) unpack(b []byte) bool {
	s.reset()
	for len(b) > 0 {
		bucket := int(b[0])
		klen, n1 := binary.Uvarint(b[1:])
		if n1 <= 0 {
			return false
		}
		vlen, n2 := binary.Uvarint(b[1+n1:])
		if n2 <= 0 || bucket >= len(buckets) || uint64(len(b)-1-n1-n2) < klen+vlen {
			return false
		}
		b = b[1+n1+n2:]
		s.add(buckets[bucket], append(s.buf, b[:klen+vlen]...), int(vlen))
		b = b[klen+vlen:]
	}
	return true
}

// fileID is the index file's own id (meta), made by the file's first
// write: a Reader's notes (stored) are of one file.
func fileID(tx *bolt.Tx) (string, error) {
	m := tx.Bucket(bMeta)
	if id := m.Get(kFile); len(id) > 0 {
		return string(id), nil
	}
	id := make([]byte, 16)
	_, _ = rand.Read(id) // crypto/rand never fails on Linux
	return string(id), m.Put(kFile, id)
}

// keysOf sets s to every key t has outside the tasks bucket: its ids (a
// request id or lease id never changes owner), and, unfinished, its live
// mark, its worker's while leased, what it waits for, its place in the
// lease order (unless it waits) and its times; a wake time only after
// wakeAfter.
func keysOf(t *state.Task, n, wakeAfter int64, s *keySet) {
	s.reset()
	s.seal(bSubmits, appendNum(append(s.buf, t.RequestID...), n), 8)
	for _, a := range t.Attempts {
		s.seal(bLeases, appendNum(append(s.buf, a.LeaseID...), n), 8)
		if a.RequestID != "" {
			s.seal(bLeaseReqs, appendNum(append(s.buf, a.RequestID...), n), 8)
		}
	}
	if t.State.Terminal() {
		return
	}
	s.seal(bLive, appendNum(s.buf, n), 0)
	s.seal(bQueued, appendNamedKey(s.buf, t.Queue, n), 0)
	if t.State == state.Leased {
		s.seal(bHeld, appendNamedKey(s.buf, t.Lease.Worker, n), 0)
	}
	for _, d := range t.Waits() {
		s.seal(bAfter, appendEdgeKey(s.buf, state.Number(d.ID), n), 0)
	}
	if !t.Pending() {
		s.seal(bOrder, appendOrderValue(appendOrderKey(s.buf, t.Queue, t.Priority, n), t.Order(n)), orderValueLen)
	}
	if at := t.LapseAt(); at != 0 {
		s.seal(bLapse, appendTimeKey(s.buf, at, n), 0)
	}
	if wake := t.WakeAt(); wake != 0 && wake > wakeAfter { // 0: none (a time before 1970 is negative)
		s.seal(bWake, appendTimeKey(s.buf, wake, n), 0)
	}
}

// notedKeys is what the Reader noted of t's keys (Task.Stored) when it
// read t's copy in the transaction noted, of the index file file: the
// index has not been written since, so they are the copy's keys (nil: no
// such note).
func notedKeys(t *state.Task, n int64, file string, noted int) []byte {
	if s, ok := t.Stored.(*stored); ok && s.file == file && s.tx == noted && s.n == n {
		return s.keys
	}
	return nil
}

// oldKeys sets c.old to the keys of t's copy in the index (none when it
// has none): from what the Reader noted, else from the copy itself, whose
// bytes are raw (nil: none).
func (c *changes) oldKeys(n int64, raw, noted []byte) error {
	c.old.reset()
	if noted != nil {
		if !c.old.unpack(noted) { // pack wrote it in this process: never so
			return fmt.Errorf("the keys noted of task %d do not read", n)
		}
		return nil
	}
	if raw == nil {
		return nil
	}
	prev, err := unseal(n, raw)
	if err != nil {
		return err
	}
	keysOf(prev, n, math.MinInt64, &c.old)
	return nil
}

// key writes t over its copy, whose keys c.old holds, as of at: its own
// value, and of its other keys only those that differ from the copy's, so
// that a change of a few of a task's keys (a dependency met, a lease
// granted) moves those and no others. A wake time of the copy is taken as
// written whatever it was (a delete of a key that is not there changes
// nothing); one that t has too is after at, so after the copy's own at,
// and so written.
func (c *changes) key(t *state.Task, n, at int64) {
	c.task = sealed(n, state.AppendTask(c.task[:0], t))
	var key [8]byte
	c.put(bTasks, appendNum(key[:0], n), c.task)
	keysOf(t, n, at, &c.new)
	gone := c.old.keys // those of the copy's keys t has not: a span's bucket set nil once matched
	for i, e := range c.new.keys {
		j := slices.IndexFunc(gone, func(o span) bool {
			return o.bucket != nil && bytes.Equal(o.bucket, e.bucket) && bytes.Equal(c.old.buf[o.from:o.mid], c.new.key(i))
		})
		if j >= 0 {
			gone[j].bucket = nil
			if bytes.Equal(c.old.value(j), c.new.value(i)) {
				continue
			}
		}
		c.put(e.bucket, c.new.key(i), c.new.value(i))
	}
	for j, o := range gone {
		if o.bucket != nil {
			c.del(o.bucket, c.old.key(j))
		}
	}
}

// apply writes the changes of every part, each bucket's in key order. A
// bucket whose keys mostly come after every key it holds (tasks by number,
// the live marks, times), or after every key of their range (the lease
// order: a queue's new task after those of its priority), fills its pages:
// bbolt's half-full default is for keys that land anywhere.
func apply(tx *bolt.Tx, parts []changes) error {
	dels, puts := parts[0].dels, parts[0].puts
	for _, c := range parts[1:] { // every key names its task: no two parts change one key
		for name, keys := range c.dels {
			if dels == nil {
				dels = map[string][][]byte{}
			}
			dels[name] = append(dels[name], keys...)
		}
		for name, kvs := range c.puts {
			if puts == nil {
				puts = map[string][]kv{}
			}
			puts[name] = append(puts[name], kvs...)
		}
	}
	for name, keys := range dels {
		cur := tx.Bucket([]byte(name)).Cursor() // one for all: Delete makes one each time
		slices.SortFunc(keys, bytes.Compare)
		for _, k := range keys {
			if at, _ := cur.Seek(k); !bytes.Equal(at, k) {
				continue
			}
			if err := cur.Delete(); err != nil {
				return err
			}
		}
	}
	for name, kvs := range puts {
		b := tx.Bucket([]byte(name))
		switch name {
		case string(bTasks), string(bLive), string(bLapse), string(bWake), string(bAfter), string(bQueued), string(bOrder):
			b.FillPercent = 0.9
		}
		slices.SortFunc(kvs, func(a, b kv) int { return bytes.Compare(a.k, b.k) })
		for _, e := range kvs {
			if err := b.Put(e.k, e.v); err != nil {
				return err
			}
		}
	}
	return nil
}
