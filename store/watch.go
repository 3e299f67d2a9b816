package store

import (
	"errors"
	"path/filepath"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watcher wakes a waiting worker when the WAL may have changed: inotify on
// the WAL's directory (so that a WAL created, replaced by rename or deleted
// is seen as well as one appended to), filtered to the WAL's name. It holds
// no lock. A waiter sleeps in poll(2) until an event or its deadline, never
// polling the file.
type Watcher struct {
	fd   int
	name string
	buf  []byte
	// wake is a pipe whose read end every Wait polls beside the inotify
	// descriptor, so that Interrupt can end a wait from another goroutine.
	wake [2]int
}

// ErrInterrupted is a Wait ended by Interrupt.
var ErrInterrupted = errors.New("the wait was interrupted")

// Watch starts watching the WAL at path. Close it when done.
func (h *Handle) Watch() (*Watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(h.opts.Path)
	const mask = unix.IN_MODIFY | unix.IN_CLOSE_WRITE | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_ATTRIB
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		return nil, err
	}
	w := &Watcher{fd: fd, name: filepath.Base(h.opts.Path), buf: make([]byte, 64<<10)}
	if err := unix.Pipe2(w.wake[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return w, nil
}

// Close stops watching.
func (w *Watcher) Close() {
	unix.Close(w.fd)
	unix.Close(w.wake[0])
	unix.Close(w.wake[1])
}

// Interrupt ends the current Wait, or the next one, with ErrInterrupted. It
// may be called from any goroutine while the watcher is open.
func (w *Watcher) Interrupt() { _, _ = unix.Write(w.wake[1], []byte{1}) }

// Wait blocks until the WAL may have changed (true) or until is reached
// (false). A zero until waits for a change only.
func (w *Watcher) Wait(until time.Time) (bool, error) {
	for {
		if w.drain() {
			return true, nil
		}
		timeout := -1
		if !until.IsZero() {
			left := time.Until(until)
			if left <= 0 {
				return false, nil
			}
			timeout = int(min(left.Milliseconds()+1, 1<<30))
		}
		fds := []unix.PollFd{{Fd: int32(w.fd), Events: unix.POLLIN}, {Fd: int32(w.wake[0]), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, timeout); err != nil && !errors.Is(err, unix.EINTR) {
			return false, err
		}
		if fds[1].Revents != 0 {
			return false, ErrInterrupted
		}
	}
}

// drain reads every pending event and reports whether one was about the WAL.
func (w *Watcher) drain() bool {
	changed := false
	for {
		n, err := unix.Read(w.fd, w.buf)
		if err != nil || n <= 0 {
			return changed
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&w.buf[off]))
			nameLen := int(ev.Len)
			name := w.buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+nameLen]
			for len(name) > 0 && name[len(name)-1] == 0 {
				name = name[:len(name)-1]
			}
			if string(name) == w.name || ev.Mask&unix.IN_Q_OVERFLOW != 0 {
				changed = true
			}
			off += unix.SizeofInotifyEvent + nameLen
		}
	}
}
