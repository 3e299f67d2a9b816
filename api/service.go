package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
)

// Service is every operation of leasewal, whichever side decides it: the
// local one (leasewal/service, on a WAL of this machine) or a server's
// (leasewal/client, over HTTP). The command line, the runner and a Go
// program call it the same way. A refusal is an *Error (or a
// *UsageError), no eligible task an *Empty, a lease that is not the
// authority any more a *Cancelled.
type Service interface {
	Submit(context.Context, SubmitRequest) (Ack, error)
	// SubmitBatch creates every task or none, in one write.
	SubmitBatch(context.Context, []SubmitRequest) ([]Ack, error)
	Lease(context.Context, LeaseRequest) (Lease, error)
	Extend(context.Context, ExtendRequest) (Extended, error)
	Complete(context.Context, CompleteRequest) (Committed, error)
	Fail(context.Context, FailRequest) (Failed, error)
	Release(context.Context, ReleaseRequest) (Released, error)
	Heartbeat(context.Context, HeartbeatRequest) (Heartbeat, error)
	Expire(context.Context, ExpireRequest) (Expired, error)
	Abort(context.Context, AbortRequest) (Aborted, error)
	Redact(context.Context, RedactRequest) (Redacted, error)
	Stats(context.Context, StatsRequest) (Stats, error)
	QueueList(context.Context, QueueListRequest) (QueueList, error)
	QueueLimit(context.Context, QueueLimitRequest) (QueueLimit, error)
	QueueRate(context.Context, QueueRateRequest) (QueueRate, error)
	Pause(context.Context, PauseRequest) (Paused, error)
	Resume(context.Context, ResumeRequest) (Resumed, error)
	ScheduleAdd(context.Context, ScheduleAddRequest) (ScheduleAdded, error)
	ScheduleRemove(context.Context, ScheduleRemoveRequest) (ScheduleRemoved, error)
	ScheduleList(context.Context, ScheduleListRequest) (Schedules, error)
	Requeue(context.Context, RequeueRequest) (Ack, error)
	// RequeueAll requeues every FAILED or DEAD task selected that was
	// not requeued yet, in one write.
	RequeueAll(context.Context, RequeueAllRequest) (RequeuedAll, error)
	Why(context.Context, WhyRequest) (Why, error)
	Wait(context.Context, WaitRequest) (Wait, error)
	// Inspect answers the tasks named (one named alone with its records),
	// or every task; List hands every task on one at a time instead.
	Inspect(context.Context, InspectRequest) (Inspect, error)
	List(context.Context, InspectRequest, Listing) error
	Workers(context.Context) (Workers, error)
	// Log hands each record that matches on to each, in order.
	Log(context.Context, LogRequest, func(Record) error) (LogEnd, error)
	// Changes signals whenever the WAL may have changed, until the
	// context is done: a follower of the log, or a worker waiting for a
	// task, looks again then.
	Changes(context.Context) (<-chan struct{}, error)
	// Compact compacts the WAL: a server compacts its own (beside its
	// batches; a cluster's every node at the same record).
	Compact(context.Context, CompactRequest) (Compacted, error)
	WorkAcquire(context.Context, WorkAcquireRequest) (Work, error)
	WorkSucceed(context.Context, WorkSucceedRequest) (Work, error)
	WorkFail(context.Context, WorkFailRequest) (Work, error)
	WorkInspect(context.Context, WorkInspectRequest) (WorkInspect, error)
}

// Listing receives a listing of every task: its head (the counts and the
// summary, no tasks) first, then each task.
type Listing struct {
	Head func(Inspect) error
	Task func(Task) error
}

// StreamEnd is the last line of a streamed answer of the HTTP API (log,
// inspect's listing): what the whole read came to. A client reads the
// stream's lines as they come and trusts them only once this line has
// come; a stream without it was cut short.
type StreamEnd struct {
	End  string  `json:"end"` // OK
	Exit int     `json:"exit"`
	Log  *LogEnd `json:"log,omitempty"` // a log's: where it stood
}

// IsStreamEnd says whether a line of a streamed answer is its StreamEnd.
func IsStreamEnd(line []byte) bool { return bytes.HasPrefix(line, []byte(`{"end":`)) }

// LogEnd is where the log stood when a Log call read it.
type LogEnd struct {
	// FirstAt is the time of the first record the call read: the first
	// record held (always when it asked From the first record, or with
	// Since or Until). After a compaction that dropped its history, it is
	// the time of the first record after the base.
	FirstAt string `json:"first_at,omitempty"`
	LastSeq int64  `json:"last_seq"`
	// Compacted says, when records asked for are no longer held (neither
	// in the WAL nor in a sealed segment), where they went.
	Compacted string `json:"compacted,omitempty"`
}

// OutcomeOf is an answer's result where it picks an exit code of its own
// (a wait's TIMEOUT or UNREACHABLE), else OK: every other answer exits 0,
// and EMPTY and CANCELLED are errors of their own.
func OutcomeOf(answer any) Outcome {
	if r, ok := answer.(interface{ Outcome() Outcome }); ok {
		return r.Outcome()
	}
	return ResultOK
}

// OutcomeExit is the exit code of each answer that is not an error: EMPTY
// 4, CANCELLED 3, a wait's TIMEOUT or UNREACHABLE 9, every other 0.
func OutcomeExit(o Outcome) int {
	switch o {
	case ResultCancelled:
		return ExitCancelled
	case ResultEmpty:
		return ExitNotFound
	case ResultTimeout, ResultUnreachable:
		return ExitWaitedOut
	}
	return ExitOK
}

// Hand hands an answer with every task in it on to the listing: its head
// first, then each task.
func (l Listing) Hand(v Inspect) error {
	tasks := v.Tasks
	v.Tasks = []Task{}
	if err := l.Head(v); err != nil {
		return err
	}
	for _, t := range tasks {
		if err := l.Task(t); err != nil {
			return err
		}
	}
	return nil
}

// JSONListing is a listing that writes to w, a task at a time, exactly the
// JSON document of the Inspect answer with every task in it (one line, as
// json.Encoder without HTML escaping writes it); end closes the document.
func JSONListing(w io.Writer) (l Listing, end func() error) {
	first := true
	encode := func(v any) ([]byte, error) {
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		err := enc.Encode(v)
		return bytes.TrimSuffix(b.Bytes(), []byte("\n")), err
	}
	l.Head = func(v Inspect) error {
		b, err := encode(v)
		if err != nil {
			return err
		}
		prefix, ok := bytes.CutSuffix(b, []byte("[]}"))
		if !ok {
			return errors.New("internal error: a listing's head does not end with its tasks")
		}
		_, err = w.Write(append(prefix, '['))
		return err
	}
	l.Task = func(t Task) error {
		b, err := encode(t)
		if err != nil {
			return err
		}
		if !first {
			b = append([]byte{','}, b...)
		}
		first = false
		_, err = w.Write(b)
		return err
	}
	return l, func() error { _, err := io.WriteString(w, "]}\n"); return err }
}
