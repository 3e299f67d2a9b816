package client_test

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"leasewal/api"
	"leasewal/client"
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

	if _, err := c.Submit(ctx, api.SubmitRequest{Payload: "flaky", Queue: "calls"}); err != nil {
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
