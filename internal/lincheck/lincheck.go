// Package lincheck is the sequential specification the linearizability
// checks give porcupine: one client call (Input), what the client saw
// (Output), and Model, which answers each call with the reference model
// (internal/refmodel, written from docs/guarantees.md and sharing no code with package
// state). The local check (scenarios) and the cluster's (cmd) both use it.
package lincheck

import (
	"cmp"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasewal/leasewal/internal/refmodel"
)

// Input is one client call. Its time is Offset after the WAL's last record,
// so that the model computes the same now in whatever order it linearizes.
// Req, if set, is the call's request id (submit and lease).
type Input struct {
	Op     string // submit, lease, extend, complete, fail, release, rate
	Worker string
	Rate   string // rate: the default queue's rate (N/s), or none
	After  string // submit: a task it waits for ("": none)
	Task   string
	Lease  string
	Req    string
	Offset time.Duration
}

// Output is what the client saw.
type Output struct {
	Result string `json:"result"`
	Error  string `json:"error"`
	Task   string `json:"task_id"`
	Lease  string `json:"lease_id"`
}

// Args is the call as a command line; withNow adds --now +Offset (a server
// stamps its own time, so a call sent to one has none).
func (in Input) Args(withNow bool) []string {
	tail := []string{"-o", "json"}
	if withNow {
		tail = append(tail, "--now", "+"+in.Offset.String())
	}
	if in.Req != "" {
		tail = append(tail, "--request-id", in.Req)
	}
	switch in.Op {
	case "submit":
		if in.After != "" {
			tail = append(tail, "--after", in.After)
		}
		return append([]string{"submit", "--payload", Job.Payload, "--window", "20s", "--max-attempts", "3"}, tail...)
	case "lease":
		return append([]string{"lease", "--worker", in.Worker, "--duration", "1s"}, tail...)
	case "extend":
		return append([]string{"extend", "--task", in.Task, "--lease", in.Lease, "--duration", "1s"}, tail...)
	case "complete":
		return append([]string{"complete", "--task", in.Task, "--lease", in.Lease}, tail...)
	case "release":
		return append([]string{"release", "--task", in.Task, "--lease", in.Lease}, tail...)
	case "rate":
		return append([]string{"queue", "rate", "default", in.Rate}, tail...) // no request id: a rate repeats as itself
	}
	return append([]string{"fail", "--task", in.Task, "--lease", in.Lease, "--reason", "flaky"}, tail...)
}

// Job is the task every submit of the check creates: its window and
// attempts as the submit gives them, the backoff the documented default
// (1s, doubling up to 5m).
var Job = refmodel.Spec{Payload: "job", Window: 20_000, Policy: refmodel.Policy{MaxAttempts: 3, Backoff: 1_000, BackoffMax: 300_000}}

// Model is the coordinator as a sequential specification: the reference
// model and the time of the last record written. initialAt is the time of
// the WAL's one record, the first submit.
func Model(initialAt int64) porcupine.Model {
	type modelState struct {
		m      *refmodel.Model
		lastAt int64
	}
	return porcupine.Model{
		Init: func() any {
			m := refmodel.New()
			m.Submit(initialAt, Job)
			return modelState{m: m, lastAt: initialAt}
		},
		Step: func(s, input, output any) (bool, any) {
			st, in := s.(modelState), input.(Input)
			now := st.lastAt + in.Offset.Milliseconds()
			next := modelState{m: st.m.Clone(), lastAt: st.lastAt}
			a := call(next.m, in, now)
			if len(a.Written) > 0 {
				next.lastAt = now
			}
			return outputOf(in, a) == output.(Output), next
		},
		Equal: func(a, b any) bool {
			x, y := a.(modelState), b.(modelState)
			return x.lastAt == y.lastAt && x.m.Key() == y.m.Key()
		},
		DescribeOperation: func(in, out any) string { return fmt.Sprintf("%+v -> %+v", in, out) },
		DescribeState:     func(s any) string { return fmt.Sprintf("last record at %d", s.(modelState).lastAt) },
	}
}

// call is what the reference model answers to in at now.
func call(m *refmodel.Model, in Input, now int64) refmodel.Answer {
	switch in.Op {
	case "submit":
		spec := Job
		spec.Req = in.Req
		if in.After != "" {
			spec.After = []string{in.After}
		}
		return m.Submit(now, spec)
	case "lease":
		return m.Lease(now, in.Worker, 1000, "", in.Req, nil)
	case "extend":
		return m.Extend(now, in.Task, in.Lease, 1000)
	case "complete":
		return m.Complete(now, in.Task, in.Lease, "")
	case "release":
		return m.Release(now, in.Task, in.Lease, 0)
	case "rate":
		count := 0 // none
		fmt.Sscanf(in.Rate, "%d/s", &count)
		return m.Rate(now, "default", count, 1000, 0)
	}
	return m.Fail(now, in.Task, in.Lease, false)
}

// outputOf is the model's answer as the client sees it.
func outputOf(in Input, a refmodel.Answer) Output {
	out := Output{Result: a.Result, Error: a.Error, Task: a.Task, Lease: a.Lease}
	if a.Result == "EMPTY" || a.Result == "ERROR" {
		out.Task, out.Lease = "", ""
	}
	return out.Normalize(in)
}

// Normalize makes a client's output comparable with the model's. A lease
// answers CANCELLED only when its request id is repeated after the lease
// it was granted is no longer current: the client sent it again after an
// unknown outcome, and the first attempt's grant is the call's effect (the
// answer is a later look at it). The model, which sees each call once,
// answers that grant: LEASED, the same task and lease.
func (out Output) Normalize(in Input) Output {
	if in.Op == "submit" {
		out.Lease = ""
	}
	if in.Op == "lease" && out.Result == "CANCELLED" {
		out.Result = "LEASED"
	}
	return out
}

// Check checks a history against Model(initialAt) within limit. When it is
// not linearizable, where names the file porcupine's visualization of it was
// written to.
func Check(initialAt int64, history []porcupine.Operation, limit time.Duration) (res porcupine.CheckResult, where string) {
	model := Model(initialAt)
	res, info := porcupine.CheckOperationsVerbose(model, history, limit)
	if res == porcupine.Ok {
		return res, ""
	}
	f, err := os.CreateTemp("", "leasewal-linearizability-*.html")
	if err != nil {
		return res, fmt.Sprintf("nowhere (%v)", err)
	}
	f.Close()
	if err := porcupine.VisualizePath(model, info, f.Name()); err != nil {
		return res, fmt.Sprintf("nowhere (%v)", err)
	}
	return res, f.Name()
}

// Clients runs n clients at once, each making at least ops calls and going
// on while more() says so: a random mix of submits, leases (each with a
// request id; half of a client's submits wait for its last task),
// completions, failures or releases of the lease it holds and
// (client 0's second call, then now and then, when time moves on between
// calls) the default queue's rate, each call
// Offset after the last record. send makes client i's call in and returns
// what it printed (-o json), a definite answer (the caller retries unknown
// outcomes). Times are since began; answered counts the calls answered so
// far. Clients returns the history once every client is done, or the first
// error of send.
func Clients(n, ops int, offset time.Duration, began time.Time, more func() bool, answered *atomic.Int32, send func(client int, in Input) (string, error)) ([]porcupine.Operation, error) {
	var (
		mu      sync.Mutex
		history []porcupine.Operation
		first   error
		wg      sync.WaitGroup
	)
	for client := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(client), 11))
			worker := "W" + strconv.Itoa(client)
			var task, lease, submitted string
			for i := 0; i < ops || more(); i++ {
				in := Input{Op: "lease", Worker: worker, Offset: offset, Req: fmt.Sprintf("c%d-%d", client, i)}
				switch k := rng.IntN(10); {
				case k < 3:
					in.Op = "submit"
					if submitted != "" && rng.IntN(2) == 0 { // a chain: it waits for the client's last task
						in.After = submitted
					}
				case lease != "" && k < 7:
					in.Op, in.Task, in.Lease, in.Req = "complete", task, lease, ""
				case lease != "" && k < 8:
					in.Op, in.Task, in.Lease, in.Req = "fail", task, lease, ""
				case lease != "" && k < 9:
					in.Op, in.Task, in.Lease, in.Req = "release", task, lease, ""
				case offset > 0 && ((client == 0 && i == 1) || (k == 9 && rng.IntN(3) == 0)): // a rate holds leases back, replay-exactly on every node (on a clock that stands still, it would hold every lease after its first)
					in.Op, in.Rate, in.Req = "rate", []string{"1/s", "2/s", "none"}[rng.IntN(3)*min(1, i-1)], ""
				}
				call := time.Since(began).Nanoseconds()
				stdout, err := send(client, in)
				ret := time.Since(began).Nanoseconds()
				var got Output
				if err == nil {
					if jerr := json.Unmarshal([]byte(stdout), &got); jerr != nil {
						err = fmt.Errorf("%v answered no JSON: %q", in.Args(false), stdout)
					}
				}
				mu.Lock()
				if err != nil {
					first = cmp.Or(first, err)
					mu.Unlock()
					return
				}
				got = got.Normalize(in)
				history = append(history, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: got, Return: ret})
				mu.Unlock()
				answered.Add(1)
				if in.Op == "submit" && got.Result == "ACK" {
					submitted = got.Task
				}
				if in.Op == "lease" && got.Result == "LEASED" {
					task, lease = got.Task, got.Lease
				} else if in.Op == "complete" || in.Op == "fail" || in.Op == "release" {
					task, lease = "", ""
				}
			}
		}()
	}
	wg.Wait()
	return history, first
}

// Acked is the request ids of the history's acknowledged submits.
func Acked(history []porcupine.Operation) []string {
	var ids []string
	for _, op := range history {
		if in, out := op.Input.(Input), op.Output.(Output); in.Op == "submit" && out.Result == "ACK" {
			ids = append(ids, in.Req)
		}
	}
	return ids
}
