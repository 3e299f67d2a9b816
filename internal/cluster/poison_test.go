package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
	"github.com/leasewal/leasewal/state"
)

// testCluster is three nodes over raft's in-memory transport, n1 leading.
type testCluster struct {
	t     *testing.T
	dir   string
	nodes []*Node
	trans []*raft.InmemTransport
}

func startCluster(t *testing.T) *testCluster {
	t.Helper()
	c := &testCluster{t: t, dir: t.TempDir()}
	for i := range 3 {
		addr, trans := raft.NewInmemTransport(raft.ServerAddress(fmt.Sprintf("n%d", i+1)))
		_ = addr
		c.trans = append(c.trans, trans)
	}
	for _, a := range c.trans {
		for _, b := range c.trans {
			if a != b {
				a.Connect(b.LocalAddr(), b)
			}
		}
	}
	for i := range 3 {
		c.nodes = append(c.nodes, c.start(i))
	}
	testwait.Until(t, "n1 to lead", c.nodes[0].Leading, c.nodes[0].Role)
	for i := 1; i < 3; i++ {
		if err := c.nodes[0].Join(c.id(i), string(c.trans[i].LocalAddr()), "http://127.0.0.1:1"); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			if n != nil {
				_ = n.Shutdown()
			}
		}
	})
	return c
}

func (c *testCluster) id(i int) string { return fmt.Sprintf("n%d", i+1) }

func (c *testCluster) walPath(i int) string { return filepath.Join(c.dir, c.id(i)+".wal") }

func (c *testCluster) start(i int) *Node {
	c.t.Helper()
	n, err := Start(Config{ID: c.id(i), Dir: filepath.Join(c.dir, c.id(i)), URL: "http://127.0.0.1:1", Transport: c.trans[i], Join: i > 0,
		Timing: Timing{Heartbeat: 100 * time.Millisecond, Election: 100 * time.Millisecond, LeaderLease: 100 * time.Millisecond}},
		store.Options{Path: c.walPath(i), LockTimeout: 5 * time.Second})
	if err != nil {
		c.t.Fatal(err)
	}
	return n
}

// settled waits until every node has applied what the leader committed, and
// says that none has failed.
func (c *testCluster) settled() {
	c.t.Helper()
	_, commit, _ := c.nodes[0].Indexes()
	for i, n := range c.nodes {
		testwait.Until(c.t, c.id(i)+" to apply every committed entry", func() bool {
			_, _, applied := n.Indexes()
			return applied >= commit
		}, func() string { _, _, applied := n.Indexes(); return fmt.Sprintf("applied %d of %d", applied, commit) })
		select {
		case err := <-n.Failed():
			c.t.Fatalf("%s stopped: %v", c.id(i), err)
		default:
		}
	}
}

// sameWALs says that every node's WAL is byte for byte n1's, and returns it.
func (c *testCluster) sameWALs() []byte {
	c.t.Helper()
	first, err := os.ReadFile(c.walPath(0))
	if err != nil {
		c.t.Fatal(err)
	}
	for i := 1; i < 3; i++ {
		b, err := os.ReadFile(c.walPath(i))
		if err != nil {
			c.t.Fatal(err)
		}
		if !bytes.Equal(b, first) {
			c.t.Fatalf("%s's WAL differs from n1's:\n%s\n---\n%s", c.id(i), b, first)
		}
	}
	return first
}

// rawEntry is a records entry holding bodies as they are, unchecked: what
// an older leader proposed.
func rawEntry(bodies ...string) []byte {
	out := []byte{entryRecords}
	for _, b := range bodies {
		out = binary.AppendUvarint(out, uint64(len(b)))
		out = append(out, b...)
	}
	return out
}

// TestACommittedEntryEveryNodeRefusesStopsNoNode: the raft log an older
// leader wrote can hold a record that the WAL would refuse (an actor of 600
// KB, over the WAL's largest record), one that does not decode, and one this
// version reads clamped (a queue limit of 2^31, written as 2^31-1). Each was
// committed: every node refuses the first two alike, applies the third, and
// goes on; the proposer hears the refusal;
// the WALs stay identical; a node restarted, which raft hands the entries
// again, comes back with the same WAL; and a write after them is taken.
func TestACommittedEntryEveryNodeRefusesStopsNoNode(t *testing.T) {
	c := startCluster(t)
	leader := c.nodes[0]
	limit := `{"seq":1,"at":1767225600000,"type":"QueueLimited","actor":"old","queue":"q","limit":2147483648}`
	if err := leader.propose(rawEntry(limit)); err != nil {
		t.Fatalf("the entry of a queue limit of 2^31: %v", err)
	}
	huge := `{"seq":2,"at":1767225600001,"type":"QueueLimited","actor":"` + strings.Repeat("a", 600_000) + `","queue":"r","limit":3}`
	err := leader.propose(rawEntry(huge))
	var refused *RefusedEntryError
	if !errors.As(err, &refused) {
		t.Fatalf("the entry of a 600 KB actor: %v, want a RefusedEntryError", err)
	}
	garbage := "{not json"
	if err := leader.propose(rawEntry(garbage)); !errors.As(err, &refused) {
		t.Fatalf("the entry of a record that does not decode: %v, want a RefusedEntryError", err)
	}
	c.settled()
	c.sameWALs()

	errs, _, err := leader.Commit([]func(*store.Tx) error{func(tx *store.Tx) error {
		d, err := tx.State.DecideSubmit(state.Submit{Payload: "after", Window: state.Duration(time.Minute), Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
		if err != nil {
			return err
		}
		return tx.Commit(d.Records)
	}})
	if err != nil || errs[0] != nil {
		t.Fatalf("a submit after the refused entries: %v, %v", err, errs[0])
	}
	c.settled()
	wal := c.sameWALs()
	if !bytes.Contains(wal, []byte(`"limit":2147483647`)) || bytes.Contains(wal, []byte(`"queue":"r"`)) || !bytes.Contains(wal, []byte(`"seq":2,`)) {
		t.Fatalf("the WAL holds the wrong records:\n%s", wal)
	}

	_ = c.nodes[2].Shutdown()
	c.nodes[2] = c.start(2)
	c.settled()
	c.sameWALs()
	h := store.Open(store.Options{Path: c.walPath(2), LockTimeout: time.Minute}) // the node may be writing: wait (a hang guard)
	defer h.Close()
	if err := h.Read(func(tx *store.Tx) error {
		if got := tx.State.Limits()["q"]; got != 2147483647 {
			return fmt.Errorf("queue q's limit reads %d, want 2147483647 (2^31 clamped)", got)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}
