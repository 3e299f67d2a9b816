package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// reportBench prints what 'leasewal report' costs on WALs of each
// size (1,000 tasks left waiting, the rest finished): time, peak RSS and
// the page's size.
func reportBench(dir, leasewal, self string, sizes []int) {
	fmt.Println("report: WALs written by histgen, 1,000 tasks waiting; the page draws the first 500 tasks")
	fmt.Printf("%10s %9s | %8s %8s %9s\n", "records", "WAL MB", "wall s", "RSS MB", "page KB")
	for _, n := range sizes {
		wal := filepath.Join(dir, fmt.Sprintf("report-%d.wal", n))
		page := filepath.Join(dir, fmt.Sprintf("report-%d.html", n))
		execute(self, "-generate", wal, "-records", strconv.Itoa(n), "-waiting", "1000")
		r := executeTo(false, "sh", "-c", `exec "$0" --wal "$1" report > "$2"`, leasewal, wal, page)
		fmt.Printf("%10d %9.1f | %8.2f %8.0f %9.0f\n", n, mb(statSize(wal)), r.elapsed.Seconds(), float64(r.rssKB)/1024, float64(statSize(page))/1024)
		os.Remove(wal)
		os.Remove(page)
	}
}
