package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasewal/leasewal/api"
)

// peersBench drives leasewal serve, beanstalkd and redis with the same load
// generator, side by side: 1, 8 and 32 clients submitting (put, LPUSH), and
// taking and finishing tasks (leasewal's complete-and-lease-next and its
// separate lease and complete; beanstalkd's reserve and delete; redis's
// RPOPLPUSH and LREM), every write fsynced before it is answered:
// beanstalkd with -f 0, redis with appendfsync always. The three are
// interleaved, twice, for every figure. With strace on PATH it first counts
// each server's fsyncs per operation, to show that each really syncs.
func peersBench(dir, leasewal string, phase time.Duration) {
	beanstalkd, errB := exec.LookPath("beanstalkd")
	redis, errR := exec.LookPath("redis-server")
	if errB != nil || errR != nil {
		fmt.Println("peers: needs beanstalkd and redis-server on PATH (apt-get install -y redis-server beanstalkd); nothing measured")
		return
	}
	peers := []peer{
		leasewalPeer{bin: leasewal, dir: dir},
		leasewalPeer{bin: leasewal, dir: dir, serial: true},
		beanstalkPeer{bin: beanstalkd, dir: dir},
		redisPeer{bin: redis, dir: dir},
	}
	fmt.Printf("peers: %s phases, each figure the mean of two interleaved runs; every acknowledged write fsynced\n", phase)
	if _, err := exec.LookPath("strace"); err == nil {
		fmt.Println("fsyncs per operation (strace -f, 8 clients, 1 s; fewer than 1 is group commit):")
		for _, p := range peers {
			for _, work := range []string{"submit", "take"} {
				s := p.start(work == "take")
				ops, syncs := countSyncs(s, work, 8)
				s.stop()
				fmt.Printf("  %-10s %-7s %6d ops %6d fsyncs  %.2f per op\n", p.name(), work, ops, syncs, float64(syncs)/float64(max(ops, 1)))
			}
		}
	} else {
		fmt.Println("(strace is not on PATH: the fsync counts are not shown; apt-get install -y strace)")
	}
	fmt.Printf("%-8s %-34s %12s %12s %12s %12s\n", "clients", "operation", "github.com/leasewal/leasewal/s", "beanstalkd/s", "redis/s", "serial/s")
	for _, clients := range []int{1, 8, 32} {
		for _, work := range []string{"submit", "take", "take-separate"} {
			rates := map[string][]float64{}
			for range 2 {
				for _, p := range peers {
					if work == "take-separate" && p.name() != "leasewal" && p.name() != "serial" {
						continue
					}
					s := p.start(work != "submit")
					rates[p.name()] = append(rates[p.name()], rate(s, work, clients, phase))
					s.stop()
				}
			}
			label := map[string]string{"submit": "submit (put, LPUSH)",
				"take":          "complete-and-lease-next (reserve+delete, RPOPLPUSH+LREM)",
				"take-separate": "lease, then complete (2 requests)"}[work]
			fmt.Printf("%-8d %-34s %12s %12s %12s %12s\n", clients, label, figure(rates["leasewal"]), figure(rates["beanstalkd"]), figure(rates["redis"]), figure(rates["serial"]))
			fmt.Printf("%-8s %-34s %12s %12s %12s %12s\n", "", "  leasewal as a multiple of", "", ratio(rates["leasewal"], rates["beanstalkd"]), ratio(rates["leasewal"], rates["redis"]), ratio(rates["leasewal"], rates["serial"]))
		}
	}
}

func figure(xs []float64) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", mean(xs))
}

func ratio(a, b []float64) string {
	if len(a) == 0 || len(b) == 0 || mean(b) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", mean(a)/mean(b))
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

// countSyncs runs 8 clients for a second under strace and counts the
// server's fsync and fdatasync calls.
func countSyncs(s server, work string, clients int) (int64, int64) {
	out, err := os.CreateTemp("", "strace-")
	check(err)
	defer os.Remove(out.Name())
	tracer := exec.Command("strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", out.Name(), "-p", strconv.Itoa(s.pid()))
	check(tracer.Start())
	time.Sleep(500 * time.Millisecond) // attached
	ops := rate(s, work, clients, time.Second)
	_ = tracer.Process.Signal(syscall.SIGINT)
	_ = tracer.Wait()
	summary, _ := os.ReadFile(out.Name())
	var syncs int64
	for _, m := range regexp.MustCompile(`(?m)^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(fsync|fdatasync)$`).FindAllStringSubmatch(string(summary), -1) {
		n, _ := strconv.ParseInt(m[1], 10, 64)
		syncs += n
	}
	return int64(ops), syncs
}

// fill is how many tasks wait before a phase that takes them.
const fill = 60000

// leasewalPeer is leasewal serve over a new WAL, filled through the batch
// door; serial is serve --pipeline=false (one batch at a time), the A of
// the pipelined server's A/B.
type leasewalPeer struct {
	bin, dir string
	serial   bool
}

func (p leasewalPeer) name() string {
	if p.serial {
		return "serial"
	}
	return "leasewal"
}

type leasewalServer struct {
	cmd  *exec.Cmd
	base string
	http *http.Client
}

var nextPort atomic.Int64

func init() { nextPort.Store(7700) }

func (p leasewalPeer) start(filled bool) server {
	s := p.startOn("")
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
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
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

type leaseAnswer struct {
	TaskID  string `json:"task_id"`
	LeaseID string `json:"lease_id"`
	Next    *struct {
		Lease *leaseAnswer `json:"lease"`
	} `json:"next"`
}

func (s *leasewalServer) client(work string, id int) (func() error, error) {
	worker := fmt.Sprintf("w%d", id)
	lease := []byte(`{"worker":"` + worker + `","duration":"5m"}`)
	take := func() (*leaseAnswer, error) {
		b, err := s.post("lease", lease)
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
		return s.post("complete", []byte(body+"}"))
	}
	switch work {
	case "submit":
		body := []byte(`{"payload":"job"}`)
		return func() error { _, err := s.post("submit", body); return err }, nil
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
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
}

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
	if filled {
		for i := range fill {
			_, err := c.do("LPUSH", "q", fmt.Sprintf("job-%d", i))
			check(err)
		}
	}
	_, err = c.do("CONFIG", "SET", "appendfsync", "always")
	check(err)
	return s
}

func (s *redisServer) pid() int { return s.cmd.Process.Pid }

func (s *redisServer) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	_ = s.cmd.Wait()
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

func waitListening(addr string) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return
		}
	}
	check(fmt.Errorf("nothing listens on %s", addr))
}
