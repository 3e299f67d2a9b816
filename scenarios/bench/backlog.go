package main

import (
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/leasewal/leasewal/internal/histgen"
)

// backlog prints per-command latency (median and mean of reps, each
// command a process reading the index its predecessors wrote and the
// records after it; the mean carries the index writes a command does once
// the WAL has run indexTail records past the index) with each number of
// tasks waiting in sizes, the commands interleaved across the backlogs
// (A B C A B C …) so that the machine's drift cancels; the target is the
// largest backlog within 1.15x of the smallest.
func backlog(dir, leasewal, floor string, sizes []int, reps int) {
	wals := make([]string, len(sizes))
	for i, n := range sizes {
		wals[i] = filepath.Join(dir, fmt.Sprintf("backlog-%d.wal", n))
		check(histgen.WriteFile(wals[i], histgen.Options{Records: 1000, Waiting: n}))
		execute(leasewal, "--wal", wals[i], "submit", "--payload", "warm") // builds the index
	}
	ops := []string{"submit", "lease", "complete", "heartbeat"}
	lat := map[string][][]time.Duration{}
	for _, op := range ops {
		lat[op] = make([][]time.Duration, len(sizes))
	}
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
			lat["heartbeat"][i] = append(lat["heartbeat"][i], execute(leasewal, "--wal", wal, "heartbeat", "--worker", "B").elapsed)
		}
	}
	last := len(sizes) - 1
	fmt.Printf("per-command latency by tasks waiting (median / mean of %d, ms; target: %d waiting within 1.15x of %d)\n", reps, sizes[last], sizes[0])
	fmt.Printf("%-9s", "")
	for _, n := range sizes {
		fmt.Printf(" %15d", n)
	}
	fmt.Printf(" %14s %14s\n", "last / first", "last / floor")
	for _, op := range ops {
		med, avg := make([]time.Duration, len(sizes)), make([]time.Duration, len(sizes))
		fmt.Printf("%-9s", op)
		for i := range sizes {
			med[i], avg[i] = median(lat[op][i]), meanDuration(lat[op][i])
			fmt.Printf(" %7.2f / %5.2f", ms(med[i]), ms(avg[i]))
		}
		againstFloor := "n/a"
		if len(floorRuns) > 0 {
			againstFloor = fmt.Sprintf("%.2fx", float64(med[last])/float64(median(floorRuns)))
		}
		fmt.Printf(" %6.2fx/%5.2fx %14s\n", float64(med[last])/float64(med[0]), float64(avg[last])/float64(avg[0]), againstFloor)
	}
	if len(floorRuns) > 0 {
		fmt.Printf("I/O floor (open, lock, read, append, fsync; target <= 1.15x): %.2f ms\n", ms(median(floorRuns)))
	}
}

func meanDuration(d []time.Duration) time.Duration {
	xs := make([]float64, len(d))
	for i, x := range d {
		xs[i] = float64(x)
	}
	return time.Duration(mean(xs))
}
