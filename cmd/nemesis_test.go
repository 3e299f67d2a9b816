package cmd

import (
	"bytes"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasewal/leasewal/internal/cluster"
	"github.com/leasewal/leasewal/internal/lincheck"
	"github.com/leasewal/leasewal/internal/nemesis"
	"github.com/leasewal/leasewal/internal/testwait"
)

// TestClusterNemesis: three clients lease, complete and fail through a
// three-node cluster while the network between the nodes is broken phase
// after phase: the leader cut off from both followers, one follower
// isolated, a bridge (one node sees both halves, which do not see each
// other), a fifth of every link's messages and answers lost, every message
// delayed, and a node stopped and restarted on its files. Each phase lasts
// until the clients have had nemesis.AnswersPerPhase more answers. Then the network heals and
// the history is checked by porcupine against the reference model, and
// every node's WAL by nemesis.Check (every acknowledged submit created one
// task, no two grants of a task overlap, lease ids increase) and verify;
// the WALs are identical.
func TestClusterNemesis(t *testing.T) {
	t.Parallel()
	const step = 300
	net := nemesis.New(7)
	c := startCluster(t, 3, &testCluster{step: step, net: net,
		timing: cluster.Timing{Heartbeat: 500 * time.Millisecond, Election: 500 * time.Millisecond, LeaderLease: 250 * time.Millisecond}})
	start := c.now.Load()
	if code, out := c.definite(0, lincheck.Input{Op: "submit", Req: "first"}.Args(false)...); code != 0 {
		t.Fatalf("submit: exit %d %s", code, out)
	}
	var (
		calls atomic.Int32
		over  atomic.Bool
	)
	clientsDone := c.runClients(3, 4, time.Now(), func() bool { return !over.Load() }, &calls)
	others := func(tn *testNode) (ids []string) {
		for _, o := range c.nodes {
			if o != tn {
				ids = append(ids, o.id)
			}
		}
		return ids
	}
	type phase struct {
		name  string
		apply func()
	}
	var stopped *testNode
	phases := []phase{
		{"the leader cut off from both followers", func() {
			old := c.leader()
			net.Partition([]string{old.id}, others(old))
		}},
		{"one follower isolated", func() {
			leader := c.leader()
			follower := c.nodes[0]
			if follower == leader {
				follower = c.nodes[1]
			}
			net.Partition([]string{follower.id}, others(follower))
		}},
		{"a bridge", func() {
			bridge := c.leader()
			halves := others(bridge)
			net.Partition(halves[:1], halves[1:])
		}},
		{"a fifth of all messages lost", func() {
			for _, a := range c.nodes {
				for _, b := range c.nodes {
					if a != b {
						net.Set(nemesis.Fault{Loss: 0.2}, a.id, b.id, false)
					}
				}
			}
		}},
		{"every message delayed", func() {
			for _, a := range c.nodes {
				for _, b := range c.nodes {
					if a != b {
						net.Set(nemesis.Fault{Delay: 30 * time.Millisecond}, a.id, b.id, false)
					}
				}
			}
		}},
		{"a node stopped", func() {
			stopped = c.leader()
			c.halt(stopped)
		}},
	}
	perPhase := nemesis.AnswersPerPhase()
	for _, p := range phases {
		at := calls.Load()
		p.apply()
		testwait.Until(t, fmt.Sprintf("%d answers while %s", perPhase, p.name), func() bool { return calls.Load() >= at+perPhase }, func() string {
			return fmt.Sprintf("%d answers since the phase began", calls.Load()-at)
		})
		net.Heal()
		if stopped != nil {
			c.restart(stopped)
			stopped = nil
		}
		t.Logf("%s: the clients went on (%d answers so far)", p.name, calls.Load())
	}
	over.Store(true)
	history := <-clientsDone
	if t.Failed() {
		return
	}
	wals := c.converge()
	if res, where := lincheck.Check(start, history, testwait.HangGuard); res != porcupine.Ok {
		t.Fatalf("the history of %d calls under the nemesis is %s; see %s\n%s", len(history), res, where, wals[0])
	}
	acked := lincheck.Acked(history)
	var sum nemesis.Summary
	for i, wal := range wals {
		if !bytes.Equal(wal, wals[0]) {
			t.Fatalf("%s's WAL differs from %s's", c.nodes[i].id, c.nodes[0].id)
		}
		var err error
		if sum, err = nemesis.Check(wal, acked); err != nil {
			t.Fatalf("%s's WAL: %v\n%s", c.nodes[i].id, err, wal)
		}
		if code, _, stderr := cli("--wal", c.nodes[i].wal, "verify"); code != 0 {
			t.Fatalf("verify on %s: exit %d: %s", c.nodes[i].id, code, stderr)
		}
	}
	sent, lost := net.Counts()
	t.Logf("%d calls from 3 clients through %d nemesis phases: linearizable; WALs identical: %d records, %d tasks (%d acknowledged submits), %d grants; raft messages %d delivered, %d cut or lost",
		len(history), len(phases), sum.Records, sum.Tasks, len(acked), sum.Grants, sent, lost)
}

// TestClusterFastClock measures what a leader whose clock runs fast does to
// leases: with the leader 20 s ahead, a 1-minute lease granted under an
// honest leader lapses 40 s after its grant on the test's clock (20 s early:
// the skew, and not a millisecond more); once an honest node leads again,
// the records' time stands still at the fast node's until the honest clock
// passes it, so no later lease lapses early.
func TestClusterFastClock(t *testing.T) {
	c := newTestCluster(t, 3, fastTiming)
	t0 := c.now.Load()
	at := func(ms int64) { c.now.Store(t0 + ms) }
	expire := func() {
		if code, out := c.definite(0, "expire", "-o", "json"); code != 0 {
			t.Fatalf("expire: exit %d %s", code, out)
		}
	}
	// --backoff 0s: a lapsed lease's task is leasable again at once.
	if code, out := c.definite(0, "submit", "--payload", "x", "--request-id", "s1", "--backoff", "0s", "-o", "json"); code != 0 {
		t.Fatalf("submit: exit %d %s", code, out)
	}
	if code, out := c.definite(0, "lease", "--worker", "W", "--duration", "1m", "--request-id", "l1", "-o", "json"); code != 0 || !strings.Contains(out, "LEASED") {
		t.Fatalf("lease: exit %d %s", code, out)
	}
	// lapsed counts the LeaseExpired records: an expire whose answer was
	// lost is sent again, and the repeat finds nothing left to expire.
	lapsed := func() int {
		code, out := c.definite(0, "log", "--type", "LeaseExpired", "-o", "tsv", "--no-headers")
		if code != 0 {
			t.Fatalf("log: exit %d %s", code, out)
		}
		return strings.Count(out, "\n")
	}
	// lapsesAt checks that the lease held lapses at ms on the test's clock,
	// not a millisecond before.
	lapsesAt := func(ms int64, what string) {
		t.Helper()
		before := lapsed()
		at(ms - 1)
		expire()
		if n := lapsed(); n != before {
			t.Fatalf("%s: it lapsed before %d ms (%d LeaseExpired records, %d before)", what, ms, n, before)
		}
		at(ms)
		expire()
		if n := lapsed(); n != before+1 {
			t.Fatalf("%s: it did not lapse at %d ms (%d LeaseExpired records, %d before)", what, ms, n, before)
		}
	}
	fast := c.leader()
	fast.skew.Store(20_000)
	lapsesAt(40_000, "a 1-minute lease with the leader 20 s fast")
	c.isolate(fast) // for good: the fast node must not lead again
	testwait.Until(t, "an honest node leading", func() bool {
		leader := c.leader()
		return leader != fast && !fast.node.Leading()
	}, nil)
	at(41_000)
	code, out := c.definite(0, "lease", "--worker", "W", "--duration", "1m", "--request-id", "l2", "-o", "json")
	if code != 0 || !strings.Contains(out, `"expiry":"`+time.UnixMilli(t0+120_000).UTC().Format("2006-01-02T15:04:05.000Z")) {
		t.Fatalf("a lease under an honest leader after the fast one: exit %d %s (want it stamped at the fast node's 60 s)", code, out)
	}
	lapsesAt(120_000, "a lease granted after the fast leader")
	t.Log("a leader 20 s fast: a 1 m lease lapsed 40 s after its grant (20 s early, exactly the skew); after it, the records' time stood at its 60 s until the honest clock passed it")
}
