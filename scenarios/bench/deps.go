package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"
)

// copySettle is how long depsBench waits after copying a WAL before it
// times a command on it.
const copySettle = 300 * time.Millisecond

// depsBench prints what tasks that wait cost, one-shot commands on WALs
// with their index, each command on a fresh copy, alternated A B B A:
//
//   - n tasks waiting on one task (A) against the same WAL without them
//     (B): a lease of an unrelated eligible task; the completion of the
//     task they wait for (which makes all of them eligible in one write)
//     against a plain completion; the lease after it; each with its peak
//     RSS, and that completion's peak anonymous RSS apart;
//   - a DAG of 10,000 tasks in one batch (a root, a fan-out of 9,999, a
//     fan-in of them all): how long its submit takes.
func depsBench(dir, leasewal string, n, reps int) {
	fmt.Printf("dependencies: %d tasks waiting on one (A) against none (B); one-shot commands on a copy of each WAL and its index, %d rounds (A B, then B A)\n", n, reps)
	walA, walB := filepath.Join(dir, "deps-a.wal"), filepath.Join(dir, "deps-b.wal")
	for _, w := range []struct {
		path    string
		waiting bool
	}{{walA, true}, {walB, false}} {
		jobs := filepath.Join(dir, "deps.jsonl")
		f, err := os.Create(jobs)
		check(err)
		b := bufio.NewWriter(f)
		fmt.Fprintln(b, `{"payload":"upstream","request_id":"up","queue":"up"}`)
		fmt.Fprintln(b, `{"payload":"unrelated","request_id":"other","queue":"other"}`)
		if w.waiting {
			for i := range n {
				fmt.Fprintf(b, "{\"payload\":\"step %d\",\"request_id\":\"d%d\",\"after\":[\"up\"],\"queue\":\"down\"}\n", i, i)
			}
		}
		check(b.Flush())
		check(f.Close())
		executeTo(false, leasewal, "--wal", w.path, "submit", "--batch-file", jobs, "-o", "json")
		executeTo(false, leasewal, "--wal", w.path, "reindex")
	}
	debug.FreeOSMemory() // a child's peak RSS starts from this process's
	// copyWAL copies a WAL and its index, streamed (a copy held here would
	// count in the next children's RSS) and synced (else the command's own
	// fsync would write the copy back, on the clock of what it measures),
	// then lets the file system settle: A's copy is 60 MB and B's a few KB,
	// and a command timed right after the larger one paid for its journal
	// and discards (up to 1.19x A/B for the same lease of one task, 1.0x
	// after a pause). Nothing pauses between the commands a figure times.
	copyWAL := func(src, name string) string {
		defer time.Sleep(copySettle)
		dst := filepath.Join(dir, name)
		for _, suffix := range []string{"", ".index"} {
			in, err := os.Open(src + suffix)
			check(err)
			out, err := os.Create(dst + suffix)
			check(err)
			_, err = io.Copy(out, in)
			check(err)
			check(out.Sync())
			check(out.Close())
			check(in.Close())
		}
		return dst
	}
	type figure struct {
		label    string
		times    [2][]time.Duration
		rss      [2]int64
		measured func(wal string) run
	}
	lease := func(queue string) func(string) run {
		return func(wal string) run {
			return executeTo(false, leasewal, "--wal", wal, "lease", "--worker", "W", "--queue", queue, "-o", "json")
		}
	}
	figures := []*figure{
		{label: "lease of an unrelated task", measured: lease("other")},
		{label: "complete of the task waited on", measured: func(wal string) run {
			executeTo(false, leasewal, "--wal", wal, "lease", "--worker", "W", "--queue", "up", "-o", "json")
			return executeTo(false, leasewal, "--wal", wal, "complete", "--task", "T1", "--lease", "L1", "-o", "json")
		}},
	}
	after := &figure{label: "lease after that complete"}
	moved := &figure{label: "reindex (every task into an index)"}
	for round := range reps {
		for i := range 2 {
			ab := (round + i) % 2 // A B, then B A: neither always follows the round's reindex
			src := []string{walA, walB}[ab]
			for _, f := range figures {
				wal := copyWAL(src, fmt.Sprintf("deps-run-%d-%d.wal", round, ab))
				r := f.measured(wal)
				f.times[ab], f.rss[ab] = append(f.times[ab], r.elapsed), max(f.rss[ab], r.rssKB)
				if f == figures[1] {
					queue := "down"
					if ab == 1 {
						queue = "other"
					}
					r = lease(queue)(wal)
					after.times[ab], after.rss[ab] = append(after.times[ab], r.elapsed), max(after.rss[ab], r.rssKB)
				}
				for _, suffix := range []string{"", ".index"} {
					os.Remove(wal + suffix)
				}
			}
		}
		wal := copyWAL(walA, fmt.Sprintf("deps-reindex-%d.wal", round))
		r := executeTo(false, leasewal, "--wal", wal, "reindex")
		moved.times[0], moved.rss[0] = append(moved.times[0], r.elapsed), max(moved.rss[0], r.rssKB)
		moved.times[1] = append(moved.times[1], r.elapsed)
		for _, suffix := range []string{"", ".index"} {
			os.Remove(wal + suffix)
		}
	}
	fmt.Printf("%-34s %10s %10s %7s %10s %10s\n", "median ms (peak RSS MB)", "A", "B", "A/B", "A RSS", "B RSS")
	for _, f := range []*figure{figures[0], figures[1], after, moved} {
		a, b := median(f.times[0]), median(f.times[1])
		fmt.Printf("%-34s %10.2f %10.2f %6.2fx %10.1f %10.1f\n", f.label, ms(a), ms(b), float64(a)/float64(b), float64(f.rss[0])/1024, float64(f.rss[1])/1024)
	}
	plain, move := median(figures[1].times[1]), median(moved.times[0])
	fmt.Printf("the complete in A moves %d tasks into their queue's lease order (the WAL's one record; the index written 4,096 tasks a transaction): %.2fx a plain complete plus a reindex of A (%.0f ms)\n",
		n, float64(median(figures[1].times[0]))/float64(plain+move), ms(plain+move))
	wal := copyWAL(walA, "deps-anon.wal") // apart: sampling its memory slows what the rounds time
	executeTo(false, leasewal, "--wal", wal, "lease", "--worker", "W", "--queue", "up", "-o", "json")
	s := sampled(leasewal, "--wal", wal, "complete", "--task", "T1", "--lease", "L1", "-o", "json")
	fmt.Printf("that complete, its memory sampled every 5 ms: peak RssAnon %.0f MB (the index's mapped pages left out), largest live heap %.0f MB\n", s.anonMB, s.heapMB)
	for _, suffix := range []string{"", ".index"} {
		os.Remove(wal + suffix)
	}

	jobs := filepath.Join(dir, "dag.jsonl")
	f, err := os.Create(jobs)
	check(err)
	b := bufio.NewWriter(f)
	fmt.Fprintln(b, `{"payload":"root","request_id":"root"}`)
	for i := range 9_999 {
		fmt.Fprintf(b, "{\"payload\":\"leaf %d\",\"request_id\":\"leaf-%d\",\"after\":[\"root\"]}\n", i, i)
	}
	fmt.Fprint(b, `{"payload":"sum","request_id":"sum","after":[`)
	for i := range 9_999 {
		if i > 0 {
			fmt.Fprint(b, ",")
		}
		fmt.Fprintf(b, "\"leaf-%d\"", i)
	}
	fmt.Fprintln(b, "]}")
	check(b.Flush())
	check(f.Close())
	var dag []time.Duration
	var rss int64
	for round := range reps {
		r := executeTo(false, leasewal, "--wal", filepath.Join(dir, fmt.Sprintf("dag-%d.wal", round)), "submit", "--batch-file", jobs, "-o", "json")
		dag, rss = append(dag, r.elapsed), max(rss, r.rssKB)
	}
	fmt.Printf("a DAG of 10,001 tasks in one batch (a root, 9,999 after it, one after all of them): median %.0f ms, peak RSS %.1f MB (%d runs)\n",
		ms(median(dag)), float64(rss)/1024, reps)
}
