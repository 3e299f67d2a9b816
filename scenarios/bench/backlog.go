package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/leasewal/leasewal/internal/histgen"
)

// backlog prints per-command latency (median of reps, each command a process
// starting from the checkpoint its predecessors wrote) with 100, 10,000 and
// 100,000 tasks waiting, the commands interleaved across the backlogs
// (A B C A B C …) so that the machine's drift cancels; the target is the
// 100,000 column within 1.2x of the 100 one.
func backlog(dir, leasewal, floor string, reps int) {
	sizes := []int{100, 10_000, 100_000}
	wals := make([]string, len(sizes))
	for i, n := range sizes {
		wals[i] = filepath.Join(dir, fmt.Sprintf("backlog-%d.wal", n))
		check(histgen.WriteFile(wals[i], histgen.Options{Records: 1000, Waiting: n}))
		execute(leasewal, "--wal", wals[i], "submit", "--payload", "warm") // writes the checkpoint
	}
	lat := map[string][][]time.Duration{"submit": make([][]time.Duration, len(sizes)), "lease": make([][]time.Duration, len(sizes)), "complete": make([][]time.Duration, len(sizes))}
	var floorRuns []time.Duration
	floorFile := filepath.Join(dir, "backlog-floor.log")
	for rep := range reps {
		if floor != "" {
			floorRuns = append(floorRuns, execute(floor, floorFile).elapsed)
		}
		for i, wal := range wals {
			lat["submit"][i] = append(lat["submit"][i], execute(leasewal, "--wal", wal, "submit", "--payload", "b"+strconv.Itoa(rep)).elapsed)
			r := execute(leasewal, "--wal", wal, "lease", "--worker", "B", "-o", "json")
			lat["lease"][i] = append(lat["lease"][i], r.elapsed)
			if m := leaseRE.FindSubmatch(r.out); m != nil {
				lat["complete"][i] = append(lat["complete"][i], execute(leasewal, "--wal", wal, "complete", "--task", string(m[1]), "--lease", string(m[2])).elapsed)
			}
		}
	}
	fmt.Printf("per-command latency by backlog (medians of %d, ms; target: 100,000 waiting within 1.2x of 100)\n", reps)
	fmt.Printf("%-9s %10s %10s %10s %12s %14s\n", "", "100", "10,000", "100,000", "100k / 100", "100k / floor")
	for _, op := range []string{"submit", "lease", "complete"} {
		m := make([]time.Duration, len(sizes))
		for i := range sizes {
			m[i] = median(lat[op][i])
		}
		againstFloor := "n/a"
		if len(floorRuns) > 0 {
			againstFloor = fmt.Sprintf("%.2fx", float64(m[2])/float64(median(floorRuns)))
		}
		fmt.Printf("%-9s %10.2f %10.2f %10.2f %11.2fx %14s\n", op, ms(m[0]), ms(m[1]), ms(m[2]), float64(m[2])/float64(m[0]), againstFloor)
	}
	if len(floorRuns) > 0 {
		fmt.Printf("I/O floor (open, lock, read, append, fsync; target <= 1.15x): %.2f ms\n", ms(median(floorRuns)))
	}
}
