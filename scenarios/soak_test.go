package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
	"github.com/leasewal/leasewal/wal"
)

// allocated is what a file takes on disk: its blocks, at most its length
// (the index's file has holes where bbolt grew it ahead of its pages).
func allocated(info fs.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return min(info.Size(), st.Blocks*512)
	}
	return info.Size()
}

// diskOf is what a WAL costs on disk: the WAL, its index and its history,
// as they stand between two writes. It holds the WAL's shared lock while it
// looks, so that no compaction's last step (sealing the segment, replacing
// the WAL, placing its index) is half done, and it leaves out what the
// first step of a compaction under way writes beside (its new WAL and the
// segment it copies): those are there for the length of one compaction.
func diskOf(t *testing.T, walPath string) int64 {
	t.Helper()
	var log *wal.Log
	err := wal.ErrReplaced
	for guard := time.Now().Add(testwait.HangGuard); errors.Is(err, wal.ErrReplaced) && time.Now().Before(guard); {
		log, err = wal.OpenAt(walPath, wal.Read, testwait.HangGuard, wal.Position{}, nil)
	}
	if err != nil {
		t.Fatalf("the WAL's shared lock: %v", err)
	}
	defer log.Close()
	var total int64
	err = filepath.WalkDir(filepath.Dir(walPath), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasPrefix(path, walPath) {
			return err
		}
		if name := d.Name(); strings.Contains(name, ".compacting-") || strings.HasPrefix(name, "sealing-") {
			return nil // a compaction's first step under way
		}
		info, err := d.Info()
		if errors.Is(err, fs.ErrNotExist) { // removed meanwhile by a compaction
			return nil
		}
		if err == nil {
			total += allocated(info)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// recordsSince is how many bytes the frames of the records at or after
// since take, each counted once, in the WAL and its history segments (not
// their bases).
func recordsSince(t *testing.T, walPath string, since int64) int64 {
	t.Helper()
	paths := []string{walPath}
	for _, s := range store.Segments(store.HistoryDir(walPath)) {
		paths = append(paths, s.Path)
	}
	seen, total := map[int64]bool{}, int64(0)
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(data), "\n")[1:] {
			var r struct {
				Seq  int64  `json:"seq"`
				At   int64  `json:"at"`
				Type string `json:"type"`
			}
			if len(line) < 10 || json.Unmarshal([]byte(line[9:]), &r) != nil || strings.HasPrefix(r.Type, "Base") || r.At < since || seen[r.Seq] {
				continue
			}
			seen[r.Seq], total = true, total+int64(len(line))+1
		}
	}
	return total
}

// compactedTo matches the size a server's compaction left its WAL at.
var compactedTo = regexp.MustCompile(`compacted .* -> (\d+) bytes`)

// settle waits until the server's compactor has nothing due: its WAL, of
// more than above bytes, is no more than twice what the last compaction left,
// and no history segment is wholly older than keep at now while records
// follow the last compaction (service.Compactor). The compactor looks after
// every batch written; the disk is measured once it has caught up, whatever
// the machine's load.
func settle(t *testing.T, walPath string, above int64, now time.Time, keep time.Duration, stderr *lockedBuffer) {
	t.Helper()
	testwait.Until(t, "the server's compaction of a WAL above twice what the last one left, or of history past its retention", func() bool {
		info, err := os.Stat(walPath)
		if err != nil {
			return false
		}
		left := int64(0)
		if all := compactedTo.FindAllStringSubmatch(stderr.String(), -1); len(all) > 0 {
			left, _ = strconv.ParseInt(all[len(all)-1][1], 10, 64)
		}
		segs := store.Segments(store.HistoryDir(walPath))
		expired := info.Size() > left && len(segs) > 0 && segs[0].LastAt < now.Add(-keep).UnixMilli()
		return (info.Size() <= above || info.Size() <= 2*left) && !expired
	}, stderr.String)
}

// keptOf is what a retention of keep keeps of the WAL at walPath at now, as
// a WAL: a copy of it compacted with no history, its size in bytes.
func keptOf(t *testing.T, walPath, now, keep string) int64 {
	t.Helper()
	kept := filepath.Join(t.TempDir(), "kept.wal")
	for _, args := range [][]string{{"backup", kept, "--lock-timeout", "1m"}, {"--wal", kept, "compact", "--drop", "--keep-finished", keep, "--now", now}} {
		if code, out, errOut := run(t, walPath, nil, args...); code != 0 {
			t.Fatalf("%v: exit %d %s %s", args, code, out, errOut)
		}
	}
	info, err := os.Stat(kept)
	if err != nil {
		t.Fatal(err)
	}
	return info.Size()
}

// TestSoak runs a server for many simulated hours (the test clock moves 20
// minutes a round) with a retention of three rounds (an hour) for finished
// tasks and for history: each round submits a batch of tasks and a worker completes them
// all. The server compacts by size as it goes; each round's disk is
// measured once its compactor has caught up. The disk the WAL costs (WAL,
// index and sealed history) must stop growing once the retention is full:
// the rounds of the second half of the run may cost at most 1.25 times the
// rounds of the first half after the warm-up, median against median (one
// round measured while the compactor lags, as it does beside CPU burners,
// is not growth; the bound below holds for every round). After the
// warm-up, every round it must stay within twice the live and retained
// data: the tasks the retention keeps (the WAL compacted with no history)
// and the records of the history's retention. Between rounds the WAL and
// its whole history verify. LEASEWAL_SOAK=1 (CI) runs 60 rounds of 200
// tasks instead of 24 of 100; LEASEWAL_SOAK_TASKS=N runs rounds of 2,000
// tasks until N were processed (millions, on demand); LEASEWAL_SOAK_DAYS=N
// runs N rounds of a day each (a retention of three days), 200 tasks a
// round: a simulated year with 365.
func TestSoak(t *testing.T) {
	t.Parallel()
	rounds, perRound := 24, 100
	if os.Getenv("LEASEWAL_SOAK") == "1" {
		rounds, perRound = 60, 200
	}
	roundLen := 20 * time.Minute
	if n, err := strconv.Atoi(os.Getenv("LEASEWAL_SOAK_TASKS")); err == nil && n > 0 {
		rounds, perRound = max(24, n/2000), 2000
	}
	if n, err := strconv.Atoi(os.Getenv("LEASEWAL_SOAK_DAYS")); err == nil && n > 0 {
		rounds, perRound, roundLen = max(24, n), 200, 24*time.Hour
	}
	retention := 3 * roundLen
	keep := retention.String()
	dir := t.TempDir()
	walPath, clock := filepath.Join(dir, "q.wal"), filepath.Join(dir, "clock")
	if err := os.WriteFile(clock, []byte("2026-01-01T00:00:00Z"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, url, stderr := startServeEnv(t, []string{"LEASEWAL_TESTING=1", "LEASEWAL_TEST_CLOCK=" + clock, "LEASEWAL_NOW="},
		"--wal", walPath, "serve", "--listen", "127.0.0.1:0", "--compact-above", "64KiB", "--keep-finished", keep, "--keep-history", keep)
	c, err := client.New([]string{url}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
	warmUp := 6 // the retention (three rounds) and the history's fill up
	var disk []int64
	var latency []time.Duration
	worst := 0.0 // the most the disk cost, as a share of the live and retained data
	for round := range rounds {
		now := start.Add(time.Duration(round+1) * roundLen)
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
		settle(t, walPath, 64<<10, now, retention, stderr)
		disk = append(disk, diskOf(t, walPath))
		if round >= warmUp {
			kept, window := keptOf(t, walPath, now.Format(time.RFC3339), keep), recordsSince(t, walPath, now.Add(-retention).UnixMilli())
			ratio := float64(disk[round]) / float64(kept+window)
			if worst = max(worst, ratio); ratio > 2 {
				t.Fatalf("round %d: the WAL, its index and its history take %d bytes, %.2f times the %d bytes the retention keeps (%d of tasks, %d of the last hour's records)",
					round, disk[round], ratio, kept+window, kept, window)
			}
		}
		if round%6 == 5 {
			if code, out, errOut := run(t, walPath, nil, "verify", "--history", "--lock-timeout", "1m"); code != 0 {
				t.Fatalf("round %d: verify --history: exit %d %s %s\nserver: %s", round, code, out, errOut, stderr.String())
			}
		}
	}
	testwait.Until(t, "the server's compactions", func() bool { return strings.Count(stderr.String(), "compacted ") >= rounds/4 }, stderr.String)
	median := func(xs []int64) int64 { s := slices.Sorted(slices.Values(xs)); return s[len(s)/2] }
	firstHalf := median(disk[warmUp : warmUp+(rounds-warmUp)/2])
	secondHalf := median(disk[warmUp+(rounds-warmUp)/2:])
	t.Logf("%d rounds of %d tasks, %d compactions; disk per round (bytes): %v; submit batch latency per round: %v",
		rounds, perRound, strings.Count(stderr.String(), "compacted "), disk, latency)
	if float64(secondHalf) > 1.25*float64(firstHalf) {
		t.Fatalf("the disk keeps growing: a median of %d bytes a round in the first half, %d in the second", firstHalf, secondHalf)
	}
	t.Logf("the WAL, its index and its history took at most %.2f times the live and retained data", worst)
	if segs := store.Segments(store.HistoryDir(walPath)); len(segs) == 0 || segs[0].First == 1 {
		t.Fatalf("segments %+v: the oldest should have expired", segs)
	}
}

// TestAServerExpiresHistoryOnTime: a server whose WAL stays small (no
// compaction by size) still deletes the history past --keep-history, at the
// first write once its oldest segment is wholly past it: the retention is
// applied by a compaction, which the compactor then makes for it.
func TestAServerExpiresHistoryOnTime(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	walPath, clock := filepath.Join(dir, "q.wal"), filepath.Join(dir, "clock")
	start, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
	setClock := func(at time.Time) {
		if err := os.WriteFile(clock, []byte(at.Format(time.RFC3339)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setClock(start)
	_, url, stderr := startServeEnv(t, []string{"LEASEWAL_TESTING=1", "LEASEWAL_TEST_CLOCK=" + clock, "LEASEWAL_NOW="},
		"--wal", walPath, "serve", "--listen", "127.0.0.1:0", "--compact-above", "16KiB", "--keep-finished", "1h", "--keep-history", "1h")
	c, err := client.New([]string{url}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	submit := func(n int) {
		reqs := make([]api.SubmitRequest, n)
		for i := range reqs {
			reqs[i] = api.SubmitRequest{Payload: fmt.Sprintf("task %d of %d", i, n)}
		}
		if _, err := c.SubmitBatch(context.Background(), reqs); err != nil {
			t.Fatal(err)
		}
	}
	compactions := func() int { return strings.Count(stderr.String(), "compacted ") }
	submit(200) // past 16 KiB: compacted by size, its records sealed in a segment
	testwait.Until(t, "a compaction by size", func() bool { return compactions() == 1 }, stderr.String)
	if segs := store.Segments(store.HistoryDir(walPath)); len(segs) != 1 || segs[0].LastAt != start.UnixMilli() {
		t.Fatalf("after the first compaction, segments %+v", segs)
	}
	setClock(start.Add(2 * time.Hour))
	submit(1) // a few hundred bytes: the WAL stays far from twice what the compaction left
	testwait.Until(t, "a compaction for the history past its retention", func() bool { return compactions() == 2 }, stderr.String)
	if segs := store.Segments(store.HistoryDir(walPath)); len(segs) == 0 || segs[0].LastAt < start.Add(time.Hour).UnixMilli() {
		t.Fatalf("after the compaction for the history, segments %+v: one is past the retention", segs)
	}
	if code, out, errOut := run(t, walPath, nil, "verify", "--history", "--lock-timeout", "1m"); code != 0 {
		t.Fatalf("verify --history: exit %d %s %s", code, out, errOut)
	}
}
