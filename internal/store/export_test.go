package store

import (
	"cmp"
	"errors"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasewal/leasewal/state"
)

// What the tests of package store_test reach inside the package.

// MinCheckpointTail is minCheckpointTail.
const MinCheckpointTail = minCheckpointTail

// DecodesAsCheckpoint reports whether data is an intact checkpoint.
func DecodesAsCheckpoint(data []byte) bool {
	_, runs, snapshot, ok := decodeCheckpoint(data)
	if !ok || len(runs.archive)+len(runs.cold) > 0 {
		return ok
	}
	_, err := state.LoadSnapshot(snapshot, nil, nil)
	return err == nil
}

// CheckpointOf is the checkpoint of the WAL at path as it stands.
func CheckpointOf(path string) ([]byte, error) {
	h := Open(Options{Path: path, LockTimeout: time.Second, FullReplay: true})
	defer h.Close()
	var cp []byte
	err := h.Read(func(tx *Tx) error {
		if a, c := tx.State.Archives(); len(a)+len(c) > 0 {
			return errors.New("the replay spilled: a checkpoint would name runs that are not beside the WAL")
		}
		cp = encodeCheckpoint(tx.State, tx.log.Position, runNames{})
		return nil
	})
	return cp, err
}

// LoadCheckpoint reads the checkpoint beside the WAL at path: how many
// records it holds, and whether it is good and matches its own state.
func LoadCheckpoint(path string) (int, bool) {
	h := Open(Options{Path: path})
	defer h.Close()
	st, pos, maps, ok := h.loadCheckpoint()
	if !ok {
		return 0, false
	}
	defer h.forget()
	h.mapped = maps
	return pos.Count, pos.Count == int(st.LastSeq())
}

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

// LenOf is lenOf.
func LenOf(files []*state.Archive) int { return lenOf(files) }
