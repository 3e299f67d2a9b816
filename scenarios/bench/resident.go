package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasewal/leasewal/internal/store"
)

// residentBench prints what a resident server costs over a big backlog: a
// WAL of n tasks waiting (histgen), served by each binary in turn (A B A B),
// then 16 HTTP clients submitting ops tasks, then doing work
// complete-and-lease-next; for each phase its rate and the server's peak
// resident size during it (the server has answered a first request, and
// the peak is reset, before: start-up is the first-start benchmark's), and
// the files beside the WAL after.
func residentBench(dir, binaries, self string, n, ops, work int) {
	bins := strings.Split(binaries, ",")
	fmt.Printf("a resident server over %d waiting tasks: 16 HTTP clients, %d submits, then %d complete-and-lease-next; peak RSS per phase (VmHWM, the index's mapped pages in it) and peak RssAnon (sampled every 5 ms)\n", n, ops, work)
	fmt.Printf("%-4s %-28s | %10s %8s %8s | %10s %8s %8s | %8s %6s\n", "", "binary", "submit/s", "RSS MB", "anon MB", "c+l/s", "RSS MB", "anon MB", "side MB", "files")
	source := filepath.Join(dir, "resident-source.wal")
	execute(self, "-generate", source, "-records", strconv.Itoa(n), "-waiting", strconv.Itoa(n))
	data, err := os.ReadFile(source)
	check(err)
	check(os.Remove(source))
	for round := range 2 * len(bins) {
		bin := bins[round%len(bins)]
		wal := filepath.Join(dir, fmt.Sprintf("resident-%d.wal", round))
		check(os.WriteFile(wal, data, 0o644))
		s := leasewalPeer{bin: bin, dir: dir}.startOn(wal, "--compact-above", "0")
		_, err := s.post("stats", []byte(`{}`)) // the first start (replay, index) is the first-start benchmark's
		check(err)
		resetPeak(s.pid())
		var submitRate, workRate float64
		submitAnon := peakAnonKB(s.pid(), func() { submitRate = countedLoops(ops, s, "submit") })
		submitPeak := peakKB(s.pid())
		resetPeak(s.pid())
		workAnon := peakAnonKB(s.pid(), func() { workRate = countedLoops(work, s, "complete-and-lease-next") })
		workPeak := peakKB(s.pid())
		s.stop()
		side, files := besideWAL(wal)
		fmt.Printf("%-4s %-28s | %10.0f %8.0f %8.0f | %10.0f %8.0f %8.0f | %8.0f %6d\n", string(rune('A'+round%len(bins))), filepath.Base(bin),
			submitRate, float64(submitPeak)/1024, float64(submitAnon)/1024, workRate, float64(workPeak)/1024, float64(workAnon)/1024, mb(side), files)
		matches, _ := filepath.Glob(wal + "*")
		for _, path := range matches {
			os.Remove(path)
		}
	}
}

// countedLoops runs ops calls of work from 16 clients of s and returns
// their rate per second.
func countedLoops(ops int, s *leasewalServer, work string) float64 {
	var left atomic.Int64
	left.Store(int64(ops))
	var failed atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for id := range 16 {
		one, err := s.client(work, id)
		check(err)
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := one(); err != nil && failed.Add(1) == 1 {
					fmt.Printf("  (%s: %v)\n", work, err)
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		fmt.Printf("  (%d calls of %s failed)\n", failed.Load(), work)
	}
	return float64(ops) / time.Since(start).Seconds()
}

// resetPeak sets a process's peak resident size back to its current one
// (clear_refs 5).
func resetPeak(pid int) {
	check(os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0o200))
}

// peakAnonKB runs fn and is process pid's largest RssAnon, in KiB, sampled
// every 5 ms meanwhile: unlike VmHWM, it leaves out the index's mapped pages.
func peakAnonKB(pid int, fn func()) int64 {
	done, peak := make(chan struct{}), make(chan int64)
	go func() {
		var most int64
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			most = max(most, statusKB(pid, "RssAnon"))
			select {
			case <-done:
				peak <- most
				return
			case <-tick.C:
			}
		}
	}()
	fn()
	close(done)
	return <-peak
}

// peakKB is a process's peak resident size (VmHWM) in KiB.
func peakKB(pid int) int64 { return statusKB(pid, "VmHWM") }

// statusKB is a figure of /proc/PID/status in KiB (VmHWM, VmRSS).
func statusKB(pid int, field string) int64 {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	check(err)
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			check(err)
			return kb
		}
	}
	return 0
}

// besideWAL is the bytes and the number of the files the store keeps
// beside a WAL (store.Beside: its index).
func besideWAL(wal string) (bytes int64, files int) {
	beside := store.Beside(wal)
	for _, path := range beside {
		bytes += statSize(path)
	}
	return bytes, len(beside)
}
