package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leasewal/leasewal/internal/histgen"
)

// workers prints two measurements of 'leasewal run':
//
//   - throughput: 4 runners running 'true' (B) against 4 loops of one
//     process per lease and one per complete, as a shell worker does (A),
//     each on a WAL of 20,000 waiting tasks, alternated A B A B;
//   - pickup: how long after a lease's expiry a runner waiting with --wait
//     starts the task again.
func workers(dir, leasewal string, phase time.Duration) {
	fmt.Printf("workers: 4 loops of lease+complete processes (A) against 4 'leasewal run -- true' (B), %s phases, alternated\n", phase)
	fmt.Printf("%-34s %12s\n", "", "tasks/s")
	var rate [2][]float64
	for round := range 4 {
		wal := filepath.Join(dir, fmt.Sprintf("workers-%d.wal", round))
		check(histgen.WriteFile(wal, histgen.Options{Waiting: 20_000}))
		if round%2 == 0 {
			n := shellLoops(leasewal, wal, phase)
			rate[0] = append(rate[0], n)
			fmt.Printf("%-34s %12.1f\n", "A: 4 shell loops of lease+complete", n)
		} else {
			n := runners(leasewal, wal, phase)
			rate[1] = append(rate[1], n)
			fmt.Printf("%-34s %12.1f\n", "B: 4 leasewal run -- true", n)
		}
	}
	fmt.Printf("run = %.1fx the shell loops' tasks per second (target >= 3x)\n", mean(rate[1])/mean(rate[0]))
	var pickups []time.Duration
	for i := range 5 {
		pickups = append(pickups, pickup(leasewal, filepath.Join(dir, fmt.Sprintf("pickup-%d.wal", i))))
	}
	slices.Sort(pickups)
	fmt.Printf("a lapsed lease picked up by a runner waiting with --wait: median %.1f ms, worst %.1f ms after its expiry (5 tries; target <= 100 ms)\n",
		ms(pickups[2]), ms(pickups[4]))
}

func shellLoops(leasewal, wal string, d time.Duration) float64 {
	stop := time.Now().Add(d)
	var done atomic.Int64
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := "S" + strconv.Itoa(w)
			for time.Now().Before(stop) {
				out, err := exec.Command(leasewal, "--wal", wal, "-o", "json", "lease", "--worker", worker).Output()
				if err != nil {
					continue
				}
				var l struct {
					TaskID  string `json:"task_id"`
					LeaseID string `json:"lease_id"`
				}
				if json.Unmarshal(out, &l) != nil {
					continue
				}
				if exec.Command(leasewal, "--wal", wal, "complete", "--task", l.TaskID, "--lease", l.LeaseID).Run() == nil {
					done.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / d.Seconds()
}

func runners(leasewal, wal string, d time.Duration) float64 {
	var done atomic.Int64
	var wg sync.WaitGroup
	var procs []*exec.Cmd
	for w := range 4 {
		cmd := exec.Command(leasewal, "--wal", wal, "-o", "json", "run", "--worker", "R"+strconv.Itoa(w), "--forever", "--", "true")
		out, err := cmd.StdoutPipe()
		check(err)
		check(cmd.Start())
		procs = append(procs, cmd)
		wg.Add(1)
		go func() {
			defer wg.Done()
			lines := bufio.NewScanner(out)
			for lines.Scan() {
				if strings.Contains(lines.Text(), `"outcome":"COMMITTED"`) {
					done.Add(1)
				}
			}
		}()
	}
	time.Sleep(d)
	counted := done.Load()
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGTERM)
	}
	wg.Wait()
	for _, p := range procs {
		_ = p.Wait()
	}
	return float64(counted) / d.Seconds()
}

// pickup leases a task for 1s and lets it lapse while a runner waits; it
// returns how long after the expiry the runner's child started.
func pickup(leasewal, wal string) time.Duration {
	check(exec.Command(leasewal, "--wal", wal, "submit", "--payload", "p").Run())
	out, err := exec.Command(leasewal, "--wal", wal, "-o", "json", "lease", "--worker", "gone", "--duration", "1s").Output()
	check(err)
	var l struct {
		Expiry string `json:"expiry"`
	}
	check(json.Unmarshal(out, &l))
	expiry, err := time.Parse(time.RFC3339Nano, l.Expiry)
	check(err)
	stamp := wal + ".started"
	cmd := exec.Command(leasewal, "--wal", wal, "run", "--worker", "W", "--wait", "5s", "--max-tasks", "1", "--",
		"sh", "-c", "date +%s%N > "+stamp)
	check(cmd.Run())
	b, err := os.ReadFile(stamp)
	check(err)
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	check(err)
	return time.Unix(0, ns).Sub(expiry)
}
