// Package histgen writes realistic leasewal histories for benchmarks and
// damage tests: tasks through their whole life with payloads of varied size,
// failures, expiries written by expire, late completions that are cancelled,
// extensions, and work-lease records. Every record is decided and applied by
// package state, so the history is one leasewal itself would write.
package histgen

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// Start is the time of the first record: 2026-01-01T00:00:00Z.
const Start = int64(1767225600000)

// Options shape a history.
type Options struct {
	Records int // at least this many records
	Waiting int // tasks left WAITING at the end, for lease benchmarks
}

// WriteFile writes a whole WAL file at path.
func WriteFile(path string, o Options) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	_, err = Write(f, o)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Write writes a whole WAL file to w and returns the final state.
func Write(w io.Writer, o Options) (*state.State, error) {
	g := &generator{st: state.New(), w: bufio.NewWriterSize(w, 1<<20), now: Start}
	if _, err := g.w.Write(wal.HeaderLine(wal.NewVersion)); err != nil {
		return nil, err
	}
	g.sum = wal.HeaderSeed()
	for i := 0; g.err == nil && g.st.LastSeq() < int64(o.Records); i++ {
		g.lifecycle(i)
	}
	for range o.Waiting {
		g.decide(g.st.DecideSubmit(state.Submit{Payload: "waiting", Window: state.Duration(24 * time.Hour * 365), Policy: state.RetryPolicy{MaxAttempts: 3}}, g.now))
	}
	if g.err == nil {
		g.err = g.w.Flush()
	}
	return g.st, g.err
}

type generator struct {
	st  *state.State
	w   *bufio.Writer
	sum uint32
	now int64
	err error
}

func (g *generator) commit(recs ...state.Record) {
	for _, r := range recs {
		if g.err != nil {
			return
		}
		r.Seq, r.At, r.Actor = g.st.LastSeq()+1, g.now, "histgen"
		if g.err = g.st.Apply(r); g.err != nil {
			return
		}
		body, err := state.EncodeRecord(r)
		if err != nil {
			g.err = err
			return
		}
		var frame []byte
		if frame, g.sum, g.err = wal.EncodeFrame(g.sum, body); g.err == nil {
			_, g.err = g.w.Write(frame)
		}
	}
}

func (g *generator) decide(d state.Decision, err error) state.Decision {
	if err != nil {
		g.err = fmt.Errorf("histgen: %w", err)
		return d
	}
	g.commit(d.Records...)
	return d
}

func (g *generator) decideWork(d state.WorkDecision, err error) {
	if err != nil {
		g.err = fmt.Errorf("histgen: %w", err)
		return
	}
	if d.Record != nil {
		g.commit(*d.Record)
	}
}

// lifecycle plays task i from submission to its end, and one work-lease step.
func (g *generator) lifecycle(i int) {
	payload := strings.Repeat("p", 1+(i*97)%300)
	if i%50 == 0 {
		payload = strings.Repeat("P", 1+(i*7919)%3000)
	}
	g.decide(g.st.DecideSubmit(state.Submit{Payload: payload, Window: state.Duration(10 * time.Minute),
		Policy: state.RetryPolicy{MaxAttempts: 3}, RequestID: fmt.Sprintf("job-%d", i)}, g.now))
	d := g.decide(g.st.DecideLease(state.LeaseRequest{Worker: fmt.Sprintf("W%d", i%4), Duration: 30 * time.Second}, g.now))
	switch i % 4 {
	case 0:
		g.decide(g.st.DecideComplete(d.TaskID, d.LeaseID, "", g.now))
	case 1:
		g.decide(g.st.DecideFail(d.TaskID, d.LeaseID, "flaky", false, g.now))
		d = g.decide(g.st.DecideLease(state.LeaseRequest{Worker: "W9", TaskID: d.TaskID, Duration: 30 * time.Second}, g.now))
		g.decide(g.st.DecideComplete(d.TaskID, d.LeaseID, "", g.now))
	case 2:
		g.now += 31_000
		g.decide(g.st.DecideExpire(g.now))
		g.decide(g.st.DecideComplete(d.TaskID, d.LeaseID, "", g.now)) // late: cancelled
		d = g.decide(g.st.DecideLease(state.LeaseRequest{Worker: "W8", TaskID: d.TaskID, Duration: 30 * time.Second}, g.now))
		g.decide(g.st.DecideFail(d.TaskID, d.LeaseID, "bad input", true, g.now))
	default:
		g.decide(g.st.DecideExtend(d.TaskID, d.LeaseID, time.Minute, g.now))
		g.decide(g.st.DecideComplete(d.TaskID, d.LeaseID, "", g.now))
	}
	// Each domain is a partition with its own consecutive offsets.
	domain, offset := fmt.Sprintf("domain %d", i%16), int64(i/16)
	g.decideWork(g.st.DecideAcquire(domain, offset))
	if dom, ok := g.st.Domain(domain); ok && dom.Lease != nil && dom.Lease.Offset != offset {
		g.decideWork(g.st.DecideSucceed(domain, dom.Lease.Token))
		g.decideWork(g.st.DecideAcquire(domain, dom.Backlog[0]))
	}
	g.now += 1000
}
