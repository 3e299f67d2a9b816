package service

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
)

// TestACompactorLooksAfterItsRest: a compactor rests after a look that a
// write prompted, and a write during that rest is looked at once it ends:
// a WAL that grew past the policy during the rest is compacted then, not
// at the next periodic look (an hour away here).
func TestACompactorLooksAfterItsRest(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	grow := func(size int) {
		if err := os.WriteFile(path, make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	back := &fakeBackend{entered: make(chan struct{}, 16), release: make(chan struct{})}
	close(back.release)
	b := NewBatcher(back, 64, nil)
	defer b.Stop()
	write := func() {
		if _, err := b.Run(context.Background(), func(*store.Tx) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	var compactions atomic.Int32
	compact := func(store.CompactOptions) (store.Compaction, error) {
		compactions.Add(1)
		return store.Compaction{BytesAfter: 10}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := startCompactor(ctx, AutoCompact{Above: 100}, WAL{Path: path}, b, compact, func(string) {}, time.Hour)
	defer func() { cancel(); c.Wait() }()

	grow(1000)
	write()
	testwait.Until(t, "the compaction a write prompted", func() bool { return compactions.Load() == 1 },
		func() string { return fmt.Sprint(compactions.Load(), " compactions") })
	// At once, well within the rest: the WAL is past the policy again.
	grow(1000)
	write()
	testwait.Until(t, "the compaction of the write made during the rest", func() bool { return compactions.Load() == 2 },
		func() string { return fmt.Sprint(compactions.Load(), " compactions") })
}
