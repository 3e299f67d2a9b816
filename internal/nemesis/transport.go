package nemesis

import (
	"io"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Transport is a node's raft transport with the network's faults applied to
// what it sends: a request is lost, delayed or cut on its way from this node
// to the target, and its answer may be lost on the way back (the target
// then acted on a message its sender thinks lost).
type Transport struct {
	raft.Transport
	net  *Net
	from string
	ids  *Names
}

// Names maps the nodes' raft addresses to their ids, which links name.
type Names struct {
	mu  sync.Mutex
	ids map[raft.ServerAddress]string
}

// Name records that addr is node id's.
func (m *Names) Name(addr raft.ServerAddress, id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ids == nil {
		m.ids = map[raft.ServerAddress]string{}
	}
	m.ids[addr] = id
}

func (m *Names) of(addr raft.ServerAddress) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ids[addr]
}

// Wrap is node from's transport t on the network n.
func (n *Net) Wrap(from string, t raft.Transport, ids *Names) *Transport {
	return &Transport{Transport: t, net: n, from: from, ids: ids}
}

// send runs call if the link lets the message through, and loses its answer
// as the link says.
func (t *Transport) send(target raft.ServerAddress, call func() error) error {
	to := t.ids.of(target)
	delay, ok := t.net.pass(t.from, to)
	if !ok {
		return ErrLost
	}
	if delay > 0 {
		time.Sleep(delay)
	}
	if err := call(); err != nil {
		return err
	}
	if _, ok := t.net.pass(to, t.from); !ok {
		return ErrLost
	}
	return nil
}

// AppendEntriesPipeline is refused, so that every append goes through
// AppendEntries, where the faults apply.
func (t *Transport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (t *Transport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.send(target, func() error { return t.Transport.AppendEntries(id, target, args, resp) })
}

func (t *Transport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.send(target, func() error { return t.Transport.RequestVote(id, target, args, resp) })
}

func (t *Transport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	pre, ok := t.Transport.(raft.WithPreVote)
	if !ok {
		return raft.ErrUnsupportedProtocol
	}
	return t.send(target, func() error { return pre.RequestPreVote(id, target, args, resp) })
}

func (t *Transport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	return t.send(target, func() error { return t.Transport.InstallSnapshot(id, target, args, resp, data) })
}

func (t *Transport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.send(target, func() error { return t.Transport.TimeoutNow(id, target, args, resp) })
}

// Close closes the transport underneath, when it can be.
func (t *Transport) Close() error {
	if c, ok := t.Transport.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
