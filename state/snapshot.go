package state

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/leasewal/leasewal/internal/limits"
)

// A snapshot is a state encoded: what a compacted WAL's base holds, and,
// without its tasks, the head an index keeps (Head). The encoding is a
// compact binary one (varints and length-prefixed strings). It holds exactly
// what Apply built, so a loaded state answers as the replayed one does; the
// indexes are rebuilt on load: tasks by id at once, request ids and leases
// when a lookup first needs them (keySubmits, keyLeases). An index keeps
// each task in the same encoding (AppendTask), saying where the WAL holds a
// long payload instead of its text.

// snapshotVersion is the version a snapshot is written in when it needs
// the newest: the state of records of WAL format version 4 (rates, tasks'
// dependencies). Without them it is written in version 6 when it has
// paused queues or schedules, else in 5, so that a base an older leasewal
// wrote is the base this one writes for the same state (verify --history
// compares them byte for byte), and an older leasewal reads what it can
// hold.
const snapshotVersion = 7

// ErrSnapshot means snapshot bytes are not a snapshot this version wrote.
var ErrSnapshot = errors.New("not a valid state snapshot")

type encoder struct {
	b []byte
	// refs says the encoding is an index's, which may say where the WAL
	// holds a payload (a PayloadRef); a base's must hold every payload's
	// text, which read gets from the WAL (nil: the state holds them all).
	refs bool
	read func(*PayloadRef) (string, error)
	err  error // the first payload read failed
	// deps says a task is followed by its dependencies (version 7).
	deps bool
}

func (e *encoder) int(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *encoder) uint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *encoder) str(s string)  { e.uint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *encoder) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// length writes a slice's length, keeping nil apart from empty.
func (e *encoder) length(n int, isNil bool) {
	if isNil {
		e.uint(0)
		return
	}
	e.uint(uint64(n) + 1)
}

func (e *encoder) ints(v []int64) {
	e.length(len(v), v == nil)
	for _, x := range v {
		e.int(x)
	}
}

// liveList writes what follows the tasks: the live list, as the positions
// of its tasks among them (nil apart from empty), how many of those have
// ended since, and a count of 0 (where a cache of older versions listed
// copies superseded).
func (e *encoder) liveList(live []uint32, ended int) {
	e.length(len(live), live == nil)
	for _, i := range live {
		e.uint(uint64(i))
	}
	e.int(int64(ended))
	e.uint(0)
}

// snapshotVersion is the oldest version that holds everything the state has.
func (s *State) snapshotVersion() uint64 {
	switch {
	case s.newest:
		return snapshotVersion
	case len(s.pauses) > 0 || len(s.schedules) > 0:
		return 6
	}
	return 5
}

// FormatVersion is the WAL format version a base of the state needs: 4
// once a record of that version was applied, else 3.
func (s *State) FormatVersion() int {
	if s.newest {
		return 4
	}
	return 3
}

// encodeHead writes what comes before the tasks: the version, the counters,
// the base, and two false flags (where a cache of older versions named the
// files holding the tasks it did not).
func (s *State) encodeHead(e *encoder, version uint64) {
	e.uint(version)
	for _, v := range []int64{s.lastSeq, s.lastAt, s.lastLeaseNum, s.lastTaskNum, s.lastTokenNum} {
		e.int(v)
	}
	e.bool(s.base != nil)
	if b := s.base; b != nil {
		e.int(b.Seq)
		e.int(b.At)
		e.int(b.KeptFrom)
		e.str(b.History)
		e.str(b.Hash)
		e.str(b.ChainFrom)
	}
	e.bool(false)
	e.bool(false)
}

// encodeTail writes what comes after the tasks and the live list: the domains, redactions, limits, record counts,
// pauses and schedules.
func (s *State) encodeTail(e *encoder, version uint64) {
	e.length(len(s.domainOrder), s.domainOrder == nil)
	for _, d := range s.domainOrder {
		e.domain(d)
	}
	e.uint(uint64(len(s.redacted)))
	for _, id := range s.redacted {
		e.str(id)
	}
	limited := slices.Sorted(maps.Keys(s.limits)) // sorted: a base is a function of the state
	e.uint(uint64(len(limited)))
	for _, q := range limited {
		e.str(q)
		e.int(int64(s.limits[q]))
	}
	types := slices.Sorted(maps.Keys(s.records))
	e.uint(uint64(len(types)))
	for _, t := range types {
		e.str(string(t))
		e.int(s.records[t])
	}
	if version < 6 {
		return
	}
	e.uint(uint64(len(s.pauses)))
	for _, q := range s.pausedQueueNames() {
		e.str(q)
		spans := s.pauses[q].spans
		e.uint(uint64(len(spans)))
		for _, sp := range spans {
			e.int(sp.From)
			e.int(sp.To)
			e.str(sp.Reason)
		}
	}
	e.uint(uint64(len(s.schedules)))
	for _, sc := range s.Schedules() {
		e.str(sc.Name)
		e.int(int64(sc.Every))
		e.str(sc.Cron)
		e.str(sc.TZ)
		e.str(sc.CatchUp)
		t := sc.Template
		e.str(t.Payload)
		e.int(int64(t.Window))
		e.int(int64(t.Policy.MaxAttempts))
		e.int(int64(t.Policy.Backoff))
		e.int(int64(t.Policy.BackoffMax))
		e.str(t.Queue)
		e.int(int64(t.Priority))
		e.int(sc.AddedAt)
		e.int(sc.LastSlot)
	}
	if version < 7 {
		return
	}
	e.uint(uint64(len(s.rates)))
	for _, q := range slices.Sorted(maps.Keys(s.rates)) {
		r := s.rates[q]
		e.str(q)
		e.int(int64(r.Count))
		e.int(r.Per)
		e.int(int64(r.Burst))
		e.int(r.tat)
	}
}

func (e *encoder) task(t *Task) {
	e.str(t.ID)
	e.payload(t.Payload)
	e.int(t.CreatedAt)
	e.int(int64(t.Window))
	e.int(int64(t.Policy.MaxAttempts))
	e.int(int64(t.Policy.Backoff))
	e.int(int64(t.Policy.BackoffMax))
	e.str(t.RequestID)
	e.int(t.AvailableAt)
	e.str(t.Queue)
	e.int(int64(t.Priority))
	e.str(t.RequeuedFrom)
	e.str(string(t.State))
	e.int(int64(t.Attempt))
	e.bool(t.Lease != nil)
	if t.Lease != nil {
		e.str(t.Lease.ID)
		e.str(t.Lease.Worker)
		e.int(t.Lease.Expiry)
	}
	e.int(t.NotBefore)
	e.str(t.EndReason)
	e.str(t.EndCause)
	e.int(t.Ended)
	e.str(t.Redacted)
	e.str(t.Result)
	e.bool(t.counted)
	e.length(len(t.Attempts), t.Attempts == nil)
	for _, a := range t.Attempts {
		e.int(int64(a.Number))
		e.str(a.LeaseID)
		e.str(a.Worker)
		e.str(a.RequestID)
		e.int(a.GrantedAt)
		e.int(a.Expiry)
		e.ints(a.Extended)
		e.str(a.End)
		e.int(a.EndedAt)
		e.str(a.Reason)
		e.int(a.NotBefore)
	}
	e.ints(t.Seqs)
	if !e.deps {
		return
	}
	e.length(len(t.Deps), t.Deps == nil)
	for _, d := range t.Deps {
		e.str(d.ID)
		e.bool(d.Ended)
		e.bool(d.Met)
	}
	e.int(t.Delay)
	e.str(t.DeadBy)
	e.str(string(t.DeadEnd))
	e.int(t.DeadAt)
}

// payload writes a task's payload: its text and, in a cache, where the WAL
// has it (then no text); in a base, its text, read from the WAL if need be.
func (e *encoder) payload(p Payload) {
	ref := p.Ref()
	switch {
	case e.refs:
		e.str(p.text)
		e.bool(ref != nil)
		if ref != nil {
			e.int(ref.Frame)
			e.int(ref.Skip)
			e.uint(uint64(ref.Size))
			e.b = append(e.b, ref.Sum[:]...)
		}
		return
	case ref == nil:
		e.str(p.text)
		return
	}
	var text string
	err := ErrPayloadNotHeld
	if e.read != nil {
		if text, err = e.read(ref); err == nil {
			err = ref.Check(text)
		}
	}
	if err != nil && e.err == nil {
		e.err = err
	}
	e.str(text)
}

func (e *encoder) domain(d *Domain) {
	e.str(d.Name)
	e.bool(d.Lease != nil)
	if l := d.Lease; l != nil {
		e.int(l.Offset)
		e.str(l.Token)
		e.int(l.AcquiredAt)
		e.int(int64(l.RetryCount))
	}
	e.ints(d.Backlog)
	for _, set := range []*Offsets{&d.Processed, &d.Failed} {
		e.uint(uint64(len(set.runs)))
		for _, r := range set.runs {
			e.int(r.lo)
			e.int(r.hi)
		}
	}
}

// snapDecoder reads what encoder wrote; the first error sticks. Strings are
// sliced out of one copy of the whole snapshot (all), so that loading costs
// one allocation for them rather than one per string.
type snapDecoder struct {
	b   []byte
	all string
	off int // where b starts within all
	err error
	// short says the first error was a read past the end: a base being
	// loaded part by part may yet hold the rest (baseLoad).
	short bool
	// refs says a payload's text is followed by where the WAL holds it (a
	// cache's encoding: encoder.refs).
	refs bool
	// payloadAt, set by payload, is where in all the text of the last
	// payload read begins.
	payloadAt int
	// own says each string read is a copy of its own, not a piece of all: a
	// base's tasks must not keep alive the parts they were read from.
	own bool
	// deps says a task is followed by its dependencies (encoder.deps).
	deps bool
}

func (d *snapDecoder) fail() {
	if d.err == nil {
		d.err = ErrSnapshot
	}
}

// ranOut fails for a read past the end.
func (d *snapDecoder) ranOut() {
	if d.err == nil {
		d.short = true
	}
	d.fail()
}

func (d *snapDecoder) skip(n int) {
	d.b = d.b[n:]
	d.off += n
}

func (d *snapDecoder) int() int64 {
	v, n := binary.Varint(d.b)
	if n == 0 {
		d.ranOut()
	}
	if n <= 0 {
		d.fail()
		return 0
	}
	d.skip(n)
	return v
}

func (d *snapDecoder) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n == 0 {
		d.ranOut()
	}
	if n <= 0 {
		d.fail()
		return 0
	}
	d.skip(n)
	return v
}

func (d *snapDecoder) str() string {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.ranOut()
		return ""
	}
	s := d.all[d.off : d.off+int(n)]
	d.skip(int(n))
	if d.own {
		return strings.Clone(s)
	}
	return s
}

func (d *snapDecoder) bool() bool {
	if len(d.b) == 0 {
		d.ranOut()
		return false
	}
	if d.b[0] > 1 {
		d.fail()
		return false
	}
	v := d.b[0] == 1
	d.skip(1)
	return v
}

// length reads a slice length; isNil for a nil slice. A length larger than
// the bytes left is refused before anything is allocated for it.
func (d *snapDecoder) length() (n int, isNil bool) {
	v := d.uint()
	if v == 0 || d.err != nil {
		return 0, true
	}
	if v-1 > uint64(len(d.b)) {
		d.ranOut()
		return 0, true
	}
	return int(v - 1), false
}

func (d *snapDecoder) ints() []int64 {
	n, isNil := d.length()
	if isNil {
		return nil
	}
	out := make([]int64, n)
	for i := range out {
		out[i] = d.int()
	}
	return out
}

// LoadSnapshot decodes a snapshot and rebuilds the indexes Apply keeps.
func LoadSnapshot(b []byte) (*State, error) {
	d := &snapDecoder{b: b, all: string(b)}
	s := New()
	version, err := d.head(s)
	if err != nil {
		return nil, err
	}
	d.deps = version >= 7
	if n, isNil := d.length(); !isNil {
		s.order = make([]*Task, 0, n)
		s.tasks = make(map[string]*Task, n)
		loaded := make([]Task, n) // one allocation for all of them
		for i := range loaded {
			t := &loaded[i]
			d.task(t)
			if d.err != nil {
				return nil, d.err
			}
			s.tasks[t.ID] = t
			s.order = append(s.order, t)
			s.noteDeps(t)
		}
		s.unkeyed, s.unleased = s.order, s.order
	}
	if n, isNil := d.length(); !isNil {
		s.live = make([]*Task, 0, n)
		for range n {
			i := d.uint()
			if i >= uint64(len(s.order)) {
				d.fail()
				break
			}
			s.live = append(s.live, s.order[i])
		}
	}
	d.rest(s, version)
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return nil, d.err
	}
	return s, nil
}

// head reads what comes before the tasks into s (see encodeHead), and
// returns the snapshot's version.
func (d *snapDecoder) head(s *State) (uint64, error) {
	version := d.uint()
	switch {
	case d.err != nil:
		return 0, d.err
	case version < 5 || version > snapshotVersion:
		return 0, fmt.Errorf("%w: unknown version", ErrSnapshot)
	}
	s.lastSeq, s.lastAt, s.lastLeaseNum, s.lastTaskNum, s.lastTokenNum = d.int(), d.int(), d.int(), d.int(), d.int()
	s.newest = version >= 7
	if d.bool() {
		s.base = &Base{Seq: d.int(), At: d.int(), KeptFrom: d.int(), History: d.str(), Hash: d.str(), ChainFrom: d.str()}
	}
	// Two flags older caches set when they named files of tasks: a snapshot
	// holds every task itself.
	if namesRuns, namesCold := d.bool(), d.bool(); namesRuns || namesCold {
		d.fail()
	}
	return version, d.err
}

// rest reads what follows the live list (see encodeTail): ended, a count
// of 0, the domains, redactions, limits, record counts, pauses and
// schedules.
func (d *snapDecoder) rest(s *State, version uint64) {
	s.ended = int(d.int())
	if d.uint() != 0 {
		d.fail()
		return
	}
	if n, isNil := d.length(); !isNil {
		s.domainOrder = make([]*Domain, 0, n)
		for range n {
			dom := d.domain()
			if d.err != nil {
				return
			}
			s.domains[dom.Name] = dom
			s.domainOrder = append(s.domainOrder, dom)
		}
	}
	if n := d.uint(); n > 0 && n <= uint64(len(d.b)) {
		s.redacted = make([]string, n)
		for i := range s.redacted {
			s.redacted[i] = d.str()
		}
	} else if n > 0 {
		d.fail()
	}
	if n := d.uint(); n > 0 && n <= uint64(len(d.b)) {
		s.limits = make(map[string]int, n)
		for range n {
			q := d.str()
			s.limits[q] = int(d.int())
		}
	} else if n > 0 {
		d.fail()
	}
	if n := d.uint(); n > 0 && n <= uint64(len(d.b)) {
		s.records = make(map[RecordType]int64, n)
		for range n {
			t := RecordType(d.str())
			s.records[t] = d.int()
		}
	} else if n > 0 {
		d.fail()
	}
	if version >= 6 {
		d.pauses(s)
		d.schedules(s)
	}
	if version >= 7 {
		d.rates(s)
	}
}

// rates reads every rated queue's rule, each checked as a QueueRated is.
func (d *snapDecoder) rates(s *State) {
	for range d.count() {
		q, r := d.str(), queueRate{Rate: Rate{Count: int(d.int()), Per: d.int(), Burst: int(d.int())}, tat: d.int()}
		if d.err != nil {
			return
		}
		_, err := ParseRate(r.Rate.String())
		// tat: no grant moves it past half an int64 (each moves it by a
		// Per at most), so that no sum of the rule overflows.
		if err != nil || ValidateQueue(q) != nil || limits.Burst.Int(int64(r.Burst)) != nil || r.tat < MinTime*int64(r.Count) || r.tat > math.MaxInt64/2 {
			d.fail()
			return
		}
		if s.rates == nil {
			s.rates = map[string]queueRate{}
		}
		s.rates[q] = r
	}
}

// pauses reads every paused queue's spans, and gives them to its tasks.
func (d *snapDecoder) pauses(s *State) {
	for range d.count() {
		p := s.pausesOf(d.str())
		for range d.count() {
			p.spans = append(p.spans, PauseSpan{From: d.int(), To: d.int(), Reason: d.str()})
		}
	}
}

// count reads how many items follow; more than the bytes left is damage
// (and 0 items).
func (d *snapDecoder) count() uint64 {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.ranOut()
		return 0
	}
	return n
}

// schedules reads every schedule.
func (d *snapDecoder) schedules(s *State) {
	for range d.count() {
		sc := &Schedule{ScheduleSpec: ScheduleSpec{Name: d.str(), Every: Duration(d.int()), Cron: d.str(), TZ: d.str(), CatchUp: d.str(),
			Template: Submit{Payload: d.str(), Window: Duration(d.int()),
				Policy: RetryPolicy{MaxAttempts: int(d.int()), Backoff: Duration(d.int()), BackoffMax: Duration(d.int())},
				Queue:  d.str(), Priority: int(d.int())}}, AddedAt: d.int(), LastSlot: d.int()}
		if d.err != nil {
			return
		}
		if s.schedules == nil {
			s.schedules = map[string]*Schedule{}
		}
		s.schedules[sc.Name] = sc
	}
}

// index adds a task read from the Source to the state's indexes, as Apply
// did when it created and leased it.
func (s *State) index(t *Task) {
	s.tasks[t.ID] = t
	s.order = append(s.order, t)
	s.keySubmits()
	s.keyLeases()
	s.submits[t.RequestID] = t
	s.keyAttempts(t)
}

// reserve makes room in memory's maps for n more tasks at once: an end
// that lets many waiting tasks run adopts them all, and maps grown one
// doubling at a time cost more than one made to size.
func (s *State) reserve(n int) {
	if n < 1024 {
		return
	}
	tasks, submits := make(map[string]*Task, len(s.tasks)+n), make(map[string]*Task, len(s.submits)+n)
	maps.Copy(tasks, s.tasks)
	maps.Copy(submits, s.submits)
	s.tasks, s.submits = tasks, submits
}

// keySubmits puts the request ids of the tasks a snapshot loaded into submits.
func (s *State) keySubmits() {
	if s.unkeyed == nil {
		return
	}
	for _, t := range s.unkeyed {
		if s.tasks[t.ID] == t { // still the task memory holds by that id
			s.submits[t.RequestID] = t
		}
	}
	s.unkeyed = nil
}

// keyLeases puts the leases of the tasks a snapshot loaded into leaseTask
// and leaseRequests.
func (s *State) keyLeases() {
	if s.unleased == nil {
		return
	}
	for _, t := range s.unleased {
		if s.tasks[t.ID] == t {
			s.keyAttempts(t)
		}
	}
	s.unleased = nil
}

func (s *State) keyAttempts(t *Task) {
	for _, a := range t.Attempts {
		s.leaseTask[a.LeaseID] = t.ID
		if a.RequestID != "" {
			s.leaseRequests[a.RequestID] = leaseRequest{taskID: t.ID, leaseID: a.LeaseID, worker: a.Worker}
		}
	}
}

// task decodes one task into t.
func (d *snapDecoder) task(t *Task) {
	*t = Task{ID: d.str(), Payload: d.payload(), CreatedAt: d.int(), Window: Duration(d.int())}
	t.Policy = RetryPolicy{MaxAttempts: int(d.int()), Backoff: Duration(d.int()), BackoffMax: Duration(d.int())}
	t.RequestID = d.str()
	t.AvailableAt, t.Queue, t.Priority, t.RequeuedFrom = d.int(), d.str(), int(d.int()), d.str()
	t.State, t.Attempt = TaskState(d.str()), int(d.int())
	if d.bool() {
		t.Lease = &Lease{ID: d.str(), Worker: d.str(), Expiry: d.int()}
	}
	t.NotBefore, t.EndReason, t.EndCause, t.Ended, t.Redacted, t.Result, t.counted = d.int(), d.str(), d.str(), d.int(), d.str(), d.str(), d.bool()
	if n, isNil := d.length(); !isNil {
		t.Attempts = make([]Attempt, n)
		for i := range t.Attempts {
			a := &t.Attempts[i]
			a.Number, a.LeaseID, a.Worker, a.RequestID = int(d.int()), d.str(), d.str(), d.str()
			a.GrantedAt, a.Expiry, a.Extended = d.int(), d.int(), d.ints()
			a.End, a.EndedAt, a.Reason, a.NotBefore = d.str(), d.int(), d.str(), d.int()
		}
	}
	t.Seqs = d.ints()
	if !d.deps {
		return
	}
	if n, isNil := d.length(); !isNil {
		t.Deps = make([]Dep, n)
		for i := range t.Deps {
			t.Deps[i] = Dep{ID: d.str(), Ended: d.bool(), Met: d.bool()}
		}
	}
	t.Delay, t.DeadBy, t.DeadEnd, t.DeadAt = d.int(), d.str(), TaskState(d.str()), d.int()
}

// payload reads a task's payload (see encoder.payload).
func (d *snapDecoder) payload() Payload {
	n := d.uint()
	d.payloadAt = d.off
	if n > uint64(len(d.b)) {
		d.ranOut()
		return Payload{}
	}
	p := Payload{text: d.all[d.off : d.off+int(n)]}
	d.skip(int(n))
	if !d.refs || !d.bool() {
		return p
	}
	ref := &PayloadRef{Frame: d.int(), Skip: d.int(), Size: int(d.uint())}
	if len(d.b) < len(ref.Sum) {
		d.ranOut()
		return Payload{}
	}
	copy(ref.Sum[:], d.b)
	d.skip(len(ref.Sum))
	if p.text != "" || ref.Frame <= 0 || ref.Skip < -1 || ref.Size <= 0 || ref.Size > MaxPayloadBytes {
		d.fail()
	}
	return Payload{ref: ref}
}

func (d *snapDecoder) domain() *Domain {
	dom := &Domain{Name: d.str()}
	if d.bool() {
		dom.Lease = &WorkLease{Offset: d.int(), Token: d.str(), AcquiredAt: d.int(), RetryCount: int(d.int())}
	}
	dom.Backlog = d.ints()
	for _, set := range []*Offsets{&dom.Processed, &dom.Failed} {
		d.offsets(set)
	}
	return dom
}

// offsets reads the runs of a set, refusing runs that are empty, out of
// order or touching, which no set Add built could hold.
func (d *snapDecoder) offsets(set *Offsets) {
	n := d.uint()
	if n > uint64(len(d.b)) {
		d.fail()
		return
	}
	if n > 0 {
		set.runs = make([]offsetRun, 0, n)
	}
	for range n {
		r := offsetRun{lo: d.int(), hi: d.int()}
		if d.err != nil || r.hi < r.lo || r.lo < 0 || (len(set.runs) > 0 && r.lo <= set.runs[len(set.runs)-1].hi+1) {
			d.fail()
			return
		}
		set.runs = append(set.runs, r)
		set.n += int(r.hi-r.lo) + 1
	}
}

// AppendTask appends t as an index keeps it to b: a long payload named
// where the WAL holds it (a PayloadRef), not its text.
func AppendTask(b []byte, t *Task) []byte {
	e := encoder{b: b, refs: true, deps: true}
	e.task(t)
	return e.b
}

// DecodeTask reads back what AppendTask wrote; the task holds its own copy
// of b's bytes.
func DecodeTask(b []byte) (*Task, error) {
	d := &snapDecoder{b: b, all: string(b), refs: true, deps: true}
	t := &Task{}
	d.task(t)
	if d.err == nil && len(d.b) != 0 {
		d.fail()
	}
	if d.err != nil {
		return nil, fmt.Errorf("a task of the index: %w", d.err)
	}
	return t, nil
}
