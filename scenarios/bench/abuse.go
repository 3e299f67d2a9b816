package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// abuseBench prints what a server pays for the requests a careless or
// hostile client sends, for each binary in turn (A B A B), on a copy of one
// WAL of n records: the peak resident size a 100 MB body of garbage to the
// batch door and a log of every record add to the server idle on that WAL;
// how long a submit waits while a batch at the server's limit is decided;
// the median heartbeat with 10 workers in the registry and with 5,000; and
// submits per second at 1, 8 and 32 clients, the cost of the checks on the
// request path.
func abuseBench(dir, binaries, self string, n int, phase time.Duration) {
	bins := strings.Split(binaries, ",")
	fmt.Printf("a server's bounds: a WAL of %d records; peak RSS added to the server idle on it (VmHWM - VmRSS before); every figure per binary, A B A B\n", n)
	fmt.Printf("%-4s %-22s | %9s %9s | %9s %9s | %10s %9s | %8s %8s %6s | %8s %8s %8s\n", "", "binary",
		"garbage", "+RSS MB", "log s", "+RSS MB", "batch s", "submit≤s", "hb 10", "hb 5000", "ratio", "sub/s 1", "sub/s 8", "sub/s 32")
	source := filepath.Join(dir, "abuse-source.wal")
	execute(self, "-generate", source, "-records", strconv.Itoa(n))
	data, err := os.ReadFile(source)
	check(err)
	check(os.Remove(source))
	for round := range 2 * len(bins) {
		bin := bins[round%len(bins)]
		wal := filepath.Join(dir, fmt.Sprintf("abuse-%d.wal", round))
		check(os.WriteFile(wal, data, 0o644))
		s := leasewalPeer{bin: bin, dir: dir}.startOn(wal, "--compact-above", "0")
		_, err := s.post("stats", []byte(`{}`)) // the state loaded: what idle holds
		check(err)

		idle := statusKB(s.pid(), "VmRSS")
		resetPeak(s.pid())
		garbage := postGarbage(s, 100<<20)
		garbageRSS := peakKB(s.pid()) - idle

		idle = statusKB(s.pid(), "VmRSS")
		resetPeak(s.pid())
		began := time.Now()
		lines := readLog(s)
		logTime := time.Since(began)
		logRSS := peakKB(s.pid()) - idle

		batchTime, waited := batchBeside(s)
		hb10, hb5000 := heartbeats(s)
		var rates []string
		for _, clients := range []int{1, 8, 32} {
			rates = append(rates, fmt.Sprintf("%.0f", rate(s, "submit", clients, phase)))
		}
		s.stop()
		fmt.Printf("%-4s %-22s | %9s %9.0f | %9.1f %9.0f | %10.2f %9.3f | %7.2fms %7.2fms %6.2f | %8s %8s %8s\n", string(rune('A'+round%len(bins))), filepath.Base(bin),
			garbage, float64(garbageRSS)/1024, logTime.Seconds(), float64(logRSS)/1024, batchTime.Seconds(), waited.Seconds(),
			ms(hb10), ms(hb5000), float64(hb5000)/float64(hb10), rates[0], rates[1], rates[2])
		if lines < n {
			fmt.Printf("  (the log answered %d lines of %d records)\n", lines, n)
		}
		matches, _ := filepath.Glob(wal + "*")
		for _, path := range matches {
			os.Remove(path)
		}
	}
}

// postGarbage sends size bytes that are not JSON to the batch door and
// says how the server answered.
func postGarbage(s *leasewalServer, size int) string {
	body := io.LimitReader(repeatReader('x'), int64(size))
	resp, err := s.http.Post(s.base+"/v1/submit/batch", "application/x-ndjson", body)
	if err != nil {
		return "closed" // the server stopped reading, and hung up
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return "HTTP " + strconv.Itoa(resp.StatusCode)
}

type repeatReader byte

func (r repeatReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(r)
	}
	return len(p), nil
}

// readLog reads a log of every record through the server, a line at a
// time, and returns how many lines came.
func readLog(s *leasewalServer) int {
	resp, err := s.http.Post(s.base+"/v1/log", "application/json", strings.NewReader(`{}`))
	check(err)
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	lines.Buffer(make([]byte, 64<<10), 16<<20)
	n := 0
	for lines.Scan() {
		n++
	}
	check(lines.Err())
	return n
}

// batchBeside sends a batch of 20,000 tasks (the server's limit) and, while
// it is decided, one submit after another: how long the batch took, and the
// longest a submit beside it waited.
func batchBeside(s *leasewalServer) (batch, longest time.Duration) {
	var lines bytes.Buffer
	for i := range 20_000 {
		fmt.Fprintf(&lines, "{\"payload\":\"bulk-%d\"}\n", i)
	}
	done := make(chan time.Duration)
	go func() {
		began := time.Now()
		_, err := s.postAs("submit/batch", "application/x-ndjson", lines.Bytes())
		check(err)
		done <- time.Since(began)
	}()
	for {
		began := time.Now()
		_, err := s.post("submit", []byte(`{"payload":"beside"}`))
		check(err)
		longest = max(longest, time.Since(began))
		select {
		case batch = <-done:
			return batch, longest
		default:
		}
	}
}

// heartbeats is the median heartbeat of ten workers, with those ten in the
// registry and then with 5,000 (each of which heartbeated once).
func heartbeats(s *leasewalServer) (ten, many time.Duration) {
	median := func() time.Duration {
		var d []time.Duration
		for i := range 300 {
			began := time.Now()
			_, err := s.post("heartbeat", []byte(`{"worker":"w`+strconv.Itoa(i%10)+`"}`))
			check(err)
			d = append(d, time.Since(began))
		}
		slices.Sort(d)
		return d[len(d)/2]
	}
	ten = median()
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := g; i < 5000; i += 8 {
				_, err := s.post("heartbeat", []byte(`{"worker":"other-`+strconv.Itoa(i)+`"}`))
				check(err)
			}
		})
	}
	wg.Wait()
	return ten, median()
}
