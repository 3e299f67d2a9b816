package store

import (
	"errors"
	"sync/atomic"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// pipeline applies records on a second goroutine while the scanning one
// reads, checksums and decodes the next ones, so that a long replay uses two
// cores. Records are applied in WAL order, in batches of pipelineBatch
// records or pipelineBytes bytes, whichever comes first (a base's parts are
// a few hundred KiB each: a batch of them would hold a base in memory); the
// error of the earliest record wins (finish). pipelineBuffers batches may
// wait, so that the scanner decodes on while the applier writes a batch of
// tasks into the index (at most 32 MiB of records).
type pipeline struct {
	apply  func(decoded) error
	full   chan []decoded
	empty  chan []decoded
	done   chan struct{}
	failed atomic.Bool // set once err is
	err    error       // the applier's; read only after done is closed
	batch  []decoded
	bytes  int // the bytes of the records in batch
}

type decoded struct {
	r      state.Record
	index  int
	offset int64
	size   int          // the record's body in bytes
	after  wal.Position // where the WAL's valid prefix ends with it
}

const (
	pipelineBatch   = 256
	pipelineBytes   = 1 << 20
	pipelineBuffers = 32
)

// errApplyFailed stops the scan once the applier has failed; finish returns
// the applier's own error instead.
var errApplyFailed = errors.New("a record before this one was refused")

func startPipeline(apply func(decoded) error) *pipeline {
	p := &pipeline{apply: apply, full: make(chan []decoded, pipelineBuffers), empty: make(chan []decoded, pipelineBuffers), done: make(chan struct{})}
	for range pipelineBuffers - 1 {
		p.empty <- make([]decoded, 0, pipelineBatch)
	}
	p.batch = make([]decoded, 0, pipelineBatch)
	go p.run()
	return p
}

// run applies batches until the scanner closes full. After an error it keeps
// taking batches, unapplied, so that the scanner never waits for it.
func (p *pipeline) run() {
	defer close(p.done)
	for batch := range p.full {
		for i := 0; i < len(batch) && p.err == nil; i++ {
			if p.err = p.apply(batch[i]); p.err != nil {
				p.failed.Store(true)
			}
		}
		clear(batch) // the records applied are not kept alive by the buffer
		p.empty <- batch[:0]
	}
}

// add queues a decoded record, and reports errApplyFailed once the applier
// has refused one.
func (p *pipeline) add(d decoded) error {
	p.batch = append(p.batch, d)
	if p.bytes += d.size; len(p.batch) == pipelineBatch || p.bytes >= pipelineBytes {
		p.full <- p.batch
		p.batch, p.bytes = <-p.empty, 0
	}
	if p.failed.Load() {
		return errApplyFailed
	}
	return nil
}

// finish applies what is queued and returns the applier's error, if any.
func (p *pipeline) finish() error {
	if len(p.batch) > 0 {
		p.full <- p.batch
	}
	close(p.full)
	<-p.done
	return p.err
}

// RecordsSince hands fn, in order, every record of the WAL written at or
// after since, decoded and not applied: what a count over a recent span
// needs, at the cost of a scan (no state is built, no index read). whole
// is false when the WAL starts with a base written after since: records of
// the span were sealed in the history, and the caller must read through
// it.
func (h *Handle) RecordsSince(since int64, fn func(state.Record) error) (whole bool, err error) {
	whole = true
	log, err := wal.OpenAt(h.opts.Path, wal.Read, h.opts.LockTimeout, wal.Position{}, func(f wal.Frame) error {
		if at, ok := state.PeekAt(f.Body); ok && at < since {
			return nil // its checksum held: the rest of it is not needed
		}
		r, err := decodeFrame(f)
		switch {
		case err != nil:
			return damageAt(f, err)
		case r.Type == state.BaseBegin:
			whole = r.At < since
		case r.Type.IsBase(), r.At < since:
		default:
			return fn(r)
		}
		return nil
	})
	if err != nil {
		return false, h.openError(err)
	}
	log.Close()
	return whole, nil
}
