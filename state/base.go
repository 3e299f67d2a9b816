package state

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"slices"
	"strings"
	"time"
)

// A compaction replaces the records up to some seq N with a base: the state
// they lead to, less the finished tasks that ended before the retention, as
// a snapshot in BaseParts between a BaseBegin and a BaseEnd, all carrying seq
// N. The records after N follow unchanged. Replaying the base loads the
// snapshot, so a compacted WAL answers as the uncompacted one would for
// every task it kept; a task that was dropped is unknown, with a message that
// says where its history went.

// History says where the records a base replaces went.
const (
	HistoryKept    = "kept"    // sealed segments beside the WAL
	HistoryDropped = "dropped" // nowhere
)

// MaxBasePart is how many snapshot bytes one BasePart carries. Encoded as
// base64 they stay well within a record's limit (the WAL's MaxBodySize).
const MaxBasePart = 256 << 10

// Base is where a compacted WAL's history starts.
type Base struct {
	Seq       int64  // the last record the base replaces
	At        int64  // when the compaction ran
	KeptFrom  int64  // finished tasks that ended before it were not kept
	History   string // HistoryKept or HistoryDropped
	Hash      string // SHA-256 chain head of every record it replaces (and the bases before), hex
	ChainFrom string // the checksum of record Seq, which the record after it continues from
}

// Compacted is the message for what a compacted WAL no longer holds.
func (b *Base) Compacted() string {
	kept := "kept in the history segments beside the WAL"
	if b.History == HistoryDropped {
		kept = "dropped"
	}
	return fmt.Sprintf("records up to seq %d were compacted on %s (finished tasks that ended before %s were not kept; their records were %s)",
		b.Seq, formatTime(b.At), formatTime(b.KeptFrom), kept)
}

func formatTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

// baseLoad is a base being replayed: its BaseBegin, and its snapshot as
// far as the parts read so far hold it. Each task is taken into the state as
// soon as its bytes are in, so that a replay may move tasks out of memory
// while a base of millions loads (store's spills), as it does while records
// create them.
type baseLoad struct {
	begin   Record
	parts   int
	digest  hash.Hash  // of the snapshot bytes read so far
	pending []byte     // the bytes read and not yet decoded
	from    []partSpan // where pending's bytes are in the WAL, in order
	version uint64     // 0 until the head is decoded
	left    int        // the tasks still to decode
	loaded  int        // the tasks decoded
	// unfinished are the positions of the unfinished tasks, which the
	// snapshot's live list must name, in order.
	unfinished []uint32
}

// partSpan says that the pending bytes from at on came from the BasePart
// whose frame starts at frame, skip bytes into its data (up to the next
// span's).
type partSpan struct {
	at    int
	frame int64
	skip  int64
}

// refer is where the WAL holds the pending bytes from at on (nowhere when
// the parts were read from no file).
func (l *baseLoad) refer(at int) PayloadRef {
	i := len(l.from) - 1
	for i > 0 && l.from[i].at > at {
		i--
	}
	if i < 0 {
		return PayloadRef{}
	}
	sp := l.from[i]
	return PayloadRef{Frame: sp.frame, Skip: sp.skip + int64(at-sp.at)}
}

// consumed drops the first n pending bytes from the spans.
func (l *baseLoad) consumed(n int) {
	kept := l.from[:0]
	for i, sp := range l.from {
		if i+1 < len(l.from) && l.from[i+1].at <= n {
			continue // every byte of it was decoded
		}
		if sp.at < n {
			sp.skip += int64(n - sp.at)
			sp.at = n
		}
		sp.at -= n
		kept = append(kept, sp)
	}
	l.from = kept
}

// IsBase reports whether the record is part of a compaction's base.
func (t RecordType) IsBase() bool { return t == BaseBegin || t == BasePart || t == BaseEnd }

// Base is the base the WAL starts with, nil for a WAL never compacted.
func (s *State) Base() *Base { return s.base }

// BaseSnapshot is the snapshot of a base in three pieces: the head (the
// counters and how many tasks follow), the tasks, which WriteBase streams to
// a writer, and the tail (the live list, domains, limits, pauses,
// schedules, ...). Head, tasks and tail read in turn are the snapshot the
// base's parts carry.
type BaseSnapshot struct {
	Seq, KeptFrom int64
	Cut           bool // the base cuts a history segment (Record.Cut)
	Head, Tail    []byte
	TasksSize     int64 // the bytes written for the tasks
	Kept, Dropped int
}

// WriteBase writes the snapshot of a base that replaces every record applied
// so far, keeping the finished tasks that ended at or after keptFrom: it
// streams the tasks to w in creation order, one at a time, from memory and
// the Source alike (EachTask), so that a base of millions is built in the
// memory of the state it is built from. read gets the text of a
// payload the state does not hold from the WAL the state was read from.
func (s *State) WriteBase(w io.Writer, keptFrom int64, read func(*PayloadRef) (string, error)) (BaseSnapshot, error) {
	if s.loading != nil || s.lastSeq == 0 {
		return BaseSnapshot{}, errors.New("there is nothing to compact: no record follows the base")
	}
	snap := BaseSnapshot{Seq: s.lastSeq, KeptFrom: keptFrom}
	version := s.snapshotVersion()
	tasks, live := &encoder{read: read, deps: version >= 7}, &encoder{}
	unfinished := []uint32{} // never nil: a base always has its live list, if empty
	var werr error
	flush := func() {
		if werr == nil {
			var n int
			n, werr = w.Write(tasks.b)
			snap.TasksSize += int64(n)
		}
		tasks.b = tasks.b[:0]
	}
	err := s.EachTask(false, func(t *Task) bool {
		if t.State.Terminal() && t.Ended < keptFrom {
			snap.Dropped++
			return true
		}
		if !t.State.Terminal() {
			unfinished = append(unfinished, uint32(snap.Kept))
		}
		snap.Kept++
		tasks.task(t)
		if len(tasks.b) >= 64<<10 {
			flush()
		}
		return werr == nil && tasks.err == nil
	})
	flush()
	if err = cmp.Or(err, tasks.err, werr); err != nil {
		return BaseSnapshot{}, err
	}
	// A base lists as live exactly its unfinished tasks in creation order,
	// and so has none ended among them.
	head := &encoder{}
	s.encodeHead(head, version)
	head.length(snap.Kept, false)
	live.liveList(unfinished, 0)
	s.encodeTail(live, version)
	snap.Head, snap.Tail = head.b, live.b
	return snap, nil
}

// Records hands emit the records of the base, a compaction at at: a
// BaseBegin, the snapshot in BaseParts of MaxBasePart bytes, and a BaseEnd
// with its digest, hash (the SHA-256 chain head of the records it replaces)
// and chainFrom (the checksum of the last one's frame). tasks reads back what
// WriteBase wrote.
func (b *BaseSnapshot) Records(at int64, history, hash string, chainFrom uint32, tasks io.Reader, emit func(Record) error) error {
	if history != HistoryKept && history != HistoryDropped {
		return fmt.Errorf("history must be %q or %q", HistoryKept, HistoryDropped)
	}
	size := int64(len(b.Head)) + b.TasksSize + int64(len(b.Tail))
	parts := int((size + MaxBasePart - 1) / MaxBasePart)
	keptFrom := b.KeptFrom
	if err := emit(Record{Seq: b.Seq, At: at, Type: BaseBegin, Parts: parts, KeptFrom: &keptFrom, History: history, Cut: b.Cut}); err != nil {
		return err
	}
	digest := sha256.New()
	snapshot := io.TeeReader(io.MultiReader(bytes.NewReader(b.Head), io.LimitReader(tasks, b.TasksSize), bytes.NewReader(b.Tail)), digest)
	chunk := make([]byte, MaxBasePart)
	for i := range parts {
		n, err := io.ReadFull(snapshot, chunk[:min(MaxBasePart, size-int64(i)*MaxBasePart)])
		if err != nil {
			return fmt.Errorf("reading back the base's tasks: %w", err)
		}
		if err := emit(Record{Seq: b.Seq, At: at, Type: BasePart, Part: i + 1, Data: base64.StdEncoding.EncodeToString(chunk[:n])}); err != nil {
			return err
		}
	}
	return emit(Record{ChainFrom: fmt.Sprintf("%08x", chainFrom), Seq: b.Seq, At: at, Type: BaseEnd,
		Digest: hex.EncodeToString(digest.Sum(nil)), Hash: hash})
}

// applyBase applies a record of a base, or refuses any other record while a
// base is incomplete.
func (s *State) applyBase(r Record) error {
	if r.ChainFrom != "" && r.Type != BaseEnd {
		return invalid("only a BaseEnd may carry chain_from")
	}
	if r.Cut && r.Type != BaseBegin {
		return invalid("only a BaseBegin may carry cut")
	}
	switch r.Type {
	case BaseBegin:
		switch {
		case s.lastSeq != 0 || s.loading != nil:
			return invalid("a base must open the WAL")
		case r.Seq < 1:
			return invalid("a base must replace at least one record")
		case r.Parts < 1 || r.KeptFrom == nil:
			return invalid("a BaseBegin needs parts (1 or more) and kept_from")
		case r.History != HistoryKept && r.History != HistoryDropped:
			return invalid("a BaseBegin's history must be %q or %q", HistoryKept, HistoryDropped)
		}
		s.loading = &baseLoad{begin: r, digest: sha256.New()}
		return nil
	case BasePart:
		l := s.loading
		switch {
		case l == nil:
			return invalid("a BasePart outside a base")
		case r.Seq != l.begin.Seq || r.Part != l.parts+1 || r.Part > l.begin.Parts:
			return invalid("BasePart %d of seq %d does not follow part %d of %d of the base of seq %d", r.Part, r.Seq, l.parts, l.begin.Parts, l.begin.Seq)
		}
		chunk, err := base64.StdEncoding.DecodeString(r.Data)
		if err != nil || len(chunk) == 0 || len(chunk) > MaxBasePart {
			return invalid("BasePart %d does not hold base64 of 1 to %d bytes", r.Part, MaxBasePart)
		}
		l.parts++
		l.digest.Write(chunk)
		if r.Frame > 0 {
			l.from = append(l.from, partSpan{at: len(l.pending), frame: r.Frame})
		}
		l.pending = append(l.pending, chunk...)
		return s.loadTasks(l)
	case BaseEnd:
		return s.endBase(r)
	}
	return invalid("the base is incomplete: a %s record comes before its BaseEnd", r.Type)
}

// loadTasks decodes the head and then every task whose bytes are all in,
// taking each into the state as a snapshot's load would.
func (s *State) loadTasks(l *baseLoad) error {
	if l.version != 0 && l.left == 0 {
		return nil // the tail, read whole at the BaseEnd
	}
	d := &snapDecoder{b: l.pending, all: string(l.pending), own: true, deps: l.version >= 7}
	defer func(size int) { l.consumed(size - len(l.pending)) }(len(l.pending))
	if l.version == 0 {
		version, err := d.head(s)
		n := 0
		if err == nil {
			n, _ = d.length()
			err = d.err
		}
		switch {
		case d.short:
			return nil // the head runs on in the next part
		case err == nil && d.refs:
			err = errors.New("it names payloads in the WAL, as only a cache may")
			fallthrough
		case err != nil:
			return invalid("the base's snapshot does not load: %v", err)
		}
		l.version, l.left, d.deps = version, n, version >= 7
		l.pending = l.pending[len(l.pending)-len(d.b):]
	}
	for l.left > 0 {
		t := &Task{}
		d.task(t)
		if d.short {
			break // its bytes run on in the next part
		}
		if d.err != nil {
			return invalid("the base's snapshot does not load: task %d: %v", l.loaded+1, d.err)
		}
		t.Payload = referTo(t.Payload.text, l.refer(d.payloadAt), s.inline)
		if t.Payload.ref == nil {
			t.Payload.text = strings.Clone(t.Payload.text) // a payload held in memory, as own strings are
		}
		s.tasks[t.ID] = t
		s.order = append(s.order, t)
		s.unkeyed, s.unleased = append(s.unkeyed, t), append(s.unleased, t)
		s.noteDeps(t)
		if !t.State.Terminal() {
			s.live = append(s.live, t)
			l.unfinished = append(l.unfinished, uint32(l.loaded))
		}
		l.loaded++
		l.left--
		l.pending = l.pending[len(l.pending)-len(d.b):]
	}
	l.pending = slices.Clone(l.pending) // the bytes left, not the array of the whole part
	return nil
}

// endBase checks the base read and makes the state the one it holds.
func (s *State) endBase(r Record) error {
	l := s.loading
	switch {
	case l == nil:
		return invalid("a BaseEnd outside a base")
	case r.Seq != l.begin.Seq || l.parts != l.begin.Parts:
		return invalid("the base of seq %d ends after %d of its %d parts", l.begin.Seq, l.parts, l.begin.Parts)
	case len(r.ChainFrom) != 8:
		return invalid("a BaseEnd needs chain_from, the checksum the next record continues from")
	case hex.EncodeToString(l.digest.Sum(nil)) != r.Digest:
		return invalid("the base's snapshot does not match its digest %q", r.Digest)
	case l.version == 0 || l.left > 0:
		return invalid("the base's snapshot does not load: it ends after %d tasks, %d short", l.loaded, l.left)
	}
	d := &snapDecoder{b: l.pending, all: string(l.pending)}
	if err := d.liveList(l.unfinished); err != nil {
		return invalid("the base's snapshot does not load: %v", err)
	}
	d.rest(s, l.version)
	switch {
	case d.err == nil && (len(d.b) != 0 || s.ended != 0):
		d.fail()
		fallthrough
	case d.err != nil:
		return invalid("the base's snapshot does not load: %v", d.err)
	case s.lastSeq != r.Seq:
		return invalid("the base of seq %d holds the state at seq %d", r.Seq, s.lastSeq)
	}
	if !l.begin.Cut {
		s.base = &Base{Seq: r.Seq, At: l.begin.At, KeptFrom: *l.begin.KeptFrom, History: l.begin.History, Hash: r.Hash, ChainFrom: r.ChainFrom}
	}
	s.loading = nil
	return nil
}

// liveList reads a base's live list, which must name its unfinished tasks,
// in creation order.
func (d *snapDecoder) liveList(unfinished []uint32) error {
	n, isNil := d.length()
	if isNil || n != len(unfinished) {
		d.fail()
		return fmt.Errorf("its live list names %d tasks, not its %d unfinished ones", n, len(unfinished))
	}
	for _, want := range unfinished {
		if i := d.uint(); d.err != nil || i != uint64(want) {
			d.fail()
			return fmt.Errorf("its live list does not name its unfinished tasks")
		}
	}
	return nil
}
