package scenarios

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"leasewal/state"
	"leasewal/wal"
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

// coordinatorModel is the coordinator as a sequential specification: its state
// is the list of records so far (starting from initial), and a step decides the
// call with package state's own rules at the time the call would have run.
func coordinatorModel(initial []state.Record) porcupine.Model {
	return porcupine.Model{
		Init: func() any { return initial },
		Step: func(s, input, output any) (bool, any) {
			recs := s.([]state.Record)
			st := state.New()
			for _, r := range recs {
				if err := st.Apply(r); err != nil {
					return false, s
				}
			}
			in, out := input.(lzInput), output.(lzOutput)
			now := st.LastAt() + in.Offset.Milliseconds()
			want, records := decide(st, in, now)
			if want != out {
				return false, s
			}
			next := append([]state.Record(nil), recs...)
			for _, r := range records {
				r.Seq, r.At = int64(len(next))+1, now
				next = append(next, r)
			}
			return true, next
		},
		Equal:             func(a, b any) bool { return reflect.DeepEqual(a, b) },
		DescribeOperation: func(in, out any) string { return fmt.Sprintf("%+v -> %+v", in, out) },
		DescribeState:     func(s any) string { return fmt.Sprintf("%d records", len(s.([]state.Record))) },
	}
}

// recordsOf reads a WAL's records.
func recordsOf(t *testing.T, walPath string) []state.Record {
	t.Helper()
	data, err := os.ReadFile(walPath)
	if err != nil {
		t.Fatal(err)
	}
	scanned, err := wal.Scan(data)
	if err != nil {
		t.Fatal(err)
	}
	var recs []state.Record
	for _, f := range scanned.Frames {
		r, err := state.DecodeRecord(f.Body)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, r)
	}
	return recs
}

// decide is what the coordinator must answer to in at now, and the records it writes.
func decide(st *state.State, in lzInput, now int64) (lzOutput, []state.Record) {
	var d state.Decision
	var err error
	switch in.Op {
	case "submit":
		d, err = st.DecideSubmit(state.Submit{Payload: "job", Window: state.Duration(20 * time.Second), Policy: state.RetryPolicy{MaxAttempts: 3}})
	case "lease":
		d, err = st.DecideLease(state.LeaseRequest{Worker: in.Worker, Duration: time.Second}, now)
	case "extend":
		d, err = st.DecideExtend(in.Task, in.Lease, time.Second, now)
	case "complete":
		d, err = st.DecideComplete(in.Task, in.Lease, now)
	default:
		d, err = st.DecideFail(in.Task, in.Lease, "flaky", false, now)
	}
	if err != nil {
		return lzOutput{Result: "ERROR", Error: string(err.(*state.Error).Kind)}, nil
	}
	out := lzOutput{Result: string(d.Outcome), Task: d.TaskID, Lease: d.LeaseID}
	if d.Outcome == state.ResultEmpty {
		out.Task, out.Lease = "", ""
	}
	if in.Op == "submit" {
		out.Lease = ""
	}
	return out, d.Records
}

// TestLinearizable runs several client processes at once against one WAL,
// records each call's invocation and response times, and checks the history
// with porcupine against coordinatorModel. LEASEWAL_LONG=1 runs a longer one.
func TestLinearizable(t *testing.T) {
	clients, ops := 4, 15
	if os.Getenv("LEASEWAL_LONG") == "1" {
		clients, ops = 6, 60
	}
	walPath := filepath.Join(t.TempDir(), "q.wal")
	run(t, walPath, nil, "submit", "--payload", "job", "--window", "20s", "--max-attempts", "3", "--now", t0)
	model := coordinatorModel(recordsOf(t, walPath))
	var history []porcupine.Operation
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
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
		return
	}
	res, info := porcupine.CheckOperationsVerbose(model, history, time.Minute)
	if res != porcupine.Ok {
		f, _ := os.CreateTemp("", "leasewal-linearizability-*.html")
		f.Close()
		if err := porcupine.VisualizePath(model, info, f.Name()); err != nil {
			t.Logf("writing the visualization: %v", err)
		}
		t.Fatalf("the history of %d operations is %s; see %s", len(history), res, f.Name())
	}
	t.Logf("%d operations from %d concurrent client processes: linearizable", len(history), clients)
}
