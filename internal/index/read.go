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
	seek   *cursor               // Task's: a Get makes a cursor each time
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
		read := &Reader{tx: tx, tasks: tasks, cached: map[int64]*state.Task{}}
		read.seek = read.cursor(bTasks)
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
		k, b, err := r.seek.seek(appendNum(key[:0], n))
		if err != nil || !bytes.Equal(k, key[:]) {
			return err
		}
		t, err = decodeTask(n, b)
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
		k, v, err := r.cursor(bucket).seek([]byte(key)) // a Get, with the entries around it checked
		if err != nil || !bytes.Equal(k, []byte(key)) {
			return err
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
			return r.walk(bTasks, nil, nil, func(k, v []byte) (bool, error) {
				if len(k) != 8 {
					return false, errKey("tasks", k)
				}
				t, err := decodeTask(int64(binary.BigEndian.Uint64(k)), v)
				return err == nil && fn(t), err
			})
		}
		return r.walk(bLive, nil, nil, func(k, _ []byte) (bool, error) {
			if len(k) != 8 {
				return false, errKey("live", k)
			}
			n := int64(binary.BigEndian.Uint64(k))
			t, err := unseal(n, r.tasks.Get(k))
			if err == nil && t.State.Terminal() {
				err = &damageError{what: fmt.Sprintf("task %d is marked unfinished and is %s", n, t.State)}
			}
			return err == nil && fn(t), err
		})
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
		for _, q := range queues {
			prefix := append([]byte(q), 0)
			if err := r.walk(bQueued, prefix, prefix, func([]byte, []byte) (bool, error) { n++; return true, nil }); err != nil {
				return err
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
		c := r.cursor(bQueued)
		k, _, err := c.seek(nil)
		for err == nil && k != nil {
			i := bytes.IndexByte(k, 0)
			if i < 0 {
				return errKey("queued", k)
			}
			queues = append(queues, string(k[:i]))
			k, _, err = c.seek(append(bytes.Clone(k[:i]), 1)) // the next queue: past every key of this one
		}
		return err
	})
	return queues, err
}

// Queued hands fn a queue's unfinished tasks in lease order.
func (r *Reader) Queued(queue string, after state.OrderEntry, fn func(state.OrderEntry) bool) error {
	return guard(func() error {
		prefix := append([]byte(queue), 0)
		from := prefix
		if after.Num != 0 {
			from = appendOrderKey(nil, queue, after.Priority, after.Num)
		}
		return r.walk(bOrder, from, prefix, func(k, v []byte) (bool, error) {
			if after.Num != 0 && bytes.Equal(k, from) { // after itself
				return true, nil
			}
			rest := k[len(prefix):]
			if len(rest) != 10 || len(v) != orderValueLen {
				return false, errKey("order", k)
			}
			return fn(state.OrderEntry{Num: int64(binary.BigEndian.Uint64(rest[2:])), Priority: state.MaxPriority - int(binary.BigEndian.Uint16(rest)),
				From: int64(binary.BigEndian.Uint64(v)), To: int64(binary.BigEndian.Uint64(v[8:])), Leased: v[16] == 1}), nil
		})
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
		return r.walk(bHeld, prefix, prefix, func(k, _ []byte) (bool, error) {
			i := bytes.IndexByte(k, 0)
			if i < 0 || len(k) != i+9 {
				return false, errKey("held", k)
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
			return err == nil && fn(n), err
		})
	})
}

// Lapsing hands fn, by time, the tasks whose lapse time is at or before until.
func (r *Reader) Lapsing(until int64, fn func(int64) bool) error {
	return guard(func() error {
		return r.walk(bLapse, nil, nil, func(k, _ []byte) (bool, error) {
			if len(k) != 16 {
				return false, errKey("lapse", k)
			}
			return keyTime(k) <= until && fn(int64(binary.BigEndian.Uint64(k[8:]))), nil
		})
	})
}

// Dependents hands fn every unfinished task that waits, as recorded, for
// task n.
func (r *Reader) Dependents(n, after int64, fn func(int64) bool) error {
	return guard(func() error {
		return r.walk(bAfter, appendEdgeKey(nil, n, after+1), num(n), func(k, _ []byte) (bool, error) {
			if len(k) != 16 {
				return false, errKey("after", k)
			}
			return fn(int64(binary.BigEndian.Uint64(k[8:]))), nil
		})
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
		cursors, keys := make([]*cursor, len(buckets)), make([][]byte, len(buckets))
		for i, b := range buckets {
			cursors[i] = r.cursor(b)
			var err error
			if keys[i], _, err = cursors[i].seek(from); err != nil {
				return err
			}
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
			var err error
			if keys[next], _, err = cursors[next].next(); err != nil {
				return err
			}
		}
	})
}

// walk hands fn, in key order, each entry of bucket from the first key at
// or after from (the first key, for nil) while its key begins with prefix,
// read by a cursor, until fn says no more or fails.
func (r *Reader) walk(bucket, from, prefix []byte, fn func(k, v []byte) (bool, error)) error {
	c := r.cursor(bucket)
	k, v, err := c.seek(from)
	for ; err == nil && k != nil && bytes.HasPrefix(k, prefix); k, v, err = c.next() {
		if more, err := fn(k, v); err != nil || !more {
			return err
		}
	}
	return err
}

// cursor reads a bucket of sealed entries (entrySum, or a task's) and checks, as it
// goes, what bbolt does not, keeping no checksum of its pages: every entry
// it reads is sealed and after the one before it, and the entry before the
// one a seek lands on is sealed and before the key sought. A flipped key,
// of a branch page or of a leaf, can send bbolt's binary search past the
// entries sought, and a flipped page number can hand a leaf twice: the
// first check finds the entries in another's place, the second the place.
type cursor struct {
	c      *bolt.Cursor
	bucket []byte
	sum    uint32 // bucketSum's
	last   []byte // the key read last
	kv     []byte // an entry's key and value, checksummed at once
}

func (r *Reader) cursor(bucket []byte) *cursor {
	return &cursor{c: r.tx.Bucket(bucket).Cursor(), bucket: bucket, sum: bucketSum(bucket)}
}

// seek moves to the first key at or after from (the first key, for nil)
// and reads it (a nil key: none).
func (c *cursor) seek(from []byte) (k, v []byte, err error) {
	c.last = nil
	if from == nil {
		return c.read(c.c.First())
	}
	var before, bv []byte
	if k, v = c.c.Seek(from); k != nil {
		before, bv = c.c.Prev()
	} else {
		before, bv = c.c.Last()
	}
	if before != nil {
		if _, _, err := c.read(before, bv); err != nil {
			return nil, nil, err
		}
		if bytes.Compare(before, from) >= 0 {
			return nil, nil, c.misplaced(before)
		}
	}
	if k == nil {
		return nil, nil, nil
	}
	if bytes.Compare(k, from) < 0 { // a branch page's key flipped higher sends the search a page early
		return nil, nil, c.misplaced(k)
	}
	if before == nil { // the cursor back on k: Prev leaves it on the first key when it finds none before
		c.c.First()
	} else {
		c.c.Next()
	}
	return c.read(k, v)
}

// next moves to the next key and reads it (a nil key: none).
func (c *cursor) next() (k, v []byte, err error) { return c.read(c.c.Next()) }

// read checks key k and its value v where the cursor stands, and says the
// value without its seal (a task's encoding, for decodeTask).
func (c *cursor) read(k, v []byte) ([]byte, []byte, error) {
	if k == nil {
		return nil, nil, nil
	}
	if len(v) < 4 {
		return nil, nil, c.unsealed(k)
	}
	body, seal := v[:len(v)-4], binary.BigEndian.Uint32(v[len(v)-4:])
	if bytes.Equal(c.bucket, bTasks) { // a task's own seal (sealed)
		if len(k) != 8 || taskSum(int64(binary.BigEndian.Uint64(k)), body) != seal {
			return nil, nil, c.unsealed(k)
		}
	} else if c.kv = append(append(c.kv[:0], k...), body...); entrySum(c.sum, c.kv) != seal {
		return nil, nil, c.unsealed(k)
	}
	v = body
	if c.last != nil && bytes.Compare(k, c.last) <= 0 {
		return nil, nil, c.misplaced(k)
	}
	c.last = k
	return k, v, nil
}

func (c *cursor) unsealed(k []byte) error {
	return &damageError{what: fmt.Sprintf("an entry of bucket %s does not match its checksum: %s", c.bucket, bytes.ToValidUTF8(k, []byte("?")))}
}

func (c *cursor) misplaced(k []byte) error {
	return &damageError{what: fmt.Sprintf("bucket %s holds %s out of its order", c.bucket, bytes.ToValidUTF8(k, []byte("?")))}
}

// errKey is a key or value of a bucket that this package never wrote.
func errKey(bucket string, k []byte) error {
	return &damageError{what: "a key of bucket " + bucket + " is malformed: " + string(bytes.ToValidUTF8(k, []byte("?")))}
}

type damageError struct{ what string }

func (e *damageError) Error() string { return "the index is damaged: " + e.what }
