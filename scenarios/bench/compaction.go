package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"time"
)

// compactionBench prints, for WALs of each size (records of finished tasks,
// with 10,000 tasks left waiting), what `leasewal compact` costs: its wall
// time and peak RSS, the WAL's size before and after, and the latency of a
// writer (one `submit` process after another) beside it: median before the
// compaction, median and worst while it runs. The writer waits only for the
// compaction's last step (its history is read and copied without the lock).
func compactionBench(dir, leasewal, self string, sizes []int) {
	fmt.Println("compaction: 10,000 tasks waiting, the rest finished; a submit loop beside it")
	fmt.Printf("%10s %9s %9s %8s %8s | %12s %12s %12s %8s\n", "records", "WAL MB", "after MB", "wall s", "RSS MB", "submit before", "during (med)", "during (max)", "submits")
	for _, n := range sizes {
		wal := filepath.Join(dir, fmt.Sprintf("compact-%d.wal", n))
		execute(self, "-generate", wal, "-records", strconv.Itoa(n), "-waiting", "10000")
		execute(leasewal, "--wal", wal, "submit", "--payload", "warm") // the index, as a live WAL has it
		before := statSize(wal)
		var quiet []time.Duration
		for i := range 15 {
			quiet = append(quiet, execute(leasewal, "--wal", wal, "submit", "--payload", "q"+strconv.Itoa(i)).elapsed)
		}
		compact := exec.Command(leasewal, "--wal", wal, "compact", "--keep-history", "0s", "-o", "json")
		var errOut bytes.Buffer
		compact.Stderr = &errOut
		start := time.Now()
		check(compact.Start())
		exited := make(chan error, 1)
		go func() { exited <- compact.Wait() }()
		var during []time.Duration
		var err error
	loop:
		for i := 0; ; i++ {
			select {
			case err = <-exited:
				break loop
			default:
				during = append(during, execute(leasewal, "--wal", wal, "submit", "--payload", "d"+strconv.Itoa(i)).elapsed)
			}
		}
		elapsed := time.Since(start)
		if err != nil {
			check(fmt.Errorf("compact: %v: %s", err, errOut.Bytes()))
		}
		rss := compact.ProcessState.SysUsage().(*syscall.Rusage).Maxrss
		worst := slices.Max(during)
		fmt.Printf("%10d %9.1f %9.1f %8.2f %8.0f | %10.2f ms %10.2f ms %10.2f ms %8d\n", n, mb(before), mb(statSize(wal)), elapsed.Seconds(), float64(rss)/1024,
			ms(median(quiet)), ms(median(during)), ms(worst), len(during))
		os.Remove(wal)
	}
}

func statSize(path string) int64 {
	info, err := os.Stat(path)
	check(err)
	return info.Size()
}

func mb(n int64) float64 { return float64(n) / 1e6 }
