package index

import (
	"bytes"
	"encoding/binary"
	"math"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/leasewal/leasewal/state"
)

// Write makes the index hold the state whose hot tasks are tasks and whose
// head is head, as of meta, in one transaction: each task replaces its
// copy and the keys that copy had, and meta and head say what the index
// now holds. sync waits for the transaction to be on disk; without it the
// kernel writes it back when it will.
func (d *DB) Write(tasks []*state.Task, head []byte, meta Meta, sync bool) error {
	d.db.NoSync = !sync
	defer func() { d.db.NoSync = false }()
	return guard(func() error {
		return d.db.Update(func(tx *bolt.Tx) error {
			c := changes{}
			newest := int64(0) // tasks numbered after it have no copy to replace
			if k, _ := tx.Bucket(bTasks).Cursor().Last(); len(k) == 8 {
				newest = int64(binary.BigEndian.Uint64(k))
			}
			for _, t := range tasks {
				n := state.Number(t.ID)
				var prev *state.Task
				if n <= newest {
					if old := tx.Bucket(bTasks).Get(num(n)); old != nil {
						var err error
						if prev, err = unseal(n, old); err != nil {
							return err
						}
					}
				}
				c.key(t, prev, n, meta.At)
			}
			if err := c.apply(tx); err != nil {
				return err
			}
			return putMeta(tx.Bucket(bMeta), map[string][]byte{string(kSchema): binary.BigEndian.AppendUint64(nil, Schema), string(kPosition): encodePosition(meta.Position),
				string(kSeq): binary.BigEndian.AppendUint64(nil, uint64(meta.Seq)), string(kHead): head, string(kBoot): []byte(meta.Boot), string(kSynced): synced(meta.Synced)})
		})
	})
}

// MarkSynced syncs the index and then says so in its meta: what every
// write before holds is on disk (fsync covers every write of the file).
func (d *DB) MarkSynced() error {
	return guard(func() error {
		return d.db.Update(func(tx *bolt.Tx) error {
			if err := tx.DB().Sync(); err != nil {
				return err
			}
			return putMeta(tx.Bucket(bMeta), map[string][]byte{string(kSynced): synced(true)})
		})
	})
}

func putMeta(m *bolt.Bucket, values map[string][]byte) error {
	for k, v := range values {
		if err := m.Put([]byte(k), v); err != nil {
			return err
		}
	}
	return nil
}

func synced(yes bool) []byte {
	if yes {
		return []byte{1}
	}
	return []byte{0}
}

// changes are one write's deletes and puts, by bucket: applied in key
// order (deletes first: a task's new keys may be its old copy's), so that
// each bucket is walked once, leaf after leaf, however the tasks' ids and
// times are ordered.
type changes struct {
	dels map[string][][]byte
	puts map[string][]kv
}

type kv struct{ k, v []byte }

func (c *changes) del(bucket []byte, key []byte) {
	if c.dels == nil {
		c.dels = map[string][][]byte{}
	}
	c.dels[string(bucket)] = append(c.dels[string(bucket)], key)
}

func (c *changes) put(bucket []byte, key, value []byte) {
	if c.puts == nil {
		c.puts = map[string][]kv{}
	}
	c.puts[string(bucket)] = append(c.puts[string(bucket)], kv{key, value})
}

// entry is one key a task has in a bucket besides its own value.
type entry struct {
	bucket     []byte
	key, value []byte
}

// keysOf is every key t has outside the tasks bucket: its ids (a request
// id or lease id never changes owner), and, unfinished, its live mark,
// what it waits for, its place in the lease order (unless it waits) and its
// times; a wake time only after wakeAfter.
func keysOf(t *state.Task, n, wakeAfter int64) []entry {
	key := num(n)
	out := []entry{{bSubmits, []byte(t.RequestID), key}}
	for _, a := range t.Attempts {
		out = append(out, entry{bLeases, []byte(a.LeaseID), key})
		if a.RequestID != "" {
			out = append(out, entry{bLeaseReqs, []byte(a.RequestID), key})
		}
	}
	if t.State.Terminal() {
		return out
	}
	out = append(out, entry{bLive, key, nil})
	for _, d := range t.Waits() {
		out = append(out, entry{bAfter, edgeKey(state.Number(d.ID), n), nil})
	}
	if !t.Pending() {
		out = append(out, entry{bOrder, orderKey(t.Queue, t.Priority, n), orderValue(t.Order(n))})
	}
	if at := t.LapseAt(); at != 0 {
		out = append(out, entry{bLapse, timeKey(at, n), nil})
	}
	if wake := t.WakeAt(); wake != 0 && wake > wakeAfter { // 0: none (a time before 1970 is negative)
		out = append(out, entry{bWake, timeKey(wake, n), nil})
	}
	return out
}

// key writes t over its copy prev (nil: none), as of at: its own value,
// and of its other keys only those that differ from prev's, so that a
// change of a few of a task's keys (a dependency met, a lease granted)
// moves those and no others. A wake time of prev is taken as written
// whatever it was (a delete of a key that is not there changes nothing);
// one that t has too is after at, so after prev's own at, and so written.
func (c *changes) key(t, prev *state.Task, n, at int64) {
	c.put(bTasks, num(n), sealed(n, state.EncodeTask(t)))
	var old []entry
	if prev != nil {
		old = keysOf(prev, n, math.MinInt64)
	}
	for _, e := range keysOf(t, n, at) {
		same := false
		old = slices.DeleteFunc(old, func(o entry) bool {
			if !bytes.Equal(o.bucket, e.bucket) || !bytes.Equal(o.key, e.key) {
				return false
			}
			same = bytes.Equal(o.value, e.value)
			return true
		})
		if !same {
			c.put(e.bucket, e.key, e.value)
		}
	}
	for _, o := range old {
		c.del(o.bucket, o.key)
	}
}

// apply writes the changes, each bucket's in key order. A bucket whose
// keys mostly come after every key it holds (tasks by number, the live
// marks, times) fills its pages: bbolt's half-full default is for keys
// that land anywhere.
func (c *changes) apply(tx *bolt.Tx) error {
	for name, keys := range c.dels {
		b := tx.Bucket([]byte(name))
		slices.SortFunc(keys, bytes.Compare)
		for _, k := range keys {
			if err := b.Delete(k); err != nil {
				return err
			}
		}
	}
	for name, kvs := range c.puts {
		b := tx.Bucket([]byte(name))
		switch name {
		case string(bTasks), string(bLive), string(bLapse), string(bWake), string(bAfter):
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
