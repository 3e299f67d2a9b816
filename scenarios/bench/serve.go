package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
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
// 'leasewal serve' (B, group commit), alternated A B A B, with B's p99.
func serveBench(dir, leasewal string, phase time.Duration) {
	fmt.Printf("serve: 16 concurrent clients submitting, %s phases, alternated\n", phase)
	fmt.Printf("%-40s %12s %10s\n", "", "submits/s", "p99 ms")
	var rate [2][]float64
	for round := range 4 {
		wal := filepath.Join(dir, fmt.Sprintf("serve-%d.wal", round))
		if round%2 == 0 {
			n, p99 := processSubmits(leasewal, wal, phase)
			rate[0] = append(rate[0], n)
			fmt.Printf("%-40s %12.1f %10.2f\n", "A: 16 loops of 'leasewal submit'", n, ms(p99))
		} else {
			n, p99 := httpSubmits(leasewal, wal, phase, 7500+round)
			rate[1] = append(rate[1], n)
			fmt.Printf("%-40s %12.1f %10.2f\n", "B: 16 HTTP clients of 'leasewal serve'", n, ms(p99))
		}
	}
	fmt.Printf("serve = %.1fx the per-process submits per second (target >= 5x)\n", mean(rate[1])/mean(rate[0]))
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
	srv := exec.Command(leasewal, "--wal", wal, "serve", "--listen", addr)
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
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32}}
	rate, p99 := loops(d, func() error {
		resp, err := client.Post("http://"+addr+"/v1/submit", "application/json", bytes.NewReader([]byte(`{"payload":"job"}`)))
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
	_ = srv.Process.Signal(syscall.SIGTERM)
	_ = srv.Wait()
	return rate, p99
}
