package cluster

import (
	"io"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/leasewal/leasewal/internal/testcert"
)

// TestRaftOverMutualTLS: two nodes whose certificates the cluster's CA
// signed exchange raft messages; a node with a certificate from another CA
// is refused, though it trusts the cluster's.
func TestRaftOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testcert.NewAuthority(t, "cluster CA")
	rogueCA := testcert.NewAuthority(t, "rogue CA")
	certA, _, _ := ca.Issue(t, "a", dir)
	certB, _, _ := ca.Issue(t, "b", dir)
	certRogue, _, _ := rogueCA.Issue(t, "rogue", dir)
	transport := func(pair TLS) raft.Transport {
		tr, err := NewTransport("127.0.0.1:0", "", &pair, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tr.(io.Closer).Close() })
		return tr
	}
	a := transport(TLS{Cert: certA, CA: ca.Pool()})
	b := transport(TLS{Cert: certB, CA: ca.Pool()})
	rogue := transport(TLS{Cert: certRogue, CA: ca.Pool()})
	go func() {
		for rpc := range a.Consumer() {
			rpc.Respond(&raft.AppendEntriesResponse{Term: 7, Success: true}, nil)
		}
	}()
	var resp raft.AppendEntriesResponse
	if err := b.AppendEntries("a", a.LocalAddr(), &raft.AppendEntriesRequest{Term: 7}, &resp); err != nil || !resp.Success {
		t.Fatalf("a node of the cluster: %v %+v", err, resp)
	}
	resp = raft.AppendEntriesResponse{}
	if err := rogue.AppendEntries("a", a.LocalAddr(), &raft.AppendEntriesRequest{Term: 8}, &resp); err == nil || resp.Success {
		t.Fatalf("a node outside the cluster's CA was answered: %v %+v", err, resp)
	}
	if _, err := NewTransport("127.0.0.1:0", "", &TLS{Cert: certA}, io.Discard); err == nil {
		t.Fatal("raft over TLS without a CA started")
	}
}
