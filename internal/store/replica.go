package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// A WAL that belongs to a raft node is written by that node only: the leader
// decides (DecideBatch), raft commits, and every node appends the committed
// records itself (Replicate). A local writer beside it would fork the node's
// WAL from the cluster's, so the node marks the WAL (<wal>.node) and every
// handle not opened as that node refuses to write it; readers are welcome.

// NodeSuffix names the file that marks a WAL as a raft node's.
const NodeSuffix = ".node"

// NodeMark is what <wal>.node holds: the node, and where it answers.
type NodeMark struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

// NodeOwnedError is a write refused because a raft node owns the WAL.
type NodeOwnedError struct {
	Path string
	Mark NodeMark
}

func (e *NodeOwnedError) Error() string {
	return fmt.Sprintf("the WAL %s belongs to raft node %s and only the node writes it: send the command to the cluster with --server %s (reading it here works)", e.Path, e.Mark.ID, e.Mark.URL)
}

// MarkNode records that the node owns the WAL.
func (h *Handle) MarkNode(m NodeMark) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	return h.opts.FS.WriteFile(h.side(NodeSuffix), append(b, '\n'))
}

// ownedBy reads the WAL's node mark; nil when no node owns it.
func (h *Handle) ownedBy() (*NodeMark, error) {
	b, err := os.ReadFile(h.side(NodeSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", h.side(NodeSuffix), err)
	}
	var m NodeMark
	if err := json.Unmarshal(b, &m); err != nil || m.ID == "" {
		return nil, fmt.Errorf("%s is not a node mark (remove it if no raft node runs on this WAL)", h.side(NodeSuffix))
	}
	return &m, nil
}

// DecideBatch is WriteBatch for a replicated WAL: each fn decides, in order,
// against the WAL as it stands plus the decisions before it, and the records
// they committed are stamped and returned, but nothing is written. The
// caller proposes them; they reach the WAL through Replicate once the
// cluster committed them. The handle forgets its state, which now runs ahead
// of its file, and keeps it aside for that Replicate (decided).
func (h *Handle) DecideBatch(fns []func(*Tx) error) (errs []error, committed [][]state.Record, err error) {
	errs, committed = make([]error, len(fns)), make([][]state.Record, len(fns))
	var ahead *decided
	err = h.Read(func(tx *Tx) error {
		ahead = nil
		tx.staging = true
		before := tx.State.LastSeq()
		err := tx.decideEach(fns, errs, committed)
		if err == nil && len(tx.staged) > 0 && tx.State == h.cache && !h.spilled {
			ahead = &decided{st: tx.State, pos: h.pos, indexed: h.indexed, lastSeq: before, bodies: tx.staged}
		}
		return err
	})
	h.forget()
	if err == nil {
		h.ahead = ahead
	}
	return errs, committed, err
}

// decided is the state a leader's DecideBatch left: the WAL at pos (its
// index at indexed) with the records whose bodies are bodies applied,
// which only the cluster's commit of them makes true. The Replicate that
// follows takes it, rather than read the index and replay the WAL after
// it again, when nothing has read or written the WAL since and the entry
// holds exactly those records; any other operation drops it.
type decided struct {
	st           *state.State
	pos, indexed wal.Position
	lastSeq      int64 // the WAL's last record's
	bodies       [][]byte
}

// errNotDecided is an entry other than the records the handle decided.
var errNotDecided = errors.New("the entry holds other records than the batch decided")

// Replicate appends records the cluster committed, as the leader stamped
// them, after applying each (so a record replay would refuse is never
// written); records whose seq the WAL already holds are skipped, since raft
// hands a restarted node the entries after its last snapshot again. It
// returns the WAL's length after them.
func (h *Handle) Replicate(recs []state.Record) (end int64, err error) {
	ahead := h.ahead
	if ahead != nil && h.cache == nil && h.pos == (wal.Position{}) {
		h.cache, h.pos, h.indexed = ahead.st, ahead.pos, ahead.indexed
	}
	end, err = h.replicate(recs, ahead)
	if errors.Is(err, errNotDecided) {
		h.forget()
		end, err = h.replicate(recs, nil)
	}
	return end, err
}

func (h *Handle) replicate(recs []state.Record, ahead *decided) (end int64, err error) {
	err = h.Write(func(tx *Tx) error {
		// The decided state goes on only if the operation read nothing
		// more from the WAL: it holds its records already.
		var adopt bool
		if ahead != nil && tx.State == ahead.st {
			if tx.log == nil || tx.log.Position != ahead.pos {
				return errNotDecided
			}
			adopt = true
		}
		next := tx.State.LastSeq() + 1
		if adopt {
			next = ahead.lastSeq + 1
		}
		var kept []state.Record
		for _, r := range recs {
			if r.Seq < next && len(kept) == 0 {
				continue
			}
			if r.Seq != next {
				return fmt.Errorf("a committed record has seq %d but the WAL %s ends at %d: the node's WAL lost records; restore it from another node's copy", r.Seq, h.opts.Path, next-1)
			}
			kept = append(kept, r)
			next++
		}
		bodies, version, err := tx.passGate(kept)
		if err != nil {
			return err
		}
		switch {
		case adopt && !slices.EqualFunc(bodies, ahead.bodies, bytes.Equal):
			return errNotDecided
		case !adopt:
			if err := tx.applyAll(kept); err != nil {
				return err
			}
		}
		if len(bodies) > 0 {
			if err := tx.append(bodies, version); err != nil {
				h.forget()
				return err
			}
			h.pos = tx.log.Position
			tx.Committed = recs
		}
		end = h.pos.End
		return nil
	})
	return end, err
}

// Install makes the WAL hold data, a copy of another node's WAL: a WAL that
// already begins with data is kept (raft restores the last snapshot on every
// start, and the entries after it are skipped by Replicate); any other is
// replaced atomically, and the index that described it is removed.
func (h *Handle) Install(data []byte) (kept bool, err error) {
	have, err := os.ReadFile(h.opts.Path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	if bytes.HasPrefix(have, data) {
		return true, nil
	}
	h.forget()
	if err := h.opts.FS.Remove(h.indexPath()); err != nil {
		return false, err
	}
	if len(data) == 0 {
		return false, h.opts.FS.Remove(h.opts.Path)
	}
	return false, h.opts.FS.WriteFile(h.opts.Path, data)
}

// End is the WAL's length as of the handle's last operation.
func (h *Handle) End() int64 { return h.pos.End }
