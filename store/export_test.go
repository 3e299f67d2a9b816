package store

import (
	"time"

	"golang.org/x/sys/unix"
)

// What the tests of package store_test reach inside the package.

// MinCheckpointTail is minCheckpointTail.
const MinCheckpointTail = minCheckpointTail

// DecodesAsCheckpoint reports whether data is an intact checkpoint.
func DecodesAsCheckpoint(data []byte) bool {
	_, _, ok := decodeCheckpoint(data, nil, nil)
	return ok
}

// CheckpointOf is the checkpoint of the WAL at path as it stands.
func CheckpointOf(path string) ([]byte, error) {
	h := Open(Options{Path: path, LockTimeout: time.Second, FullReplay: true})
	defer h.Close()
	var cp []byte
	err := h.Read(func(tx *Tx) (err error) {
		cp, err = encodeCheckpoint(tx.State, tx.log.Position)
		return err
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
