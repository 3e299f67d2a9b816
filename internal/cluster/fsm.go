package cluster

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// A raft entry is one of three kinds, told apart by its first byte: records a
// leader decided (each a record body as the WAL frames it, length-prefixed),
// a member's URL (JSON), which followers need to forward to the leader (an
// empty URL is a member removed, kept so that a repeated removal knows it),
// or a compaction (JSON), which every node applies to its WAL at the same
// record with the same time and retention, so that their WALs stay
// byte-identical.
const (
	entryRecords byte = 'R'
	entryMember  byte = 'M'
	entryCompact byte = 'C'
)

// compaction is a compaction entry: the last record the base stands for,
// when, and what to keep.
type compaction struct {
	Seq          int64 `json:"seq"`
	At           int64 `json:"at"`
	KeepFinished int64 `json:"keep_finished_ms"`
	KeepHistory  int64 `json:"keep_history_ms"`
	Drop         bool  `json:"drop,omitempty"`
}

func recordsEntry(recs []state.Record) ([]byte, error) {
	out := []byte{entryRecords}
	for _, r := range recs {
		body, err := state.EncodeRecord(r)
		if err != nil {
			return nil, fmt.Errorf("encoding record %d: %w", r.Seq, err)
		}
		out = binary.AppendUvarint(out, uint64(len(body)))
		out = append(out, body...)
	}
	return out, nil
}

func decodeRecords(b []byte) ([]state.Record, error) {
	var recs []state.Record
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, errors.New("a records entry is cut short")
		}
		r, err := state.DecodeRecord(b[k : k+int(n)])
		if err != nil {
			return nil, err
		}
		recs, b = append(recs, r), b[k+int(n):]
	}
	return recs, nil
}

type member struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

func memberEntry(id, url string) []byte {
	b, _ := json.Marshal(member{ID: id, URL: url}) // two strings always marshal
	return append([]byte{entryMember}, b...)
}

// fsm applies committed entries to the node's WAL.
type fsm struct {
	n *Node

	mu      sync.Mutex
	end     int64             // the WAL's length once the applied entries are in it
	members map[string]string // node id → URL ("" once removed)
	// covered is the last seq that came through raft (an entry, or the WAL
	// of a snapshot): a WAL that holds more holds records no other node has,
	// which only a founding node moved into the cluster has (Node.importWAL).
	covered int64

	// compacting is the compaction entry last applied, which may still be
	// running (compactWAL). Only raft's apply loop (Apply, Snapshot,
	// Restore) touches it, and Shutdown once that loop has stopped.
	compacting *pendingCompaction
}

// settle waits for the compaction last applied to end: compactions run one
// at a time, and a raft snapshot or a restore must see the WAL it leaves.
func (f *fsm) settle() {
	if p := f.compacting; p != nil {
		<-p.done
	}
}

func (f *fsm) coveredSeq() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.covered
}

func (f *fsm) setEnd(end int64) {
	f.mu.Lock()
	f.end = end
	f.mu.Unlock()
}

func (f *fsm) member(id string) (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	url, ok := f.members[id]
	return url, ok
}

// Apply appends a committed entry's records to the WAL. An entry whose
// records every node refuses alike (one that does not decode, or that the
// gate or the rules refuse: they depend on the entry and the WAL, which
// every node holds the same) is skipped on every node, logged, and answered
// to its proposer as the refusal. An entry that cannot be applied for any
// other reason (a failed write, a WAL that lost records) stops the node
// (Failed): raft has committed it, so skipping it would fork this node's
// WAL from the others'.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand || len(l.Data) == 0 {
		return nil
	}
	switch l.Data[0] {
	case entryMember:
		var m member
		if err := json.Unmarshal(l.Data[1:], &m); err != nil {
			return f.failed(l.Index, err)
		}
		f.mu.Lock()
		f.members[m.ID] = m.URL
		f.mu.Unlock()
		return nil
	case entryRecords:
		recs, err := decodeRecords(l.Data[1:])
		if err != nil {
			return f.refused(l.Index, err)
		}
		f.n.mu.Lock()
		end, err := f.n.h.Replicate(recs)
		var refusal *store.RefusedRecordError
		if errors.As(err, &refusal) {
			f.n.mu.Unlock()
			return f.refused(l.Index, err)
		}
		if err != nil {
			f.n.mu.Unlock()
			return f.failed(l.Index, err)
		}
		f.mu.Lock() // under n.mu: a compaction finishing beside sets end too
		f.end = end
		if len(recs) > 0 {
			f.covered = max(f.covered, recs[len(recs)-1].Seq)
		}
		f.mu.Unlock()
		f.n.mu.Unlock()
		if f.n.cfg.Applied != nil {
			f.n.cfg.Applied(recs)
		}
		return nil
	case entryCompact:
		var c compaction
		if err := json.Unmarshal(l.Data[1:], &c); err != nil {
			return f.failed(l.Index, err)
		}
		// The compaction runs beside the entries applied after it, not in
		// raft's apply loop: its base stands at c.Seq whatever they add.
		f.settle()
		p := &pendingCompaction{done: make(chan struct{})}
		f.compacting = p
		go func() {
			defer close(p.done)
			p.result, p.err = f.n.compactWAL(c)
			switch {
			case errors.Is(p.err, store.ErrNothingToCompact):
				p.err = nil
			case p.err != nil: // the other nodes compacted: this WAL would differ from theirs
				p.err = f.failed(l.Index, p.err)
			}
		}()
		return p
	}
	return f.failed(l.Index, fmt.Errorf("unknown entry kind %q", l.Data[0]))
}

// refused answers an entry every node refuses alike: nothing of it is
// applied anywhere, and the node goes on.
func (f *fsm) refused(index uint64, err error) error {
	err = &RefusedEntryError{Index: index, Err: err}
	if f.n.cfg.Log != nil {
		fmt.Fprintf(f.n.cfg.Log, "leasewal: node %s: %v\n", f.n.cfg.ID, err)
	}
	return err
}

func (f *fsm) failed(index uint64, err error) error {
	err = fmt.Errorf("node %s cannot apply raft entry %d: %w", f.n.cfg.ID, index, err)
	f.n.fail(err)
	return err
}

// Snapshot captures the WAL's length and the members, and opens the WAL;
// Persist copies that much of it, which is append-only, while entries go on
// being applied. A compaction applied meanwhile renames a new WAL over it:
// the file opened here is still the one the length describes.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	f.settle()    // a snapshot of a WAL not yet compacted would never be, on the node that installs it
	f.n.mu.Lock() // no compaction replaces the WAL between the length and the open
	defer f.n.mu.Unlock()
	f.mu.Lock()
	defer f.mu.Unlock()
	members := make(map[string]string, len(f.members))
	for id, url := range f.members {
		members[id] = url
	}
	var wal *os.File
	if f.end > 0 {
		var err error
		if wal, err = os.Open(f.n.h.Path()); err != nil {
			return nil, fmt.Errorf("opening the WAL for a raft snapshot: %w", err)
		}
	}
	return &snapshot{wal: wal, header: snapshotHeader{Members: members, WALBytes: f.end}}, nil
}

// snapshotHeader is the first line of a snapshot; the WAL's bytes follow.
type snapshotHeader struct {
	Members  map[string]string `json:"members"`
	WALBytes int64             `json:"wal_bytes"`
}

type snapshot struct {
	wal    *os.File // nil for an empty WAL
	header snapshotHeader
}

func (s *snapshot) Persist(sink raft.SnapshotSink) error {
	err := json.NewEncoder(sink).Encode(s.header)
	if err == nil && s.wal != nil {
		_, err = io.CopyN(sink, s.wal, s.header.WALBytes)
	}
	if err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("writing a raft snapshot: %w", err)
	}
	return sink.Close()
}

func (s *snapshot) Release() {
	if s.wal != nil {
		s.wal.Close()
	}
}

// Restore makes the node's WAL the snapshot's (keeping a WAL that already
// begins with it).
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	r := bufio.NewReader(rc)
	line, err := r.ReadBytes('\n')
	if err != nil {
		return fmt.Errorf("reading a raft snapshot: %w", err)
	}
	var header snapshotHeader
	if err := json.Unmarshal(line, &header); err != nil || header.WALBytes < 0 {
		return errors.New("a raft snapshot without its header")
	}
	data := make([]byte, header.WALBytes)
	if _, err := io.ReadFull(r, data); err != nil {
		return fmt.Errorf("reading a raft snapshot's WAL: %w", err)
	}
	f.settle()
	f.n.mu.Lock()
	defer f.n.mu.Unlock()
	if _, err := f.n.h.Install(data); err != nil {
		return fmt.Errorf("installing a raft snapshot's WAL: %w", err)
	}
	var last int64
	if err := f.n.h.Read(func(tx *store.Tx) error { last = tx.State.LastSeq(); return nil }); err != nil {
		return err
	}
	f.mu.Lock()
	f.members, f.end, f.covered = header.Members, f.n.h.End(), last
	if f.members == nil {
		f.members = map[string]string{}
	}
	f.mu.Unlock()
	return nil
}
