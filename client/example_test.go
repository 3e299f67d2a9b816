package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
)

// serverURL is a `leasewal serve` the examples and tests use, started by
// TestMain on a fresh WAL; clockFile moves its clock (LEASEWAL_TEST_CLOCK).
var serverURL, clockFile string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasewal-client-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "leasewal")
		if out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building leasewal: %v\n%s", err, out)
			return 1
		}
		clockFile = filepath.Join(dir, "clock")
		if err := os.WriteFile(clockFile, []byte("+0s\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		server := exec.Command(bin, "--wal", filepath.Join(dir, "q.wal"), "serve", "--listen", "127.0.0.1:0")
		server.Env = append(os.Environ(), "LEASEWAL_TESTING=1", "LEASEWAL_TEST_CLOCK="+clockFile)
		stderr, err := server.StderrPipe()
		if err == nil {
			err = server.Start()
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer func() { server.Process.Kill(); server.Wait() }()
		lines := bufio.NewScanner(stderr)
		for serverURL == "" && lines.Scan() { // it says where it serves once it does
			if _, after, ok := strings.Cut(lines.Text(), " on "); ok && strings.Contains(lines.Text(), "serving") {
				serverURL = after
			}
		}
		if serverURL == "" {
			fmt.Fprintln(os.Stderr, "leasewal serve ended without serving")
			return 1
		}
		go func() { // drain what it says from now on
			for lines.Scan() {
			}
		}()
		return m.Run()
	}()
	os.Exit(code)
}

// A worker: lease a task, do it, complete it, until none is left.
func Example_worker() {
	ctx := context.Background()
	c, err := client.New([]string{serverURL}, client.Options{Actor: "example"})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Submit(ctx, api.SubmitRequest{Payload: "resize img-42", Queue: "images", RequestID: "img-42"}); err != nil {
		log.Fatal(err)
	}
	for {
		lease, err := c.Lease(ctx, api.LeaseRequest{Worker: "w1", Duration: "1m", Queue: "images"})
		var empty *api.Empty
		if errors.As(err, &empty) {
			fmt.Println("nothing left:", empty.Reason)
			return
		} else if err != nil {
			log.Fatal(err)
		}
		fmt.Println("working on", lease.Payload, "attempt", lease.Attempt)
		if _, err := c.Complete(ctx, api.CompleteRequest{Task: lease.TaskID, Lease: lease.LeaseID}); err != nil {
			log.Fatal(err) // an *api.Cancelled: the lease lapsed and the task went to another worker
		}
	}
	// Output:
	// working on resize img-42 attempt 1
	// nothing left: no task is WAITING and eligible
}

// A worker that goes on: each completion leases its next task in the same
// request, one write and one fsync a task.
func Example_workerNext() {
	ctx := context.Background()
	c, err := client.New([]string{serverURL}, client.Options{Actor: "example"})
	if err != nil {
		log.Fatal(err)
	}
	jobs := []api.SubmitRequest{{Payload: "thumb 1", Queue: "thumbs", RequestID: "t1"}, {Payload: "thumb 2", Queue: "thumbs", RequestID: "t2"}}
	if _, err := c.SubmitBatch(ctx, jobs); err != nil {
		log.Fatal(err)
	}
	lease, err := c.Lease(ctx, api.LeaseRequest{Worker: "w2", Duration: "1m", Queue: "thumbs"})
	for err == nil {
		fmt.Println("working on", lease.Payload)
		done, cerr := c.Complete(ctx, api.CompleteRequest{Task: lease.TaskID, Lease: lease.LeaseID,
			Next: &api.NextLease{Worker: "w2", Duration: "1m", Queue: "thumbs"}})
		if cerr != nil {
			log.Fatal(cerr) // an *api.Cancelled carries its Next too
		}
		if done.Next.Lease == nil {
			fmt.Println("nothing left")
			return
		}
		lease = *done.Next.Lease
	}
	log.Fatal(err)
	// Output:
	// working on thumb 1
	// working on thumb 2
	// nothing left
}

// A submitter: a request id makes a submit safe to repeat, after a timeout
// or a crash: the repeat answers with the first task and writes nothing.
func Example_submitter() {
	ctx := context.Background()
	c, err := client.New([]string{serverURL}, client.Options{Actor: "example"})
	if err != nil {
		log.Fatal(err)
	}
	first, err := c.Submit(ctx, api.SubmitRequest{Payload: "send digest", Queue: "mail", Priority: 5, RequestID: "digest-2026-11-24"})
	if err != nil {
		log.Fatal(err)
	}
	again, err := c.Submit(ctx, api.SubmitRequest{Payload: "send digest", Queue: "mail", Priority: 5, RequestID: "digest-2026-11-24"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.Result, first.Duplicate, again.Duplicate, again.TaskID == first.TaskID)
	_, err = c.Submit(ctx, api.SubmitRequest{Payload: "another digest", Queue: "mail", RequestID: "digest-2026-11-24"})
	var refused *api.Error
	if errors.As(err, &refused) {
		fmt.Println(refused.Kind, "exit", refused.Exit)
	}
	// Output:
	// ACK false true true
	// RequestConflict exit 2
}
