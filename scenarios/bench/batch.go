package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
)

// batchBench prints how fast the batch door takes n tasks: 'leasewal submit
// --batch-file' on a new WAL (A), and the same through 'leasewal serve'
// (B, one HTTP request), alternated A B A B A B, with each one's peak RSS
// (the command's; the server's is not counted in B).
func batchBench(dir, leasewal string, n int) {
	jobs := filepath.Join(dir, "jobs.jsonl")
	f, err := os.Create(jobs)
	check(err)
	w := bufio.NewWriter(f)
	for i := range n {
		fmt.Fprintf(w, "{\"payload\":\"resize img-%d\",\"request_id\":\"job-%d\",\"queue\":\"images\"}\n", i, i)
	}
	check(w.Flush())
	check(f.Close())
	fmt.Printf("batch door: %d tasks in one 'submit --batch-file', on a new WAL each time, alternated\n", n)
	fmt.Printf("%-44s %10s %12s %8s\n", "", "seconds", "tasks/s", "RSS MB")
	var rate [2][]float64
	for round := range 6 {
		wal := filepath.Join(dir, fmt.Sprintf("batch-%d.wal", round))
		var r run
		label := "A: leasewal submit --batch-file (local)"
		if round%2 == 0 {
			r = executeTo(false, leasewal, "--wal", wal, "submit", "--batch-file", jobs, "-o", "json")
		} else {
			label = "B: the same through leasewal serve"
			addr := fmt.Sprintf("127.0.0.1:%d", 7700+round)
			srv := startServe(leasewal, "--wal", wal, "serve", "--listen", addr)
			r = executeTo(false, leasewal, "--server", "http://"+addr, "submit", "--batch-file", jobs, "-o", "json")
			stopAll(srv)
		}
		rate[round%2] = append(rate[round%2], float64(n)/r.elapsed.Seconds())
		fmt.Printf("%-44s %10.2f %12.0f %8.0f\n", label, r.elapsed.Seconds(), float64(n)/r.elapsed.Seconds(), float64(r.rssKB)/1024)
	}
	fmt.Printf("mean: local %.0f tasks/s, through serve %.0f tasks/s (target >= 100,000)\n", mean(rate[0]), mean(rate[1]))
}
