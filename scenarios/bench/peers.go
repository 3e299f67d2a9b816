package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasewal/leasewal/api"
)

// peersBench drives leasewal serve, beanstalkd and redis with the same load
// generator, side by side: clients submitting (put, LPUSH), and taking and
// finishing tasks (leasewal's complete-and-lease-next and its separate lease
// and complete; beanstalkd's reserve and delete; redis's RPOPLPUSH and
// LREM), every write fsynced before it is answered: beanstalkd with -f 0,
// redis with appendfsync always. The peers are interleaved, rounds times,
// for every figure; each figure is the median of the rounds with their
// spread, and a ratio the median of the rounds' ratios. Beside each rate,
// the server's CPU per operation (its user and system time over the phase,
// every thread counted, divided by the operations answered). With perf or
// strace on PATH it first counts each server's fsyncs per operation at 8 and 32
// clients, to show that each really syncs and how many requests share one;
// leasewal's own counters (batches, WAL fsyncs) say the same from inside.
func peersBench(dir, leasewal string, o peerOptions) {
	beanstalkd, errB := exec.LookPath("beanstalkd")
	redis, errR := exec.LookPath("redis-server")
	if errB != nil || errR != nil {
		fmt.Println("peers: needs beanstalkd and redis-server on PATH (apt-get install -y redis-server beanstalkd); nothing measured")
		return
	}
	// With several leasewal binaries (A,B), the last is "leasewal" and the
	// others are named by their file: an A/B in the same rounds.
	bins := strings.Split(leasewal, ",")
	var all []peer
	for i, bin := range bins {
		name := "leasewal"
		if i < len(bins)-1 {
			name += "@" + filepath.Base(bin)
		}
		all = append(all, leasewalPeer{bin: bin, dir: dir, label: name})
	}
	all = append(all, leasewalPeer{bin: bins[len(bins)-1], dir: dir, lines: true}, leasewalPeer{bin: bins[len(bins)-1], dir: dir, serial: true}, clusterPeer{bin: bins[len(bins)-1], dir: dir},
		beanstalkPeer{bin: beanstalkd, dir: dir}, redisPeer{bin: redis, dir: dir})
	var peers []peer
	for _, p := range all {
		name, _, _ := strings.Cut(p.name(), "@")
		if len(o.only) == 0 || slices.Contains(o.only, name) {
			peers = append(peers, p)
		}
	}
	fmt.Printf("peers: %s phases, %d interleaved rounds: each figure the median [lowest-highest] of the rounds; every acknowledged write fsynced\n", o.phase, o.rounds)
	if o.waiters > 0 {
		fmt.Printf("beside the load, %d consumers wait on an empty queue \"idle\" (lease --wait, reserve-with-timeout, BRPOP) through every phase\n", o.waiters)
	}
	if o.consumers > 0 {
		fmt.Printf("beside the submits, %d consumers wait on their queue and take each task as it comes, leaving it unfinished (lease --wait, reserve-with-timeout, BRPOP)\n", o.consumers)
	}
	if o.watchers > 0 {
		fmt.Printf("beside the load, %d waits for a task that does not change (leasewal's wait; beanstalkd and redis have none) through every phase\n", o.watchers)
	}
	_, errStrace := exec.LookPath("strace")
	_, errPerf := exec.LookPath("perf")
	if errStrace == nil || errPerf == nil {
		fmt.Println("requests per fsync (1 s; more than 1 is group commit):")
		for _, clients := range []int{8, 32} {
			for _, p := range peers {
				if _, ok := p.(clusterPeer); ok {
					continue // three processes, raft's log fsyncs among them
				}
				for _, work := range []string{"submit", "take"} {
					s := p.start(work == "take")
					ops, syncs, renames, tool := countSyncs(s, work, clients)
					s.stop()
					fmt.Printf("  %2d clients %-10s %-7s %6d ops %6d fsyncs  %5.1f per fsync  %d renames (%s)\n", clients, p.name(), work, ops, syncs, float64(ops)/float64(max(syncs, 1)), renames, tool)
				}
			}
		}
	} else {
		fmt.Println("(neither perf nor strace is on PATH: the fsync counts are not shown; apt-get install -y linux-perf or strace)")
	}
	names := make([]string, len(peers))
	for i, p := range peers {
		names[i] = p.name()
	}
	fmt.Printf("%-8s %-24s", "clients", "operation")
	for _, n := range names {
		fmt.Printf(" %26s", n+"/s, CPU µs/op")
	}
	fmt.Println()
	for _, clients := range o.clients {
		for _, work := range []string{"submit", "take", "take-separate"} {
			runs := map[string][]phaseResult{}
			for range o.rounds {
				for _, p := range peers {
					if work == "take-separate" && !strings.HasPrefix(p.name(), "leasewal") && p.name() != "serial" && p.name() != "lines" {
						continue
					}
					if _, ok := p.(clusterPeer); ok && work != "submit" {
						continue
					}
					s := p.start(work != "submit")
					endIdle, err := s.idle(o.waiters, false)
					check(err)
					endConsume := func() {}
					if work == "submit" {
						endConsume, err = s.idle(o.consumers, true)
						check(err)
					}
					endWatch, err := s.watch(o.watchers)
					check(err)
					runs[p.name()] = append(runs[p.name()], measure(s, work, clients, o.phase))
					endWatch()
					endConsume()
					endIdle()
					s.stop()
				}
			}
			label := map[string]string{"submit": "submit", "take": "complete-and-lease-next", "take-separate": "lease, then complete"}[work]
			fmt.Printf("%-8d %-24s", clients, label)
			for _, n := range names {
				fmt.Printf(" %26s", figure(runs[n]))
			}
			fmt.Println()
			for _, door := range []string{"leasewal", "lines"} {
				if lw := runs[door]; len(lw) > 0 {
					fmt.Printf("%-8s %-24s", "", "  "+door+" ÷ it")
					for _, n := range names {
						fmt.Printf(" %26s", ratio(lw, runs[n]))
					}
					fmt.Println()
				}
			}
			for _, door := range []string{"leasewal", "lines"} {
				if lw := runs[door]; len(lw) > 0 && lw[0].batches > 0 {
					var perBatch, perSync []float64
					for _, r := range lw {
						perBatch = append(perBatch, r.requests/max(r.batches, 1))
						perSync = append(perSync, r.requests/max(r.syncs, 1))
					}
					fmt.Printf("%-8s   %s's counters: %s requests a batch, %s a WAL fsync\n", "", door, spread(perBatch, "%.1f"), spread(perSync, "%.1f"))
				}
			}
		}
	}
}

// peerOptions are peersBench's flags.
type peerOptions struct {
	phase     time.Duration
	rounds    int
	clients   []int
	only      []string
	waiters   int // consumers waiting on an empty queue beside the load (idle)
	consumers int // consumers waiting on the submits' queue (idle, in the submit phases)
	watchers  int // waits for a task's state beside the load (watch)
}

// idleSettle is how long idle consumers are given to be waiting before a
// phase begins.
const idleSettle = 500 * time.Millisecond

// idleConns has n connections of dial each send what wait sends (a wait
// on an empty queue, answered at most when it times out), over and over,
// until end closes them.
func idleConns[C io.Closer](n int, dial func() (C, error), wait func(C) error) (end func(), err error) {
	var conns []C
	var wg sync.WaitGroup
	end = func() {
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	}
	for range n {
		c, err := dial()
		if err != nil {
			end()
			return nil, err
		}
		conns = append(conns, c)
		wg.Go(func() {
			for wait(c) == nil {
			}
		})
	}
	if n > 0 {
		time.Sleep(idleSettle)
	}
	return end, nil
}

// phaseResult is one phase of one server: what it answered, and the CPU it
// spent (and, for leasewal, its own counters over the phase).
type phaseResult struct {
	rate, cpuPerOp           float64 // operations a second; CPU seconds an operation
	requests, batches, syncs float64
}

// measure runs clients clients against s for d, and reads s's CPU time and
// counters around it.
func measure(s server, work string, clients int, d time.Duration) phaseResult {
	cpu0 := serverCPU(s)
	c0 := serverCounters(s)
	r := phaseResult{rate: rate(s, work, clients, d)}
	cpu := serverCPU(s) - cpu0
	c1 := serverCounters(s)
	r.requests, r.batches, r.syncs = c1[0]-c0[0], c1[1]-c0[1], c1[2]-c0[2]
	if ops := r.rate * d.Seconds(); ops > 0 {
		r.cpuPerOp = cpu / ops
	}
	return r
}

// serverCPU is the CPU time of s's processes so far.
func serverCPU(s server) float64 {
	c, ok := s.(*clusterServer)
	if !ok {
		return cpuSeconds(s.pid())
	}
	var sum float64
	for _, n := range c.nodes {
		sum += cpuSeconds(n.Process.Pid)
	}
	return sum
}

// cpuSeconds is a process's user and system time so far, its exited threads
// included (/proc/PID/stat, in clock ticks of 1/100 s).
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	check(err)
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	utime, _ := strconv.ParseFloat(fields[11], 64)
	stime, _ := strconv.ParseFloat(fields[12], 64)
	return (utime + stime) / 100
}

// serverCounters are leasewal's requests decided in batches, batches, and
// WAL fsyncs so far (its /metrics); zeros for a peer without them.
func serverCounters(s server) [3]float64 {
	l, ok := s.(*leasewalServer)
	if !ok {
		return [3]float64{}
	}
	resp, err := l.http.Get(l.base + "/metrics")
	check(err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	check(err)
	var c [3]float64
	for i, name := range []string{"leasewal_batch_size_sum", "leasewal_batch_size_count", "leasewal_wal_syncs_total"} {
		if m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindSubmatch(b); m != nil {
			c[i], _ = strconv.ParseFloat(string(m[1]), 64)
		}
	}
	return c
}

// figure is a peer's rate and CPU per operation, medians of its rounds.
func figure(rs []phaseResult) string {
	if len(rs) == 0 {
		return "-"
	}
	var rates, cpus []float64
	for _, r := range rs {
		rates = append(rates, r.rate)
		cpus = append(cpus, r.cpuPerOp*1e6)
	}
	return fmt.Sprintf("%s, %.0f", spread(rates, "%.0f"), median(cpus))
}

// ratio is the median of a's rate over b's, round by round, with its spread.
func ratio(a, b []phaseResult) string {
	if len(a) == 0 || len(b) == 0 {
		return "-"
	}
	var rs []float64
	for i := range min(len(a), len(b)) {
		if b[i].rate > 0 {
			rs = append(rs, a[i].rate/b[i].rate)
		}
	}
	return spread(rs, "%.2f") + "x"
}

// spread is the median of xs and, with more than one, their range.
func spread(xs []float64, format string) string {
	if len(xs) == 0 {
		return "-"
	}
	m := fmt.Sprintf(format, median(xs))
	if len(xs) == 1 {
		return m
	}
	return m + " [" + fmt.Sprintf(format, slices.Min(xs)) + "-" + fmt.Sprintf(format, slices.Max(xs)) + "]"
}

// peer is one server under test.
type peer interface {
	name() string
	// start starts a fresh server, with enough tasks waiting to be taken
	// for a phase when filled.
	start(filled bool) server
}

// server is a running peer: its clients, and how to stop it.
type server interface {
	pid() int
	// client is one connection; each call of its op does one operation
	// (a submit, or a task taken and finished).
	client(work string, id int) (op func() error, err error)
	// idle opens n consumers that wait on an empty queue "idle" (lease
	// --wait, reserve-with-timeout, BRPOP), or on the queue the submits go
	// to (load), until the function it returns ends them. A consumer takes
	// what comes and waits again, leaving it unfinished.
	idle(n int, load bool) (end func(), err error)
	// watch opens n waits for a task that does not change (leasewal's
	// wait; the others have none: nothing).
	watch(n int) (end func(), err error)
	stop()
}

// rate is the operations per second of clients clients for d.
func rate(s server, work string, clients int, d time.Duration) float64 {
	var done atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	syscall.Sync() // what filling wrote is on disk: no phase pays for another's writes
	stop := time.Now().Add(d)
	for i := range clients {
		op, err := s.client(work, i)
		check(err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if err := op(); err != nil {
					if failed.Add(1) == 1 {
						fmt.Printf("  (a call failed: %v)\n", err)
					}
					return
				}
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / d.Seconds()
}

// countSyncs runs clients clients for a second and counts the fsync and
// fdatasync calls made meanwhile, and the renames (a server that renames a
// file between a decision and its answer, a checkpoint's, shows them):
// with perf's syscall tracepoints across the machine when perf can open
// them (the load generator makes none), else with strace on the server.
// strace stops the server at each traced call, and the time that adds
// lets more requests join each fsync: it overstates grouping (redis
// gathers 7.8 at 8 clients under strace, 4.2 without).
func countSyncs(s server, work string, clients int) (ops, syncs, renames int64, tool string) {
	out, err := os.CreateTemp("", "syncs-")
	check(err)
	defer os.Remove(out.Name())
	tool, counted := "perf", regexp.MustCompile(`(?m)^(\d+),[^,]*,syscalls:sys_enter_(f(?:data)?sync|rename(?:at2?)?),`)
	tracer := exec.Command("perf", "stat", "-a", "-x,", "-e", "syscalls:sys_enter_fsync,syscalls:sys_enter_fdatasync,syscalls:sys_enter_rename,syscalls:sys_enter_renameat,syscalls:sys_enter_renameat2", "-o", out.Name())
	if !perfCounts() {
		tool, counted = "strace", regexp.MustCompile(`(?m)^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(f(?:data)?sync|rename(?:at2?)?)$`)
		tracer = exec.Command("strace", "-f", "-c", "-e", "trace=fsync,fdatasync,rename,renameat,renameat2", "-o", out.Name(), "-p", strconv.Itoa(s.pid()))
	}
	check(tracer.Start())
	time.Sleep(500 * time.Millisecond) // attached
	ops = int64(rate(s, work, clients, time.Second))
	_ = tracer.Process.Signal(syscall.SIGINT)
	_ = tracer.Wait()
	summary, _ := os.ReadFile(out.Name())
	for _, m := range counted.FindAllStringSubmatch(string(summary), -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		if strings.HasPrefix(m[2], "rename") {
			renames += n
		} else {
			syncs += n
		}
	}
	return ops, syncs, renames, tool
}

// perfCounts says whether perf can open the syscall tracepoints here,
// asked once.
var perfCounts = sync.OnceValue(func() bool {
	return exec.Command("perf", "stat", "-e", "syscalls:sys_enter_fsync", "true").Run() == nil
})

// fill is how many tasks wait before a phase that takes them.
const fill = 60000

// leasewalPeer is leasewal serve over a new WAL, filled through the batch
// door; serial is serve --pipeline=false (one batch at a time), the A of
// the pipelined server's A/B.
type leasewalPeer struct {
	bin, dir string
	serial   bool
	lines    bool   // its clients send over the lines door, each on a connection of its own
	label    string // "leasewal", or "leasewal@FILE" for an A of an A/B
}

func (p leasewalPeer) name() string {
	switch {
	case p.serial:
		return "serial"
	case p.lines:
		return "lines"
	case p.label != "":
		return p.label
	}
	return "leasewal"
}

type leasewalServer struct {
	cmd   *exec.Cmd
	base  string
	http  *http.Client
	lines bool
}

var nextPort atomic.Int64

func init() { nextPort.Store(7700) }

func (p leasewalPeer) start(filled bool) server {
	s := p.startOn("")
	s.lines = p.lines
	if filled {
		s.fill(fill)
	}
	return s
}

// fill submits n tasks through the batch door, in requests of at most a
// server's batch.
func (s *leasewalServer) fill(n int) {
	for from := 0; from < n; from += api.MaxServerBatchTasks {
		var lines bytes.Buffer
		for i := from; i < min(n, from+api.MaxServerBatchTasks); i++ {
			fmt.Fprintf(&lines, "{\"payload\":\"job-%d\",\"window\":\"1h\"}\n", i)
		}
		_, err := s.postAs("submit/batch", "application/x-ndjson", lines.Bytes())
		check(err)
	}
}

// startOn starts serve over wal (a new one named by its port for ""),
// with args after serve's own.
func (p leasewalPeer) startOn(wal string, args ...string) *leasewalServer {
	port := nextPort.Add(1)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if wal == "" {
		wal = filepath.Join(p.dir, fmt.Sprintf("peer-%d.wal", port))
	}
	serve := append([]string{"--wal", wal, "serve", "--listen", addr, "--pipeline=" + strconv.FormatBool(!p.serial)}, args...)
	return &leasewalServer{cmd: startServe(p.bin, serve...), base: "http://" + addr,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

func (s *leasewalServer) pid() int { return s.cmd.Process.Pid }

func (s *leasewalServer) stop() {
	stopAll(s.cmd)
}

// post sends one request and returns its answer; an exit other than 0 is
// an error.
func (s *leasewalServer) post(path string, body []byte) ([]byte, error) {
	return s.postAs(path, "application/json", body)
}

// postAs is post of a body of the content type given.
func (s *leasewalServer) postAs(path, contentType string, body []byte) ([]byte, error) {
	resp, err := s.http.Post(s.base+"/v1/"+path, contentType, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.Header.Get("Leasewal-Exit") != "0" {
		err = fmt.Errorf("%s: exit %s: %.200s", path, resp.Header.Get("Leasewal-Exit"), b)
	}
	return b, err
}

// idle has n HTTP clients lease from queue idle with a wait, each on a
// connection of its own.
func (s *leasewalServer) idle(n int, load bool) (func(), error) {
	return s.waitingFor(n, "lease", `{"worker":"idle","queue":"`+map[bool]string{false: "idle", true: "default"}[load]+`","wait":"10m"}`)
}

// watch submits a task to queue watched, which nothing leases, and has n
// HTTP clients wait for it to complete, each on a connection of its own.
func (s *leasewalServer) watch(n int) (func(), error) {
	if n == 0 {
		return func() {}, nil
	}
	b, err := s.post("submit", []byte(`{"payload":"watched","queue":"watched"}`))
	if err != nil {
		return nil, err
	}
	var ack struct {
		TaskID string `json:"task_id"`
	}
	if err := json.Unmarshal(b, &ack); err != nil {
		return nil, err
	}
	return s.waitingFor(n, "wait", fmt.Sprintf(`{"tasks":[%q],"for":"COMPLETED","timeout":"10m"}`, ack.TaskID))
}

// waitingFor has n HTTP clients post body to path, each again once
// answered, until the function it returns ends them.
func (s *leasewalServer) waitingFor(n int, path, body string) (func(), error) {
	ctx, cancel := context.WithCancel(context.Background())
	return idleConns(n, func() (*leasewalWaiter, error) { return &leasewalWaiter{cancel: cancel}, nil }, func(w *leasewalWaiter) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.base+"/v1/"+path, strings.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			return err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return err
	})
}

// leasewalWaiter is one waiting request: closing it ends every one.
type leasewalWaiter struct{ cancel context.CancelFunc }

func (w *leasewalWaiter) Close() error { w.cancel(); return nil }

type leaseAnswer struct {
	TaskID  string `json:"task_id"`
	LeaseID string `json:"lease_id"`
	Next    *struct {
		Lease *leaseAnswer `json:"lease"`
	} `json:"next"`
}

func (s *leasewalServer) client(work string, id int) (func() error, error) {
	post := s.post
	if s.lines {
		var err error
		if post, err = s.overLines(); err != nil {
			return nil, err
		}
	}
	worker := fmt.Sprintf("w%d", id)
	lease := []byte(`{"worker":"` + worker + `","duration":"5m"}`)
	take := func() (*leaseAnswer, error) {
		b, err := post("lease", lease)
		if err != nil {
			return nil, err
		}
		var l leaseAnswer
		return &l, json.Unmarshal(b, &l)
	}
	complete := func(l *leaseAnswer, next bool) ([]byte, error) {
		body := `{"task":"` + l.TaskID + `","lease":"` + l.LeaseID + `"`
		if next {
			body += `,"next":{"worker":"` + worker + `","duration":"5m"}`
		}
		return post("complete", []byte(body+"}"))
	}
	switch work {
	case "submit":
		body := []byte(`{"payload":"job"}`)
		return func() error { _, err := post("submit", body); return err }, nil
	case "take-separate":
		return func() error {
			l, err := take()
			if err == nil {
				_, err = complete(l, false)
			}
			return err
		}, nil
	}
	var held *leaseAnswer
	return func() error {
		var err error
		if held == nil {
			if held, err = take(); err != nil {
				return err
			}
		}
		b, err := complete(held, true)
		if err != nil {
			return err
		}
		var done leaseAnswer
		if err := json.Unmarshal(b, &done); err != nil {
			return err
		}
		if done.Next == nil || done.Next.Lease == nil {
			return fmt.Errorf("no next task: %.200s", b)
		}
		held = done.Next.Lease
		return nil
	}, nil
}

// overLines is post over a connection of its own switched to the lines
// door (api.LinesUpgrade), spoken here as the API's reference says.
func (s *leasewalServer) overLines() (func(path string, body []byte) ([]byte, error), error) {
	conn, err := net.Dial("tcp", strings.TrimPrefix(s.base, "http://"))
	if err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	if _, err := io.WriteString(conn, "GET /v1/lines HTTP/1.1\r\nHost: "+strings.TrimPrefix(s.base, "http://")+"\r\nConnection: Upgrade\r\nUpgrade: "+api.LinesUpgrade+"\r\n\r\n"); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		return nil, fmt.Errorf("the lines door answered %s", resp.Status)
	}
	w := bufio.NewWriter(conn)
	return func(path string, body []byte) ([]byte, error) {
		w.WriteString(path)
		w.WriteByte(' ')
		w.Write(body)
		w.WriteByte('\n')
		if err := w.Flush(); err != nil {
			return nil, err
		}
		line, err := r.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		fields := bytes.SplitN(bytes.TrimSuffix(line, []byte("\n")), []byte(" "), 3)
		if len(fields) != 3 || string(fields[1]) != "0" {
			return nil, fmt.Errorf("%s: %.200s", path, line)
		}
		return fields[2], nil
	}, nil
}

// clusterPeer is three leasewal serve processes in a raft cluster on
// loopback, the clients sent to the leader; it takes part in the submit
// phases, and its CPU is the three processes'.
type clusterPeer struct{ bin, dir string }

func (clusterPeer) name() string { return "cluster" }

type clusterServer struct {
	*leasewalServer // the leader
	nodes           []*exec.Cmd
}

func (p clusterPeer) start(filled bool) server {
	port := int(nextPort.Add(10)) - 10
	leader, nodes := startCluster(p.bin, filepath.Join(p.dir, fmt.Sprintf("cluster-%d", port)), port)
	s := &clusterServer{leasewalServer: &leasewalServer{cmd: nodes[0], base: leader,
		http: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}, nodes: nodes}
	if filled {
		s.fill(fill)
	}
	return s
}

func (s *clusterServer) stop() {
	stopAll(s.nodes...)
}

// beanstalkPeer is beanstalkd with a binlog fsynced at every write (-f 0),
// filled while it fsyncs rarely and then restarted on the same binlog.
type beanstalkPeer struct{ bin, dir string }

func (beanstalkPeer) name() string { return "beanstalkd" }

type beanstalkServer struct {
	cmd  *exec.Cmd
	addr string
}

func (p beanstalkPeer) start(filled bool) server {
	port := nextPort.Add(1)
	binlog := filepath.Join(p.dir, fmt.Sprintf("beanstalk-%d", port))
	check(os.MkdirAll(binlog, 0o755))
	run := func(fsyncMs string) *beanstalkServer {
		s := &beanstalkServer{addr: fmt.Sprintf("127.0.0.1:%d", port)}
		s.cmd = exec.Command(p.bin, "-l", "127.0.0.1", "-p", strconv.FormatInt(port, 10), "-b", binlog, "-f", fsyncMs)
		check(s.cmd.Start())
		waitListening(s.addr)
		return s
	}
	if filled {
		s := run("100000")
		c, err := dialBeanstalk(s.addr)
		check(err)
		for i := range fill {
			check(c.put(fmt.Sprintf("job-%d", i)))
		}
		c.conn.Close()
		s.stop()
	}
	return run("0")
}

func (s *beanstalkServer) pid() int { return s.cmd.Process.Pid }

func (s *beanstalkServer) stop() {
	stopAll(s.cmd)
}

// idle has n connections reserve from tube idle, which nothing is put in,
// or from the tube the submits go to (load).
func (s *beanstalkServer) idle(n int, load bool) (func(), error) {
	return idleConns(n, func() (*beanstalkConn, error) {
		c, err := dialBeanstalk(s.addr)
		if err != nil || load {
			return c, err
		}
		fmt.Fprint(c.conn, "watch idle\r\nignore default\r\n")
		for range 2 {
			if l, err := c.line(); err != nil || !strings.HasPrefix(l, "WATCHING") {
				c.Close()
				return nil, fmt.Errorf("beanstalkd watch: %q %v", l, err)
			}
		}
		return c, nil
	}, func(c *beanstalkConn) error {
		fmt.Fprint(c.conn, "reserve-with-timeout 600\r\n")
		l, err := c.line()
		var id, size int
		if _, scanned := fmt.Sscanf(l, "RESERVED %d %d", &id, &size); err == nil && scanned == nil {
			_, err = io.ReadFull(c.r, make([]byte, size+2))
		}
		return err
	})
}

func (c *beanstalkConn) Close() error { return c.conn.Close() }

func (s *beanstalkServer) watch(int) (func(), error) { return func() {}, nil }

type beanstalkConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialBeanstalk(addr string) (*beanstalkConn, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &beanstalkConn{conn: conn, r: bufio.NewReader(conn)}, nil
}

func (c *beanstalkConn) line() (string, error) {
	l, err := c.r.ReadString('\n')
	return strings.TrimRight(l, "\r\n"), err
}

func (c *beanstalkConn) put(body string) error {
	fmt.Fprintf(c.conn, "put 0 0 300 %d\r\n%s\r\n", len(body), body)
	l, err := c.line()
	if err == nil && !strings.HasPrefix(l, "INSERTED") {
		err = fmt.Errorf("put: %s", l)
	}
	return err
}

func (s *beanstalkServer) client(work string, _ int) (func() error, error) {
	c, err := dialBeanstalk(s.addr)
	if err != nil {
		return nil, err
	}
	if work == "submit" {
		return func() error { return c.put("job") }, nil
	}
	return func() error {
		fmt.Fprint(c.conn, "reserve-with-timeout 0\r\n")
		l, err := c.line()
		if err != nil {
			return err
		}
		var id, size int
		if _, err := fmt.Sscanf(l, "RESERVED %d %d", &id, &size); err != nil {
			return fmt.Errorf("reserve: %s", l)
		}
		if _, err := io.ReadFull(c.r, make([]byte, size+2)); err != nil {
			return err
		}
		fmt.Fprintf(c.conn, "delete %d\r\n", id)
		if l, err = c.line(); err == nil && l != "DELETED" {
			err = fmt.Errorf("delete: %s", l)
		}
		return err
	}, nil
}

// redisPeer is redis with an append-only file fsynced at every write
// (appendfsync always), filled while it does not fsync.
type redisPeer struct{ bin, dir string }

func (redisPeer) name() string { return "redis" }

type redisServer struct {
	cmd  *exec.Cmd
	addr string
}

func (p redisPeer) start(filled bool) server {
	port := nextPort.Add(1)
	dir := filepath.Join(p.dir, fmt.Sprintf("redis-%d", port))
	check(os.MkdirAll(dir, 0o755))
	s := &redisServer{addr: fmt.Sprintf("127.0.0.1:%d", port)}
	s.cmd = exec.Command(p.bin, "--port", strconv.FormatInt(port, 10), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "no")
	check(s.cmd.Start())
	waitListening(s.addr)
	c, err := dialRedis(s.addr)
	check(err)
	defer c.conn.Close()
	if filled { // ten times the others': redis takes them faster than a phase's fill
		for from := 0; from < 10*fill; from += 1000 {
			args := []string{"LPUSH", "q"}
			for i := from; i < from+1000; i++ {
				args = append(args, fmt.Sprintf("job-%d", i))
			}
			_, err := c.do(args...)
			check(err)
		}
	}
	_, err = c.do("CONFIG", "SET", "appendfsync", "always")
	check(err)
	return s
}

func (s *redisServer) pid() int { return s.cmd.Process.Pid }

func (s *redisServer) stop() {
	stopAll(s.cmd)
}

type redisConn struct {
	conn net.Conn
	r    *bufio.Reader
}

func dialRedis(addr string) (*redisConn, error) {
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &redisConn{conn: conn, r: bufio.NewReader(conn)}, nil
}

// do sends one command and reads its reply: a simple string, an integer or
// a bulk string (nil: a null bulk string).
func (c *redisConn) do(args ...string) (*string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := io.WriteString(c.conn, b.String()); err != nil {
		return nil, err
	}
	l, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	l = strings.TrimRight(l, "\r\n")
	switch {
	case strings.HasPrefix(l, "-"):
		return nil, fmt.Errorf("redis: %s", l)
	case strings.HasPrefix(l, "$-1"):
		return nil, nil
	case strings.HasPrefix(l, "$"):
		n, _ := strconv.Atoi(l[1:])
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		v := string(buf[:n])
		return &v, nil
	}
	v := l[1:]
	return &v, nil
}

func (s *redisServer) client(work string, _ int) (func() error, error) {
	c, err := dialRedis(s.addr)
	if err != nil {
		return nil, err
	}
	if work == "submit" {
		return func() error { _, err := c.do("LPUSH", "q", "job"); return err }, nil
	}
	return func() error {
		job, err := c.do("RPOPLPUSH", "q", "processing")
		if err != nil {
			return err
		}
		if job == nil {
			return fmt.Errorf("redis: the queue is empty")
		}
		_, err = c.do("LREM", "processing", "1", *job)
		return err
	}, nil
}

// idle has n connections BRPOP list idle, which nothing is pushed to, or
// the list the submits go to (load).
func (s *redisServer) idle(n int, load bool) (func(), error) {
	return idleConns(n, func() (*redisConn, error) { return dialRedis(s.addr) }, func(c *redisConn) error {
		_, err := c.do("BRPOP", map[bool]string{false: "idle", true: "q"}[load], "600")
		return err
	})
}

func (c *redisConn) Close() error { return c.conn.Close() }

func (s *redisServer) watch(int) (func(), error) { return func() {}, nil }

func waitListening(addr string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
	}
	check(fmt.Errorf("nothing listens on %s", addr))
}
