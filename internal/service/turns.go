package service

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/leasewal/leasewal/internal/store"
)

// turns keeps a server's waiting leases in line, a line for each thing
// they ask for (a task, or a list of queues), in the order they came: the
// first of a line watches for a write that may give it a task, and the
// others sleep until given a turn, so that a submit wakes one waiter, not
// all of them. The first, woken by n records that may each free a task
// (marks.freed), gives a turn to the next n-1 as well; one that may free
// tasks anywhere gives every waiter a turn. A waiter that leases a task,
// or stops waiting, leaves the line, and when it was the first, the next
// becomes the first and is given a turn: it looks at once, and so none is
// left asleep while a task it could take waits (a burst's tasks that came
// after the first's look are taken one turn after the other). Waiters of
// one line ask for the same tasks: what one finds nothing in, none finds
// anything in. A turn is a watcher's Interrupt, which a Wait not yet
// begun keeps.
//
// The first of a line of queues also leaves its lease with the batcher
// (park): a decision whose records may free a task in one of its queues
// decides it right after, in the same batch (riders), so that the submit
// and the grant it allows share a write and an fsync.
type turns struct {
	mu    sync.Mutex
	lines map[string]*line
	// parked counts the lines whose first left its lease: while none has,
	// a decision looks no further.
	parked atomic.Int64
}

type line struct {
	task    string   // a lease of this task, or of the next in queues
	queues  []string // none: every queue
	waiting []*store.Watcher
	parked  *pending // the first's lease, to be decided in a batch
}

// lineOf is the line of a lease of task (or of the next in queues).
func lineOf(task string, queues []string) string {
	return task + "\x00" + strings.Join(slices.Compact(slices.Sorted(slices.Values(queues))), ",")
}

// join puts w at the end of the line of a lease of task or queues.
func (t *turns) join(task string, queues []string, w *store.Watcher) (key string) {
	key = lineOf(task, queues)
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lines == nil {
		t.lines = map[string]*line{}
	}
	l := t.lines[key]
	if l == nil {
		l = &line{task: task, queues: queues}
		t.lines[key] = l
	}
	l.waiting = append(l.waiting, w)
	return key
}

// first says whether w is the first of line.
func (t *turns) first(key string, w *store.Watcher) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.lines[key]
	return l != nil && l.waiting[0] == w
}

// leave takes w out of line; when it was the first, the next is given a
// turn.
func (t *turns) leave(key string, w *store.Watcher) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.lines[key]
	if l == nil {
		return
	}
	i := slices.Index(l.waiting, w)
	if i < 0 {
		return
	}
	l.waiting = slices.Delete(l.waiting, i, i+1)
	if len(l.waiting) == 0 {
		delete(t.lines, key)
		return
	}
	if i == 0 {
		l.waiting[0].Interrupt()
	}
}

// give gives a turn to the n waiters after the first of line (every one:
// all).
func (t *turns) give(key string, n uint64, all bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.lines[key]
	if l == nil {
		return
	}
	for i := 1; i < len(l.waiting) && (all || uint64(i) <= n); i++ {
		l.waiting[i].Interrupt()
	}
}

// park leaves p, the lease of w, the first of a line of queues, to be
// decided in a batch that may free a task for it (riders). It says
// whether it was left.
func (t *turns) park(key string, w *store.Watcher, p *pending) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	l := t.lines[key]
	if l == nil || l.task != "" || l.waiting[0] != w || l.parked != nil {
		return false
	}
	l.parked = p
	t.parked.Add(1)
	return true
}

// unpark takes p back, unless a batch took it first (taken): then its
// answer comes as any request's does.
func (t *turns) unpark(key string, p *pending) (taken bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if l := t.lines[key]; l != nil && l.parked == p {
		l.parked = nil
		t.parked.Add(-1)
		return false
	}
	return true
}

// riders takes the leases parked in the lines that ask for queue (every
// line: queue ""), to be decided after a record that may free a task
// there.
func (t *turns) riders(queue string) (ps []*pending) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.lines {
		if l.parked != nil && (queue == "" || len(l.queues) == 0 || slices.Contains(l.queues, queue)) {
			ps = append(ps, l.parked)
			l.parked = nil
			t.parked.Add(-1)
		}
	}
	return ps
}
