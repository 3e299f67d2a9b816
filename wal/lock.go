package wal

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Locking is writer-preferring, with blocking waits.
//
// The WAL itself carries the readers–writer lock (flock LOCK_SH / LOCK_EX).
// Beside it, <wal>.lock is a turnstile: a writer holds it exclusively while it
// waits for the WAL, and a reader passes through it (shared) before it asks
// for the WAL. So while a writer waits, new readers queue behind it instead of
// overlapping their shared locks forever, and the writer gets in as soon as
// the readers already inside are done. The turnstile is held only while
// waiting, never while working.
//
// Waits block in flock(2) rather than polling. Go restarts system calls a
// signal interrupts, so a timer cannot break a blocked flock: the wait runs on
// a goroutine with its own descriptor of the same open file, and if its caller
// has given up by the time the lock comes, it releases the lock at once.

// TurnstileSuffix names the turnstile file beside the WAL.
const TurnstileSuffix = ".lock"

// LockTimeoutError means another process held the WAL lock for longer than allowed.
type LockTimeoutError struct {
	Path   string
	Waited time.Duration
}

func (e *LockTimeoutError) Error() string {
	return fmt.Sprintf("the WAL %s is busy: another leasewal held its lock for the whole %s waited; retry, or raise --lock-timeout", e.Path, e.Waited)
}

// lockFair takes the WAL lock how (LOCK_SH or LOCK_EX) on f through the
// turnstile, waiting at most timeout in all. A writer that finds the WAL free
// takes it at once; a reader always passes through the turnstile, since a
// shared lock free for it may be one a writer is waiting for.
func lockFair(f *os.File, path string, how int, timeout time.Duration) error {
	if how == unix.LOCK_EX {
		if err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB); err == nil {
			return nil // no one in the way: the common case costs one system call
		}
	}
	deadline := time.Now().Add(timeout)
	turnHow := unix.LOCK_SH
	if how == unix.LOCK_EX {
		turnHow = unix.LOCK_EX
	}
	// A writer that has to wait creates the turnstile; a reader only uses one
	// that exists (a reader never writes beside the WAL, and where no writer
	// ever waited there is no one to queue behind). A turnstile that cannot
	// be opened (a read-only directory) only costs fairness: the WAL lock
	// alone still serializes writers.
	var turn *os.File
	var err error
	if how == unix.LOCK_EX {
		turn, err = createTurnstile(path)
	} else {
		turn, err = os.OpenFile(path+TurnstileSuffix, os.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err == nil {
		defer turn.Close() // closing releases the turnstile
		if err := FlockWait(turn, turnHow, time.Until(deadline)); err != nil {
			return lockError(path, timeout, err)
		}
	}
	return lockError(path, timeout, FlockWait(f, how, time.Until(deadline)))
}

var errWaitedOut = errors.New("lock wait timed out")

func lockError(path string, timeout time.Duration, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errWaitedOut):
		return &LockTimeoutError{Path: path, Waited: timeout}
	}
	return fmt.Errorf("locking %s: %w", path, err)
}

// FlockWait takes the lock how on f, blocking for at most timeout.
func FlockWait(f *os.File, how int, timeout time.Duration) error {
	fd := int(f.Fd())
	err := unix.Flock(fd, how|unix.LOCK_NB)
	if err == nil || !errors.Is(err, unix.EWOULDBLOCK) {
		return err
	}
	if timeout <= 0 {
		return errWaitedOut
	}
	// The waiter's descriptor shares f's open file description, so the lock
	// it takes is f's; and it stays valid even if f is closed after a time-out.
	waiterFD, err := unix.Dup(fd)
	if err != nil {
		return err
	}
	const (
		waiting int32 = iota
		taken
		abandoned
	)
	var outcome atomic.Int32
	done := make(chan error, 1)
	go func() {
		var err error
		for {
			if err = unix.Flock(waiterFD, how); !errors.Is(err, unix.EINTR) {
				break
			}
		}
		if err == nil && !outcome.CompareAndSwap(waiting, taken) {
			_ = unix.Flock(waiterFD, unix.LOCK_UN) // the caller gave up: let the next one in
		}
		_ = unix.Close(waiterFD)
		done <- err
	}()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		if outcome.CompareAndSwap(waiting, abandoned) {
			return errWaitedOut
		}
		return <-done // the lock came just as time ran out: it is ours
	}
}

// Turnstile is a resident writer's view of the turnstile beside its WAL:
// whether another process, or another descriptor of this one, waits for
// the lock it holds.
type Turnstile struct{ f *os.File }

// OpenTurnstile opens the turnstile beside the WAL at path, creating it
// so that readers queue in it too and can be seen waiting.
func OpenTurnstile(path string) (*Turnstile, error) {
	f, err := createTurnstile(path)
	if err != nil {
		return nil, err
	}
	return &Turnstile{f: f}, nil
}

// createTurnstile opens the turnstile beside the WAL at path, for writing,
// creating it if need be.
func createTurnstile(path string) (*os.File, error) {
	return os.OpenFile(path+TurnstileSuffix, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
}

// Waiting reports whether someone waits for the WAL: a waiting writer holds
// the turnstile exclusively, a waiting reader shared, so it cannot be
// taken now. Two system calls; nothing waits behind the moment it is held.
func (t *Turnstile) Waiting() bool {
	fd := int(t.f.Fd())
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return errors.Is(err, unix.EWOULDBLOCK)
	}
	_ = unix.Flock(fd, unix.LOCK_UN)
	return false
}

// Close closes the turnstile's descriptor.
func (t *Turnstile) Close() error { return t.f.Close() }
