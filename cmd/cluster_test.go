package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/hashicorp/raft"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/cluster"
	"github.com/leasewal/leasewal/internal/lincheck"
	"github.com/leasewal/leasewal/internal/nemesis"
	"github.com/leasewal/leasewal/internal/server"
	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
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
	srv   atomic.Pointer[server.Server]
	// upgrades counts the connections asked to switch to its lines door.
	upgrades atomic.Int32
	// skew is how far (ms) the node's clock runs ahead of the test's.
	skew atomic.Int64
}

// testCluster is three (or n) nodes whose leaders stamp records with the
// test's clock (now, unix ms).
type testCluster struct {
	t     *testing.T
	nodes []*testNode
	now   atomic.Int64
	// timing applies to every node; SnapshotThreshold low makes snapshots.
	timing cluster.Timing
	// step, when set, makes the clock the last record's time plus step, and
	// batches one request each: every decision's time follows from the
	// order of the records alone, as the linearizability model computes it.
	step int64
	// token is the nodes' bearer token ("" for none).
	token string
	// net, when set, carries the nodes' raft messages with its faults.
	net   *nemesis.Net
	names nemesis.Names
	// fault, when set, is every node's WAL failpoint.
	fault *wal.Fault
}

// newTestNode is a node's files in root, its transport and its HTTP server,
// which answers 503 while the node is not running.
func newTestNode(root, id string) *testNode {
	tn := &testNode{id: id, wal: filepath.Join(root, id+".wal"), dir: filepath.Join(root, id+".raft")}
	tn.addr, tn.trans = raft.NewInmemTransport("")
	tn.http = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/lines" {
			tn.upgrades.Add(1)
		}
		if s := tn.srv.Load(); s != nil {
			s.ServeHTTP(w, r)
			return
		}
		server.Error(w, http.StatusServiceUnavailable, ExitUsage, "NoLeader", "starting")
	}))
	return tn
}

func newTestCluster(t *testing.T, n int, timing cluster.Timing) *testCluster {
	return startCluster(t, n, &testCluster{timing: timing})
}

// startCluster starts n nodes with c's settings.
func startCluster(t *testing.T, n int, c *testCluster) *testCluster {
	t.Helper()
	c.t = t
	c.now.Store(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	root := t.TempDir()
	for i := range n {
		c.nodes = append(c.nodes, newTestNode(root, fmt.Sprintf("n%d", i+1)))
	}
	c.connectAll()
	for i, tn := range c.nodes {
		c.start(tn, i > 0)
	}
	leader := c.leader()
	for _, tn := range c.nodes {
		if tn != leader {
			c.join(tn)
		}
	}
	t.Cleanup(func() {
		for _, tn := range c.nodes {
			tn.http.Close()
			c.halt(tn)
		}
	})
	c.formed()
	return c
}

// formed waits until every running node knows the leader's URL: until then a
// follower answers 503 (which a client retries, and a test need not).
func (c *testCluster) formed() {
	c.t.Helper()
	leader := c.leader()
	for deadline := time.Now().Add(testwait.HangGuard); ; time.Sleep(20 * time.Millisecond) {
		known := true
		for _, tn := range c.nodes {
			if tn.node != nil && tn.node.Leader() != leader.http.URL {
				known = false
			}
		}
		if known {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("hang guard: the nodes did not learn the leader's URL (%s) in %s", leader.http.URL, testwait.HangGuard)
		}
	}
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
	opts.Fault = c.fault
	opts.Clock = func(lastAt int64) (int64, error) {
		if c.step > 0 && lastAt > 0 {
			return lastAt + c.step, nil
		}
		return max(c.now.Load()+tn.skew.Load(), lastAt), nil
	}
	var trans raft.Transport = tn.trans
	if c.net != nil {
		c.names.Name(tn.addr, tn.id)
		trans = c.net.Wrap(tn.id, tn.trans, &c.names)
	}
	node, err := cluster.Start(cluster.Config{ID: tn.id, Dir: tn.dir, URL: tn.http.URL, Join: join,
		Transport: trans, Timing: c.timing}, opts)
	if err != nil {
		c.t.Fatalf("starting %s: %v", tn.id, err)
	}
	maxBatch := 64
	if c.step > 0 {
		maxBatch = 1
	}
	s, _, _, _, _ := newServer(e, service.NodeBackend{Node: node}, node, maxBatch, server.Options{Token: c.token})
	tn.node, tn.stop = node, s.Stop
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
	deadline := time.Now().Add(testwait.HangGuard)
	for time.Now().Before(deadline) {
		for _, tn := range c.nodes {
			if tn.node != nil && tn.node.Leading() {
				return tn
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.t.Fatalf("hang guard: no node led in %s", testwait.HangGuard)
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
	deadline := time.Now().Add(testwait.HangGuard)
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
			c.t.Fatalf("hang guard: the nodes did not converge in %s: %s", testwait.HangGuard, behind)
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

// restart stops a node and starts it again on the same files.
func (c *testCluster) restart(tn *testNode) {
	c.halt(tn)
	tn.trans = nil
	tn.addr, tn.trans = raft.NewInmemTransport(tn.addr)
	c.connectAll()
	c.start(tn, true)
}

// add starts a new node and has the leader add it.
func (c *testCluster) add(id string) *testNode {
	c.t.Helper()
	tn := newTestNode(filepath.Dir(c.nodes[0].wal), id)
	c.nodes = append(c.nodes, tn)
	c.connectAll()
	c.start(tn, true)
	c.join(tn)
	return tn
}

// join has the cluster's leader add tn, asking whoever leads again while
// leadership moves (a loaded machine misses short election timeouts).
func (c *testCluster) join(tn *testNode) {
	c.t.Helper()
	var last error
	testwait.Until(c.t, "a leader to add "+tn.id, func() bool {
		last = c.leader().node.Join(tn.id, string(tn.addr), tn.http.URL)
		var unknown *cluster.UnknownOutcomeError // leadership lost under the proposal: a join repeats safely
		if last != nil && !errors.Is(last, cluster.ErrNotLeader) && !errors.As(last, &unknown) {
			c.t.Fatalf("join %s: %v", tn.id, last)
		}
		return last == nil
	}, func() string { return fmt.Sprint(last) })
}

// snapshotted waits until the node's raft dir holds a snapshot.
func (c *testCluster) snapshotted(tn *testNode) {
	c.t.Helper()
	deadline := time.Now().Add(testwait.HangGuard)
	for time.Now().Before(deadline) {
		if found, _ := filepath.Glob(filepath.Join(tn.dir, "snapshots", "*", "meta.json")); len(found) > 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("hang guard: %s took no raft snapshot in %s", tn.id, testwait.HangGuard)
}

// TestClusterRestartAndSnapshotInstall: a node stopped while the others go
// on, restarted after the leader compacted its raft log, and a node added
// after that (installed from a snapshot that carries the WAL's bytes) end
// with the same WAL bytes as the leader; a restarted node's replayed entries
// add nothing twice.
func TestClusterRestartAndSnapshotInstall(t *testing.T) {
	c := newTestCluster(t, 3, cluster.Timing{SnapshotInterval: 100 * time.Millisecond, SnapshotThreshold: 4, TrailingLogs: 2})
	sent := 0
	submit := func(n int) {
		for range n {
			sent++ // a request id, so that an answer lost to a leader change is asked again
			if code, out := c.definite(0, "submit", "--payload", longPayload(sent), "--request-id", fmt.Sprint("s", sent)); code != 0 {
				t.Fatalf("submit: exit %d\n%s", code, out)
			}
		}
	}
	submit(5)
	stopped := c.nodes[2]
	if stopped == c.leader() {
		stopped = c.nodes[1]
	}
	c.halt(stopped)
	submit(12)
	if code, out := c.definite(0, "lease", "--worker", "W", "--duration", "1h", "--request-id", "lease"); code != 0 {
		t.Fatalf("lease: exit %d\n%s", code, out)
	}
	leader := c.leader()
	c.snapshotted(leader)
	submit(6) // past the snapshot: the log the stopped node needs is gone
	c.restart(stopped)
	added := c.add("n4")
	submit(2)
	wals := c.converge()
	for i, wal := range wals {
		if !bytes.Equal(wal, wals[0]) {
			t.Fatalf("%s's WAL differs from %s's:\n%s\nwant\n%s", c.nodes[i].id, c.nodes[0].id, wal, wals[0])
		}
	}
	if code, out, _ := cli("--wal", added.wal, "log", "-o", "tsv", "--no-headers"); code != 0 || strings.Count(out, "\n") != 26 {
		t.Fatalf("the added node's log: exit %d, %d lines, want 26\n%s", code, strings.Count(out, "\n"), out)
	}
	c.restart(leader)
	submit(1)
	for i, wal := range c.converge() {
		if !bytes.Equal(wal, c.converge()[0]) || bytes.Count(wal, []byte("\n")) != 28 {
			t.Fatalf("after restarting the old leader, %s's WAL:\n%s", c.nodes[i].id, wal)
		}
	}
}

// isolate cuts a node off from the others, both ways.
func (c *testCluster) isolate(tn *testNode) {
	tn.trans.DisconnectAll()
	for _, o := range c.nodes {
		if o != tn {
			o.trans.Disconnect(tn.addr)
		}
	}
}

// definite sends a command to the cluster until it has a definite answer:
// an unknown outcome (exit 10) or no node answering is sent again, as it
// may be with a request id (or, for complete and fail, with the same lease).
func (c *testCluster) definite(first int, args ...string) (int, string) {
	c.t.Helper()
	var code int
	var out, stderr string
	for guard := time.Now().Add(testwait.HangGuard); time.Now().Before(guard); {
		code, out, stderr = cli(append([]string{"--server", c.urls(first)}, args...)...)
		if code != ExitUnknownSent && !(code == ExitInternal && strings.Contains(stderr, "no server answered")) {
			return code, out
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("hang guard: %v had no definite answer in %s: exit %d %s%s", args, testwait.HangGuard, code, out, stderr)
	return 0, ""
}

// TestClusterFailover: clients lease, complete and fail through a
// three-node cluster while its leader is cut off mid-run. The history is
// linearizable (porcupine against the reference model), lease ids keep
// increasing in the WAL, every node's WAL is the same and passes verify, a
// completion under a lease granted before the failover and superseded after
// it is CANCELLED, and blind retries with request ids answer duplicate.
func TestClusterFailover(t *testing.T) {
	const step = 300 // ms between records: a 1 s lease lapses four records later
	c := startCluster(t, 3, &testCluster{step: step,
		timing: cluster.Timing{Heartbeat: 500 * time.Millisecond, Election: 500 * time.Millisecond, LeaderLease: 250 * time.Millisecond}})
	start := c.now.Load()
	if code, out := c.definite(0, lincheck.Input{Op: "submit", Req: "first"}.Args(false)...); code != 0 {
		t.Fatalf("submit: exit %d %s", code, out)
	}
	var (
		history []porcupine.Operation
		calls   atomic.Int32
	)
	began := time.Now()
	// A lease granted before the failover, for the late completion below.
	early := lincheck.Input{Op: "lease", Worker: "early", Req: "early", Offset: step * time.Millisecond}
	code, out := c.definite(0, early.Args(false)...)
	var earlyOut lincheck.Output
	if err := json.Unmarshal([]byte(out), &earlyOut); code != 0 || err != nil || earlyOut.Result != "LEASED" {
		t.Fatalf("the early lease: exit %d %s", code, out)
	}
	history = append(history, porcupine.Operation{ClientId: 3, Input: early, Output: earlyOut, Return: time.Since(began).Nanoseconds()})
	clientsDone := c.runClients(3, 10, began, func() bool { return false }, &calls)
	testwait.Until(t, "8 calls before the cut", func() bool { return calls.Load() >= 8 }, nil)
	old := c.leader()
	c.isolate(old)
	history = append(history, <-clientsDone...)
	if t.Failed() {
		return
	}
	for deadline := time.Now().Add(testwait.HangGuard); old.node.Leading(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) { // raft deposes a leader that hears from no majority within its leader lease
			t.Fatalf("hang guard: the cut-off leader still leads after %s", testwait.HangGuard)
		}
	}
	c.connectAll()
	wals := c.converge()
	if res, where := lincheck.Check(start, history, testwait.HangGuard); res != porcupine.Ok {
		t.Fatalf("the history of %d calls across the failover is %s; see %s\n%s", len(history), res, where, wals[0])
	}
	for i, wal := range wals {
		if !bytes.Equal(wal, wals[0]) {
			t.Fatalf("%s's WAL differs from %s's", c.nodes[i].id, c.nodes[0].id)
		}
		if code, _, stderr := cli("--wal", c.nodes[i].wal, "verify"); code != 0 {
			t.Fatalf("verify on %s: exit %d: %s", c.nodes[i].id, code, stderr)
		}
	}
	last := 0
	for _, line := range strings.Split(string(wals[0]), "\n")[1:] {
		var r struct {
			Type  string `json:"type"`
			Lease string `json:"lease_id"`
		}
		if _, body, ok := strings.Cut(line, " "); ok && json.Unmarshal([]byte(body), &r) == nil && r.Type == "LeaseGranted" {
			n, err := strconv.Atoi(strings.TrimPrefix(r.Lease, "L"))
			if err != nil || n <= last {
				t.Fatalf("lease %s granted after L%d", r.Lease, last)
			}
			last = n
		}
	}
	if code, out := c.definite(0, "complete", "--task", earlyOut.Task, "--lease", earlyOut.Lease, "-o", "json"); code != ExitCancelled || !strings.Contains(out, "CANCELLED") {
		t.Fatalf("a completion under the lease granted before the failover: exit %d %s", code, out)
	}
	code, out = c.definite(1, lincheck.Input{Op: "submit", Req: "first"}.Args(false)...)
	if code != 0 || !strings.Contains(out, `"duplicate":true`) || !strings.Contains(out, `"task_id":"T1"`) {
		t.Fatalf("a blind retry of the first submit, sent before the failover: exit %d %s", code, out)
	}
	if code, out = c.definite(0, "queue", "rate", "default", "none"); code != 0 { // the clients may have left one
		t.Fatalf("queue rate none: exit %d %s", code, out)
	}
	if code, out = c.definite(0, "submit", "--payload", "late", "--priority", "9", "-o", "json"); code != 0 {
		t.Fatalf("submit: exit %d %s", code, out)
	}
	for i := range 2 {
		code, out = c.definite(i, "lease", "--worker", "late", "--duration", "1m", "--request-id", "late", "-o", "json")
		if code != 0 || strings.Contains(out, `"duplicate":true`) != (i == 1) {
			t.Fatalf("lease request 'late', try %d: exit %d %s", i+1, code, out)
		}
	}
	t.Logf("%d calls from 3 clients across a failover from %s: linearizable; %d leases granted", len(history), old.id, last)
}

// TestClusterLinesThroughAFollower: a Go client whose first URL is a
// follower sends its calls over that follower's lines door, which forwards
// each to the leader; while the cluster elects another leader the door
// answers that it cannot decide, and the client sends the call as a
// request of its own until one leads: every call decided once.
func TestClusterLinesThroughAFollower(t *testing.T) {
	c := newTestCluster(t, 3, cluster.Timing{Heartbeat: 500 * time.Millisecond, Election: 500 * time.Millisecond, LeaderLease: 250 * time.Millisecond})
	leader := c.leader()
	var follower *testNode
	for _, tn := range c.nodes {
		if tn != leader {
			follower = tn
			break
		}
	}
	cl, err := client.New([]string{follower.http.URL, leader.http.URL}, client.Options{Token: c.token})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	submit := func(req string) api.Ack {
		t.Helper()
		ack, err := cl.Submit(ctx, api.SubmitRequest{Payload: "p", RequestID: req})
		if err != nil {
			t.Fatalf("submit %s: %v", req, err)
		}
		return ack
	}
	for i := range 3 {
		submit(fmt.Sprint("before-", i))
	}
	if n := follower.upgrades.Load(); n != 1 {
		t.Fatalf("%d connections switched at the follower for 3 calls, want 1", n)
	}
	c.halt(leader)
	after := submit("after")
	if again := submit("after"); !again.Duplicate || again.TaskID != after.TaskID {
		t.Fatalf("the submit again: %+v, want %s a duplicate", again, after.TaskID)
	}
	c.converge()
	wal, err := os.ReadFile(follower.wal)
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(wal, []byte(`"type":"TaskCreated"`)); n != 4 {
		t.Fatalf("%d tasks created for 4 submits:\n%s", n, wal)
	}
}

// TestClusterRefusals: a node joining twice changes nothing; a raft dir is
// one node's and one WAL's; a joining node refuses a WAL that already
// holds records; a follower's status names the leader, and a follower forwards a
// join; a request with a wrong token is 401 on a follower as on the leader.
func TestClusterRefusals(t *testing.T) {
	c := newTestCluster(t, 3, cluster.Timing{})
	leader := c.leader()
	var follower *testNode
	for _, tn := range c.nodes {
		if tn != leader {
			follower = tn
		}
	}
	c.join(follower) // a second time: harmless
	body := fmt.Sprintf(`{"id":%q,"raft_addr":%q,"url":%q}`, follower.id, follower.addr, follower.http.URL)
	resp, err := http.Post(follower.http.URL+"/v1/cluster/join", "application/json", strings.NewReader(body))
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("a join sent to a follower: %v %v", resp.Status, err)
	}
	resp.Body.Close()
	if code, out, stderr := cli("--server", follower.http.URL, "submit", "--payload", "x", "-o", "json"); code != 0 || !strings.Contains(out, `"T1"`) {
		t.Fatalf("a submit through a follower after the repeated joins: exit %d %s%s", code, out, stderr)
	}

	resp, err = http.Get(follower.http.URL + "/v1/status")
	if err != nil {
		t.Fatal(err)
	}
	var st service.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || st.Role != "follower" || st.Leader != leader.http.URL {
		t.Fatalf("a follower's status: %+v %v (leader %s)", st, err, leader.http.URL)
	}
	resp.Body.Close()

	other := filepath.Join(t.TempDir(), "other.wal")
	e := env{Config: Config{WAL: other, LockTimeout: time.Minute}}
	_, err = cluster.Start(cluster.Config{ID: "n9", Dir: follower.dir, URL: "http://x", Transport: follower.trans}, e.storeOptions())
	if err == nil || !strings.Contains(err.Error(), "belongs to node "+follower.id) {
		t.Fatalf("another node on a follower's raft dir: %v", err)
	}
	if code, _, stderr := cli("--wal", other, "submit", "--payload", "x"); code != 0 {
		t.Fatal(stderr)
	}
	_, trans := raft.NewInmemTransport("")
	_, err = cluster.Start(cluster.Config{ID: "n9", Dir: filepath.Join(t.TempDir(), "n9.raft"), URL: "http://x", Transport: trans, Join: true}, e.storeOptions())
	if err == nil || !strings.Contains(err.Error(), "already holds 1 records") {
		t.Fatalf("a new node on a WAL with records: %v", err)
	}
	if _, err := os.Stat(other + store.NodeSuffix); err == nil {
		t.Fatal("the refused node marked the WAL as its own")
	}
}

// TestClusterWrongToken: a follower refuses a wrong token itself, and
// forwards the right one.
func TestClusterWrongToken(t *testing.T) {
	c := startCluster(t, 3, &testCluster{token: "secret"})
	dir := t.TempDir()
	for name, content := range map[string]string{"good": "secret\n", "bad": "guess\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	leader := c.leader()
	follower := c.nodes[0]
	if follower == leader {
		follower = c.nodes[1]
	}
	code, _, stderr := cli("--server", follower.http.URL, "--token-file", filepath.Join(dir, "bad"), "submit", "--payload", "x")
	if code != ExitUsage || !strings.Contains(stderr, "token") {
		t.Fatalf("a wrong token through a follower: exit %d %s", code, stderr)
	}
	if code, out, stderr := cli("--server", follower.http.URL, "--token-file", filepath.Join(dir, "good"), "submit", "--payload", "x"); code != 0 {
		t.Fatalf("the right token through a follower: exit %d %s%s", code, out, stderr)
	}
}

// TestClusterLeaseWait: lease --wait through a follower is answered by the
// leader, woken by a submit that another client sends meanwhile.
func TestClusterLeaseWait(t *testing.T) {
	c := newTestCluster(t, 3, cluster.Timing{})
	c.now.Store(time.Now().UnixMilli()) // a wait runs on the wall clock
	leader := c.leader()
	follower := c.nodes[0]
	if follower == leader {
		follower = c.nodes[1]
	}
	type result struct {
		code int
		out  string
	}
	done := make(chan result, 1)
	go func() {
		code, out, stderr := cli("--server", follower.http.URL, "lease", "--worker", "W", "--wait", "10m", "-o", "json")
		done <- result{code, out + stderr}
	}()
	time.Sleep(500 * time.Millisecond)
	if code, out, stderr := cli("--server", c.urls(2), "submit", "--payload", "late"); code != 0 {
		t.Fatalf("submit: exit %d %s%s", code, out, stderr)
	}
	select {
	case r := <-done:
		if r.code != 0 || !strings.Contains(r.out, `"result":"LEASED"`) {
			t.Fatalf("lease --wait through a follower: exit %d %s", r.code, r.out)
		}
	case <-time.After(testwait.HangGuard):
		t.Fatalf("hang guard: lease --wait was not woken by the submit in %s", testwait.HangGuard)
	}
}

// runClients runs lincheck's clients against the cluster (client i from
// node i on), each call retried until its answer is definite, and sends
// their history once they are done.
func (c *testCluster) runClients(clients, ops int, began time.Time, more func() bool, calls *atomic.Int32) <-chan []porcupine.Operation {
	done := make(chan []porcupine.Operation, 1)
	go func() {
		history, err := lincheck.Clients(clients, ops, time.Duration(c.step)*time.Millisecond, began, more, calls,
			func(client int, in lincheck.Input) (string, error) {
				_, out := c.definite(client, in.Args(false)...)
				return out, nil
			})
		if err != nil {
			c.t.Error(err)
		}
		done <- history
	}()
	return done
}

// TestClusterCompaction: a compaction is an entry the leader proposes, and
// every node compacts at that record: the WALs stay byte-identical through
// it, through the records after it, through a restart (raft hands the
// restarted node the compaction entry again, which finds its base in place)
// and through a raft snapshot that carries the compacted WAL to a new node.
// Each node seals the same history beside its WAL.
func TestClusterCompaction(t *testing.T) {
	c := newTestCluster(t, 3, cluster.Timing{SnapshotInterval: 100 * time.Millisecond, SnapshotThreshold: 4, TrailingLogs: 2})
	sent := 0
	submit := func(n int) {
		t.Helper()
		for range n {
			sent++ // a request id, so that an answer lost to a leader change is asked again
			if code, out := c.definite(0, "submit", "--payload", longPayload(sent), "--request-id", fmt.Sprint("s", sent)); code != 0 {
				t.Fatalf("submit: exit %d\n%s", code, out)
			}
		}
	}
	identical := func(when string) [][]byte { // a follower applies the compaction entry after the leader
		t.Helper()
		var wals [][]byte
		differs := ""
		testwait.Until(t, "every node's WAL equal to the others' "+when, func() bool {
			wals, differs = c.converge(), ""
			for i, wal := range wals {
				if !bytes.Equal(wal, wals[0]) {
					differs = fmt.Sprintf("%s's WAL differs from %s's:\n%s\nwant\n%s", c.nodes[i].id, c.nodes[0].id, wal, wals[0])
				}
			}
			return differs == ""
		}, func() string { return differs })
		return wals
	}
	submit(6)
	if code, out := c.definite(0, "lease", "--worker", "W", "--duration", "1h", "--request-id", "lease"); code != 0 {
		t.Fatalf("lease: exit %d\n%s", code, out)
	}
	c.converge()
	leader := c.leader()
	done, err := leader.node.Compact(store.CompactOptions{KeepFinished: time.Hour, KeepHistory: 24 * time.Hour})
	if err != nil || done.Seq != 7 || done.TasksKept != 6 {
		t.Fatalf("compact: %+v %v", done, err)
	}
	wals := identical("after the compaction")
	if !bytes.HasPrefix(wals[0], []byte("leasewal-wal v3\n")) {
		t.Fatalf("the WAL was not compacted:\n%s", wals[0])
	}
	for _, tn := range c.nodes {
		if segs := store.Segments(store.HistoryDir(tn.wal)); len(segs) != 1 || segs[0].Last != 7 {
			t.Fatalf("%s's history: %+v", tn.id, segs)
		}
		if code, out, stderr := cli("--wal", tn.wal, "verify", "--history"); code != 0 {
			t.Fatalf("%s: verify --history: exit %d %s %s", tn.id, code, out, stderr)
		}
	}
	submit(5)
	identical("after records past the compaction")
	follower := c.nodes[0]
	if follower == c.leader() {
		follower = c.nodes[1]
	}
	c.restart(follower)
	submit(1)
	identical("after a follower's restart")
	c.snapshotted(c.leader())
	added := c.add("n4")
	submit(1)
	identical("after a node joined from a snapshot")
	code, out, _ := cli("--wal", added.wal, "inspect", "-o", "json")
	var listed struct{ Tasks []api.Task }
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed.Tasks) != 13 {
		t.Fatalf("the added node's tasks: exit %d %v %.300s", code, err, out)
	}
	if _, err := c.leader().node.Compact(store.CompactOptions{KeepFinished: time.Hour}); err != nil {
		t.Fatalf("a second compaction: %v", err)
	}
	identical("after a second compaction")
	// Payloads longer than a state holds read back from the base, on every node.
	code, out = c.definite(0, "lease", "--worker", "W", "--task", "T2", "--duration", "1h", "--request-id", "long", "-o", "json")
	var lease api.Lease
	if err := json.Unmarshal([]byte(out), &lease); code != 0 || err != nil || lease.Payload != longPayload(2) {
		t.Fatalf("a lease on T2 after the compactions: exit %d %.200s", code, out)
	}
	for _, tn := range c.nodes {
		var v api.Inspect
		code, out, _ := cli("--wal", tn.wal, "inspect", "T3", "-o", "json")
		if err := json.Unmarshal([]byte(out), &v); code != 0 || err != nil || len(v.Tasks) != 1 || v.Tasks[0].Payload != longPayload(3) {
			t.Fatalf("%s: inspect T3: exit %d %.200s", tn.id, code, out)
		}
	}
	resp, err := http.Get(c.leader().http.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`leasewal_raft_role{role="leader"} 1`, "leasewal_raft_term ", "leasewal_raft_commit_index ", "leasewal_raft_applied_index "} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the leader's /metrics has no %q:\n%s", want, body)
		}
	}
}

// longPayload is the payload of submit n: longer than a state holds in
// memory, so that it is read back from the WAL.
func longPayload(n int) string { return fmt.Sprint(strings.Repeat("x", 2*state.InlinePayloadBytes), n) }

// TestClusterAppliesEntriesWhileItCompacts: a compaction entry is applied
// beside the entries after it, not in raft's apply loop. Every node's first
// step is held at a failpoint until a submit through the cluster has been
// acknowledged (applied in raft's apply loop meanwhile: were the compaction
// in that loop, the submit would wait for it, and the test for the hang
// guard); then every node's WAL is the base at the compaction's seq followed
// by that record, byte for byte alike, and verifies with its history.
func TestClusterAppliesEntriesWhileItCompacts(t *testing.T) {
	release := make(chan struct{})
	c := startCluster(t, 3, &testCluster{fault: &wal.Fault{Point: "compact-partial", Hold: func() { <-release }}})
	for i := range 4 {
		if code, out := c.definite(0, "submit", "--payload", "x", "--request-id", fmt.Sprint("before", i)); code != 0 {
			t.Fatalf("submit: exit %d %s", code, out)
		}
	}
	c.converge()
	leader := c.leader()
	type result struct {
		done store.Compaction
		err  error
	}
	compacted := make(chan result, 1)
	go func() {
		done, err := leader.node.Compact(store.CompactOptions{KeepFinished: time.Hour, KeepHistory: 24 * time.Hour})
		compacted <- result{done, err}
	}()
	testwait.Until(t, "the leader's compaction to begin its new WAL", func() bool {
		begun, _ := filepath.Glob(leader.wal + ".compacting-*")
		return len(begun) > 0
	}, nil)
	if code, out := c.definite(0, "submit", "--payload", "during", "--request-id", "during", "-o", "json"); code != 0 || !strings.Contains(out, `"task_id":"T5"`) {
		t.Fatalf("a submit while the cluster compacts: exit %d %s", code, out)
	}
	close(release)
	r := <-compacted
	if r.err != nil || r.done.Seq != 4 {
		t.Fatalf("compact: %+v %v", r.done, r.err)
	}
	var wals [][]byte
	testwait.Until(t, "every node's WAL equal to the others' after the compaction", func() bool {
		wals = c.converge()
		for _, w := range wals {
			if !bytes.Equal(w, wals[0]) || !bytes.HasPrefix(w, []byte("leasewal-wal v3\n")) {
				return false
			}
		}
		return true
	}, nil)
	for _, tn := range c.nodes {
		code, out, errOut := cli("--wal", tn.wal, "log", "--from", "5", "-o", "json")
		if code != 0 || !strings.Contains(out, `"payload":"during"`) {
			t.Fatalf("%s: the record written during the compaction, after its base: exit %d %s %s", tn.id, code, out, errOut)
		}
		if code, out, errOut := cli("--wal", tn.wal, "verify", "--history", "-o", "json"); code != 0 {
			t.Fatalf("%s: verify --history: exit %d %s %s", tn.id, code, out, errOut)
		}
	}
}
