package cmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/cluster"
	"github.com/leasewal/leasewal/internal/server"
	"github.com/leasewal/leasewal/internal/testwait"
)

// fastTiming elects a leader within a second of the last one's silence, and
// gives up a proposal that has not committed after two.
var fastTiming = cluster.Timing{Heartbeat: 500 * time.Millisecond, Election: 500 * time.Millisecond,
	LeaderLease: 250 * time.Millisecond, Apply: 2 * time.Second}

// members is the cluster's configuration as node tn's API answers it.
func (c *testCluster) members(tn *testNode) []cluster.Member {
	c.t.Helper()
	code, out, stderr := cli("--server", tn.http.URL, "cluster", "members", "-o", "json")
	var v server.Members
	if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil {
		c.t.Fatalf("cluster members on %s: exit %d %s%s", tn.id, code, out, stderr)
	}
	return v.Members
}

func memberIDs(list []cluster.Member) string {
	var ids []string
	for _, m := range list {
		ids = append(ids, m.ID)
	}
	return strings.Join(ids, ",")
}

// TestClusterReplaceDeadNode: a follower dies; `cluster remove` takes it
// out, though the leader is cut off while the removal is under way (the
// client sees no definite answer, and repeats it: "removed" or "already
// removed"); a new node joins in its place; the leader fails over once more
// while the new node catches up; every node left ends with the same WAL.
// Removing the leader itself hands the lead on; a node never in the cluster
// is exit 4. (Every submit has a request id: one repeated after an unknown
// outcome creates no second task.)
func TestClusterReplaceDeadNode(t *testing.T) {
	c := newTestCluster(t, 3, fastTiming)
	for i := range 20 {
		if code, out := c.definite(0, "submit", "--payload", fmt.Sprint("before ", i), "--request-id", fmt.Sprint("before-", i)); code != 0 {
			t.Fatalf("submit: exit %d %s", code, out)
		}
	}
	leader := c.leader()
	dead := c.nodes[0]
	if dead == leader {
		dead = c.nodes[1]
	}
	c.halt(dead)
	removed := make(chan string, 1)
	go func() {
		_, out, stderr := cli("--server", leader.http.URL, "cluster", "remove", dead.id)
		removed <- out + stderr
	}()
	c.isolate(leader) // the failover during the removal: with one node dead, no one leads until it is back
	testwait.Until(t, "the cut-off leader to step down", func() bool { return !leader.node.Leading() }, nil)
	c.connectAll()
	first := <-removed
	var alive []*testNode
	for _, tn := range c.nodes {
		if tn != dead {
			alive = append(alive, tn)
		}
	}
	c.nodes = alive
	code, out := c.definite(0, "cluster", "remove", dead.id)
	if code != 0 || !strings.Contains(out, dead.id+" ") || !strings.Contains(out, "removed") {
		t.Fatalf("the repeated removal of %s (the first answered %q): exit %d %q", dead.id, first, code, out)
	}
	if code, out := c.definite(0, "cluster", "remove", dead.id); code != 0 || !strings.Contains(out, "already removed") {
		t.Fatalf("removing %s again: exit %d %q", dead.id, code, out)
	}
	if got := memberIDs(c.members(c.leader())); strings.Contains(got, dead.id) {
		t.Fatalf("%s is still a member: %s", dead.id, got)
	}
	added := c.add("n4")
	old := c.leader()
	c.isolate(old) // a failover while n4 catches up
	testwait.Until(t, "another node to lead", func() bool { return c.leader() != old }, nil)
	for i := range 5 {
		if code, out := c.definite(1, "submit", "--payload", fmt.Sprint("after ", i), "--request-id", fmt.Sprint("after-", i)); code != 0 {
			t.Fatalf("submit: exit %d %s", code, out)
		}
	}
	c.connectAll()
	wals := c.converge()
	for i, wal := range wals {
		if !bytes.Equal(wal, wals[0]) {
			t.Fatalf("%s's WAL differs from %s's", c.nodes[i].id, c.nodes[0].id)
		}
	}
	if bytes.Count(wals[0], []byte("TaskCreated")) != 25 {
		t.Fatalf("want 25 tasks on every node, the new one (%s) included:\n%s", added.id, wals[0])
	}
	if got := memberIDs(c.members(added)); len(strings.Split(got, ",")) != 3 || strings.Contains(got, dead.id) {
		t.Fatalf("members after the replacement: %s", got)
	}
	if code, out, _ := cli("--server", added.http.URL, "cluster", "members"); code != 0 || !strings.Contains(out, "NODE") || strings.Count(out, "leader") != 1 || !strings.Contains(out, added.id) {
		t.Fatalf("cluster members as a table: exit %d\n%s", code, out)
	}
	if code, _, stderr := cli("--wal", added.wal, "cluster", "remove", "n9"); code != ExitUsage || !strings.Contains(stderr, "--server") {
		t.Fatalf("cluster remove without --server: exit %d %s", code, stderr)
	}
	if code, out := c.definite(0, "cluster", "remove", "n9"); code != ExitNotFound {
		t.Fatalf("removing a node never in the cluster: exit %d %q", code, out)
	}

	leaving := c.leader()
	if code, out := c.definite(0, "cluster", "remove", leaving.id); code != 0 {
		t.Fatalf("removing the leader %s: exit %d %q", leaving.id, code, out)
	}
	testwait.Until(t, "a node other than the removed leader to lead", func() bool { return c.leader() != leaving }, nil)
	var said string
	testwait.Until(t, "the removed node to know it", func() bool {
		code, _, stderr := cli("--server", leaving.http.URL, "submit", "--payload", "to the removed node")
		said = fmt.Sprint(code, " ", stderr)
		return code == ExitUnknownSent && strings.Contains(stderr, "was removed from its cluster")
	}, func() string { return said })
	c.halt(leaving)
	var rest []*testNode
	for _, tn := range c.nodes {
		if tn != leaving {
			rest = append(rest, tn)
		}
	}
	c.nodes = rest
	if code, out := c.definite(0, "submit", "--payload", "after the leader left", "-o", "json"); code != 0 {
		t.Fatalf("a submit after the leader removed itself: exit %d %s", code, out)
	}
	if got := memberIDs(c.members(c.leader())); strings.Contains(got, leaving.id) {
		t.Fatalf("the removed leader %s is still a member: %s", leaving.id, got)
	}
}

// TestClusterFromExistingWAL: a WAL written by local commands (seed 001)
// founds a cluster: its node brings its records into raft, two nodes join,
// the founder is cut off while the last one catches up, and every node ends
// with the founder's records byte for byte, then the cluster's own.
func TestClusterFromExistingWAL(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join(seedsDir, seedTraces[1].name+".wal"))
	if err != nil {
		t.Fatal(err)
	}
	c := &testCluster{t: t, timing: fastTiming}
	root := t.TempDir()
	for i := range 3 {
		c.nodes = append(c.nodes, newTestNode(root, fmt.Sprintf("n%d", i+1)))
	}
	founder := c.nodes[0]
	// Many records, so that the import spans several raft entries.
	wal := append([]byte(nil), golden...)
	if err := os.WriteFile(founder.wal, wal, 0o600); err != nil {
		t.Fatal(err)
	}
	var batch strings.Builder // one append of 600 records: the import's entries hold 256
	for i := range 600 {
		fmt.Fprintf(&batch, "{\"payload\":\"local %d\"}\n", i)
	}
	batchFile := filepath.Join(root, "local.ndjson")
	if err := os.WriteFile(batchFile, []byte(batch.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli("--wal", founder.wal, "submit", "--batch-file", batchFile, "--now", "2026-06-01T00:00:00Z"); code != 0 {
		t.Fatalf("a local batch: exit %d %s", code, stderr)
	}
	local, err := os.ReadFile(founder.wal)
	if err != nil {
		t.Fatal(err)
	}
	c.connectAll()
	t.Cleanup(func() {
		for _, tn := range c.nodes {
			tn.http.Close()
			c.halt(tn)
		}
	})
	c.start(founder, false)
	if c.leader() != founder {
		t.Fatal("the founder does not lead")
	}
	for _, tn := range c.nodes[1:] {
		c.start(tn, true)
		c.join(tn)
	}
	c.isolate(founder) // a failover while the last node catches up
	testwait.Until(t, "a joined node to lead", func() bool { return c.leader() != founder }, nil)
	if code, out := c.definite(1, "submit", "--payload", "in the cluster", "--request-id", "moved", "-o", "json"); code != 0 || !strings.Contains(out, `"task_id":"T602"`) {
		t.Fatalf("a submit after the move: exit %d %s", code, out)
	}
	c.connectAll()
	wals := c.converge()
	for i, wal := range wals {
		if !bytes.HasPrefix(wal, local) || !bytes.Equal(wal, wals[0]) {
			t.Fatalf("%s's WAL does not start with the founder's records, or differs from %s's", c.nodes[i].id, c.nodes[0].id)
		}
		if code, _, stderr := cli("--wal", c.nodes[i].wal, "verify"); code != 0 {
			t.Fatalf("verify on %s: exit %d %s", c.nodes[i].id, code, stderr)
		}
	}
}
