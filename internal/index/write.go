package index

import (
	"encoding/binary"

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
			w := writer{tx: tx}
			for _, t := range tasks {
				if err := w.put(t); err != nil {
					return err
				}
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

// writer is one update transaction's buckets.
type writer struct {
	tx *bolt.Tx
}

// put writes t over its copy: the keys that were the copy's (its lease
// order, times, live mark) go, the new ones come; ids a task had stay its
// own (a request id or lease id never changes owner).
func (w writer) put(t *state.Task) error {
	n := state.Number(t.ID)
	key := num(n)
	tasks := w.tx.Bucket(bTasks)
	if old := tasks.Get(key); old != nil {
		prev, err := unseal(n, old)
		if err != nil {
			return err
		}
		if err := w.unkey(prev, n); err != nil {
			return err
		}
	}
	if err := tasks.Put(key, sealed(n, state.EncodeTask(t))); err != nil {
		return err
	}
	if err := w.tx.Bucket(bSubmits).Put([]byte(t.RequestID), key); err != nil {
		return err
	}
	for _, a := range t.Attempts {
		if err := w.tx.Bucket(bLeases).Put([]byte(a.LeaseID), key); err != nil {
			return err
		}
		if a.RequestID != "" {
			if err := w.tx.Bucket(bLeaseReqs).Put([]byte(a.RequestID), key); err != nil {
				return err
			}
		}
	}
	if t.State.Terminal() {
		return w.tx.Bucket(bEnded).Put(timeKey(t.Ended, n), nil)
	}
	e := t.Order(n)
	puts := []struct {
		bucket []byte
		key    []byte
		value  []byte
	}{{bLive, key, nil}, {bOrder, orderKey(t.Queue, t.Priority, n), orderValue(e)}}
	if at := t.LapseAt(); at != 0 {
		puts = append(puts, struct{ bucket, key, value []byte }{bLapse, timeKey(at, n), nil})
	}
	if at := t.WakeAt(); at != 0 {
		puts = append(puts, struct{ bucket, key, value []byte }{bWake, timeKey(at, n), nil})
	}
	for _, p := range puts {
		if err := w.tx.Bucket(p.bucket).Put(p.key, p.value); err != nil {
			return err
		}
	}
	return nil
}

// unkey removes the keys of a task's copy that a change of the task
// changes: its live mark, lease order and times, or its end.
func (w writer) unkey(t *state.Task, n int64) error {
	dels := []struct{ bucket, key []byte }{{bLive, num(n)}, {bOrder, orderKey(t.Queue, t.Priority, n)}}
	if at := t.LapseAt(); at != 0 {
		dels = append(dels, struct{ bucket, key []byte }{bLapse, timeKey(at, n)})
	}
	if at := t.WakeAt(); at != 0 {
		dels = append(dels, struct{ bucket, key []byte }{bWake, timeKey(at, n)})
	}
	if t.State.Terminal() {
		dels = append(dels, struct{ bucket, key []byte }{bEnded, timeKey(t.Ended, n)})
	}
	for _, d := range dels {
		if err := w.tx.Bucket(d.bucket).Delete(d.key); err != nil {
			return err
		}
	}
	return nil
}
