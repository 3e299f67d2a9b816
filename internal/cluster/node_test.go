package cluster

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
)

// TestAFoundingNodeLeadsAtOnce: a node that founds a cluster is its only
// voter and stands for election at once, not after a heartbeat timeout with
// nobody to hear from. The timeout here is an hour, longer than the hang
// guard, so a node that waits for it fails.
func TestAFoundingNodeLeadsAtOnce(t *testing.T) {
	dir := t.TempDir()
	_, trans := raft.NewInmemTransport("")
	node, err := Start(Config{ID: "n1", Dir: filepath.Join(dir, "raft"), URL: "http://127.0.0.1:1", Transport: trans,
		Timing: Timing{Heartbeat: time.Hour, Election: time.Hour, LeaderLease: time.Second}},
		store.Options{Path: filepath.Join(dir, "q.wal"), LockTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Shutdown()
	testwait.Until(t, "the founding node to lead", node.Leading, node.Role)
	if h, e := node.raft.ReloadableConfig(), (raft.ReloadableConfig{HeartbeatTimeout: time.Hour, ElectionTimeout: time.Hour}); h.HeartbeatTimeout != e.HeartbeatTimeout || h.ElectionTimeout != e.ElectionTimeout {
		t.Fatalf("the timing after the election: %+v, want the one given", h)
	}
}
