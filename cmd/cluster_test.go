package cmd

import (
	"bytes"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"leasewal/cluster"
)

// testNode is one node of a cluster the tests run in one process: raft over
// an in-memory transport, the HTTP API on a loopback test server.
type testNode struct {
	id    string
	wal   string
	dir   string
	addr  raft.ServerAddress
	trans *raft.InmemTransport
	node  *cluster.Node
	stop  func()
	http  *httptest.Server
	srv   atomic.Pointer[server]
}

// testCluster is three (or n) nodes whose leaders stamp records with the
// test's clock (now, unix ms).
type testCluster struct {
	t     *testing.T
	nodes []*testNode
	now   atomic.Int64
	// timing applies to every node; SnapshotThreshold low makes snapshots.
	timing cluster.Timing
}

func newTestCluster(t *testing.T, n int, timing cluster.Timing) *testCluster {
	t.Helper()
	c := &testCluster{t: t, timing: timing}
	c.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	root := t.TempDir()
	for i := range n {
		tn := &testNode{id: fmt.Sprintf("n%d", i+1), wal: filepath.Join(root, fmt.Sprintf("n%d.wal", i+1)),
			dir: filepath.Join(root, fmt.Sprintf("n%d.raft", i+1))}
		tn.addr, tn.trans = raft.NewInmemTransport("")
		tn.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s := tn.srv.Load()
			if s == nil {
				httpError(w, http.StatusServiceUnavailable, "NoLeader", "starting")
				return
			}
			s.ServeHTTP(w, r)
		}))
		c.nodes = append(c.nodes, tn)
	}
	c.connectAll()
	for i, tn := range c.nodes {
		c.start(tn, i > 0)
	}
	leader := c.leader()
	for _, tn := range c.nodes {
		if tn != leader {
			if err := leader.node.Join(tn.id, string(tn.addr), tn.http.URL); err != nil {
				t.Fatalf("join %s: %v", tn.id, err)
			}
		}
	}
	t.Cleanup(func() {
		for _, tn := range c.nodes {
			tn.http.Close()
			c.halt(tn)
		}
	})
	return c
}

func (c *testCluster) connectAll() {
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a != b {
				a.trans.Connect(b.addr, b.trans)
			}
		}
	}
}

// start runs a node (again) on its WAL and raft dir.
func (c *testCluster) start(tn *testNode, join bool) {
	c.t.Helper()
	e := env{Config: Config{WAL: tn.wal, Output: "json", LockTimeout: time.Minute, Actor: "seed"}, stderr: os.Stderr}
	opts := e.storeOptions()
	opts.Clock = func(lastAt int64) (int64, error) { return max(c.now.Load(), lastAt), nil }
	node, err := cluster.Start(cluster.Config{ID: tn.id, Dir: tn.dir, URL: tn.http.URL, Join: join,
		Transport: tn.trans, Timing: c.timing}, opts)
	if err != nil {
		c.t.Fatalf("starting %s: %v", tn.id, err)
	}
	s, stop := newServer(e, nodeBackend{node}, node, "", 64)
	tn.node, tn.stop = node, stop
	tn.srv.Store(s)
}

// halt stops a node's server and raft; its files stay.
func (c *testCluster) halt(tn *testNode) {
	if tn.node == nil {
		return
	}
	tn.srv.Store(nil)
	tn.stop()
	_ = tn.node.Shutdown()
	tn.node = nil
}

// leader waits for a node that decides requests.
func (c *testCluster) leader() *testNode {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, tn := range c.nodes {
			if tn.node != nil && tn.node.Leading() {
				return tn
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatal("no leader within 30 s")
	return nil
}

// urls is every running node's URL, starting at node i.
func (c *testCluster) urls(i int) string {
	var list []string
	for k := range c.nodes {
		list = append(list, c.nodes[(i+k)%len(c.nodes)].http.URL)
	}
	return strings.Join(list, ",")
}

// converge waits until every running node's WAL holds the leader's last seq,
// and returns the WALs' bytes.
func (c *testCluster) converge() [][]byte {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		want, err := c.leader().node.LastSeq()
		if err != nil {
			c.t.Fatal(err)
		}
		behind := ""
		for _, tn := range c.nodes {
			if tn.node == nil {
				continue
			}
			if got, err := tn.node.LastSeq(); err != nil || got != want {
				behind = fmt.Sprintf("%s at %d (%v), leader at %d", tn.id, got, err, want)
			}
		}
		if behind == "" {
			break
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the nodes did not converge: %s", behind)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var wals [][]byte
	for _, tn := range c.nodes {
		b, err := os.ReadFile(tn.wal)
		if err != nil {
			c.t.Fatal(err)
		}
		wals = append(wals, b)
	}
	return wals
}

// TestClusterPlaysSeeds: seeds 001 and 000 sent through a three-node
// cluster, each command to another node (followers forward), end with every
// node's WAL identical to the golden WAL the local commands write, byte for
// byte.
func TestClusterPlaysSeeds(t *testing.T) {
	for _, tr := range seedTraces[:2] {
		t.Run(tr.name, func(t *testing.T) {
			c := newTestCluster(t, 3, cluster.Timing{})
			for i, command := range tr.commands {
				var args []string
				for k := 0; k < len(command); k++ {
					if command[k] == "--now" {
						at, err := time.Parse(time.RFC3339, command[k+1])
						if err != nil {
							t.Fatal(err)
						}
						c.now.Store(at.UnixMilli())
						k++
						continue
					}
					args = append(args, command[k])
				}
				args = append([]string{"--server", c.urls(i), "--actor", "seed", "-o", "json"}, args...)
				if code, out, stderr := cli(args...); code != tr.exitCode[i] {
					t.Fatalf("%v: exit %d, want %d\n%s%s", args, code, tr.exitCode[i], out, stderr)
				}
			}
			golden, err := os.ReadFile(filepath.Join(seedsDir, tr.name+".wal"))
			if err != nil {
				t.Fatal(err)
			}
			for i, wal := range c.converge() {
				if !bytes.Equal(wal, golden) {
					t.Fatalf("node %s's WAL differs from the golden %s:\n%s\nwant\n%s", c.nodes[i].id, tr.name, wal, golden)
				}
				if code, _, stderr := cli("--wal", c.nodes[i].wal, "verify"); code != 0 {
					t.Fatalf("verify on %s: exit %d: %s", c.nodes[i].id, code, stderr)
				}
			}
		})
	}
}

// TestClusterNodeOwnsItsWAL: a local writer refuses a node's WAL (exit 2,
// naming the node and --server); a local reader works.
func TestClusterNodeOwnsItsWAL(t *testing.T) {
	c := newTestCluster(t, 3, cluster.Timing{})
	if code, out, stderr := cli("--server", c.urls(0), "submit", "--payload", "x"); code != 0 {
		t.Fatalf("submit: exit %d\n%s%s", code, out, stderr)
	}
	c.converge()
	follower := c.nodes[0]
	if follower == c.leader() {
		follower = c.nodes[1]
	}
	before, _ := os.ReadFile(follower.wal)
	code, _, stderr := cli("--wal", follower.wal, "submit", "--payload", "y")
	if code != ExitUsage || !strings.Contains(stderr, "raft node "+follower.id) || !strings.Contains(stderr, "--server "+follower.http.URL) {
		t.Fatalf("a local submit on a node's WAL: exit %d, %q", code, stderr)
	}
	if after, _ := os.ReadFile(follower.wal); !bytes.Equal(before, after) {
		t.Fatal("the refused submit changed the WAL")
	}
	if code, out, stderr := cli("--wal", follower.wal, "inspect", "T1", "-o", "json"); code != 0 || !strings.Contains(out, `"payload":"x"`) {
		t.Fatalf("a local inspect on a node's WAL: exit %d\n%s%s", code, out, stderr)
	}
}

