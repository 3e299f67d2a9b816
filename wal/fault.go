package wal

import (
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"time"
)

// Fault is a failure injected into appends, for the crash-window and
// rollback tests: a crash (SIGKILL of this very process) at a named point of
// an append, a pause there, or a failing disk. It is set only by tests,
// through the LEASEWAL_FAILPOINT environment variable (see cmd).
//
// Points, in the order an append passes them:
//
//	before-write  nothing of the frame is written yet
//	mid-write     half of the frame is written (a torn tail)
//	after-write   the whole frame is written, not yet fsynced
//	after-sync    the frame is durable; the answer is not printed yet
//
// and in the order a compaction's replacement of the WAL passes them (Replace):
//
//	compact-partial  the new WAL's first two records are written beside the old one
//	compact-synced   the new WAL is complete and fsynced, not yet renamed
//	compact-renamed  the new WAL is renamed over the old, the directory not fsynced
//	compact-done     the directory is fsynced; the caches are not removed yet
//
// and, in the store, as an end that many tasks wait for is applied:
//
//	index-partial    a chunk of its dependents is written into the index,
//	                 which says it holds part of a write; the record may not
//	                 be in the WAL yet
//
// Actions: kill (the default), sleep=DURATION, and the disk faults
// short-write, enospc, fsync-eio and dirsync-eio (the fsync of the directory
// of a new WAL), which need no point.
type Fault struct {
	Point  string
	Action string
	Delay  time.Duration
	// Hold, a Go test's (no flag sets it), is called at the point instead
	// of the action: it returns when the test lets the write go on.
	Hold func()
}

var faultPoints = map[string]bool{"before-write": true, "mid-write": true, "after-write": true, "after-sync": true,
	"compact-partial": true, "compact-synced": true, "compact-renamed": true, "compact-done": true, "index-partial": true}

// ParseFault reads "POINT[:ACTION]" or a disk fault name.
func ParseFault(spec string) (*Fault, error) {
	switch spec {
	case "short-write", "enospc", "fsync-eio", "dirsync-eio":
		return &Fault{Action: spec}, nil
	}
	point, action, _ := strings.Cut(spec, ":")
	if !faultPoints[point] {
		return nil, fmt.Errorf("unknown failpoint %q: use before-write, mid-write, after-write, after-sync or compact-partial, compact-synced, compact-renamed, compact-done, index-partial, optionally with :kill or :sleep=DURATION; or short-write, enospc, fsync-eio, dirsync-eio", spec)
	}
	f := &Fault{Point: point, Action: "kill"}
	if d, ok := strings.CutPrefix(action, "sleep="); ok {
		delay, err := time.ParseDuration(d)
		if err != nil {
			return nil, fmt.Errorf("failpoint %q: %w", spec, err)
		}
		f.Action, f.Delay = "sleep", delay
	} else if action != "" && action != "kill" {
		return nil, fmt.Errorf("failpoint %q: unknown action %q", spec, action)
	}
	return f, nil
}

// Reach is called as an append, or the store, passes point.
func (f *Fault) Reach(point string) {
	if f == nil || f.Point != point {
		return
	}
	if f.Hold != nil {
		f.Hold()
		return
	}
	if f.Action == "sleep" {
		time.Sleep(f.Delay)
		return
	}
	// A crash, as abrupt as a power cut is for the process: no deferred
	// code, no flush. What the kernel already holds stays in the file.
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// splitsWrite reports whether the frame must be written in two halves, so
// that the mid-write point has a torn tail on disk.
func (f *Fault) splitsWrite() bool { return f != nil && f.Point == "mid-write" }

// faultyStore fails the way disks do.
type faultyStore struct {
	Storage
	action string
}

func (s *faultyStore) WriteAt(p []byte, off int64) (int, error) {
	switch s.action {
	case "short-write":
		return s.Storage.WriteAt(p[:len(p)/2], off)
	case "enospc":
		n, _ := s.Storage.WriteAt(p[:len(p)/3], off)
		return n, syscall.ENOSPC
	}
	return s.Storage.WriteAt(p, off)
}

func (s *faultyStore) Sync() error {
	if s.action == "fsync-eio" {
		s.action = "" // the rollback's own fsync succeeds, as a retried fsync may
		return syscall.EIO
	}
	return s.Storage.Sync()
}

// Inject makes every later append on l meet f.
func (l *Log) Inject(f *Fault) {
	l.fault = f
	if f != nil && f.Point == "" {
		l.store = &faultyStore{Storage: l.store, action: f.Action}
	}
}

// writeFrame writes frame at off, in two halves when a mid-write fault waits
// between them.
func writeFrame(w io.WriterAt, frame []byte, off int64, f *Fault) (int, error) {
	if !f.splitsWrite() {
		return w.WriteAt(frame, off)
	}
	half := len(frame) / 2
	n, err := w.WriteAt(frame[:half], off)
	if err != nil {
		return n, err
	}
	f.Reach("mid-write")
	m, err := w.WriteAt(frame[half:], off+int64(half))
	return n + m, err
}
