package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"github.com/leasewal/leasewal/internal/cluster"
	"github.com/leasewal/leasewal/internal/store"
)

// AutoCompact is a resident server's compaction policy.
type AutoCompact struct {
	// Above compacts once the WAL is larger than this many bytes and twice
	// as large as the last compaction left it (so that a WAL whose kept
	// tasks alone are larger is not compacted again and again); 0: never
	// by size.
	Above int64
	// Every compacts once this long has passed since the last compaction
	// (or since the server started); 0: never by age.
	Every time.Duration
	// Options say what a compaction keeps.
	Options store.CompactOptions
}

// Compactor compacts the WAL a batcher writes, by policy, with compact
// (LocalCompaction, or a raft node's). It looks once a minute, and after a
// batch written that its policy may act on (waitsFor): the batcher wakes it
// for no other. A compaction is also where the history's retention is
// applied, so it compacts too once the oldest history segment is wholly
// past Options.KeepHistory and records were written since the last
// compaction (with none, there is nothing to compact, and the segment
// waits for the next write).
type Compactor struct {
	policy  AutoCompact
	store   store.Options
	batch   *Batcher
	compact func(store.CompactOptions) (store.Compaction, error)
	note    func(string)
	done    chan struct{}
}

// StartCompactor starts compacting the WAL of opts by policy until ctx ends;
// Wait returns once it has. note receives one line per compaction, or per
// failure. A compaction that fails with ErrNotLeader (a raft follower's) is
// not one.
func StartCompactor(ctx context.Context, policy AutoCompact, w WAL, batch *Batcher,
	compact func(store.CompactOptions) (store.Compaction, error), note func(string)) *Compactor {
	c := &Compactor{policy: policy, store: w.store(), batch: batch, compact: compact, note: note, done: make(chan struct{})}
	go c.run(ctx)
	return c
}

// LocalCompaction compacts the WAL of opts, which batch writes: the first
// step (the history read and copied) beside the batches, the last between
// two of them (Batcher.Exclusive).
func LocalCompaction(w WAL, batch *Batcher) func(store.CompactOptions) (store.Compaction, error) {
	return func(keep store.CompactOptions) (store.Compaction, error) {
		h := store.Open(w.store())
		defer h.Close()
		p, err := h.PrepareCompaction(keep)
		if err != nil {
			return store.Compaction{}, err
		}
		defer p.Abandon()
		var done store.Compaction
		err = batch.Exclusive(func() error {
			var err error
			done, err = p.Finish()
			return err
		})
		return done, err
	}
}

// Wait returns once the compactor has stopped.
func (c *Compactor) Wait() { <-c.done }

func (c *Compactor) run(ctx context.Context) {
	defer close(c.done)
	if c.policy.Above <= 0 && c.policy.Every <= 0 {
		return
	}
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	last, left := c.now(), int64(0)
	// The oldest history segment: only a compaction changes the history, so
	// it is listed again after each (and each minute, for one made beside
	// the server), not at every batch.
	oldest := c.oldestSegment()
	stuck := "" // an expired oldest segment a compaction did not remove (it warned why): not compacted for again
	defer c.batch.lookFor(nil)
	for {
		c.batch.lookFor(c.waitsFor(left, last, oldest, stuck))
		select {
		case <-ctx.Done():
			return
		case <-c.batch.Wrote():
		case <-tick.C:
			oldest = c.oldestSegment()
		}
		c.batch.lookFor(nil) // while it looks, every batch signals: nothing waits on what it will wait for next
		info, err := os.Stat(c.store.Path)
		if err != nil {
			continue
		}
		bySize := c.policy.Above > 0 && info.Size() > c.policy.Above && info.Size() > 2*left
		byAge := c.policy.Every > 0 && c.now()-last >= c.policy.Every.Milliseconds()
		byHistory := info.Size() > left && c.expired(oldest, c.now()) && oldest.Path != stuck
		if !bySize && !byAge && !byHistory {
			continue
		}
		done, err := c.compact(c.policy.Options)
		oldest = c.oldestSegment()
		switch {
		case errors.Is(err, store.ErrNothingToCompact):
			left = info.Size() // nothing follows the base: nothing to do until a write
		case errors.Is(err, cluster.ErrNotLeader):
		case err != nil:
			c.note(fmt.Sprintf("compaction failed (serving goes on): %v", err))
		default:
			c.note(fmt.Sprintf("compacted %d records up to seq %d: %d -> %d bytes, %d tasks kept, %d dropped", done.Records, done.Seq,
				done.BytesBefore, done.BytesAfter, done.TasksKept, done.TasksDropped))
			left = done.BytesAfter
			// As of the compaction's own time: the clock may have moved on
			// since, and what expired after it is the next one's to cut.
			if c.expired(oldest, cmp.Or(done.At, c.now())) {
				stuck = oldest.Path
			}
		}
		last = c.now()
	}
}

// waitsFor is what the policy acts on, for the batcher to wake the
// compactor only then: a WAL larger than both Above and twice what the
// last compaction left, or the time Every has passed since it, or the time
// the oldest history segment is wholly past KeepHistory.
func (c *Compactor) waitsFor(left, last int64, oldest store.Segment, stuck string) *lookWhen {
	w := &lookWhen{above: math.MaxInt64}
	if c.policy.Above > 0 {
		w.above = max(c.policy.Above, 2*left)
	}
	if c.policy.Every > 0 {
		w.at = last + c.policy.Every.Milliseconds()
	}
	if keep := c.policy.Options.KeepHistory; keep > 0 && oldest.Path != "" && oldest.Path != stuck {
		if at := oldest.LastAt + keep.Milliseconds() + 1; w.at == 0 || at < w.at { // expired: its last record before at - keep
			w.at = at
		}
	}
	return w
}

// oldestSegment is the oldest history segment (none: a zero Segment).
func (c *Compactor) oldestSegment() store.Segment {
	if segs := store.Segments(store.HistoryDir(c.store.Path)); len(segs) > 0 {
		return segs[0]
	}
	return store.Segment{}
}

// expired says whether the segment's last record is older than the
// history's retention at at.
func (c *Compactor) expired(seg store.Segment, at int64) bool {
	keep := c.policy.Options.KeepHistory
	return keep > 0 && seg.Path != "" && seg.LastAt < at-keep.Milliseconds()
}

// now is the store's clock's time.
func (c *Compactor) now() int64 { return clockNow(c.store) }

// clockNow is the time of o's clock (the wall clock when it has none),
// with no record to count from.
func clockNow(o store.Options) int64 {
	if o.Clock == nil {
		return time.Now().UnixMilli()
	}
	now, _ := o.Clock(0)
	return now
}
