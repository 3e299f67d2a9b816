package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// serveBench prints submits per second from 16 concurrent clients: each a
// loop of 'leasewal submit' processes (A), against 16 HTTP clients of one
// 'leasewal serve' (B, group commit), and of a 3-node raft cluster of serve
// processes on this machine (C, sent to the leader), alternated A B C A B C,
// with each one's p99.
func serveBench(dir, leasewal string, phase time.Duration) {
	fmt.Printf("serve: 16 concurrent clients submitting, %s phases, alternated\n", phase)
	fmt.Printf("%-46s %12s %10s\n", "", "submits/s", "p99 ms")
	var rate [3][]float64
	for round := range 6 {
		wal := filepath.Join(dir, fmt.Sprintf("serve-%d.wal", round))
		var n float64
		var p99 time.Duration
		var label string
		switch round % 3 {
		case 0:
			n, p99 = processSubmits(leasewal, wal, phase)
			label = "A: 16 loops of 'leasewal submit'"
		case 1:
			n, p99 = httpSubmits(leasewal, wal, phase, 7500+round)
			label = "B: 16 HTTP clients of 'leasewal serve'"
		case 2:
			n, p99 = clusterSubmits(leasewal, filepath.Join(dir, fmt.Sprintf("cluster-%d", round)), phase, 7600+10*round)
			label = "C: 16 HTTP clients of a 3-node raft cluster"
		}
		rate[round%3] = append(rate[round%3], n)
		fmt.Printf("%-46s %12.1f %10.2f\n", label, n, ms(p99))
	}
	fmt.Printf("serve = %.1fx the per-process submits per second (target >= 5x); the 3-node cluster = %.1fx\n",
		mean(rate[1])/mean(rate[0]), mean(rate[2])/mean(rate[0]))
}

func loops(d time.Duration, one func() error) (float64, time.Duration) {
	stop := time.Now().Add(d)
	var mu sync.Mutex
	var lat []time.Duration
	var failed atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				start := time.Now()
				if err := one(); err != nil {
					failed.Add(1)
					continue
				}
				took := time.Since(start)
				mu.Lock()
				lat = append(lat, took)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		fmt.Printf("  (%d calls failed)\n", failed.Load())
	}
	slices.Sort(lat)
	return float64(len(lat)) / d.Seconds(), pct(lat, 99)
}

func processSubmits(leasewal, wal string, d time.Duration) (float64, time.Duration) {
	return loops(d, func() error {
		return exec.Command(leasewal, "--wal", wal, "submit", "--payload", "job").Run()
	})
}

func httpSubmits(leasewal, wal string, d time.Duration, port int) (float64, time.Duration) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	srv := startServe(leasewal, "--wal", wal, "serve", "--listen", addr)
	rate, p99 := postSubmits("http://"+addr, d)
	stopAll(srv)
	return rate, p99
}

// clusterSubmits starts three raft nodes in dir and submits to the leader.
func clusterSubmits(leasewal, dir string, d time.Duration, port int) (float64, time.Duration) {
	leader, nodes := startCluster(leasewal, dir, port)
	rate, p99 := postSubmits(leader, d)
	stopAll(nodes...)
	return rate, p99
}

// startCluster starts three raft nodes in dir, their HTTP on port+1 to
// port+3 (n1 founds the cluster, n2 and n3 join it), and returns the
// leader's URL, n1's, once it leads and the joins have had their time.
func startCluster(leasewal, dir string, port int) (string, []*exec.Cmd) {
	check(os.MkdirAll(dir, 0o755))
	var nodes []*exec.Cmd
	for i := 1; i <= 3; i++ {
		args := []string{"--wal", filepath.Join(dir, fmt.Sprintf("n%d.wal", i)), "serve",
			"--listen", fmt.Sprintf("127.0.0.1:%d", port+i), "--raft-id", fmt.Sprintf("n%d", i),
			"--raft-dir", filepath.Join(dir, fmt.Sprintf("n%d.raft", i)), "--raft-bind", fmt.Sprintf("127.0.0.1:%d", port+5+i)}
		if i > 1 {
			args = append(args, "--join", fmt.Sprintf("http://127.0.0.1:%d", port+1))
		}
		nodes = append(nodes, startServe(leasewal, args...))
	}
	leader := fmt.Sprintf("http://127.0.0.1:%d", port+1)
	waitFor(func() bool {
		resp, err := http.Get(leader + "/v1/status")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), `"role":"leader"`)
	})
	time.Sleep(2 * time.Second) // the joins, each a configuration change
	return leader, nodes
}

// stopAll stops server processes (SIGTERM) and waits for each to end.
func stopAll(servers ...*exec.Cmd) {
	for _, s := range servers {
		_ = s.Process.Signal(syscall.SIGTERM)
		_ = s.Wait()
	}
}

// startServe starts a serve process and returns once it says it serves.
func startServe(leasewal string, args ...string) *exec.Cmd {
	srv := exec.Command(leasewal, args...)
	stderr, err := srv.StderrPipe()
	check(err)
	check(srv.Start())
	ready := bufio.NewScanner(stderr)
	for ready.Scan() && !strings.Contains(ready.Text(), "serving") {
	}
	go func() {
		for ready.Scan() {
		}
	}()
	return srv
}

func waitFor(ok func() bool) {
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if ok() {
			return
		}
	}
	check(fmt.Errorf("timed out waiting for the cluster's leader"))
}

// postSubmits runs 16 HTTP clients submitting to base for d.
func postSubmits(base string, d time.Duration) (float64, time.Duration) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	return loops(d, func() error {
		resp, err := client.Post(base+"/v1/submit", "application/json", bytes.NewReader([]byte(`{"payload":"job"}`)))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body) // read whole, so that the connection is reused
		if resp.Header.Get("Leasewal-Exit") != "0" {
			return fmt.Errorf("exit %s", resp.Header.Get("Leasewal-Exit"))
		}
		return nil
	})
}
