package store_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
)

// TestWaitersShareOneInotify: fifty waiters on a WAL hold one inotify
// instance between them, an append wakes every one, and the instance is
// closed with the last of them.
func TestWaitersShareOneInotify(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	defer h.Close()
	before := testwait.InotifyCount(os.Getpid())
	var watchers []*store.Watcher
	for range 50 {
		w, err := h.Watch()
		if err != nil {
			t.Fatal(err)
		}
		watchers = append(watchers, w)
	}
	if got := testwait.InotifyCount(os.Getpid()) - before; got != 1 {
		t.Fatalf("50 waiters hold %d inotify instances, want 1", got)
	}
	submit(t, h, "p")
	var wg sync.WaitGroup
	for _, w := range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if changed, err := w.Wait(time.Now().Add(testwait.HangGuard)); !changed || err != nil {
				t.Errorf("a waiter was not woken by the append: %v %v", changed, err)
			}
		}()
	}
	wg.Wait()
	for _, w := range watchers {
		w.Close()
	}
	testwait.Until(t, "the instance to close with the last waiter", func() bool { return testwait.InotifyCount(os.Getpid()) == before },
		func() string {
			return fmt.Sprint(testwait.InotifyCount(os.Getpid()), " instances, ", before, " before")
		})
}

// TestWatchFallsBackToPolling: where inotify cannot be had, a waiter looks
// at the WAL instead, says so once, and is still woken by an append and by
// Interrupt.
func TestWatchFallsBackToPolling(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	var warnings []string
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Warn: func(m string) { warnings = append(warnings, m) }})
	defer h.Close()
	w, err := h.WatchWithoutInotify()
	if err != nil {
		t.Fatalf("no inotify is an error: %v", err)
	}
	defer w.Close()
	if len(warnings) != 1 || !strings.Contains(warnings[0], "looking at it every") {
		t.Fatalf("warnings: %q", warnings)
	}
	if changed, _ := w.Wait(time.Now().Add(2 * store.PollEvery)); changed {
		t.Fatal("woken with nothing appended")
	}
	submit(t, h, "p")
	if changed, err := w.Wait(time.Now().Add(testwait.HangGuard)); !changed || err != nil {
		t.Fatalf("the append was not seen: %v %v", changed, err)
	}
	w.Interrupt()
	if _, err := w.Wait(time.Time{}); !errors.Is(err, store.ErrInterrupted) {
		t.Fatalf("Interrupt: %v", err)
	}
}

// TestAWatcherSeesAppendsOfTheProcessThatCreatedTheWAL: a pipe that creates
// the WAL goes on appending through the file it created under a temporary
// name, and inotify names those appends after that name; a watcher of the
// WAL still hears them, and a pipe on a WAL that does not exist says so.
func TestAWatcherSeesAppendsOfTheProcessThatCreatedTheWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute, Resident: true})
	defer h.Close()
	p, err := h.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if !p.Missing() {
		t.Fatal("a pipe on no WAL says it is not missing")
	}
	if _, _, f, err := p.Batch([]func(*store.Tx) error{addOne}, nil); err != nil || f.Wait() != nil {
		t.Fatalf("the batch that creates the WAL: %v", err)
	}
	if p.Missing() {
		t.Fatal("a pipe that created the WAL says it is missing")
	}
	w, err := h.Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, _, f, err := p.Batch([]func(*store.Tx) error{addOne}, nil); err != nil || f.Wait() != nil {
		t.Fatalf("the second batch: %v", err)
	}
	if changed, err := w.Wait(time.Now().Add(testwait.HangGuard)); !changed || err != nil {
		t.Fatalf("the append after the WAL's creation was not seen: %v %v", changed, err)
	}
}

// TestAWatcherSleepsThroughALookThatWritesNothing: commands open the WAL
// for writing; one that writes nothing (a lease that finds no task, a
// read) closes it unchanged, and no watcher is told: idle waiters that
// woke each other so looked at the WAL for ever, a third of a core each.
// The append after them is told.
func TestAWatcherSleepsThroughALookThatWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	defer h.Close()
	if err := h.Write(addOne); err != nil {
		t.Fatal(err)
	}
	w, err := h.Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for range 3 { // as one-shot commands do
		other := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
		if err := other.Write(func(*store.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		if err := other.Read(func(*store.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
		other.Close()
	}
	other := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	defer other.Close()
	if changed, err := w.Wait(time.Now().Add(100 * time.Millisecond)); changed || err != nil {
		t.Fatalf("looks that wrote nothing woke a watcher: %v %v", changed, err)
	}
	if err := other.Write(addOne); err != nil {
		t.Fatal(err)
	}
	if changed, err := w.Wait(time.Now().Add(testwait.HangGuard)); !changed || err != nil {
		t.Fatalf("the append after them was not seen: %v %v", changed, err)
	}
}

// TestAChangeToldBeforeALookThatCannotTellIsKept: a waiter that looked at a
// WAL that did not exist holds no lock that kept another process from
// creating it meanwhile; the creation, told before the waiter says what
// it waits for (Only, with nil: every change), still ends its wait. A
// server's waiting lease on a new WAL slept through its creation so, for
// as long as it was to wait.
func TestAChangeToldBeforeALookThatCannotTellIsKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	defer h.Close()
	w, err := h.Watch()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	other := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	defer other.Close()
	if err := other.Write(addOne); err != nil { // another process creates the WAL
		t.Fatal(err)
	}
	testwait.Until(t, "the creation to be told", w.Told, func() string { return "no change told" })
	w.Only(nil)
	if !w.Told() {
		t.Fatal("the creation told before the waiter's look was dropped")
	}
	w.Only(func() bool { return true }) // a look in the WAL's lock has seen what was told before it
	if w.Told() {
		t.Fatal("a change told before a look that holds the lock was kept")
	}
}
