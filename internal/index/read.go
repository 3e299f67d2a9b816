package index

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	bolt "go.etcd.io/bbolt"

	"github.com/leasewal/leasewal/state"
)

// Reader is a read transaction of the index: the state.Source of the
// tasks it holds. It must be closed before the index is written or closed
// (bbolt cannot grow its file under an open read transaction).
type Reader struct {
	tx     *bolt.Tx
	tasks  *bolt.Bucket
	seek   *bolt.Cursor          // Task's: a Get makes a cursor each time
	cached map[int64]*state.Task // decoded in this transaction
	// file is the index file's id (meta), and notes the buffer Task
	// builds the note of each copy in (stored).
	file  string
	notes keySet
}

// Read begins a read transaction.
func (d *DB) Read() (*Reader, error) {
	var r *Reader // set once the whole read has begun
	err := guard(func() error {
		tx, err := d.db.Begin(false)
		if err != nil {
			return err
		}
		defer func() {
			if r == nil { // refused, or a damaged page panicked: a transaction left open would keep Close waiting
				_ = tx.Rollback()
			}
		}()
		tasks := tx.Bucket(bTasks)
		if tasks == nil {
			return ErrNoIndex
		}
		read := &Reader{tx: tx, tasks: tasks, seek: tasks.Cursor(), cached: map[int64]*state.Task{}}
		read.file = string(tx.Bucket(bMeta).Get(kFile))
		r = read
		return nil
	})
	return r, err
}

// Close ends the transaction.
func (r *Reader) Close() {
	if r != nil {
		_ = r.tx.Rollback()
	}
}

// maxCached bounds the tasks a transaction keeps decoded: a read of every
// task (a listing, a base) holds at most this many.
const maxCached = 4096

// Task is the task numbered n (nil: none), with a note of its copy's keys
// (Task.Stored), which a write of the task back reads instead of the copy.
func (r *Reader) Task(n int64) (t *state.Task, err error) {
	if t := r.cached[n]; t != nil {
		return t, nil
	}
	err = guard(func() error {
		var key [8]byte
		k, b := r.seek.Seek(appendNum(key[:0], n))
		if b == nil || !bytes.Equal(k, key[:]) {
			return nil
		}
		t, err = unseal(n, b)
		return err
	})
	if t != nil && r.file != "" {
		keysOf(t, n, math.MinInt64, &r.notes)
		t.Stored = &stored{file: r.file, tx: r.tx.ID(), n: n, keys: r.notes.pack()}
	}
	if t != nil {
		if len(r.cached) >= maxCached {
			clear(r.cached)
		}
		r.cached[n] = t
	}
	return t, err
}

// lookup is the number of the task key names in bucket (0: none), checked
// against the task itself (has, which a task the key does not name fails:
// damage).
func (r *Reader) lookup(bucket []byte, key string, has func(*state.Task) bool) (n int64, err error) {
	err = guard(func() error {
		v := r.tx.Bucket(bucket).Get([]byte(key))
		if v == nil {
			return nil
		}
		if len(v) != 8 {
			return errKey(string(bucket), []byte(key))
		}
		n = int64(binary.BigEndian.Uint64(v))
		return nil
	})
	if err != nil || n == 0 {
		return 0, err
	}
	t, err := r.Task(n)
	if err == nil && (t == nil || !has(t)) {
		err = &damageError{what: fmt.Sprintf("%s %q names task %d, which is not its", bucket, key, n)}
	}
	return n, err
}

// Submitted is the number of the task request id req created (0: none).
func (r *Reader) Submitted(req string) (int64, error) {
	return r.lookup(bSubmits, req, func(t *state.Task) bool { return t.RequestID == req })
}

// LeaseOwner is the number of the task lease was granted for (0: none).
func (r *Reader) LeaseOwner(lease string) (int64, error) {
	return r.lookup(bLeases, lease, func(t *state.Task) bool { return t.AttemptOf(lease) != nil })
}

// LeaseRequested is the number of the task a lease request id leased.
func (r *Reader) LeaseRequested(req string) (int64, error) {
	return r.lookup(bLeaseReqs, req, func(t *state.Task) bool {
		return slices.ContainsFunc(t.Attempts, func(a state.Attempt) bool { return a.RequestID == req })
	})
}

// Each hands fn every task in creation order (only those unfinished as
// recorded, with unfinished), decoding each in turn.
func (r *Reader) Each(unfinished bool, fn func(*state.Task) bool) error {
	return guard(func() error {
		if !unfinished {
			c := r.tasks.Cursor()
			for k, v := c.First(); k != nil; k, v = c.Next() {
				if len(k) != 8 {
					return errKey("tasks", k)
				}
				t, err := unseal(int64(binary.BigEndian.Uint64(k)), v)
				if err != nil {
					return err
				}
				if !fn(t) {
					return nil
				}
			}
			return nil
		}
		c := r.tx.Bucket(bLive).Cursor()
		for k, _ := c.First(); k != nil; k, _ = c.Next() {
			if len(k) != 8 {
				return errKey("live", k)
			}
			n := int64(binary.BigEndian.Uint64(k))
			t, err := unseal(n, r.tasks.Get(k))
			if err == nil && t.State.Terminal() {
				err = &damageError{what: fmt.Sprintf("task %d is marked unfinished and is %s", n, t.State)}
			}
			if err != nil {
				return err
			}
			if !fn(t) {
				return nil
			}
		}
		return nil
	})
}

// Unfinished is how many tasks of queues (of every queue, for none) are
// unfinished as recorded: keys counted, no task decoded.
func (r *Reader) Unfinished(queues []string) (n int, err error) {
	err = guard(func() error {
		if len(queues) == 0 {
			n = r.tx.Bucket(bLive).Stats().KeyN
			return nil
		}
		c := r.tx.Bucket(bQueued).Cursor()
		for _, q := range queues {
			prefix := append([]byte(q), 0)
			for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
				n++
			}
		}
		return nil
	})
	return n, err
}

// Queues is every queue holding an unfinished task, by name (those whose
// only tasks wait for others too: queued, not order).
func (r *Reader) Queues() (queues []string, err error) {
	err = guard(func() error {
		c := r.tx.Bucket(bQueued).Cursor()
		for k, _ := c.First(); k != nil; {
			i := bytes.IndexByte(k, 0)
			if i < 0 {
				return errKey("queued", k)
			}
			queues = append(queues, string(k[:i]))
			k, _ = c.Seek(append(bytes.Clone(k[:i]), 1)) // the next queue: past every key of this one
		}
		return nil
	})
	return queues, err
}

// Queued hands fn a queue's unfinished tasks in lease order.
func (r *Reader) Queued(queue string, after state.OrderEntry, fn func(state.OrderEntry) bool) error {
	return guard(func() error {
		prefix := append([]byte(queue), 0)
		c := r.tx.Bucket(bOrder).Cursor()
		k, v := c.Seek(prefix)
		if after.Num != 0 {
			from := appendOrderKey(nil, queue, after.Priority, after.Num)
			if k, v = c.Seek(from); bytes.Equal(k, from) {
				k, v = c.Next()
			}
		}
		for ; k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
			rest := k[len(prefix):]
			if len(rest) != 10 || len(v) != orderValueLen {
				return errKey("order", k)
			}
			e := state.OrderEntry{Num: int64(binary.BigEndian.Uint64(rest[2:])), Priority: state.MaxPriority - int(binary.BigEndian.Uint16(rest)),
				From: int64(binary.BigEndian.Uint64(v)), To: int64(binary.BigEndian.Uint64(v[8:])), Leased: v[16] == 1}
			if !fn(e) {
				return nil
			}
		}
		return nil
	})
}

// Leased hands fn the tasks leased as recorded by worker (by any worker,
// for ""), by worker and then in creation order, each checked against the
// task itself (damage when it is not leased so).
func (r *Reader) Leased(worker string, fn func(int64) bool) error {
	var prefix []byte
	if worker != "" {
		prefix = append([]byte(worker), 0)
	}
	return guard(func() error {
		c := r.tx.Bucket(bHeld).Cursor()
		for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			i := bytes.IndexByte(k, 0)
			if i < 0 || len(k) != i+9 {
				return errKey("held", k)
			}
			n := int64(binary.BigEndian.Uint64(k[i+1:]))
			// A task Task handed out before may have been changed since by
			// the state that took it: the check reads the copy again. One
			// not read yet is read through Task, which the state's read of
			// it then finds decoded.
			var t *state.Task
			var err error
			if _, handed := r.cached[n]; handed {
				t, err = unseal(n, r.tasks.Get(k[i+1:]))
			} else if t, err = r.Task(n); err == nil && t == nil {
				err = &damageError{what: fmt.Sprintf("held names task %d, which the index does not hold", n)}
			}
			if err == nil && (t.State != state.Leased || t.Lease.Worker != string(k[:i])) {
				err = &damageError{what: fmt.Sprintf("held names task %d under worker %q, which does not hold it", n, k[:i])}
			}
			if err != nil {
				return err
			}
			if !fn(n) {
				return nil
			}
		}
		return nil
	})
}

// Lapsing hands fn, by time, the tasks whose lapse time is at or before until.
func (r *Reader) Lapsing(until int64, fn func(int64) bool) error {
	return guard(func() error {
		c := r.tx.Bucket(bLapse).Cursor()
		for k, _ := c.First(); k != nil && keyTime(k) <= until; k, _ = c.Next() {
			if len(k) != 16 {
				return errKey("lapse", k)
			}
			if !fn(int64(binary.BigEndian.Uint64(k[8:]))) {
				return nil
			}
		}
		return nil
	})
}

// Dependents hands fn every unfinished task that waits, as recorded, for
// task n.
func (r *Reader) Dependents(n, after int64, fn func(int64) bool) error {
	return guard(func() error {
		c := r.tx.Bucket(bAfter).Cursor()
		prefix := num(n)
		for k, _ := c.Seek(appendEdgeKey(nil, n, after+1)); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
			if len(k) != 16 {
				return errKey("after", k)
			}
			if !fn(int64(binary.BigEndian.Uint64(k[8:]))) {
				return nil
			}
		}
		return nil
	})
}

// Upcoming hands fn, by time, the lapse and wake times after after, each
// with its task's number: the two buckets merged.
func (r *Reader) Upcoming(after int64, fn func(at, n int64) bool) error {
	return r.times(after, fn, bLapse, bWake)
}

// Wakes hands fn, by time, the wake times after after, each with its
// task's number.
func (r *Reader) Wakes(after int64, fn func(at, n int64) bool) error {
	return r.times(after, fn, bWake)
}

// times hands fn, by time, the keys after after of buckets of times, each
// with its task's number: the buckets merged.
func (r *Reader) times(after int64, fn func(at, n int64) bool, buckets ...[]byte) error {
	return guard(func() error {
		from := appendTimeKey(nil, after+1, 0)
		cursors, keys := make([]*bolt.Cursor, len(buckets)), make([][]byte, len(buckets))
		for i, b := range buckets {
			cursors[i] = r.tx.Bucket(b).Cursor()
			keys[i], _ = cursors[i].Seek(from)
		}
		for {
			next := -1
			for i, k := range keys {
				if k != nil && (next < 0 || bytes.Compare(k, keys[next]) < 0) {
					next = i
				}
			}
			if next < 0 {
				return nil
			}
			k := keys[next]
			if len(k) != 16 {
				return errKey(string(buckets[next]), k)
			}
			if !fn(keyTime(k), int64(binary.BigEndian.Uint64(k[8:]))) {
				return nil
			}
			keys[next], _ = cursors[next].Next()
		}
	})
}

// errKey is a key or value of a bucket that this package never wrote.
func errKey(bucket string, k []byte) error {
	return &damageError{what: "a key of bucket " + bucket + " is malformed: " + string(bytes.ToValidUTF8(k, []byte("?")))}
}

type damageError struct{ what string }

func (e *damageError) Error() string { return "the index is damaged: " + e.what }
