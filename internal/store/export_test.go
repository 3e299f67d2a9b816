package store

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasewal/leasewal/internal/index"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// What the tests of package store_test reach inside the package.

// IndexAfter and IndexTail are indexAfter and indexTail.
const (
	IndexAfter = indexAfter
	IndexTail  = indexTail
)

// SetWriteChunk makes writeIndex write n tasks a transaction until restore.
func SetWriteChunk(n int) (restore func()) {
	old := writeChunk
	writeChunk = n
	return func() { writeChunk = old }
}

// IndexSuffix is the index's name beside its WAL.
const IndexSuffix = index.Suffix

// IndexOf says how many records the index beside the WAL at path holds,
// and whether it loads as a state of that many.
func IndexOf(path string) (int, bool) {
	h := Open(Options{Path: path})
	defer h.Close()
	o, meta, head, ok := h.openIndex(false)
	if !ok {
		return 0, false
	}
	defer o.close()
	st, err := state.LoadHead(head, o.r)
	return meta.Position.Count, err == nil && st.LastSeq() >= int64(meta.Position.Count) && meta.Seq == st.LastSeq()
}

// PeakHot is the most tasks memory held during the handle's last replay
// from the WAL's start.
func (h *Handle) PeakHot() int { return h.peakHot }

// PollEvery is pollEvery.
const PollEvery = pollEvery

// WatchWithoutInotify is Watch where inotify cannot be had.
func (h *Handle) WatchWithoutInotify() (*Watcher, error) {
	return h.watchWith(&hub{fd: -1, init: func(int) (int, error) { return -1, unix.EMFILE }})
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.ReaderAt
	n int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	c.n += int64(n)
	return n, err
}

// PayloadsRead reads the payload of every task of the WAL at path, in
// creation order, through one payloadSource, and says how many bytes of the
// file that took.
func PayloadsRead(path string) (payloads map[string]string, bytesRead int64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	counting := &countingReader{r: f}
	source := newPayloadSource(counting, path)
	h := Open(Options{Path: path, LockTimeout: time.Second, FullReplay: true})
	defer h.Close()
	payloads = map[string]string{}
	err = h.Read(func(tx *Tx) error {
		var readErr error
		err := tx.State.EachTask(false, func(t *state.Task) bool {
			text, err := t.Payload.Text()
			if ref := t.Payload.Ref(); errors.Is(err, state.ErrPayloadNotHeld) && ref != nil {
				text, err = source.read(ref)
			}
			payloads[t.ID], readErr = text, err
			return err == nil
		})
		return cmp.Or(readErr, err)
	})
	return payloads, counting.n, err
}

// SetBootID makes the store take id for this boot's, until restore.
func SetBootID(id string) (restore func()) {
	was := bootID
	bootID = func() string { return id }
	return func() { bootID = was }
}

// IndexSynced says whether the index beside the WAL at path says it was
// synced, and the boot that wrote it.
func IndexSynced(path string) (bool, string) {
	db, err := index.Open(path+index.Suffix, false, time.Minute)
	if err != nil {
		return false, ""
	}
	defer db.Close()
	meta, _, _ := db.Meta()
	return meta.Synced, meta.Boot
}

// BootID is this boot's id as the store reads it.
func BootID() string { return bootID() }

// TamperIndex changes task number n's priority in the index beside the WAL
// at path, behind the WAL's back: an index that loads and is wrong.
func TamperIndex(path string, n int64) error {
	return rewriteIndex(path, func(db *index.DB, _ *index.Meta) ([]*state.Task, error) {
		r, err := db.Read()
		if err != nil {
			return nil, err
		}
		defer r.Close()
		t, err := r.Task(n)
		if err != nil {
			return nil, err
		}
		t.Priority = (t.Priority + 1) % state.MaxPriority
		return []*state.Task{t}, nil
	})
}

// rewriteIndex writes into the index beside the WAL at path the tasks and
// the meta change makes of its own.
func rewriteIndex(path string, change func(*index.DB, *index.Meta) ([]*state.Task, error)) error {
	db, err := index.Open(path+index.Suffix, true, time.Minute)
	if err != nil {
		return err
	}
	defer db.Close()
	meta, head, err := db.Meta()
	if err != nil {
		return err
	}
	tasks, err := change(db, &meta)
	if err != nil {
		return err
	}
	return db.Write(tasks, head, meta, true)
}

// Committing says whether a committer writes the pipe's index.
func (p *Pipe) Committing() bool { return p.commit != nil }

// WaitCommitted hands the pipe's committer what the pipe holds, taking
// back the state of a commit before when there is one, and waits until it
// has written the index up to at least records records; a hang guard says
// what it waited for. Only the goroutine that calls Batch may call it.
func (p *Pipe) WaitCommitted(records int) error {
	guard := time.After(2 * time.Minute)
	for p.commit.written.Load() < int64(records) {
		p.CaptureNow()
		select {
		case <-guard:
			return fmt.Errorf("the committer wrote the index up to record %d in 2 minutes, not %d", p.commit.written.Load(), records)
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

// CaptureWatched hands the committer a copy of what the pipe holds now (it
// must hold nothing of the pipe's: WaitCommitted before), and returns a
// channel closed once the committer has found the WAL not yet durable up
// to it. Only the goroutine that calls Batch may call it.
func (p *Pipe) CaptureWatched() <-chan struct{} {
	c, want := p.commit, p.tx.log.Count
	waiting, once, durable := make(chan struct{}), sync.Once{}, c.durable
	c.durable = func() (wal.Position, int) {
		pos, version := durable()
		if pos.Count < want {
			once.Do(func() { close(waiting) })
		}
		return pos, version
	}
	p.CaptureNow()
	return waiting
}

// CaptureNow has the pipe hand its committer a copy of what it holds, and
// says whether it did. Only the goroutine that calls Batch may call it.
func (p *Pipe) CaptureNow() bool {
	p.rebase()
	p.capture(true)
	return p.commit.busy
}

// IndexedBy is how many records the pipe's committer has written into the
// index.
func (p *Pipe) IndexedBy() int { return int(p.commit.written.Load()) }

// IndexedAt is how many records the index the handle's state reads holds.
func (h *Handle) IndexedAt() int { return h.indexed.Count }

// HotCount is how many tasks the pipe's state holds in memory.
func (p *Pipe) HotCount() int { return p.tx.State.HotCount() }

// MarkIndexUnsynced makes the index beside the WAL at path say it was
// written without sync in the boot named boot.
func MarkIndexUnsynced(path, boot string) error {
	return rewriteIndex(path, func(_ *index.DB, meta *index.Meta) ([]*state.Task, error) {
		meta.Synced, meta.Boot = false, boot
		return nil, nil
	})
}

// InFlight is how many batches the pipe's syncer was handed and has not
// yet counted off: it answers a run before it counts it off.
func (p *Pipe) InFlight() int64 { return p.queued.Load() }

// Told says whether a change is waiting to end w's next Wait.
func (w *Watcher) Told() bool { return len(w.changed) > 0 }
