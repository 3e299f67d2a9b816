package scenarios

import (
	"cmp"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasewal/leasewal/internal/lincheck"
	"github.com/leasewal/leasewal/internal/testwait"
)

// TestLinearizable runs several client processes at once against one WAL,
// records each call's invocation and response times, and checks the history
// with porcupine against the reference model (lincheck.Model).
//
// The check is partitioned into rounds, each on a fresh WAL with a history
// small enough (3 clients of 8 calls) that porcupine decides it in
// milliseconds whether it is linearizable or not: a long history that is not
// linearizable makes the search explode and end "Unknown" at its time limit
// instead of "Illegal". Mutations it catches (each tried, each Illegal within
// the first rounds): an extension of twice the duration asked; lease picking
// the newest eligible task instead of the oldest. LEASEWAL_SOAK=1 runs 40
// rounds instead of 8.
func TestLinearizable(t *testing.T) {
	t.Parallel()
	rounds := 8
	if os.Getenv("LEASEWAL_SOAK") == "1" {
		rounds = 40
	}
	total := 0
	for round := range rounds {
		total += linearizableRound(t, uint64(round), 3, 8)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d rounds, %d operations from 3 concurrent client processes each, %d compactions beside them: linearizable", rounds, total, compactions.Load())
	if compactions.Load() == 0 {
		t.Fatal("no compaction ran beside the clients")
	}
}

func linearizableRound(t *testing.T, round uint64, clients, ops int) int {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	run(t, walPath, nil, "submit", "--payload", "job", "--window", "20s", "--max-attempts", "3", "--now", t0)
	start0, err := time.Parse(time.RFC3339, t0)
	if err != nil {
		t.Fatal(err)
	}
	initialAt := start0.UnixMilli()
	var history []porcupine.Operation
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7+round))
			worker := "W" + strconv.Itoa(c)
			var task, lease string
			for range ops {
				in := lincheck.Input{Op: "lease", Worker: worker, Offset: time.Duration(rng.IntN(400)) * time.Millisecond}
				switch k := rng.IntN(10); {
				case k < 2:
					in.Op = "submit"
				case lease != "" && k < 4:
					in.Op, in.Task, in.Lease = "extend", task, lease
				case lease != "" && k < 7:
					in.Op, in.Task, in.Lease = "complete", task, lease
				case lease != "" && k < 8:
					in.Op, in.Task, in.Lease = "fail", task, lease
				case lease != "" && k < 9:
					in.Op, in.Task, in.Lease = "release", task, lease
				}
				call := time.Since(start).Nanoseconds()
				code, stdout, stderr := run(t, walPath, nil, in.Args(true)...)
				ret := time.Since(start).Nanoseconds()
				var out lincheck.Output
				if err := json.Unmarshal([]byte(stdout), &out); err != nil {
					t.Errorf("%v: exit %d, no JSON: %q %q", in.Args(true), code, stdout, stderr)
					return
				}
				out = out.Normalize(in)
				if in.Op == "lease" && out.Result == "LEASED" {
					task, lease = out.Task, out.Lease
				} else if in.Op == "complete" || in.Op == "fail" || in.Op == "release" {
					task, lease = "", ""
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	// A compaction keeping every task runs beside the clients, again and
	// again: it writes no record, so the history must stay linearizable
	// whichever WAL, the old or the new, each call met.
	compacted, clientsDone := 0, make(chan struct{})
	compactor := make(chan struct{})
	go func() {
		defer close(compactor)
		for {
			select {
			case <-clientsDone:
				return
			default:
			}
			code, stdout, stderr := run(t, walPath, nil, "compact", "--keep-finished", "100000d", "--now", "+0s", "-o", "json")
			switch {
			case code == 0 && !strings.Contains(stderr, "nothing to compact"):
				compacted++
			case code != 0 && !strings.Contains(stderr, "compacted or replaced while"):
				t.Errorf("compact beside the clients: exit %d %s %s", code, stdout, stderr)
				return
			}
		}
	}()
	wg.Wait()
	close(clientsDone)
	<-compactor
	if t.Failed() {
		return 0
	}
	if code, out, errOut := run(t, walPath, nil, "verify", "--history"); code != 0 {
		t.Fatalf("round %d, %d compactions: verify --history: exit %d %s %s", round, compacted, code, out, errOut)
	}
	if res, where := lincheck.Check(initialAt, history, testwait.HangGuard); res != porcupine.Ok {
		slices.SortFunc(history, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		for _, op := range history {
			t.Logf("client %d [%d, %d] %+v -> %+v", op.ClientId, op.Call/1e6, op.Return/1e6, op.Input, op.Output)
		}
		_, records, _ := run(t, walPath, nil, "log", "-o", "tsv", "--no-headers", "--absolute")
		t.Logf("the WAL:\n%s", records)
		t.Fatalf("round %d: the history of %d operations is %s; see %s", round, len(history), res, where)
	}
	compactions.Add(int64(compacted))
	return len(history)
}

// compactions counts the compactions that ran beside the clients.
var compactions atomic.Int64
