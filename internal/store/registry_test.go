package store_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/store"
)

// TestTheRegistryStaysSmall: heartbeats append, and the registry is
// rewritten once it has doubled, so that 20,000 heartbeats of ten workers
// leave a file of about the floor, whatever their number; twelve
// goroutines heartbeating at once lose no worker's latest; and a worker
// not heard from for RegistryKeep is gone.
func TestTheRegistryStaysSmall(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	h := store.Open(store.Options{Path: path, LockTimeout: time.Minute})
	defer h.Close()
	for i := range 20_000 {
		if err := h.Heartbeat(fmt.Sprintf("W%d", i%10), t0+int64(i)); err != nil {
			t.Fatal(err)
		}
	}
	info, err := os.Stat(path + store.RegistrySuffix)
	if err != nil || info.Size() > 128<<10 {
		t.Fatalf("the registry after 20,000 heartbeats of ten workers: %v, %d bytes", err, info.Size())
	}
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Go(func() {
			for i := range 500 {
				if err := h.Heartbeat(fmt.Sprintf("G%d", g), t0+100_000+int64(i)); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	reg := h.Workers(t0 + 100_500)
	for g := range 12 {
		if got := reg[fmt.Sprintf("G%d", g)]; got != t0+100_499 {
			t.Errorf("G%d's latest heartbeat: %d, want %d", g, got, t0+100_499)
		}
	}
	if got := reg["W9"]; got != t0+19_999 {
		t.Errorf("W9's latest: %d", got)
	}
	later := t0 + 100_499 + store.RegistryKeep.Milliseconds()
	if err := h.Heartbeat("late", later); err != nil {
		t.Fatal(err)
	}
	if reg := h.Workers(later); len(reg) != 12+1 || reg["W9"] != 0 {
		t.Errorf("a day later the registry holds %d workers (W9 at %d); want the twelve heard from within the day and late", len(reg), reg["W9"])
	}
}
