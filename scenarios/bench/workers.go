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
//     starts the task again;
//   - through a server: how long after a submit an idle 'run --server'
//     holds its lease, and how many requests it sends while idle.
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
	serverPickup(leasewal, dir)
}

// serverPickup runs an idle 'run --server' beside a server, counts the
// requests it sends in 5 s (the server's access log), then submits 20
// tasks 200-300 ms apart and prints how long after each submit's record
// its lease was recorded.
func serverPickup(leasewal, dir string) {
	wal, access := filepath.Join(dir, "pickup-served.wal"), filepath.Join(dir, "pickup-access.log")
	srv := startServe(leasewal, "--wal", wal, "serve", "--listen", "127.0.0.1:7690", "--access-log", access)
	defer stopAll(srv)
	url := "http://127.0.0.1:7690"
	worker := exec.Command(leasewal, "--server", url, "run", "--worker", "W", "--forever", "--", "true")
	check(worker.Start())
	defer stopAll(worker)
	lines := func() int {
		b, err := os.ReadFile(access)
		check(err)
		return strings.Count(string(b), "\n")
	}
	time.Sleep(time.Second)
	before := lines()
	time.Sleep(5 * time.Second)
	idle := lines() - before
	for i := range 20 {
		check(exec.Command(leasewal, "--server", url, "submit", "--payload", fmt.Sprint("p", i)).Run())
		time.Sleep(200*time.Millisecond + time.Duration(i%10)*10*time.Millisecond)
	}
	time.Sleep(time.Second)
	out, err := exec.Command(leasewal, "--server", url, "log", "-o", "json").Output()
	check(err)
	created, leased := map[string]time.Time{}, map[string]time.Time{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Type   string `json:"type"`
			TaskID string `json:"task_id"`
			At     string `json:"at"`
		}
		check(json.Unmarshal([]byte(line), &r))
		at, err := time.Parse(time.RFC3339Nano, r.At)
		check(err)
		if _, seen := leased[r.TaskID]; r.Type == "LeaseGranted" && !seen {
			leased[r.TaskID] = at
		} else if r.Type == "TaskCreated" {
			created[r.TaskID] = at
		}
	}
	var waits []time.Duration
	for id, at := range created {
		if l, ok := leased[id]; ok {
			waits = append(waits, l.Sub(at))
		}
	}
	if len(waits) != 20 {
		check(fmt.Errorf("%d of 20 tasks submitted through serve were leased", len(waits)))
	}
	slices.Sort(waits)
	fmt.Printf("through serve: an idle 'run --server' sent %d requests in 5 s; a task submitted was leased a median %.1f ms, worst %.1f ms after (20 tasks)\n",
		idle, ms(waits[10]), ms(waits[19]))
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
	// No backoff: a lapse's backoff counts from the expiry, and this
	// measures the wake, not the policy.
	check(exec.Command(leasewal, "--wal", wal, "submit", "--payload", "p", "--backoff", "0s").Run())
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
