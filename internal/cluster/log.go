package cluster

import (
	"bytes"
	"io"
	"sync"
	"time"
)

// quietLog passes raft's log lines on, but each kind of line at most once
// per interval: a node that is down makes raft log a failed RPC on every
// heartbeat, which would bury everything else. A line's kind is its text
// without the timestamp and without digits (terms, indexes, ports, backoffs).
type quietLog struct {
	out      io.Writer
	interval time.Duration
	now      func() time.Time

	mu   sync.Mutex
	last map[string]time.Time
}

func newQuietLog(out io.Writer, interval time.Duration) *quietLog {
	return &quietLog{out: out, interval: interval, now: time.Now, last: map[string]time.Time{}}
}

func (q *quietLog) Write(p []byte) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, line := range bytes.SplitAfter(p, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		kind := string(bytes.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return -1
			}
			return r
		}, lineText(line)))
		now := q.now()
		if at, seen := q.last[kind]; seen && now.Sub(at) < q.interval {
			continue
		}
		q.last[kind] = now
		if _, err := q.out.Write(line); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// lineText is a log line without its leading timestamp.
func lineText(line []byte) []byte {
	if i := bytes.IndexByte(line, ' '); i >= 0 {
		return line[i+1:]
	}
	return line
}
