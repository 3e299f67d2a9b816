// Package gatedfs is a file system for tests that holds every fsync of a
// WAL until the test answers it: a test of pipelined group commit decides
// the next batch while the last one's fsync is held, and fails it at will.
package gatedfs

import (
	"sync/atomic"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/wal"
)

// FS holds every fsync of the WAL while Gated is set: it says so on
// Syncing, and returns what the test sends on Gate (nil: the fsync
// proceeds).
type FS struct {
	store.OS
	Gated   atomic.Bool
	Syncing chan struct{}
	Gate    chan error
}

// New is a gated file system, holding fsyncs from the start.
func New() *FS {
	g := &FS{Syncing: make(chan struct{}, 16), Gate: make(chan error)}
	g.Gated.Store(true)
	return g
}

func (g *FS) WAL(s wal.Storage) wal.Storage { return storage{Storage: s, fs: g} }

type storage struct {
	wal.Storage
	fs *FS
}

func (s storage) Sync() error {
	if !s.fs.Gated.Load() {
		return s.Storage.Sync()
	}
	s.fs.Syncing <- struct{}{}
	if err := <-s.fs.Gate; err != nil {
		return err
	}
	return s.Storage.Sync()
}
