package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasewal/leasewal/internal/cluster"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// Firer writes the schedules' firings on time for a resident server: it
// wakes at the next slot, when kicked (a schedule was added or removed
// through this server), and once a minute in any case (a schedule a raft
// leader before this one added; a store clock that is not the wall clock's).
type Firer struct {
	svc  *Local
	kick <-chan struct{}
	note func(string)
	done chan struct{}
}

// StartFirer fires svc's schedules until ctx ends; Wait returns once it
// has stopped. note receives one line per failure to write (a raft
// follower's ErrNotLeader is none: its leader fires).
func StartFirer(ctx context.Context, svc *Local, kick <-chan struct{}, note func(string)) *Firer {
	f := &Firer{svc: svc, kick: kick, note: note, done: make(chan struct{})}
	go f.run(ctx)
	return f
}

// Wait returns once the firer has stopped.
func (f *Firer) Wait() { <-f.done }

func (f *Firer) run(ctx context.Context) {
	defer close(f.done)
	failed := ""
	for {
		wait := time.Minute
		if next, now, err := f.next(ctx); err == nil && next != 0 {
			wait = min(wait, max(time.Duration(next-now)*time.Millisecond, time.Millisecond))
		}
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-f.kick:
			timer.Stop()
			continue
		case <-timer.C:
		}
		if due, err := f.due(ctx); err != nil || !due {
			continue
		}
		_, err := f.svc.write(ctx, "leasewal serve", func(*store.Tx) (any, error) { return nil, nil }) // firingFirst writes them
		switch {
		case err == nil, errors.Is(err, cluster.ErrNotLeader), ctx.Err() != nil:
			failed = ""
		case err.Error() != failed: // said once per distinct failure
			failed = err.Error()
			f.note(fmt.Sprintf("writing the schedules' firings failed (the next write fires them): %v", err))
		}
	}
}

// Kicker is a Firer's kick, and what a server calls with the records each
// request committed: it kicks when one added or removed a schedule.
func Kicker() (kick <-chan struct{}, committed func([]state.Record)) {
	c := make(chan struct{}, 1)
	return c, func(recs []state.Record) {
		for _, r := range recs {
			if r.Type == state.ScheduleAdded || r.Type == state.ScheduleRemoved {
				select {
				case c <- struct{}{}:
				default:
				}
				return
			}
		}
	}
}

// next is the next slot of any schedule, and the store's time now.
func (f *Firer) next(ctx context.Context) (next, now int64, err error) {
	_, err = f.svc.read(ctx, func(tx *store.Tx) (any, error) {
		next, now = tx.State.NextFiringAt(Zones, tx.Now), tx.Now
		return nil, nil
	})
	return next, now, err
}

// due reports whether a firing is due now.
func (f *Firer) due(ctx context.Context) (due bool, err error) {
	_, err = f.svc.read(ctx, func(tx *store.Tx) (any, error) {
		due = len(tx.State.DueFirings(Zones, tx.Now)) > 0
		return nil, nil
	})
	return due, err
}
