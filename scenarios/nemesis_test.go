package scenarios

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasewal/leasewal/internal/lincheck"
	"github.com/leasewal/leasewal/internal/nemesis"
	"github.com/leasewal/leasewal/internal/testwait"
)

// procNode is one `leasewal serve` process of a cluster, behind a nemesis
// proxy: the other nodes dial the proxy (--raft-advertise), and the node
// dials them from its own loopback address (--raft-bind), by which their
// proxies tell the link.
type procNode struct {
	id, dir string
	bind    string // 127.0.0.1x:port
	listen  string // the HTTP API's address
	proxy   *nemesis.Proxy
	clock   string // its LEASEWAL_TEST_CLOCK file
	cmd     *exec.Cmd
	log     *lockedBuffer
	url     string
	stopped bool
}

func (n *procNode) start(t *testing.T, join string) {
	t.Helper()
	args := []string{"--wal", filepath.Join(n.dir, n.id+".wal"), "serve", "--listen", n.listen,
		"--raft-id", n.id, "--raft-dir", filepath.Join(n.dir, n.id+".raft"), "--raft-bind", n.bind, "--raft-advertise", n.proxy.Addr()}
	if join != "" {
		args = append(args, "--join", join)
	}
	var url string
	n.cmd, url, n.log = startServeEnv(t, []string{"LEASEWAL_TESTING=1", "LEASEWAL_TEST_CLOCK=" + n.clock}, args...)
	if url != n.url { // the clients read n.url while a node restarts: it never changes
		t.Fatalf("%s serves on %s, not %s", n.id, url, n.url)
	}
}

// role is what the node's status says it is ("" when it does not answer).
func (n *procNode) role() string {
	client := http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(n.url + "/v1/status")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	var st struct {
		Role string `json:"role"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&st)
	return st.Role
}

// TestClusterNemesisProcesses: the process-level nemesis. Three serve
// processes, each behind a proxy that breaks its links as told; three
// client processes lease, complete and fail through them while, phase after
// phase, the leader is cut off from both followers, a follower is isolated,
// a bridge splits the others, the links reset a twentieth of their reads and
// then delay every read, the leader is SIGSTOPped (and SIGCONTed), and a
// node is SIGKILLed and restarted; each phase lasts until the clients have
// had enough more answers. The history is checked by porcupine (every clock
// stands still, so that the model's times are the records'); then one
// node's clock jumps ten minutes forward, and the WALs, identical on every
// node, are checked by nemesis.Check and verify. Each phase's size is
// nemesis.AnswersPerPhase.
func TestClusterNemesisProcesses(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a cluster of processes")
	}
	perPhase := nemesis.AnswersPerPhase()
	dir := t.TempDir()
	network := nemesis.New(11)
	base := 10000 + rand.IntN(20000) // below Linux's ephemeral ports, as cluster.sh's
	from := map[string]string{}
	var nodes []*procNode
	for i := range 3 {
		id, ip := fmt.Sprintf("n%d", i+1), fmt.Sprintf("127.0.0.%d", 11+i)
		from[ip] = id
		n := &procNode{id: id, dir: dir, bind: fmt.Sprintf("%s:%d", ip, base+i), listen: fmt.Sprintf("127.0.0.1:%d", base+10+i),
			clock: filepath.Join(dir, id+".clock")}
		n.url = "http://" + n.listen
		if err := os.WriteFile(n.clock, []byte("2026-01-01T00:00:00Z\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		p, err := network.Proxy(n.id, "127.0.0.1:0", n.bind, from)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		n.proxy = p
	}
	urls := func(first int) string {
		var list []string
		for k := range nodes {
			list = append(list, nodes[(first+k)%len(nodes)].url)
		}
		return strings.Join(list, ",")
	}
	logs := func() string {
		var b strings.Builder
		for _, n := range nodes {
			fmt.Fprintf(&b, "--- %s\n%s", n.id, n.log.String())
		}
		return b.String()
	}
	// definite sends a call until its answer is definite: an unknown outcome
	// (exit 10) or no node answering is sent again, with its request id.
	definite := func(first int, args ...string) (int, string) {
		var code int
		var out, errOut string
		for guard := time.Now().Add(testwait.HangGuard); time.Now().Before(guard); time.Sleep(100 * time.Millisecond) {
			code, out, errOut = run(t, "", []string{"LEASEWAL_SERVER=" + urls(first)}, args...)
			if code != 10 && !(code == 1 && strings.Contains(errOut, "no server answered")) {
				return code, out
			}
		}
		t.Fatalf("hang guard: %v had no definite answer in %s: exit %d %s%s", args, testwait.HangGuard, code, out, errOut)
		return 0, ""
	}
	leader := func() *procNode {
		var found *procNode
		testwait.Until(t, "a node to lead", func() bool {
			for _, n := range nodes {
				if !n.stopped && n.role() == "leader" {
					found = n
					return true
				}
			}
			return false
		}, logs)
		return found
	}
	nodes[0].start(t, "")
	leader()
	if code, out := definite(0, lincheck.Input{Op: "submit", Req: "first"}.Args(false)...); code != 0 {
		t.Fatalf("the first submit: exit %d %s", code, out)
	}
	for _, n := range nodes[1:] {
		n.start(t, nodes[0].url)
		testwait.Until(t, n.id+" to join", func() bool { return strings.Contains(n.log.String(), "joined the cluster") }, logs)
	}
	walOf := func(n *procNode) []byte {
		b, err := os.ReadFile(filepath.Join(dir, n.id+".wal"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	converged := func() bool {
		first, err := os.ReadFile(filepath.Join(dir, nodes[0].id+".wal"))
		for _, n := range nodes[1:] {
			if b, berr := os.ReadFile(filepath.Join(dir, n.id+".wal")); err != nil || berr != nil || !bytes.Equal(b, first) {
				return false
			}
		}
		return true
	}
	testwait.Until(t, "every node to hold the first submit", converged, logs)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

	others := func(n *procNode) (ids []string) {
		for _, o := range nodes {
			if o != n {
				ids = append(ids, o.id)
			}
		}
		return ids
	}
	every := func(f nemesis.Fault) {
		for _, a := range nodes {
			for _, b := range nodes {
				if a != b {
					network.Set(f, a.id, b.id, false)
				}
			}
		}
	}
	var paused, killed *procNode
	phases := []struct {
		name  string
		apply func()
	}{
		{"the leader cut off from both followers", func() { old := leader(); network.Partition([]string{old.id}, others(old)) }},
		{"a follower isolated", func() {
			f := nodes[0]
			if f == leader() {
				f = nodes[1]
			}
			network.Partition([]string{f.id}, others(f))
		}},
		{"a bridge", func() { halves := others(leader()); network.Partition(halves[:1], halves[1:]) }},
		{"a twentieth of the reads reset", func() { every(nemesis.Fault{Loss: 0.05}) }},
		{"every read delayed", func() { every(nemesis.Fault{Delay: 20 * time.Millisecond}) }},
		{"the leader SIGSTOPped", func() {
			paused = leader()
			paused.stopped = true
			_ = paused.cmd.Process.Signal(syscall.SIGSTOP)
		}},
		{"a node SIGKILLed", func() {
			killed = leader()
			killed.stopped = true
			_ = killed.cmd.Process.Kill()
			_ = killed.cmd.Wait()
		}},
	}
	var (
		answered atomic.Int32
		over     atomic.Bool
	)
	type result struct {
		history []porcupine.Operation
		err     error
	}
	done := make(chan result, 1)
	go func() {
		h, err := lincheck.Clients(3, 4, 0, time.Now(), func() bool { return !over.Load() }, &answered,
			func(client int, in lincheck.Input) (string, error) {
				_, out := definite(client, in.Args(false)...)
				return out, nil
			})
		done <- result{h, err}
	}()
	for _, p := range phases {
		at := answered.Load()
		p.apply()
		testwait.Until(t, fmt.Sprintf("%d answers while %s", perPhase, p.name), func() bool { return answered.Load() >= at+perPhase },
			func() string { return fmt.Sprintf("%d answers since the phase began\n%s", answered.Load()-at, logs()) })
		network.Heal()
		if paused != nil {
			_ = paused.cmd.Process.Signal(syscall.SIGCONT)
			paused.stopped, paused = false, nil
		}
		if killed != nil {
			killed.start(t, "")
			killed.stopped, killed = false, nil
		}
		t.Logf("%s: the clients went on (%d answers so far)", p.name, answered.Load())
	}
	over.Store(true)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	testwait.Until(t, "every node's WAL to be the same", converged, logs)
	if res, where := lincheck.Check(start, r.history, testwait.HangGuard); res != porcupine.Ok {
		t.Fatalf("the history of %d calls under the nemesis is %s; see %s\n%s", len(r.history), res, where, walOf(nodes[0]))
	}

	// A clock that jumps: the leader's runs ten minutes ahead from now on, so
	// a 5-minute lease granted just before lapses at once by its time.
	if code, out := definite(0, "queue", "rate", "default", "none"); code != 0 { // the clients may have left one
		t.Fatalf("queue rate none: exit %d %s", code, out)
	}
	if code, out := definite(0, "submit", "--payload", "before the jump", "--request-id", "pre-jump", "-o", "json"); code != 0 {
		t.Fatalf("a submit before the jump: exit %d %s", code, out)
	}
	code, out := definite(0, "lease", "--worker", "before-jump", "--duration", "5m", "--request-id", "pre-jump-lease", "-o", "json")
	var held lincheck.Output
	if err := json.Unmarshal([]byte(out), &held); code != 0 || err != nil || held.Result != "LEASED" {
		t.Fatalf("a lease before the jump: exit %d %s", code, out)
	}
	jumped := leader()
	if err := os.WriteFile(jumped.clock, []byte("2026-01-01T00:10:00Z\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out := definite(0, "expire", "-o", "json"); code != 0 {
		t.Fatalf("expire after the jump: exit %d %s", code, out)
	}
	if code, out := definite(1, "submit", "--payload", "after the jump", "--request-id", "jump", "-o", "json"); code != 0 {
		t.Fatalf("a submit after the jump: exit %d %s", code, out)
	}
	if code, out := definite(2, "lease", "--worker", "after-jump", "--duration", "1m", "-o", "json"); code != 0 || !strings.Contains(out, "LEASED") {
		t.Fatalf("a lease after the jump: exit %d %s", code, out)
	}
	testwait.Until(t, "every node's WAL to be the same after the jump", converged, logs)
	wal := walOf(nodes[0])
	// (read from the WAL: an expire whose answer was lost is sent again, and
	// the repeat finds nothing left to expire)
	if !regexp.MustCompile(`"type":"LeaseExpired"[^\n]*"lease_id":"` + held.Lease + `"`).Match(wal) {
		t.Fatalf("the expire after the jump did not end lease %s:\n%s", held.Lease, wal)
	}
	sum, err := nemesis.Check(wal, append(lincheck.Acked(r.history), "pre-jump", "jump"))
	if err != nil {
		t.Fatalf("%v\n%s", err, wal)
	}
	for _, n := range nodes {
		if code, _, errOut := run(t, filepath.Join(dir, n.id+".wal"), nil, "verify"); code != 0 {
			t.Fatalf("verify on %s: exit %d %s", n.id, code, errOut)
		}
	}
	sent, lost := network.Counts()
	t.Logf("nemesis (processes): %d calls from 3 client processes through %d phases: linearizable; then a clock jump of 10 m on %s; WALs identical: %d records, %d tasks (%d acknowledged submits), %d grants; raft reads %d forwarded, %d cut or reset",
		len(r.history), len(phases), jumped.id, sum.Records, sum.Tasks, len(lincheck.Acked(r.history)), sum.Grants, sent, lost)
}
