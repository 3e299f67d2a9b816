package state

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
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

// baseLoad is a base being replayed: its BaseBegin and the snapshot bytes
// of the parts read so far.
type baseLoad struct {
	begin Record
	data  []byte
	parts int
}

// IsBase reports whether the record is part of a compaction's base.
func (t RecordType) IsBase() bool { return t == BaseBegin || t == BasePart || t == BaseEnd }

// Base is the base the WAL starts with, nil for a WAL never compacted.
func (s *State) Base() *Base { return s.base }

// BaseRecords returns the records of a base that replaces every record
// applied so far: a compaction at at, keeping the finished tasks that ended
// at or after keptFrom. hash is the SHA-256 chain head of the records it
// replaces and chainFrom the checksum of the last one's frame. Every task must
// be in memory (a full replay's state). It also says how many tasks the base
// keeps and how many it drops.
func (s *State) BaseRecords(at, keptFrom int64, history, hash string, chainFrom uint32) (recs []Record, kept, dropped int, err error) {
	if s.archive != nil || s.cold != nil {
		return nil, 0, 0, errors.New("a base is built from a full replay, with every task in memory")
	}
	if s.loading != nil || s.lastSeq == 0 {
		return nil, 0, 0, errors.New("there is nothing to compact: no record follows the base")
	}
	if history != HistoryKept && history != HistoryDropped {
		return nil, 0, 0, fmt.Errorf("history must be %q or %q", HistoryKept, HistoryDropped)
	}
	retained := s.retained(keptFrom)
	snap := retained.Snapshot()
	sum := sha256.Sum256(snap)
	parts := (len(snap) + MaxBasePart - 1) / MaxBasePart
	recs = make([]Record, 0, parts+2)
	recs = append(recs, Record{Seq: s.lastSeq, At: at, Type: BaseBegin, Parts: parts, KeptFrom: &keptFrom, History: history})
	for i := range parts {
		chunk := snap[i*MaxBasePart : min(len(snap), (i+1)*MaxBasePart)]
		recs = append(recs, Record{Seq: s.lastSeq, At: at, Type: BasePart, Part: i + 1, Data: base64.StdEncoding.EncodeToString(chunk)})
	}
	return append(recs, Record{ChainFrom: fmt.Sprintf("%08x", chainFrom), Seq: s.lastSeq, At: at, Type: BaseEnd,
		Digest: hex.EncodeToString(sum[:]), Hash: hash}), len(retained.order), len(s.order) - len(retained.order), nil
}

// retained is the state without the finished tasks that ended before
// keptFrom. It shares the tasks with s: it is only for Snapshot.
func (s *State) retained(keptFrom int64) *State {
	r := *s
	r.order = make([]*Task, 0, len(s.order))
	for _, t := range s.order {
		if !t.State.Terminal() || t.Ended >= keptFrom {
			r.order = append(r.order, t)
		}
	}
	r.live = make([]*Task, 0, len(s.live)-s.ended)
	for _, t := range s.live {
		if !t.State.Terminal() {
			r.live = append(r.live, t)
		}
	}
	r.ended = 0
	return &r
}

// applyBase applies a record of a base, or refuses any other record while a
// base is incomplete.
func (s *State) applyBase(r Record) error {
	if r.ChainFrom != "" && r.Type != BaseEnd {
		return invalid("only a BaseEnd may carry chain_from")
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
		s.loading = &baseLoad{begin: r}
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
		l.data = append(l.data, chunk...)
		l.parts++
		return nil
	case BaseEnd:
		return s.endBase(r)
	}
	return invalid("the base is incomplete: a %s record comes before its BaseEnd", r.Type)
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
	}
	sum := sha256.Sum256(l.data)
	if hex.EncodeToString(sum[:]) != r.Digest {
		return invalid("the base's snapshot does not match its digest %q", r.Digest)
	}
	loaded, err := LoadSnapshot(l.data, nil, nil)
	switch {
	case err != nil:
		return invalid("the base's snapshot does not load: %v", err)
	case loaded.lastSeq != r.Seq:
		return invalid("the base of seq %d holds the state at seq %d", r.Seq, loaded.lastSeq)
	}
	loaded.base = &Base{Seq: r.Seq, At: l.begin.At, KeptFrom: *l.begin.KeptFrom, History: l.begin.History, Hash: r.Hash, ChainFrom: r.ChainFrom}
	*s = *loaded
	return nil
}
