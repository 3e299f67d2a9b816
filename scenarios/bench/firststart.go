package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// firstStartBench prints what the first command on a backlog costs when no
// checkpoint is there yet (a WAL copied, restored, or written by an older
// leasewal): a WAL of n records of history with n tasks left waiting, then
// expire (which replays it, spilling its tasks out of memory as it goes, and
// writes the checkpoint, the archive and the cold set), then the command
// after it (a submit, from the checkpoint), then stats (which counts every
// waiting task, one at a time). Targets: 10 s and 300 MB at 1,000,000.
func firstStartBench(dir, leasewal, self string, sizes []int) {
	fmt.Println("first start: WALs written by histgen, N records of history then N tasks left waiting, no checkpoint")
	fmt.Printf("%10s %9s | %12s %8s | %12s %8s | %10s %8s\n", "waiting", "WAL MB", "first: wall s", "RSS MB", "next: wall s", "RSS MB", "stats: s", "RSS MB")
	for _, n := range sizes {
		wal := filepath.Join(dir, fmt.Sprintf("first-%d.wal", n))
		execute(self, "-generate", wal, "-records", strconv.Itoa(n), "-waiting", strconv.Itoa(n))
		first := execute(leasewal, "--wal", wal, "expire", "-o", "json")
		next := execute(leasewal, "--wal", wal, "submit", "--payload", "after", "-o", "json")
		stats := execute(leasewal, "--wal", wal, "stats", "-o", "json")
		fmt.Printf("%10d %9.1f | %12.2f %8.0f | %12.2f %8.0f | %10.2f %8.0f\n", n, mb(statSize(wal)),
			first.elapsed.Seconds(), float64(first.rssKB)/1024, next.elapsed.Seconds(), float64(next.rssKB)/1024,
			stats.elapsed.Seconds(), float64(stats.rssKB)/1024)
		matches, _ := filepath.Glob(wal + "*")
		for _, path := range matches {
			os.Remove(path)
		}
	}
}
