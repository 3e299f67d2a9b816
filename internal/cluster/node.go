// Package cluster runs one node of a leasewal cluster on hashicorp/raft
// (docs/serving.md#a-raft-cluster). The leader decides a batch against its WAL (store.DecideBatch),
// stamps its records and proposes them as one raft entry; every node,
// the leader included, applies committed entries through the same
// state.Apply and appends their records to its own leasewal WAL
// (store.Replicate), so every node's WAL holds the same records, byte for
// byte, and verify, log and inspect work on each. A raft snapshot carries
// the WAL's bytes.
//
// cluster knows raft and the store; what a request means is cmd's.
package cluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// Config says how a node starts.
type Config struct {
	ID   string // the node's raft id, stable across restarts
	Dir  string // raft's log, stable store and snapshots
	Bind string // the raft transport's address (TCP), unless Transport is set
	// Advertise is the address the other nodes dial ("" for Bind): a proxy,
	// a NAT or a name in front of Bind.
	Advertise string
	URL       string // where the node's HTTP API answers: followers forward there
	// Join starts the node without founding a cluster: a member adds it
	// (Node.Join, which a joining serve asks for over HTTP).
	Join bool
	// Transport, if set, replaces TCP on Bind (tests: raft.InmemTransport).
	Transport raft.Transport
	// TLS, if set, makes the transport on Bind mutual TLS.
	TLS *TLS
	// Timing tunes raft; the zero value is Timing{}.withDefaults().
	Timing Timing
	// Log receives raft's own log lines (each kind at most once per 30 s);
	// nil discards them.
	Log io.Writer
	// Applied, if set, is told the records of each entry the node applies
	// to its WAL, in order (a live page follows them).
	Applied func([]state.Record)
}

// Timing is raft's clock. The defaults tolerate a loaded 2-core machine and
// the race detector: a leader is suspected after 2 s of silence.
type Timing struct {
	Heartbeat         time.Duration
	Election          time.Duration
	LeaderLease       time.Duration
	Apply             time.Duration // how long a proposal may wait to commit
	SnapshotInterval  time.Duration // how often raft considers a snapshot
	SnapshotThreshold uint64        // entries between raft snapshots
	TrailingLogs      uint64        // entries kept after a snapshot
}

func (t Timing) withDefaults() Timing {
	return Timing{
		Heartbeat:         orDefault(t.Heartbeat, 2*time.Second),
		Election:          orDefault(t.Election, 2*time.Second),
		LeaderLease:       orDefault(t.LeaderLease, time.Second),
		Apply:             orDefault(t.Apply, 10*time.Second),
		SnapshotInterval:  orDefault(t.SnapshotInterval, 2*time.Minute),
		SnapshotThreshold: orDefault(t.SnapshotThreshold, 8192),
		TrailingLogs:      orDefault(t.TrailingLogs, 10240),
	}
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// ErrNotLeader is a request that reached a node that cannot decide it: it
// is not the leader, or has not yet caught up with its term. Nothing was
// decided; the client may send it again.
var ErrNotLeader = errors.New("this node is not the cluster's leader (or is still catching up after its election): nothing was decided; send the request again")

// UnknownOutcomeError is a proposal whose fate the leader cannot know: it
// lost its leadership before the entry committed, and a new leader may yet
// commit it. A retry with the same request id gets the answer either way.
type UnknownOutcomeError struct{ Err error }

func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("the cluster's leader changed before the decision was known to be committed (%v): the outcome is unknown; repeat it with the same --request-id", e.Err)
}

func (e *UnknownOutcomeError) Unwrap() error { return e.Err }

// RefusedEntryError is a committed entry that every node refused alike
// (cluster's fsm): nothing of it was written on any node, which goes on.
type RefusedEntryError struct {
	Index uint64
	Err   error
}

func (e *RefusedEntryError) Error() string {
	return fmt.Sprintf("raft entry %d was refused on every node, and nothing of it written: %v", e.Index, e.Err)
}

func (e *RefusedEntryError) Unwrap() error { return e.Err }

// Node is one running member.
type Node struct {
	cfg    Config
	timing Timing
	raft   *raft.Raft
	fsm    *fsm
	opts   store.Options // the WAL's, as given
	bolt   *raftboltdb.BoltStore
	trans  raft.Transport

	// mu serializes the leader's decisions with the application of
	// committed entries: both use h, which is not safe for concurrent use.
	mu sync.Mutex
	h  *store.Handle

	ready atomic.Bool // the leader has applied every entry of earlier terms
	// leaderChanged is closed, and replaced, when the node learns of another
	// leader (or of none).
	leaderMu      sync.Mutex
	leaderChanged chan struct{}
	observed      chan raft.Observation
	observer      *raft.Observer
	notify        chan bool
	stop          chan struct{}
	done          chan struct{}
	failed        chan error
	once          sync.Once
}

// identity is what <raft dir>/leasewal-node.json holds, so that a raft dir
// is never used for another node or another WAL.
type identity struct {
	ID  string `json:"id"`
	WAL string `json:"wal"`
}

// Start opens the node's raft state in cfg.Dir and its WAL with opts, and
// joins raft: it founds a one-node cluster when the dir is new and Join is
// false.
func Start(cfg Config, opts store.Options) (*Node, error) {
	if cfg.ID == "" || cfg.Dir == "" || (cfg.Bind == "" && cfg.Transport == nil) {
		return nil, errors.New("a raft node needs --raft-id, --raft-dir and --raft-bind")
	}
	if err := state.ValidateID("--raft-id", cfg.ID); err != nil {
		return nil, err
	}
	walPath, err := filepath.Abs(opts.Path)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating the raft dir: %w", err)
	}
	id := identity{ID: cfg.ID, WAL: walPath}
	if err := checkClaim(cfg.Dir, id); err != nil {
		return nil, err
	}
	n := &Node{cfg: cfg, timing: cfg.Timing.withDefaults(), notify: make(chan bool, 16),
		stop: make(chan struct{}), done: make(chan struct{}), failed: make(chan error, 1),
		leaderChanged: make(chan struct{}), observed: make(chan raft.Observation, 16)}
	n.opts = opts
	opts.Node = true
	n.h = store.Open(opts)
	n.fsm = &fsm{n: n, members: map[string]string{}}
	if err := n.open(); err != nil {
		n.h.Close()
		return nil, err
	}
	if err := claim(cfg.Dir, id); err != nil {
		_ = n.Shutdown()
		return nil, err
	}
	n.observer = raft.NewObserver(n.observed, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
	n.raft.RegisterObserver(n.observer)
	go n.lead()
	return n, nil
}

// LeaderChanged is closed once the node learns of a leader other than the
// one it knows now (or learns that there is none).
func (n *Node) LeaderChanged() <-chan struct{} {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	return n.leaderChanged
}

func (n *Node) announceLeaderChange() {
	n.leaderMu.Lock()
	defer n.leaderMu.Unlock()
	close(n.leaderChanged)
	n.leaderChanged = make(chan struct{})
}

// The identity file: <raft dir>/leasewal-node.json.
const identityFile = "leasewal-node.json"

// checkClaim refuses a raft dir that belongs to another node or another WAL.
func checkClaim(dir string, id identity) error {
	b, err := os.ReadFile(filepath.Join(dir, identityFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the raft dir's identity: %w", err)
	}
	var have identity
	if err := json.Unmarshal(b, &have); err != nil {
		return fmt.Errorf("%s is not a leasewal node's: give another --raft-dir", dir)
	}
	if have != id {
		return fmt.Errorf("the raft dir %s belongs to node %s of the WAL %s, not to node %s of %s: give each node its own --raft-dir", dir, have.ID, have.WAL, id.ID, id.WAL)
	}
	return nil
}

// claim makes a raft dir this node's, once it has started on it.
func claim(dir string, id identity) error {
	b, _ := json.Marshal(id) // two strings always marshal
	return os.WriteFile(filepath.Join(dir, identityFile), append(b, '\n'), 0o600)
}

func (n *Node) open() error {
	var logw io.Writer = io.Discard
	if n.cfg.Log != nil {
		logw = newQuietLog(n.cfg.Log, 30*time.Second)
	}
	bolt, err := raftboltdb.NewBoltStore(filepath.Join(n.cfg.Dir, "raft.db"))
	if err != nil {
		return fmt.Errorf("opening the raft log in %s: %w", n.cfg.Dir, err)
	}
	n.bolt = bolt
	snaps, err := raft.NewFileSnapshotStore(n.cfg.Dir, 2, logw)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("opening the raft snapshots in %s: %w", n.cfg.Dir, err)
	}
	existing, err := raft.HasExistingState(bolt, bolt, snaps)
	if err != nil {
		bolt.Close()
		return err
	}
	if !existing && n.cfg.Join {
		if err := n.requireEmptyWAL(); err != nil {
			bolt.Close()
			return err
		}
	}
	if err := n.h.MarkNode(store.NodeMark{ID: n.cfg.ID, URL: n.cfg.URL}); err != nil {
		bolt.Close()
		return fmt.Errorf("marking the WAL as node %s's: %w", n.cfg.ID, err)
	}
	n.trans = n.cfg.Transport
	if n.trans == nil {
		var err error
		if n.trans, err = NewTransport(n.cfg.Bind, n.cfg.Advertise, n.cfg.TLS, logw); err != nil {
			bolt.Close()
			return fmt.Errorf("cannot listen for raft on %s: %w", n.cfg.Bind, err)
		}
	}
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.ID)
	rc.HeartbeatTimeout, rc.ElectionTimeout, rc.LeaderLeaseTimeout = n.timing.Heartbeat, n.timing.Election, n.timing.LeaderLease
	rc.SnapshotInterval, rc.SnapshotThreshold, rc.TrailingLogs = n.timing.SnapshotInterval, n.timing.SnapshotThreshold, n.timing.TrailingLogs
	rc.NotifyCh = n.notify
	rc.LogOutput, rc.LogLevel = logw, "WARN"
	if err := n.readEnd(); err != nil {
		bolt.Close()
		return err
	}
	r, err := raft.NewRaft(rc, n.fsm, bolt, bolt, snaps, n.trans)
	if err != nil {
		bolt.Close()
		return fmt.Errorf("starting raft: %w", err)
	}
	n.raft = r
	if !existing && !n.cfg.Join {
		boot := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: n.trans.LocalAddr()}}}
		if err := r.BootstrapCluster(boot).Error(); err != nil {
			r.Shutdown()
			bolt.Close()
			return fmt.Errorf("founding the cluster: %w", err)
		}
		n.electAtOnce(rc)
	}
	return nil
}

// electAtOnce has a node that founds a cluster, its only voter, stand for
// election now rather than after a heartbeat timeout (2 to 4 s by default)
// with nobody to hear from: raft re-arms a follower's timer at once when its
// heartbeat timeout is lowered, and a node that never heard from a leader
// stands at that timer. The timeout is lowered as far as the leader lease
// allows, then set back; a raft that ignores the hint elects at its own timer.
func (n *Node) electAtOnce(rc *raft.Config) {
	if rc.LeaderLeaseTimeout >= rc.HeartbeatTimeout {
		return
	}
	reload := func(heartbeat time.Duration) error {
		return n.raft.ReloadConfig(raft.ReloadableConfig{TrailingLogs: rc.TrailingLogs, SnapshotInterval: rc.SnapshotInterval,
			SnapshotThreshold: rc.SnapshotThreshold, HeartbeatTimeout: heartbeat, ElectionTimeout: rc.ElectionTimeout})
	}
	if reload(rc.LeaderLeaseTimeout) == nil {
		_ = reload(rc.HeartbeatTimeout)
	}
}

// requireEmptyWAL refuses to join a cluster with a WAL that holds records:
// the cluster's records would follow records no other node has. (A node
// that founds a cluster brings its records in: importWAL.)
func (n *Node) requireEmptyWAL() error {
	var records int
	err := n.h.Read(func(tx *store.Tx) error { records = tx.Records(); return nil })
	if err != nil {
		return err
	}
	if records > 0 {
		return fmt.Errorf("the WAL %s already holds %d records, and a new node starts from an empty WAL: give a new --wal (a WAL with records moves into a cluster by founding it: start its node without --join)", n.h.Path(), records)
	}
	return nil
}

// readEnd learns the WAL's length, which a snapshot copies.
func (n *Node) readEnd() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	err := n.h.Read(func(*store.Tx) error { return nil })
	n.fsm.setEnd(n.h.End())
	return err
}

// lead follows the node's leadership: after winning an election the leader
// waits for Barrier (every entry of earlier terms applied to its WAL) before
// it decides anything, and makes sure its URL is the one followers forward to.
func (n *Node) lead() {
	defer close(n.done)
	for {
		select {
		case <-n.stop:
			return
		case <-n.observed:
			n.announceLeaderChange()
		case leader := <-n.notify:
			n.ready.Store(false)
			for leader && n.raft.State() == raft.Leader {
				if err := n.catchUpTerm(); err == nil {
					n.ready.Store(true)
					break
				}
				select {
				case <-n.stop:
					return
				case leader = <-n.notify:
				case <-time.After(100 * time.Millisecond):
				}
			}
		}
	}
}

func (n *Node) catchUpTerm() error {
	if err := n.raft.Barrier(n.timing.Apply).Error(); err != nil {
		return err
	}
	if err := n.importWAL(); err != nil {
		return err
	}
	if url, _ := n.fsm.member(n.cfg.ID); url != n.cfg.URL {
		return n.propose(memberEntry(n.cfg.ID, n.cfg.URL))
	}
	return nil
}

// importChunk is how many records one entry of an imported WAL holds.
const importChunk = 256

// importWAL proposes the records of the leader's WAL that came through no
// raft entry: a WAL moved into a cluster by founding it. The leader's own
// WAL has them already (Replicate skips them); every other node appends
// them, so that all start from the same records. It runs after Barrier,
// when every committed entry is applied: any WAL of the cluster then holds
// no record beyond what raft carried, but these.
func (n *Node) importWAL() error {
	covered := n.fsm.coveredSeq()
	last, err := n.LastSeq()
	if err != nil || last <= covered {
		return err
	}
	var recs []state.Record
	opts := n.opts
	opts.Node, opts.Resident, opts.FullReplay = false, false, true
	opts.OnRecord = func(r state.Record, _ *store.Tx) error {
		if r.Seq > covered {
			recs = append(recs, r)
		}
		return nil
	}
	reader := store.Open(opts)
	defer reader.Close()
	if err := reader.Read(func(*store.Tx) error { return nil }); err != nil {
		return fmt.Errorf("reading the WAL to bring its records into the cluster: %w", err)
	}
	for len(recs) > 0 {
		chunk := recs[:min(importChunk, len(recs))]
		entry, err := recordsEntry(chunk)
		if err != nil {
			return err
		}
		if err := n.propose(entry); err != nil {
			return err
		}
		recs = recs[len(chunk):]
	}
	return nil
}

// Leading reports whether this node decides requests now.
func (n *Node) Leading() bool { return n.ready.Load() && n.raft.State() == raft.Leader }

// Leader is the leader's HTTP URL, "" while none is known.
func (n *Node) Leader() string {
	_, id := n.raft.LeaderWithID()
	if id == "" {
		return ""
	}
	url, _ := n.fsm.member(string(id))
	return url
}

// RaftAddr is the address the other nodes dial for this node's raft.
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }

// Role is "leader", "follower" or "candidate".
func (n *Node) Role() string {
	switch n.raft.State() {
	case raft.Leader:
		return "leader"
	case raft.Candidate:
		return "candidate"
	}
	return "follower"
}

// Indexes is the node's raft term, and its commit and applied indexes.
func (n *Node) Indexes() (term, commit, applied uint64) {
	stats := n.raft.Stats()
	parse := func(key string) uint64 { v, _ := strconv.ParseUint(stats[key], 10, 64); return v }
	return parse("term"), parse("commit_index"), parse("applied_index")
}

// LastSeq is the last seq of the node's WAL.
func (n *Node) LastSeq() (int64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	var last int64
	err := n.h.Read(func(tx *store.Tx) error { last = tx.State.LastSeq(); return nil })
	return last, err
}

// Commit is group commit on the leader: fns decide one after the other
// against the WAL plus the decisions before them, their records go to the
// cluster as one entry, and Commit returns once it is committed and applied
// to this node's WAL. err is the batch's: when it is set, no answer of the
// batch stands.
func (n *Node) Commit(fns []func(*store.Tx) error) (errs []error, committed [][]state.Record, err error) {
	if !n.Leading() {
		return make([]error, len(fns)), make([][]state.Record, len(fns)), ErrNotLeader
	}
	n.mu.Lock()
	errs, committed, err = n.h.DecideBatch(fns)
	n.mu.Unlock()
	if err != nil {
		return errs, committed, err
	}
	var all []state.Record
	for _, recs := range committed {
		all = append(all, recs...)
	}
	if len(all) == 0 {
		// Answers that wrote nothing (a read, an EMPTY lease, a refusal) are
		// given only once a majority confirms this node still leads: a leader
		// cut off from the others must not answer from a stale WAL.
		if err := n.raft.VerifyLeader().Error(); err != nil {
			return errs, committed, ErrNotLeader
		}
		return errs, committed, nil
	}
	entry, err := recordsEntry(all)
	if err != nil {
		return errs, committed, err
	}
	return errs, committed, n.propose(entry)
}

// Compact compacts the cluster's WAL, on the leader, best with no batch in
// flight (a server proposes it between two: Batcher.Exclusive, and waits
// for it beside the batches after it): the compaction is an entry naming
// the last record the leader applied, so that
// every node compacts at that record, with the leader's time and the same
// retention, and their WALs stay byte-identical. Each node seals its own copy
// of the history beside its WAL. It returns what this node's compaction did
// (store.ErrNothingToCompact when nothing followed the last one).
func (n *Node) Compact(opts store.CompactOptions) (store.Compaction, error) {
	wait, err := n.ProposeCompaction(opts)
	if err != nil {
		return store.Compaction{}, err
	}
	return wait()
}

// ProposeCompaction is Compact's first half: it returns once the entry is
// committed and this node has begun its compaction, with wait, which
// returns once that has ended. A server proposes between two batches and
// waits beside them.
func (n *Node) ProposeCompaction(opts store.CompactOptions) (wait func() (store.Compaction, error), err error) {
	if !n.Leading() {
		return nil, ErrNotLeader
	}
	seq, err := n.LastSeq()
	if err != nil {
		return nil, err
	}
	at := time.Now().UnixMilli()
	if n.opts.Clock != nil { // a test's clock, as the leader stamps records with
		if at, err = n.opts.Clock(0); err != nil {
			return nil, err
		}
	}
	entry, _ := json.Marshal(compaction{Seq: seq, At: at, KeepFinished: opts.KeepFinished.Milliseconds(),
		KeepHistory: opts.KeepHistory.Milliseconds(), Drop: opts.Drop}) // integers and a bool always marshal
	f := n.raft.Apply(append([]byte{entryCompact}, entry...), n.timing.Apply)
	if err := f.Error(); errors.Is(err, raft.ErrNotLeader) {
		return nil, ErrNotLeader
	} else if err != nil {
		return nil, &UnknownOutcomeError{Err: err}
	}
	switch p := f.Response().(type) {
	case *pendingCompaction:
		return p.wait, nil
	case error:
		return nil, p
	}
	return nil, store.ErrNothingToCompact
}

// compactWAL applies a compaction entry to the node's WAL: the first step
// (the history read and copied, the base written) without n.mu, beside the
// entries applied after it meanwhile, the last under n.mu. The base stands
// at the entry's record and time whatever has been applied since, so that
// every node builds the same WAL. Applied again (raft hands a restarted node
// the entries after its last snapshot again), it finds its base in the WAL
// and does nothing.
func (n *Node) compactWAL(c compaction) (store.Compaction, error) {
	var base *state.Base
	var last int64
	n.mu.Lock()
	err := n.h.Read(func(tx *store.Tx) error { base, last = tx.State.Base(), tx.State.LastSeq(); return nil })
	n.mu.Unlock()
	switch {
	case err != nil:
		return store.Compaction{}, err
	case base != nil && base.Seq >= c.Seq:
		return store.Compaction{}, store.ErrNothingToCompact
	case last < c.Seq:
		return store.Compaction{}, fmt.Errorf("a compaction at seq %d, but the node's WAL ends at seq %d: it differs from the cluster's; restore it from another node's copy", c.Seq, last)
	}
	opts := n.opts
	opts.Node = true
	opts.Clock = func(lastAt int64) (int64, error) { return max(c.At, lastAt), nil }
	h := store.Open(opts)
	defer h.Close()
	p, err := h.PrepareCompaction(store.CompactOptions{KeepFinished: time.Duration(c.KeepFinished) * time.Millisecond,
		KeepHistory: time.Duration(c.KeepHistory) * time.Millisecond, Drop: c.Drop, Through: c.Seq})
	if err != nil {
		return store.Compaction{}, err
	}
	defer p.Abandon()
	n.mu.Lock()
	defer n.mu.Unlock()
	done, err := p.Finish()
	if err == nil {
		err = n.h.Read(func(*store.Tx) error { return nil }) // the node's handle learns the new WAL's end
	}
	if err == nil {
		n.fsm.setEnd(n.h.End()) // under n.mu, as a raft snapshot reads it
	}
	return done, err
}

// A pendingCompaction is a compaction entry being applied beside the entries
// after it (compactWAL): done is closed once it has been.
type pendingCompaction struct {
	done   chan struct{}
	result store.Compaction
	err    error
}

// wait returns what the compaction did once it has ended.
func (p *pendingCompaction) wait() (store.Compaction, error) {
	<-p.done
	if p.err == nil && p.result.Records == 0 {
		return p.result, store.ErrNothingToCompact
	}
	return p.result, p.err
}

func (n *Node) propose(entry []byte) error {
	f := n.raft.Apply(entry, n.timing.Apply)
	if err := f.Error(); errors.Is(err, raft.ErrNotLeader) {
		return ErrNotLeader
	} else if err != nil {
		return &UnknownOutcomeError{Err: err}
	}
	if err, ok := f.Response().(error); ok {
		return err
	}
	return nil
}

// Join adds a node as a voter, on the leader; adding a node already in the
// cluster at the same address changes nothing.
func (n *Node) Join(id, raftAddr, url string) error {
	if !n.Leading() {
		return ErrNotLeader
	}
	if err := state.ValidateID("node id", id); err != nil {
		return err
	}
	if raftAddr == "" || url == "" {
		return errors.New("a joining node gives its raft address and its URL")
	}
	if err := n.raft.AddVoter(raft.ServerID(id), raft.ServerAddress(raftAddr), 0, n.timing.Apply).Error(); err != nil {
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
			return ErrNotLeader
		}
		return fmt.Errorf("adding node %s: %w", id, err)
	}
	if have, _ := n.fsm.member(id); have == url {
		return nil
	}
	return n.propose(memberEntry(id, url))
}

// ErrUnknownMember is a node id the cluster has never had.
var ErrUnknownMember = errors.New("no such node in the cluster")

// Remove takes a node out of the cluster, on the leader: it stops being a
// voter (raft's RemoveServer) and its URL is forgotten. Removing a node that
// was removed before changes nothing and says so (already), so that a
// removal repeated after a failover is not an error.
func (n *Node) Remove(id string) (already bool, err error) {
	if !n.Leading() {
		return false, ErrNotLeader
	}
	url, known := n.fsm.member(id)
	inConfig, err := n.voter(id)
	if err != nil {
		return false, err
	}
	if !known && !inConfig {
		return false, fmt.Errorf("%w: %s (see 'leasewal cluster members')", ErrUnknownMember, id)
	}
	if inConfig {
		if err := n.raft.RemoveServer(raft.ServerID(id), 0, n.timing.Apply).Error(); err != nil {
			if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) {
				return false, ErrNotLeader
			}
			return false, fmt.Errorf("removing node %s: %w", id, err)
		}
	}
	if url == "" && known {
		return !inConfig, nil
	}
	if id == n.cfg.ID { // a leader that removed itself leads no more: its last entry is the removal
		return false, nil
	}
	return false, n.propose(memberEntry(id, ""))
}

// Removed says whether the cluster has taken this node out: the cluster's
// entries named it as a member (with its URL), and the latest configuration
// it knows holds it no more, or the entry of its URL says it was removed. A
// node that has yet to join has no such entry. A removed node serves
// nothing: no leader will send it entries again.
func (n *Node) Removed() bool {
	url, known := n.fsm.member(n.cfg.ID)
	if !known {
		return false
	}
	if url == "" {
		return true
	}
	in, err := n.voter(n.cfg.ID)
	return err == nil && !in
}

func (n *Node) voter(id string) (bool, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return false, err
	}
	for _, s := range f.Configuration().Servers {
		if string(s.ID) == id {
			return true, nil
		}
	}
	return false, nil
}

// Member is one node of the cluster's configuration.
type Member struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	URL      string `json:"url"`
	Leader   bool   `json:"leader"`
}

// Members is the cluster's configuration as this node knows it.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	_, leader := n.raft.LeaderWithID()
	var list []Member
	for _, s := range f.Configuration().Servers {
		url, _ := n.fsm.member(string(s.ID))
		list = append(list, Member{ID: string(s.ID), RaftAddr: string(s.Address), URL: url, Leader: s.ID == leader})
	}
	return list, nil
}

// Failed delivers the error that stopped the node applying entries (its
// disk failed): the node must stop; on restart raft hands it the entries
// again.
func (n *Node) Failed() <-chan error { return n.failed }

func (n *Node) fail(err error) {
	select {
	case n.failed <- err:
	default:
	}
}

// Shutdown stops raft and closes the WAL and the raft log.
func (n *Node) Shutdown() error {
	var err error
	n.once.Do(func() {
		n.raft.DeregisterObserver(n.observer)
		close(n.stop)
		<-n.done
		err = n.raft.Shutdown().Error()
		n.fsm.settle() // raft's apply loop has stopped: no compaction starts after this one
		if c, ok := n.trans.(io.Closer); ok {
			_ = c.Close()
		}
		if cerr := n.bolt.Close(); err == nil {
			err = cerr
		}
		n.mu.Lock()
		n.h.Close()
		n.mu.Unlock()
	})
	return err
}
