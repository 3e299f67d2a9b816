package store

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/leasewal/leasewal/wal"
)

// Watcher wakes a waiting worker when the WAL may have changed. Every
// Watcher of a process shares one inotify instance (a hub) with one watch
// per directory, so a server with hundreds of waiting requests holds one
// inotify descriptor, not hundreds (the per-user limit is 128). Watching the
// directory, filtered to the WAL's name, sees a WAL created, replaced by
// rename or deleted as well as one appended to. Where inotify cannot be had
// (the limit is reached, a file system without it), a Watcher polls the
// WAL's identity, size and time every pollEvery instead, and says so once
// through the handle's warnings: a wait never fails for want of inotify.
type Watcher struct {
	path, name, dir string
	creating        string        // the prefix of the names the WAL is created under (names)
	changed         chan struct{} // an event about the WAL (buffered: one pending is enough)
	wake            chan struct{} // Interrupt
	polled          bool          // no inotify: compare stat results
	last            os.FileInfo
	hub             *hub
	only            atomic.Pointer[func() bool] // Only's
}

// ErrInterrupted is a Wait ended by Interrupt.
var ErrInterrupted = errors.New("the wait was interrupted")

// pollEvery is how often a Watcher without inotify looks at the WAL.
const pollEvery = 250 * time.Millisecond

// Watch starts watching the WAL at path. Close it when done.
func (h *Handle) Watch() (*Watcher, error) { return h.watchWith(watchHub) }

func (h *Handle) watchWith(hub *hub) (*Watcher, error) {
	name := filepath.Base(h.opts.Path)
	w := &Watcher{path: h.opts.Path, name: name, creating: name + wal.CreatingSuffix, dir: filepath.Dir(h.opts.Path),
		changed: make(chan struct{}, 1), wake: make(chan struct{}, 1), hub: hub}
	if err := hub.subscribe(w); err != nil {
		if errors.Is(err, fs.ErrNotExist) { // no directory to watch: no WAL can ever be there
			return nil, &NotRegularError{Path: h.opts.Path, What: "in a directory that does not exist (" + w.dir + ")"}
		}
		if !errors.Is(err, unix.EMFILE) && !errors.Is(err, unix.ENFILE) && !errors.Is(err, unix.ENOSPC) &&
			!errors.Is(err, unix.ENOSYS) && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOMEM) {
			return nil, err
		}
		w.polled = true
		w.last, _ = os.Stat(w.path)
		h.warn("cannot watch %s with inotify (%v): looking at it every %s instead", w.dir, err, pollEvery)
	}
	return w, nil
}

// Close stops watching.
func (w *Watcher) Close() {
	if !w.polled {
		w.hub.unsubscribe(w)
	}
}

// Only has the watcher tell of a change only when only, asked as the
// change is seen, reports true (nil: every change). A server's waiting
// lease sleeps through the writes that cannot give it a task, its thread
// not woken for them. It is called where the caller looks at the WAL's
// state (in a server's batch), so a change told before is dropped: that
// look has seen it (a write of two syscalls, told at the first, woke a
// waiter twice). With nil it is kept: the caller could not know what its
// look saw (a WAL that did not exist has no lock to keep another process
// from creating it between that look and this call).
func (w *Watcher) Only(only func() bool) {
	w.only.Store(&only)
	if only == nil {
		return
	}
	select {
	case <-w.changed:
	default:
	}
}

// wanted says whether a change seen now is told (Only).
func (w *Watcher) wanted() bool {
	only := w.only.Load()
	return only == nil || *only == nil || (*only)()
}

// Interrupt ends the current Wait, or the next one, with ErrInterrupted. It
// may be called from any goroutine.
func (w *Watcher) Interrupt() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// Wait blocks until the WAL may have changed (true) or until is reached
// (false). A zero until waits for a change only.
func (w *Watcher) Wait(until time.Time) (bool, error) {
	for {
		var timer <-chan time.Time
		wait := time.Duration(-1)
		if !until.IsZero() {
			if wait = time.Until(until); wait <= 0 {
				return false, nil
			}
		}
		if w.polled && (wait < 0 || wait > pollEvery) {
			wait = pollEvery
		}
		var t *time.Timer
		if wait >= 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		changed, done, err := w.await(timer)
		if t != nil {
			t.Stop()
		}
		if done {
			return changed, err
		}
	}
}

// await is one turn of Wait: done with its answer on a change or an
// interruption, or, when the timer fires, on what polling sees.
func (w *Watcher) await(timer <-chan time.Time) (changed, done bool, err error) {
	select {
	case <-w.changed:
		return true, true, nil
	case <-w.wake:
		return false, true, ErrInterrupted
	case <-timer:
		if w.polled && w.statChanged() && w.wanted() {
			return true, true, nil
		}
	}
	return false, false, nil
}

// statChanged compares the WAL's identity, size and time with the last look.
func (w *Watcher) statChanged() bool {
	now, _ := os.Stat(w.path)
	before := w.last
	w.last = now
	switch {
	case (now == nil) != (before == nil):
		return true
	case now == nil:
		return false
	}
	a, b := now.Sys().(*syscall.Stat_t), before.Sys().(*syscall.Stat_t)
	return a.Ino != b.Ino || a.Dev != b.Dev || now.Size() != before.Size() || !now.ModTime().Equal(before.ModTime())
}

// Waiting is how many Watchers of this process are open on inotify now:
// how many commands or requests wait for a WAL to change.
func Waiting() int {
	watchHub.mu.Lock()
	defer watchHub.mu.Unlock()
	n := 0
	for _, subs := range watchHub.subs {
		n += len(subs)
	}
	return n
}

// names says whether an event's name is w's WAL. The process that creates
// a WAL writes it under a temporary name, links it into place and goes on
// appending through the file it opened (wal.CreateBatch): inotify names
// those appends after the temporary name, which is gone.
func (w *Watcher) names(name string) bool {
	return name == w.name || strings.HasPrefix(name, w.creating)
}

// notify tells w its WAL may have changed.
func (w *Watcher) notify() {
	if !w.wanted() {
		return
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

// hub is the process's one inotify instance and the Watchers it serves. It
// exists while some Watcher does: the first subscriber opens it and starts
// its reader, the last one's Close stops the reader and closes it.
type hub struct {
	init  func(flags int) (int, error) // inotify_init1
	mu    sync.Mutex
	fd    int                          // the inotify instance; -1 while nobody watches
	stop  [2]int                       // a pipe that ends the reader
	dirs  map[string]int               // directory -> watch descriptor
	names map[int]string               // watch descriptor -> directory
	subs  map[string]map[*Watcher]bool // directory -> its watchers
}

var watchHub = &hub{fd: -1, init: unix.InotifyInit1}

// watchMask is what changes the WAL: a write or a cut (IN_MODIFY), one
// created, renamed over or away, or deleted. Not IN_CLOSE_WRITE: every
// command opens the WAL for writing, and a waiter that looks and finds
// nothing would wake every other waiter as it closes it, each of which
// would look again, and so on for ever.
const watchMask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_MOVED_TO | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_ATTRIB

func (h *hub) subscribe(w *Watcher) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fd < 0 {
		fd, err := h.init(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
		if err != nil {
			return err
		}
		if err := unix.Pipe2(h.stop[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
			unix.Close(fd)
			return err
		}
		h.fd = fd
		h.dirs, h.names, h.subs = map[string]int{}, map[int]string{}, map[string]map[*Watcher]bool{}
		go h.read(fd, h.stop)
	}
	if _, ok := h.dirs[w.dir]; !ok {
		wd, err := unix.InotifyAddWatch(h.fd, w.dir, watchMask)
		if err != nil {
			h.closeIfIdle()
			return err
		}
		h.dirs[w.dir], h.names[wd] = wd, w.dir
		h.subs[w.dir] = map[*Watcher]bool{}
	}
	h.subs[w.dir][w] = true
	return nil
}

func (h *hub) unsubscribe(w *Watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	subs := h.subs[w.dir]
	if !subs[w] {
		return
	}
	delete(subs, w)
	if len(subs) == 0 {
		wd := h.dirs[w.dir]
		_, _ = unix.InotifyRmWatch(h.fd, uint32(wd))
		delete(h.dirs, w.dir)
		delete(h.names, wd)
		delete(h.subs, w.dir)
	}
	h.closeIfIdle()
}

// closeIfIdle ends the reader once nobody watches; h.mu is held. The reader
// closes the instance and its pipe as it ends (waiting for it here, under
// h.mu, would deadlock with a dispatch under way); a new subscriber opens
// a new instance meanwhile.
func (h *hub) closeIfIdle() {
	if len(h.dirs) > 0 || h.fd < 0 {
		return
	}
	_, _ = unix.Write(h.stop[1], []byte{1})
	h.fd = -1
}

// read turns inotify events into notifications until the stop pipe is
// readable, then closes the instance and the pipe: they are its own.
func (h *hub) read(fd int, stop [2]int) {
	defer func() {
		unix.Close(fd)
		unix.Close(stop[0])
		unix.Close(stop[1])
	}()
	buf := make([]byte, 64<<10)
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(stop[0]), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, -1); err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
		if fds[1].Revents != 0 {
			return
		}
		for {
			n, err := unix.Read(fd, buf)
			if err != nil || n <= 0 {
				break
			}
			h.dispatch(buf[:n])
		}
	}
}

// dispatch notifies the watchers of each event's WAL name, or all of them
// when the queue overflowed (an event may have been lost).
func (h *hub) dispatch(events []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for off := 0; off+unix.SizeofInotifyEvent <= len(events); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&events[off]))
		nameLen := int(ev.Len)
		name := events[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+nameLen]
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		for dir, subs := range h.subs {
			if ev.Mask&unix.IN_Q_OVERFLOW == 0 && h.names[int(ev.Wd)] != dir {
				continue
			}
			for w := range subs {
				if ev.Mask&unix.IN_Q_OVERFLOW != 0 || w.names(string(name)) {
					w.notify()
				}
			}
		}
		off += unix.SizeofInotifyEvent + nameLen
	}
}
