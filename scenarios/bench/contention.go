package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasewal/leasewal/internal/histgen"
)

// contention prints two measurements of the lock, each interleaved A B A B in
// one run so that the machine's drift cancels:
//
//   - readers beside a writer: one writer process loop (submit after submit)
//     beside 8 loops of verify on the same WAL (A), and beside 8 loops of
//     verify on another WAL of the same size (B: the same CPU load without
//     lock contention); the ratio of commits per second A/B, and lock time-outs;
//   - writers against writers: 1, 4, 8 and 16 loops of submit on one WAL:
//     commits per second, and the p50 and p99 latency of one command (process
//     start to exit, the lock wait included).
func contention(dir, leasewal string, phase time.Duration) {
	same := filepath.Join(dir, "contended.wal")
	other := filepath.Join(dir, "other.wal")
	for _, p := range []string{same, other} {
		check(histgen.WriteFile(p, histgen.Options{Records: 20_000}))
	}
	fmt.Printf("readers beside a writer: 1 submit loop beside 8 verify loops, %s phases, interleaved\n", phase)
	fmt.Printf("%-28s %12s %10s %12s\n", "verify loops run on", "commits/s", "timeouts", "verifies/s")
	var rate [2][]float64
	for round := range 4 {
		onSame := round%2 == 0
		target := other
		if onSame {
			target = same
		}
		commits, timeouts, verifies := writerBesideReaders(leasewal, same, target, phase)
		i := 1
		label := "another WAL (control)"
		if onSame {
			i, label = 0, "the same WAL"
		}
		rate[i] = append(rate[i], commits)
		fmt.Printf("%-28s %12.1f %10d %12.1f\n", label, commits, timeouts, verifies)
	}
	fmt.Printf("writer throughput beside readers of its own WAL = %.2fx the control (target >= 0.7x)\n",
		mean(rate[0])/mean(rate[1]))
	fmt.Printf("\nwriters against writers: N submit loops on one WAL, %s each\n", phase)
	fmt.Printf("%8s %12s %10s %10s %10s\n", "writers", "commits/s", "p50 ms", "p99 ms", "timeouts")
	for _, n := range []int{1, 4, 8, 16} {
		wal := filepath.Join(dir, fmt.Sprintf("writers-%d.wal", n))
		lat, timeouts := writers(leasewal, wal, n, phase)
		slices.Sort(lat)
		fmt.Printf("%8d %12.1f %10.2f %10.2f %10d\n", n, float64(len(lat))/phase.Seconds(), ms(pct(lat, 50)), ms(pct(lat, 99)), timeouts)
	}
}

// writerBesideReaders runs one submit loop on wal beside 8 verify loops on
// readersOn for d, and returns commits and verifies per second and the
// writer's lock time-outs.
func writerBesideReaders(leasewal, wal, readersOn string, d time.Duration) (float64, int, float64) {
	stop := time.Now().Add(d)
	var verifies atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				if exec.Command(leasewal, "--wal", readersOn, "verify").Run() == nil {
					verifies.Add(1)
				}
			}
		}()
	}
	commits, timeouts := 0, 0
	for time.Now().Before(stop) {
		err := exec.Command(leasewal, "--wal", wal, "--lock-timeout", "5s", "submit", "--payload", "w").Run()
		switch code := exitCode(err); code {
		case 0:
			commits++
		case 6:
			timeouts++
		default:
			fmt.Fprintf(os.Stderr, "submit: exit %d\n", code)
		}
	}
	wg.Wait()
	return float64(commits) / d.Seconds(), timeouts, float64(verifies.Load()) / d.Seconds()
}

// writers runs n submit loops on one WAL for d and returns every command's
// latency and the lock time-outs.
func writers(leasewal, wal string, n int, d time.Duration) ([]time.Duration, int) {
	stop := time.Now().Add(d)
	var mu sync.Mutex
	var lat []time.Duration
	timeouts := 0
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				start := time.Now()
				err := exec.Command(leasewal, "--wal", wal, "--lock-timeout", "10s", "submit", "--payload", "w").Run()
				took := time.Since(start)
				mu.Lock()
				if exitCode(err) == 6 {
					timeouts++
				} else {
					lat = append(lat, took)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return lat, timeouts
}

func exitCode(err error) int {
	if err == nil {
		return 0
	}
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return -1
}

func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)]
}

func mean(xs []float64) float64 {
	sum := 0.0
	for _, x := range xs {
		sum += x
	}
	return sum / float64(max(1, len(xs)))
}
