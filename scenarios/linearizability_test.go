package scenarios

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"leasewal/internal/refmodel"
)

// lzInput is one client call. Time is "+offset" after the WAL's last record,
// so that the model can compute the same now in whatever order it linearizes.
type lzInput struct {
	Op     string // submit, lease, extend, complete, fail
	Worker string
	Task   string
	Lease  string
	Offset time.Duration
}

// lzOutput is what the process answered.
type lzOutput struct {
	Result string `json:"result"`
	Error  string `json:"error"`
	Task   string `json:"task_id"`
	Lease  string `json:"lease_id"`
}

func (in lzInput) args() []string {
	now := []string{"--now", "+" + in.Offset.String(), "-o", "json"}
	switch in.Op {
	case "submit":
		return append([]string{"submit", "--payload", "job", "--window", "20s", "--max-attempts", "3"}, now...)
	case "lease":
		return append([]string{"lease", "--worker", in.Worker, "--duration", "1s"}, now...)
	case "extend":
		return append([]string{"extend", "--task", in.Task, "--lease", in.Lease, "--duration", "1s"}, now...)
	case "complete":
		return append([]string{"complete", "--task", in.Task, "--lease", in.Lease}, now...)
	}
	return append([]string{"fail", "--task", in.Task, "--lease", in.Lease, "--reason", "flaky"}, now...)
}

// coordinatorModel is the coordinator as a sequential specification: the
// reference model (internal/refmodel, written from SPEC §2 and sharing no
// code with package state) and the time of the last record written, so that
// a call's "+offset" time is computed in whatever order it is linearized.
// initialAt is the time of the WAL's one record, the first submit.
func coordinatorModel(initialAt int64) porcupine.Model {
	type lzState struct {
		m      *refmodel.Model
		lastAt int64
	}
	return porcupine.Model{
		Init: func() any {
			m := refmodel.New()
			m.Submit(initialAt, lzJob)
			return lzState{m: m, lastAt: initialAt}
		},
		Step: func(s, input, output any) (bool, any) {
			st, in := s.(lzState), input.(lzInput)
			now := st.lastAt + in.Offset.Milliseconds()
			next := lzState{m: st.m.Clone(), lastAt: st.lastAt}
			a := modelCall(next.m, in, now)
			if len(a.Written) > 0 {
				next.lastAt = now
			}
			return outputOf(in, a) == output.(lzOutput), next
		},
		Equal: func(a, b any) bool {
			x, y := a.(lzState), b.(lzState)
			return x.lastAt == y.lastAt && x.m.Key() == y.m.Key()
		},
		DescribeOperation: func(in, out any) string { return fmt.Sprintf("%+v -> %+v", in, out) },
		DescribeState:     func(s any) string { return fmt.Sprintf("last record at %d", s.(lzState).lastAt) },
	}
}

// lzJob is the task every submit of the check creates.
var lzJob = refmodel.Spec{Payload: "job", Window: 20_000, Policy: refmodel.Policy{MaxAttempts: 3}}

// modelCall is what the reference model answers to in at now.
func modelCall(m *refmodel.Model, in lzInput, now int64) refmodel.Answer {
	switch in.Op {
	case "submit":
		return m.Submit(now, lzJob)
	case "lease":
		return m.Lease(now, in.Worker, 1000, "", "", nil)
	case "extend":
		return m.Extend(now, in.Task, in.Lease, 1000)
	case "complete":
		return m.Complete(now, in.Task, in.Lease)
	}
	return m.Fail(now, in.Task, in.Lease, false)
}

// outputOf is the model's answer as the client saw it.
func outputOf(in lzInput, a refmodel.Answer) lzOutput {
	out := lzOutput{Result: a.Result, Error: a.Error, Task: a.Task, Lease: a.Lease}
	if a.Result == "EMPTY" || a.Result == "ERROR" {
		out.Task, out.Lease = "", ""
	}
	if in.Op == "submit" {
		out.Lease = ""
	}
	return out
}

// TestLinearizable runs several client processes at once against one WAL,
// records each call's invocation and response times, and checks the history
// with porcupine against coordinatorModel, the reference model.
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
	t.Logf("%d rounds, %d operations from 3 concurrent client processes each: linearizable", rounds, total)
}

func linearizableRound(t *testing.T, round uint64, clients, ops int) int {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	run(t, walPath, nil, "submit", "--payload", "job", "--window", "20s", "--max-attempts", "3", "--now", t0)
	start0, err := time.Parse(time.RFC3339, t0)
	if err != nil {
		t.Fatal(err)
	}
	model := coordinatorModel(start0.UnixMilli())
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
				in := lzInput{Op: "lease", Worker: worker, Offset: time.Duration(rng.IntN(400)) * time.Millisecond}
				switch k := rng.IntN(10); {
				case k < 2:
					in.Op = "submit"
				case lease != "" && k < 4:
					in.Op, in.Task, in.Lease = "extend", task, lease
				case lease != "" && k < 7:
					in.Op, in.Task, in.Lease = "complete", task, lease
				case lease != "" && k < 9:
					in.Op, in.Task, in.Lease = "fail", task, lease
				}
				call := time.Since(start).Nanoseconds()
				code, stdout, stderr := run(t, walPath, nil, in.args()...)
				ret := time.Since(start).Nanoseconds()
				var out lzOutput
				if err := json.Unmarshal([]byte(stdout), &out); err != nil {
					t.Errorf("%v: exit %d, no JSON: %q %q", in.args(), code, stdout, stderr)
					return
				}
				if in.Op == "submit" {
					out.Lease = ""
				}
				if in.Op == "lease" && out.Result == "LEASED" {
					task, lease = out.Task, out.Lease
				} else if in.Op == "complete" || in.Op == "fail" {
					task, lease = "", ""
				}
				mu.Lock()
				history = append(history, porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return 0
	}
	res, info := porcupine.CheckOperationsVerbose(model, history, 20*time.Second)
	if res != porcupine.Ok {
		f, _ := os.CreateTemp("", "leasewal-linearizability-*.html")
		f.Close()
		if err := porcupine.VisualizePath(model, info, f.Name()); err != nil {
			t.Logf("writing the visualization: %v", err)
		}
		slices.SortFunc(history, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		for _, op := range history {
			t.Logf("client %d [%d, %d] %+v -> %+v", op.ClientId, op.Call/1e6, op.Return/1e6, op.Input, op.Output)
		}
		_, records, _ := run(t, walPath, nil, "log", "-o", "tsv", "--no-headers", "--absolute")
		t.Logf("the WAL:\n%s", records)
		t.Fatalf("round %d: the history of %d operations is %s; see %s", round, len(history), res, f.Name())
	}
	return len(history)
}
