package scenarios

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"leasewal/api"
	"leasewal/client"
	"leasewal/internal/testwait"
	"leasewal/store"
)

// diskOf is what a WAL costs on disk: the WAL, its caches and its history.
func diskOf(t *testing.T, walPath string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(filepath.Dir(walPath), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasPrefix(path, walPath) {
			return err
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) { // removed meanwhile by a compaction
			return nil
		}
		if err == nil {
			total += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// TestSoak runs a server for many simulated hours (the test clock moves 20
// minutes a round) with a retention of an hour for finished tasks and for
// history: each round submits a batch of tasks and a worker completes them
// all. The server compacts by size as it goes. The disk the WAL costs (WAL,
// caches and sealed history) must stop growing once the retention is full:
// no round in the second half of the run may cost more than 1.25 times the
// most any round cost in the first half after the warm-up. Between rounds
// the WAL and its whole history verify. LEASEWAL_SOAK=1 (CI) runs 60
// rounds of 200 tasks instead of 24 of 100; LEASEWAL_SOAK_TASKS=N runs
// rounds of 2,000 tasks until N were processed (millions, on demand).
func TestSoak(t *testing.T) {
	t.Parallel()
	rounds, perRound := 24, 100
	if os.Getenv("LEASEWAL_SOAK") == "1" {
		rounds, perRound = 60, 200
	}
	if n, err := strconv.Atoi(os.Getenv("LEASEWAL_SOAK_TASKS")); err == nil && n > 0 {
		rounds, perRound = max(24, n/2000), 2000
	}
	dir := t.TempDir()
	walPath, clock := filepath.Join(dir, "q.wal"), filepath.Join(dir, "clock")
	if err := os.WriteFile(clock, []byte("2026-01-01T00:00:00Z"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url, stderr := startServeEnv(t, []string{"LEASEWAL_TESTING=1", "LEASEWAL_TEST_CLOCK=" + clock, "LEASEWAL_NOW="},
		"--wal", walPath, "serve", "--listen", "127.0.0.1:0", "--compact-above", "64KiB", "--keep-finished", "1h", "--keep-history", "1h")
	c, err := client.New([]string{url}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
	warmUp := 6 // the retention (an hour, three rounds) and the history's fill up
	var disk []int64
	var latency []time.Duration
	for round := range rounds {
		now := start.Add(time.Duration(round+1) * 20 * time.Minute)
		if err := os.WriteFile(clock, []byte(now.Format(time.RFC3339)), 0o600); err != nil {
			t.Fatal(err)
		}
		reqs := make([]api.SubmitRequest, perRound)
		for i := range reqs {
			reqs[i] = api.SubmitRequest{Payload: fmt.Sprintf("round %d task %d", round, i), RequestID: fmt.Sprintf("r%d-%d", round, i)}
		}
		began := time.Now()
		if _, err := c.SubmitBatch(ctx, reqs); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		latency = append(latency, time.Since(began))
		lease, err := c.Lease(ctx, api.LeaseRequest{Worker: "W"})
		for done := 0; err == nil; done++ {
			if done > perRound {
				t.Fatalf("round %d: more than %d leases", round, perRound)
			}
			var committed api.Committed
			committed, err = c.Complete(ctx, api.CompleteRequest{Task: lease.TaskID, Lease: lease.LeaseID, Next: &api.NextLease{Worker: "W"}})
			if err == nil && committed.Next.Lease == nil {
				break
			}
			if err == nil {
				lease = *committed.Next.Lease
			}
		}
		var empty *api.Empty
		if err != nil && !errors.As(err, &empty) {
			t.Fatalf("round %d: %v", round, err)
		}
		disk = append(disk, diskOf(t, walPath))
		if round%6 == 5 {
			if code, out, errOut := run(t, walPath, nil, "verify", "--history", "--lock-timeout", "1m"); code != 0 {
				t.Fatalf("round %d: verify --history: exit %d %s %s\nserver: %s", round, code, out, errOut, stderr.String())
			}
		}
	}
	testwait.Until(t, "the server's compactions", func() bool { return strings.Count(stderr.String(), "compacted ") >= rounds/4 }, stderr.String)
	firstHalf := slices.Max(disk[warmUp : warmUp+(rounds-warmUp)/2])
	secondHalf := slices.Max(disk[warmUp+(rounds-warmUp)/2:])
	t.Logf("%d rounds of %d tasks, %d compactions; disk per round (bytes): %v; submit batch latency per round: %v",
		rounds, perRound, strings.Count(stderr.String(), "compacted "), disk, latency)
	if float64(secondHalf) > 1.25*float64(firstHalf) {
		t.Fatalf("the disk keeps growing: at most %d bytes a round in the first half, %d in the second", firstHalf, secondHalf)
	}
	if segs := store.Segments(store.HistoryDir(walPath)); len(segs) == 0 || segs[0].First == 1 {
		t.Fatalf("segments %+v: the oldest should have expired", segs)
	}
}
