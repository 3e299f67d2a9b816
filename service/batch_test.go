package service

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"leasewal/internal/testwait"
	"leasewal/state"
	"leasewal/store"
)

// fakeBackend runs a batch's functions in order, as a WAL would, and
// counts the batches; it blocks each batch until release is closed.
type fakeBackend struct {
	entered chan struct{} // a batch reached Commit
	mu      sync.Mutex
	batches [][]int
	release chan struct{}
	fail    error
}

func (b *fakeBackend) Commit(fns []func(*store.Tx) error) ([]error, [][]state.Record, error) {
	b.entered <- struct{}{}
	<-b.release
	errs, committed := make([]error, len(fns)), make([][]state.Record, len(fns))
	var sizes []int
	for i, fn := range fns {
		errs[i] = fn(nil)
		sizes = append(sizes, i)
	}
	b.mu.Lock()
	b.batches = append(b.batches, sizes)
	b.mu.Unlock()
	return errs, committed, b.fail
}

func (b *fakeBackend) Status() (Status, error) { return Status{Role: "single"}, nil }

// TestBatcher: requests that queue while a batch is under way are decided
// together in the next one, in arrival order; a request whose client has
// gone is not decided; a batch's write error voids every answer of it; once
// stopped, a request is refused with ErrStopping and nothing is decided.
func TestBatcher(t *testing.T) {
	back := &fakeBackend{entered: make(chan struct{}, 16), release: make(chan struct{})}
	b := NewBatcher(back, 64)
	var mu sync.Mutex
	var order []int
	decide := func(i int) func(*store.Tx) error {
		return func(*store.Tx) error {
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			return nil
		}
	}
	first := make(chan error, 1)
	go func() { _, err := b.Run(context.Background(), decide(0)); first <- err }()
	<-back.entered // the first batch is taken, and held in Commit
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	results := make(chan error, 4)
	for i := 1; i <= 3; i++ {
		ctx := context.Background()
		if i == 2 {
			ctx = gone
		}
		go func() { _, err := b.Run(ctx, decide(i)); results <- err }()
		testwait.Until(t, "the request to queue before the next: in arrival order", func() bool { return b.Received() == int64(i+1) },
			func() string { return fmt.Sprint(b.Received(), " received") })
	}
	close(back.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	var goneErrs int
	for range 3 {
		if err := <-results; errors.Is(err, ErrClientGone) {
			goneErrs++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if goneErrs != 1 || len(order) != 3 || order[0] != 0 || order[1] != 1 || order[2] != 3 {
		t.Fatalf("decided %v, %d gone; want 0, 1, 3 and one gone", order, goneErrs)
	}
	if len(back.batches) != 2 || len(back.batches[1]) != 3 {
		t.Fatalf("batches %v; want the first alone, then the three queued behind it together", back.batches)
	}
	back.fail = errors.New("injected: the write failed")
	if _, err := b.Run(context.Background(), decide(4)); !errors.Is(err, back.fail) {
		t.Fatalf("a failed write answered %v", err)
	}
	b.Stop()
	b.Stop() // a second stop is harmless
	if _, err := b.Run(context.Background(), decide(5)); !errors.Is(err, ErrStopping) || len(order) != 4 {
		t.Fatalf("after Stop: %v, decided %v", err, order)
	}
}
