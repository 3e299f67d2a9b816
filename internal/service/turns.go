package service

import (
	"slices"
	"strings"
	"sync"

	"github.com/leasewal/leasewal/internal/store"
)

// turns keeps a server's waiting leases in line, a line for each thing
// they ask for (a task, or a list of queues), in the order they came: the
// first of a line watches for a write that may give it a task, and the
// others sleep until given a turn, so that a submit wakes one waiter, not
// all of them. A first that takes a task gives a turn to as many after it
// as the records since its look may have freed tasks, less its own
// (marks.freed); one that finds nothing gives none: waiters of one line
// ask for the same tasks, and what one finds nothing in, none finds
// anything in. A waiter that leases a task, or stops waiting, leaves the
// line, and when it was the first, the next becomes the first and is given
// a turn: it looks at once, and so none is left asleep while a task it
// could take waits (the tasks that came after the first's look are taken
// one turn after the other). A turn is a watcher's Interrupt, which a Wait
// not yet begun keeps.
type turns struct {
	mu    sync.Mutex
	lines map[string][]*store.Watcher
}

// lineOf is the line of a lease of task (or of the next in queues).
func lineOf(task string, queues []string) string {
	return task + "\x00" + strings.Join(slices.Compact(slices.Sorted(slices.Values(queues))), ",")
}

// join puts w at the end of line.
func (t *turns) join(line string, w *store.Watcher) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lines == nil {
		t.lines = map[string][]*store.Watcher{}
	}
	t.lines[line] = append(t.lines[line], w)
}

// first says whether w is the first of line.
func (t *turns) first(line string, w *store.Watcher) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	waiting := t.lines[line]
	return len(waiting) > 0 && waiting[0] == w
}

// leave takes w out of line; when it was the first, the next is given a
// turn.
func (t *turns) leave(line string, w *store.Watcher) {
	t.mu.Lock()
	defer t.mu.Unlock()
	waiting := t.lines[line]
	i := slices.Index(waiting, w)
	if i < 0 {
		return
	}
	waiting = slices.Delete(waiting, i, i+1)
	if len(waiting) == 0 {
		delete(t.lines, line)
		return
	}
	t.lines[line] = waiting
	if i == 0 {
		waiting[0].Interrupt()
	}
}

// give gives a turn to the n waiters after the first of line (every one:
// all).
func (t *turns) give(line string, n uint64, all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	waiting := t.lines[line]
	for i := 1; i < len(waiting) && (all || uint64(i) <= n); i++ {
		waiting[i].Interrupt()
	}
}
