package report

import (
	"cmp"
	"slices"
	"sync"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/state"
)

// LiveRecords is how many of the latest records a live page keeps and
// draws (up to a quarter more between two trims): its memory is bounded by
// them, whatever the WAL's size.
const LiveRecords = 20000

// Live is the page a server shows at /ui: the latest records, fed as they
// are committed (never read again from the WAL), and a signal to its
// watchers at each new one.
type Live struct {
	title string
	load  func() ([]api.Record, int64, error) // the WAL's latest records, read at the first look
	once  sync.Once
	mu    sync.Mutex
	recs  []api.Record
	last  int64
	next  chan struct{} // closed at the next change, then replaced
	// looked is set at the first look: until then a page that reads the
	// WAL then (LoadFrom) takes no record as it is committed, since the
	// load reads it. firstLook is closed then.
	looked    bool
	firstLook chan struct{}
}

// NewLive is a live page with no record yet.
func NewLive(title string) *Live {
	return &Live{title: title, next: make(chan struct{}), firstLook: make(chan struct{})}
}

// Looked is closed when the page is first looked at: a server follows
// the WAL for it from then on, not before.
func (l *Live) Looked() <-chan struct{} { return l.firstLook }

// LoadFrom has the page read the WAL's latest records (and its last seq)
// with load once, when it is first looked at, so that a server no one
// watches never reads them. It is set before the page is served.
func (l *Live) LoadFrom(load func() ([]api.Record, int64, error)) { l.load = load }

// loaded has the WAL's latest records read, once.
func (l *Live) loaded() {
	l.once.Do(func() {
		l.mu.Lock()
		l.looked = true // what is committed from now on is added, and what the load reads too: Add keeps each once
		l.mu.Unlock()
		defer close(l.firstLook)
		if l.load == nil {
			return
		}
		if recs, last, err := l.load(); err == nil {
			l.Load(recs, last)
		}
	})
}

// Load gives the page recs, the WAL's latest records as read at start (its
// last seq being last), below any record added already.
func (l *Live) Load(recs []api.Record, last int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var older []api.Record
	for _, r := range recs {
		if len(l.recs) == 0 || r.Seq < l.recs[0].Seq {
			older = append(older, r)
		}
	}
	l.recs = append(older, l.recs...)
	l.keep(nil)
	l.last = max(l.last, last)
}

// Add takes the records a request committed, or a raft node applied, in
// order (a redaction masks its task's payload here, as the log does).
func (l *Live) Add(recs []state.Record) {
	if len(recs) == 0 || l.unseen() {
		return
	}
	read := make([]api.Record, len(recs))
	for i, r := range recs {
		read[i] = answers.Record(r)
	}
	l.add(read, false)
}

// Follow takes records read from the WAL after the page's last (Last),
// which someone else may have written: a local command beside a server.
// Records that do not follow the page's last (more were written than it
// keeps) take the place of those it has, which would leave a gap.
func (l *Live) Follow(recs []api.Record) {
	if len(recs) > 0 {
		l.add(recs, true)
	}
}

// unseen says that no one has looked at the page yet: the first look reads
// from the WAL what was committed until then, so nothing is kept (nor made
// into an answer's record) before it.
func (l *Live) unseen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.load != nil && !l.looked
}

func (l *Live) add(recs []api.Record, read bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.load != nil && !l.looked { // no one has looked: the first look reads these from the WAL
		return
	}
	if read && recs[0].Seq > l.last+1 {
		l.recs = nil
	}
	changed := false
	for _, r := range recs {
		if r.Type == string(state.TaskRedacted) {
			for i := range l.recs {
				if l.recs[i].TaskID == r.TaskID {
					l.recs[i].Payload = ""
				}
			}
		}
		// Requests are told of their records as each is answered, so two of
		// one batch may come in either order, a raft leader is told of a
		// record twice (its commit, then its apply), and a server's own
		// records are read again when it follows the WAL: keep each once,
		// in order.
		i, found := slices.BinarySearchFunc(l.recs, r.Seq, func(k api.Record, seq int64) int { return cmp.Compare(k.Seq, seq) })
		if found || (i == 0 && len(l.recs) >= LiveRecords) { // told again, or older than the page keeps
			continue
		}
		l.recs = slices.Insert(l.recs, i, r)
		l.last = max(l.last, r.Seq)
		changed = true
	}
	if !changed { // a redaction is a record too: nothing new is nothing changed
		return
	}
	l.keep(nil)
	close(l.next)
	l.next = make(chan struct{})
}

// keep adds recs and, once a quarter more than LiveRecords are kept,
// drops the oldest down to LiveRecords: a copy every LiveRecords/4
// records, not at each.
func (l *Live) keep(recs []api.Record) {
	l.recs = append(l.recs, recs...)
	if n := len(l.recs) - LiveRecords; n > LiveRecords/4 {
		l.recs = append(l.recs[:0:0], l.recs[n:]...)
	}
}

// Page is the page as the records kept stand now; changed is closed at
// the next change.
func (l *Live) Page() (p Page, changed <-chan struct{}) {
	l.loaded()
	l.mu.Lock()
	defer l.mu.Unlock()
	p = FromRecords(l.recs, l.last, Options{Title: l.title, Now: func(int64) int64 { return time.Now().UnixMilli() }})
	p.Live = true
	return p, l.next
}

// Last is the last seq the page shows, and a channel closed at the next
// change.
func (l *Live) Last() (int64, <-chan struct{}) {
	l.loaded()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last, l.next
}
