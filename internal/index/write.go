package index

import (
	"bytes"
	"encoding/binary"
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
				if n <= newest {
					if old := tx.Bucket(bTasks).Get(num(n)); old != nil {
						prev, err := unseal(n, old)
						if err != nil {
							return err
						}
						c.unkey(prev, n)
					}
				}
				c.key(t, n, meta.At)
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

// key writes t over its copy: its own value, and the keys it has now; ids
// a task had stay its own (a request id or lease id never changes owner).
func (c *changes) key(t *state.Task, n, at int64) {
	key := num(n)
	c.put(bTasks, key, sealed(n, state.EncodeTask(t)))
	c.put(bSubmits, []byte(t.RequestID), key)
	for _, a := range t.Attempts {
		c.put(bLeases, []byte(a.LeaseID), key)
		if a.RequestID != "" {
			c.put(bLeaseReqs, []byte(a.RequestID), key)
		}
	}
	if t.State.Terminal() {
		return
	}
	c.put(bLive, key, nil)
	for _, d := range t.Waits() {
		c.put(bAfter, edgeKey(state.Number(d.ID), n), nil)
	}
	if !t.Pending() {
		c.put(bOrder, orderKey(t.Queue, t.Priority, n), orderValue(t.Order(n)))
	}
	if at := t.LapseAt(); at != 0 {
		c.put(bLapse, timeKey(at, n), nil)
	}
	if wake := t.WakeAt(); wake > at {
		c.put(bWake, timeKey(wake, n), nil)
	}
}

// unkey removes the keys of a task's copy that a change of the task
// changes: its live mark, lease order and times, or its end.
func (c *changes) unkey(t *state.Task, n int64) {
	if t.State.Terminal() {
		return
	}
	c.del(bLive, num(n))
	for _, d := range t.Waits() {
		c.del(bAfter, edgeKey(state.Number(d.ID), n))
	}
	if !t.Pending() {
		c.del(bOrder, orderKey(t.Queue, t.Priority, n))
	}
	if at := t.LapseAt(); at != 0 {
		c.del(bLapse, timeKey(at, n))
	}
	if at := t.WakeAt(); at != 0 {
		c.del(bWake, timeKey(at, n))
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
