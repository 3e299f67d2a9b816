package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// firstStartBench prints what the first command on a backlog costs when no
// index is there yet (a WAL copied, restored, or written by an older
// leasewal): a WAL of n records of history with n tasks left waiting, then
// expire (which replays it, moving its tasks into the index it builds as it
// goes), then the command after it (a submit, from the index), then stats
// (which counts every waiting task). For each binary in turn (A B A B) on
// a copy of the same WAL: wall time, the peak anonymous resident size
// (RssAnon, sampled every 5 ms: it leaves out the index's mapped pages,
// which the kernel may drop at will), and the largest live heap a garbage
// collection left (GODEBUG=gctrace=1), so that the soft memory limit
// cannot hide growth.
func firstStartBench(dir, binaries, self string, sizes []int) {
	bins := strings.Split(binaries, ",")
	fmt.Println("first start: WALs written by histgen, N records of history then N tasks left waiting, no index; A B A B")
	fmt.Printf("%-4s %-16s %10s %9s | %8s %8s %7s | %8s %8s | %8s %8s\n", "", "binary", "waiting", "WAL MB",
		"first s", "anon MB", "heap MB", "next s", "anon MB", "stats s", "anon MB")
	for _, n := range sizes {
		source := filepath.Join(dir, fmt.Sprintf("first-%d.source", n))
		execute(self, "-generate", source, "-records", strconv.Itoa(n), "-waiting", strconv.Itoa(n))
		for round := range 2 * len(bins) {
			bin := bins[round%len(bins)]
			wal := filepath.Join(dir, fmt.Sprintf("first-%d-%d.wal", n, round))
			copyFile(source, wal)
			first := sampled(bin, "--wal", wal, "expire", "-o", "json")
			next := sampled(bin, "--wal", wal, "submit", "--payload", "after", "-o", "json")
			stats := sampled(bin, "--wal", wal, "stats", "-o", "json")
			fmt.Printf("%-4s %-16s %10d %9.1f | %8.2f %8.0f %7.0f | %8.3f %8.0f | %8.2f %8.0f\n", string(rune('A'+round%len(bins))), filepath.Base(bin),
				n, mb(statSize(wal)), first.elapsed.Seconds(), first.anonMB, first.heapMB, next.elapsed.Seconds(), next.anonMB,
				stats.elapsed.Seconds(), stats.anonMB)
			matches, _ := filepath.Glob(wal + "*")
			for _, path := range matches {
				os.Remove(path)
			}
		}
		os.Remove(source)
	}
}

// sampledRun is a command's wall time, its peak RssAnon and its largest
// live heap after a collection.
type sampledRun struct {
	elapsed        time.Duration
	anonMB, heapMB float64
}

// gcLive is a gctrace line's heap sizes: at the collection's start, at
// its end, and what it found live.
var gcLive = regexp.MustCompile(`(\d+)->(\d+)->(\d+) MB`)

func sampled(name string, args ...string) sampledRun {
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	start := time.Now()
	check(cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var peakKB int64
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil && cmd.ProcessState.ExitCode() != 4 {
				fmt.Fprintf(os.Stderr, "%s %v: %v\n%s", name, args, err, errOut.Bytes())
				os.Exit(1)
			}
			heap := 0.0
			for _, m := range gcLive.FindAllStringSubmatch(errOut.String(), -1) {
				live, _ := strconv.ParseFloat(m[3], 64)
				heap = max(heap, live)
			}
			return sampledRun{elapsed: time.Since(start), anonMB: float64(peakKB) / 1024, heapMB: heap}
		case <-tick.C:
			if b, err := os.ReadFile(status); err == nil {
				for line := range strings.Lines(string(b)) {
					if rest, ok := strings.CutPrefix(line, "RssAnon:"); ok {
						kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
						peakKB = max(peakKB, kb)
					}
				}
			}
		}
	}
}

func copyFile(from, to string) {
	b, err := os.ReadFile(from)
	check(err)
	check(os.WriteFile(to, b, 0o644))
}
