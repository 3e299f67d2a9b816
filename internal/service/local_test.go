package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/api"
)

// TestWaitCap: a server's service waits at most WaitCap in one request
// (the client asks again until its own wait runs out), a wait shorter than
// the cap lasts as asked, and 0 looks once (wait --timeout 0 through a
// server once waited five minutes); a local wait lasts as asked, and no
// wait given is for ever.
func TestWaitCap(t *testing.T) {
	capped := New(Options{WaitCap: 5 * time.Minute})
	for asked, want := range map[string]time.Duration{"0s": 0, "1h": 5 * time.Minute, "1s": time.Second, "": 5 * time.Minute} {
		if got, forever, err := capped.waitFor("timeout", asked); err != nil || got != want || forever {
			t.Errorf("a server's wait of %q lasts %s (for ever: %v, %v), want %s", asked, got, forever, err, want)
		}
	}
	local := New(Options{})
	if got, forever, err := local.waitFor("timeout", "1h"); err != nil || got != time.Hour || forever {
		t.Errorf("a local wait of 1h lasts %s (for ever: %v, %v)", got, forever, err)
	}
	if _, forever, _ := local.waitFor("timeout", ""); !forever {
		t.Errorf("a local wait with no timeout is not for ever")
	}
	if _, _, err := local.waitFor("timeout", "-1s"); err == nil || !strings.Contains(err.Error(), "give a duration of 0 or more") {
		t.Errorf("a negative wait: %v; want a refusal that says what to give", err)
	}
}

// TestABatchAnswersAsItsSubmitsOneByOne: a batch's acks, made on every
// processor for the tasks it creates and in order for the others (a
// duplicate of a task the index holds), are those its submits get one at
// a time, on another WAL at the same times.
func TestABatchAnswersAsItsSubmitsOneByOne(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	ctx := context.Background()
	at := int64(1_767_225_600_000)
	clock := func(int64) (int64, error) { return at, nil }
	dir := t.TempDir()
	batched := New(Options{WAL: WAL{Path: filepath.Join(dir, "batch.wal"), Clock: clock}})
	single := New(Options{WAL: WAL{Path: filepath.Join(dir, "single.wal"), Clock: clock}})
	first := make([]api.SubmitRequest, 520) // past the records after which a WAL has an index
	for i := range first {
		first[i] = api.SubmitRequest{Payload: fmt.Sprint("first ", i), RequestID: fmt.Sprint("r", i)}
	}
	if _, err := batched.SubmitBatch(ctx, first); err != nil {
		t.Fatal(err)
	}
	for _, r := range first {
		if _, err := single.Submit(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	at += 1000
	var reqs []api.SubmitRequest
	for i := range 600 {
		r := api.SubmitRequest{Payload: fmt.Sprint("second ", i), Queue: fmt.Sprint("q", i%3), Priority: i % 5, Window: "1h"}
		switch i % 4 {
		case 1: // a duplicate of a task of the first batch, which the index holds
			r = first[i%len(first)]
		case 2:
			r.After = []string{"T1"}
		}
		reqs = append(reqs, r)
	}
	acks, err := batched.SubmitBatch(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range reqs {
		want, err := single.Submit(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(acks[i], want) {
			t.Fatalf("the batch's ack %d is %+v; one submit at a time: %+v", i, acks[i], want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "batch.wal.index")); err != nil {
		t.Fatalf("the batch's WAL has no index, so no duplicate was read from one: %v", err)
	}
}
