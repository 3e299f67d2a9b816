package client_test

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
)

// TestCalls: each typed call's answer and errors, against a real server:
// extend and fail under the current lease, a wait woken by a submit, a
// completion under a lease that lapsed and was granted again (an
// *api.Cancelled), a refusal (an *api.Error with its kind and exit code),
// and no server at all (a *client.NoServerError: nothing sent).
func TestCalls(t *testing.T) {
	ctx := context.Background()
	c, err := client.New([]string{serverURL}, client.Options{Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	woken := make(chan error, 1)
	go func() {
		lease, err := c.Lease(ctx, api.LeaseRequest{Worker: "waiter", Queue: "calls", Wait: "10m", RequestID: "waiter-1"})
		if err == nil && lease.Payload != "wake" {
			err = errors.New("leased " + lease.Payload)
		}
		woken <- err
	}()
	if _, err := c.Submit(ctx, api.SubmitRequest{Payload: "wake", Queue: "calls"}); err != nil {
		t.Fatal(err)
	}
	if err := <-woken; err != nil {
		t.Fatalf("a lease waiting for a task: %v", err)
	}

	if _, err := c.Submit(ctx, api.SubmitRequest{Payload: "flaky", Queue: "calls", Backoff: "0s"}); err != nil { // retried at once
		t.Fatal(err)
	}
	lease, err := c.Lease(ctx, api.LeaseRequest{Worker: "w", Queue: "calls", Duration: "1m"})
	if err != nil {
		t.Fatal(err)
	}
	if ext, err := c.Extend(ctx, api.ExtendRequest{Task: lease.TaskID, Lease: lease.LeaseID, Duration: "2m"}); err != nil || ext.Result != "EXTENDED" {
		t.Fatalf("extend: %+v %v", ext, err)
	}
	if failed, err := c.Fail(ctx, api.FailRequest{Task: lease.TaskID, Lease: lease.LeaseID, Reason: "flaky"}); err != nil || failed.Result != "RETRY" || failed.State != "WAITING" {
		t.Fatalf("fail: %+v %v", failed, err)
	}

	again, err := c.Lease(ctx, api.LeaseRequest{Worker: "w", Queue: "calls", Duration: "1m"})
	if err != nil || again.TaskID != lease.TaskID {
		t.Fatalf("the second attempt: %+v %v", again, err)
	}
	if err := os.WriteFile(clockFile, []byte("+2m\n"), 0o644); err != nil { // the lease lapses
		t.Fatal(err)
	}
	if _, err := c.Lease(ctx, api.LeaseRequest{Worker: "other", Queue: "calls", Duration: "1m"}); err != nil {
		t.Fatalf("a lease after the first lapsed: %v", err)
	}
	_, err = c.Complete(ctx, api.CompleteRequest{Task: again.TaskID, Lease: again.LeaseID})
	var cancelled *api.Cancelled
	if !errors.As(err, &cancelled) || cancelled.LeaseID != again.LeaseID {
		t.Fatalf("a completion under a lapsed lease: %v, want *api.Cancelled", err)
	}

	_, err = c.Complete(ctx, api.CompleteRequest{Task: "T999", Lease: "L1"})
	var refused *api.Error
	if !errors.As(err, &refused) || refused.Kind != "NotFound" || refused.Exit != api.ExitNotFound {
		t.Fatalf("completing a task that does not exist: %#v", err)
	}

	if beat, err := c.Heartbeat(ctx, api.HeartbeatRequest{Worker: "other"}); err != nil || len(beat.Leases) != 1 {
		t.Fatalf("a heartbeat of the worker holding one lease: %+v %v", beat, err)
	}
	if err := os.WriteFile(clockFile, []byte("+4m\n"), 0o644); err != nil { // the other worker's lease lapses too
		t.Fatal(err)
	}
	if expired, err := c.Expire(ctx, api.ExpireRequest{}); err != nil || len(expired.Transitions) == 0 || expired.Transitions[0].Type != "LeaseExpired" {
		t.Fatalf("expire after the clock moved: %+v %v", expired, err)
	}

	batch := []api.SubmitRequest{{Payload: "one", RequestID: "b1", Queue: "bulk"}, {Payload: "two", RequestID: "b2", Queue: "bulk"}}
	acks, err := c.SubmitBatch(ctx, batch)
	if err != nil || len(acks) != 2 || acks[0].Duplicate || acks[1].RequestID != "b2" {
		t.Fatalf("a batch: %+v %v", acks, err)
	}
	resent, err := c.SubmitBatch(ctx, batch)
	if err != nil || len(resent) != 2 || !resent[0].Duplicate || resent[1].TaskID != acks[1].TaskID {
		t.Fatalf("the batch again: %+v %v", resent, err)
	}
	_, err = c.SubmitBatch(ctx, []api.SubmitRequest{{Payload: "three", RequestID: "b3"}, {Payload: "not two", RequestID: "b2"}})
	if !errors.As(err, &refused) || refused.Kind != "RequestConflict" || !strings.Contains(refused.Message, "batch line 2") {
		t.Fatalf("a conflicting batch: %#v", err)
	}
	// A string that is not UTF-8 is refused before anything is sent, as a
	// lone request's is: JSON would send it as another (U+FFFD).
	before, err := c.Stats(ctx, api.StatsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.SubmitBatch(ctx, []api.SubmitRequest{{Payload: "fine"}, {Payload: "bad \xff byte"}})
	var usage *api.UsageError
	if !errors.As(err, &usage) || err.Error() != "item 2 of the batch: payload is not UTF-8 text: encode binary data (e.g. base64) first" {
		t.Fatalf("a batch with a payload that is not UTF-8: %v", err)
	}
	if after, err := c.Stats(ctx, api.StatsRequest{}); err != nil || after.LastSeq != before.LastSeq {
		t.Fatalf("the refused batch wrote: last seq %d -> %d (%v)", before.LastSeq, after.LastSeq, err)
	}

	readCalls(ctx, t, c, acks[0].TaskID)
	workCalls(ctx, t, c)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()
	nobody, err := client.New([]string{closed}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var none *client.NoServerError
	if _, err := nobody.Submit(ctx, api.SubmitRequest{Payload: "x"}); !errors.As(err, &none) {
		t.Fatalf("no server: %v, want *client.NoServerError", err)
	}
	var bad *client.BadURLError
	if _, err := client.New([]string{"127.0.0.1:7420"}, client.Options{}); !errors.As(err, &bad) || !bad.NoScheme {
		t.Fatalf("a URL without its scheme: %v", err)
	}
}

// readCalls: the calls that read, on the task of a batch (WAITING).
func readCalls(ctx context.Context, t *testing.T, c *client.Client, task string) {
	t.Helper()
	if why, err := c.Why(ctx, api.WhyRequest{Task: task}); err != nil || !why.Eligible || why.Queue != "bulk" {
		t.Fatalf("why %s: %+v %v", task, why, err)
	}
	view, err := c.Inspect(ctx, api.InspectRequest{Tasks: []string{task}})
	if err != nil || len(view.Tasks) != 1 || view.Tasks[0].State != "WAITING" || len(view.Tasks[0].Records) != 1 || view.Tasks[0].Records[0].Type != "TaskCreated" {
		t.Fatalf("inspect %s: %+v %v", task, view, err)
	}
	if workers, err := c.Workers(ctx); err != nil || len(workers.Workers) == 0 {
		t.Fatalf("the workers: %+v %v", workers, err)
	}
	if waited, err := c.Wait(ctx, api.WaitRequest{Tasks: []string{task}, For: "WAITING"}); err != nil || waited.Result != "OK" {
		t.Fatalf("a wait already satisfied: %+v %v", waited, err)
	}
	if waited, err := c.Wait(ctx, api.WaitRequest{Tasks: []string{task}, Timeout: "0s"}); err != nil || waited.Result != "TIMEOUT" {
		t.Fatalf("a wait that looks once: %+v %v", waited, err)
	}
	var records []api.Record
	_, err = c.Log(ctx, api.LogRequest{Task: task}, func(r api.Record) error { records = append(records, r); return nil })
	if err != nil || len(records) != 1 || records[0].Seq == 0 || records[0].RequestID != "b1" || records[0].At == "" {
		t.Fatalf("the log of %s: %+v %v", task, records, err)
	}
	var refused *api.Error
	if _, err := c.Log(ctx, api.LogRequest{Type: "Nonsense"}, func(api.Record) error { return nil }); !errors.As(err, &refused) || refused.Exit != api.ExitUsage {
		t.Fatalf("a log of an unknown record type: %#v", err)
	}
	if aborted, err := c.Abort(ctx, api.AbortRequest{Task: task, Reason: "not needed"}); err != nil || aborted.State != "DEAD" {
		t.Fatalf("abort %s: %+v %v", task, aborted, err)
	}
	if again, err := c.Requeue(ctx, api.RequeueRequest{Task: task, RequestID: "again"}); err != nil || again.RequeuedFrom != task {
		t.Fatalf("requeue %s: %+v %v", task, again, err)
	}
}

// workCalls: a domain's offsets through the work-lease calls, and a token
// that is not the domain's (exit 7).
func workCalls(ctx context.Context, t *testing.T, c *client.Client) {
	t.Helper()
	offset := func(n int64) *int64 { return &n }
	got, err := c.WorkAcquire(ctx, api.WorkAcquireRequest{Domain: "orders", Offset: offset(7)})
	if err != nil || got.Result != "ACQUIRED" || got.Token == "" {
		t.Fatalf("acquire: %+v %v", got, err)
	}
	if queued, err := c.WorkAcquire(ctx, api.WorkAcquireRequest{Domain: "orders", Offset: offset(8)}); err != nil || queued.Result != "ENQUEUED" {
		t.Fatalf("acquire behind it: %+v %v", queued, err)
	}
	var refused *api.Error
	if _, err := c.WorkSucceed(ctx, api.WorkSucceedRequest{Domain: "orders", Token: "K999"}); !errors.As(err, &refused) || refused.Exit != api.ExitContract {
		t.Fatalf("succeed under another token: %#v", err)
	}
	zero := 0
	if failed, err := c.WorkFail(ctx, api.WorkFailRequest{Domain: "orders", Token: got.Token, MaxRetries: &zero}); err != nil || failed.Failed == nil || *failed.Failed != 7 {
		t.Fatalf("fail with no retries: %+v %v", failed, err)
	}
	view, err := c.WorkInspect(ctx, api.WorkInspectRequest{Domain: "orders"})
	if err != nil || len(view.Domains) != 1 || len(view.Domains[0].Backlog) != 1 || view.Domains[0].Failed[0] != 7 {
		t.Fatalf("inspect the domain: %+v %v", view, err)
	}
}

// TestTheClientImportsOnlyTheAPI: a program that imports the client
// compiles the API's types, the table of limits and the helper that cuts a
// batch's lines between processors, and none of leasewal's rules, storage
// or server.
func TestTheClientImportsOnlyTheAPI(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		switch {
		case !strings.HasPrefix(pkg, "github.com/leasewal/leasewal"):
		case pkg == "github.com/leasewal/leasewal/client", pkg == "github.com/leasewal/leasewal/api", pkg == "github.com/leasewal/leasewal/internal/limits",
			pkg == "github.com/leasewal/leasewal/internal/parallel":
		default:
			t.Errorf("the client depends on %s", pkg)
		}
	}
}
