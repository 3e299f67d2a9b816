package service

import (
	"context"
	"errors"

	"leasewal/state"
	"leasewal/store"
)

// replaySegments hands onRecord the records of the sealed history segments
// beside the WAL (see store.Compact), oldest first, each record once: every
// segment is a WAL of its own, replayed from its start (the base of the
// records before it, or the first record), and only its records after the
// last one handed on go to onRecord, with the state of the segment as of
// that record. Segments that end before from are skipped. When onRecord
// returns store.ErrStop, stopped is the state there; else last is the seq
// of the last record handed on (0: none), from which the WAL goes on.
func (l *Local) replaySegments(ctx context.Context, from int64, onRecord func(state.Record, *state.State) error) (last int64, stopped *state.State, err error) {
	for _, seg := range store.Segments(store.HistoryDir(l.o.Store.Path)) {
		if seg.Last < from || seg.Last <= last {
			continue
		}
		if err := ctx.Err(); err != nil {
			return last, nil, err
		}
		opts := l.o.Store
		opts.Path, opts.FullReplay, opts.ReplayFrom = seg.Path, true, 0
		opts.Clock = func(lastAt int64) (int64, error) { return lastAt, nil } // a segment is read, never decided on
		halted := false
		opts.OnRecord = func(rec state.Record, st *state.State) error {
			if rec.Seq <= last {
				return nil
			}
			last = rec.Seq
			err := onRecord(rec, st)
			halted = errors.Is(err, store.ErrStop)
			return err
		}
		h := store.Open(opts)
		err := h.Read(func(tx *store.Tx) error {
			if halted {
				stopped = tx.State
			}
			return nil
		})
		h.Close()
		if err != nil {
			return last, nil, &store.HistoryError{Path: seg.Path, Err: err}
		}
		if halted {
			return last, stopped, nil
		}
	}
	return last, nil, nil
}
