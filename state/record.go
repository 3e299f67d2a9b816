// Package state is leasewal's functional core: records, how each one changes
// the state (Apply), what a command means at a given time (Decide…), and the
// invariants. It is pure and deterministic: no files, no clock, no globals;
// time is always an argument, in unix milliseconds.
package state

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// RecordType names one kind of WAL record; each is one event of the seeds.
type RecordType string

// The task record types (docs/wal-format.md).
const (
	TaskCreated     RecordType = "TaskCreated"
	LeaseGranted    RecordType = "LeaseGranted"
	LeaseExtended   RecordType = "LeaseExtended"
	LeaseExpired    RecordType = "LeaseExpired"
	TaskCompleted   RecordType = "TaskCompleted"
	TaskCancelled   RecordType = "TaskCancelled"
	TaskFailed      RecordType = "TaskFailed"
	TaskDead        RecordType = "TaskDead"
	TaskAborted     RecordType = "TaskAborted"     // revision 2
	TaskRedacted    RecordType = "TaskRedacted"    // format version 3
	QueueLimited    RecordType = "QueueLimited"    // format version 3
	LeaseReleased   RecordType = "LeaseReleased"   // format version 3
	QueuePaused     RecordType = "QueuePaused"     // format version 3
	QueueResumed    RecordType = "QueueResumed"    // format version 3
	ScheduleAdded   RecordType = "ScheduleAdded"   // format version 3
	ScheduleRemoved RecordType = "ScheduleRemoved" // format version 3
	QueueRated      RecordType = "QueueRated"      // format version 4
)

// The records of a compaction's base (format version 3): a WAL that was
// compacted starts with one BaseBegin, its BaseParts and one BaseEnd, all
// with the seq of the last record they replace (see base.go).
const (
	BaseBegin RecordType = "BaseBegin"
	BasePart  RecordType = "BasePart"
	BaseEnd   RecordType = "BaseEnd"
)

// recordTypes lists every record type, tasks first, as help texts show them.
var recordTypes = []RecordType{TaskCreated, LeaseGranted, LeaseExtended, LeaseExpired, TaskCompleted, TaskCancelled,
	TaskFailed, TaskDead, TaskAborted, TaskRedacted, LeaseReleased, QueueLimited, QueueRated, QueuePaused, QueueResumed, ScheduleAdded, ScheduleRemoved, WorkAcquired, WorkEnqueued, WorkSucceeded, WorkFailed, BaseBegin, BasePart, BaseEnd}

// RecordTypeNames returns the names of all record types.
func RecordTypeNames() []string {
	names := make([]string, len(recordTypes))
	for i, t := range recordTypes {
		names[i] = string(t)
	}
	return names
}

// ParseRecordType accepts a record type's name in any case.
func ParseRecordType(name string) (RecordType, bool) {
	for _, t := range recordTypes {
		if strings.EqualFold(string(t), name) {
			return t, true
		}
	}
	return "", false
}

// The range of every time leasewal keeps, in unix ms: the years 0001 to 9999
// (internal/limits). Computed times saturate at these bounds, never wrap.
const (
	MinTime int64 = -62135596800000 // 0001-01-01T00:00:00Z
	MaxTime int64 = 253402300799999 // 9999-12-31T23:59:59.999Z
)

// NoWindow is the window of a task that has none: it waits for a worker
// as long as it takes. It is written as the longest duration there is
// ("2562047h47m16.854775807s"), which a version that knows no "none" reads
// as a window of 292 years.
const NoWindow = Duration(math.MaxInt64)

// NoDeadline is the deadline of a task without a window: later than any
// time a record can have, so no time reaches it.
const NoDeadline int64 = math.MaxInt64

// addTime is at+d, saturating at MaxTime.
func addTime(at, d int64) int64 {
	if d > MaxTime-at {
		return MaxTime
	}
	return at + d
}

// Duration is a time.Duration written as Go duration text ("30s") in records,
// so that a WAL reads like the seeds.
type Duration time.Duration

// String prints the duration as Go does ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }

// WindowText is a window as people read it: "none" for NoWindow.
func WindowText(w Duration) string {
	if w == NoWindow {
		return "none"
	}
	return w.String()
}

// MarshalText writes the duration as text ("1m30s"), which JSON quotes.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(d.String()), nil
}

// UnmarshalJSON reads duration text.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string like \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Millis converts the duration to milliseconds, the unit of all record times.
func (d Duration) Millis() int64 { return time.Duration(d).Milliseconds() }

// RetryPolicy says how often and how soon a task is retried.
type RetryPolicy struct {
	MaxAttempts int      `json:"max_attempts"`
	Backoff     Duration `json:"backoff"`
	BackoffMax  Duration `json:"backoff_max"`
}

// Record is one WAL record. Every record carries seq, at (unix ms), type and
// actor; the other fields belong to particular types and are omitted otherwise.
// actor is for audit only: no decision ever reads it.
type Record struct {
	// ChainFrom comes first because the WAL reads it from the body's first
	// bytes: only a BaseEnd has it (see the wal package's format).
	ChainFrom string `json:"chain_from,omitempty"`

	Seq   int64      `json:"seq"`
	At    int64      `json:"at"`
	Type  RecordType `json:"type"`
	Actor string     `json:"actor,omitempty"`

	TaskID      string       `json:"task_id,omitempty"`
	Payload     string       `json:"payload,omitempty"`
	Window      Duration     `json:"window,omitempty"`
	RetryPolicy *RetryPolicy `json:"retry_policy,omitempty"`
	RequestID   string       `json:"request_id,omitempty"`
	LeaseID     string       `json:"lease_id,omitempty"`
	WorkerID    string       `json:"worker_id,omitempty"`
	Attempt     int          `json:"attempt,omitempty"`
	Expiry      int64        `json:"expiry,omitempty"`
	Reason      string       `json:"reason,omitempty"`
	Permanent   bool         `json:"permanent,omitempty"`

	// Revision 2 (queue features): a TaskCreated of this revision carries all
	// of not_before, queue and priority, defaults included, so that replay
	// never reads configuration.
	// A LeaseReleased's not_before is when its task is eligible again.
	NotBefore    *int64 `json:"not_before,omitempty"`
	Queue        string `json:"queue,omitempty"`
	Priority     *int   `json:"priority,omitempty"`
	RequeuedFrom string `json:"requeued_from,omitempty"`

	Domain     string `json:"domain,omitempty"`
	Offset     *int64 `json:"offset,omitempty"`
	Token      string `json:"token,omitempty"`
	AcquiredAt int64  `json:"acquired_at,omitempty"`
	RetryCount int    `json:"retry_count,omitempty"`
	Outcome    string `json:"outcome,omitempty"`
	Hint       *int64 `json:"hint,omitempty"`
	MaxRetries *int   `json:"max_retries,omitempty"`

	// Dependencies (format version 4): a TaskCreated's after names the
	// tasks it waits to see COMPLETED, and after_ended those it waits to
	// see end whatever their outcome; its not_before is then its delay
	// after the last of them is met. A TaskDead's dependency names the task
	// whose end (not COMPLETED) ended it.
	After      []string `json:"after,omitempty"`
	AfterEnded []string `json:"after_ended,omitempty"`
	Dependency string   `json:"dependency,omitempty"`

	// Result is what a TaskCompleted's worker reported (format version 3).
	Result string `json:"result,omitempty"`
	// Limit is a QueueLimited's most current leases in its queue (absent:
	// no limit any more).
	Limit *int `json:"limit,omitempty"`
	// Rate is a QueueRated's rate (N/s, N/m, N/h; absent: no rate any
	// more), and Burst how many of its grants may come at once (format
	// version 4).
	Rate  string `json:"rate,omitempty"`
	Burst int    `json:"burst,omitempty"`
	// Until is when a QueuePaused's pause ends by itself (absent: when a
	// QueueResumed ends it).
	Until *int64 `json:"until,omitempty"`

	// Periodic tasks (format version 3): a ScheduleAdded names the schedule,
	// its every or cron (with tz) and catch_up, with the task it submits in
	// the TaskCreated fields; a firing's TaskCreated names the schedule and
	// the slot it was due at.
	Schedule string   `json:"schedule,omitempty"`
	Every    Duration `json:"every,omitempty"`
	Cron     string   `json:"cron,omitempty"`
	TZ       string   `json:"tz,omitempty"`
	CatchUp  string   `json:"catch_up,omitempty"`
	Slot     *int64   `json:"slot,omitempty"`

	// A compaction's base (format version 3).
	Parts    int    `json:"parts,omitempty"`     // BaseBegin: how many BaseParts follow
	KeptFrom *int64 `json:"kept_from,omitempty"` // BaseBegin: finished tasks that ended before were dropped
	History  string `json:"history,omitempty"`   // BaseBegin: "kept" (sealed segments) or "dropped"
	// Cut marks the BaseBegin of a base that cuts a history segment where
	// the history's retention starts: the state it loads says its history
	// starts where its snapshot says (as the state of the records it stands
	// for did), not at the cut, so that the bases after it are derived as
	// the compactions that made them did.
	Cut    bool   `json:"cut,omitempty"`
	Part   int    `json:"part,omitempty"`   // BasePart: its number, from 1
	Data   string `json:"data,omitempty"`   // BasePart: a piece of the state snapshot, base64
	Digest string `json:"digest,omitempty"` // BaseEnd: SHA-256 of the whole snapshot, hex
	Hash   string `json:"hash,omitempty"`   // BaseEnd: SHA-256 chain head of the records replaced, hex

	// Frame is where the record's frame starts in the WAL it was read from or
	// is written to (0: none yet); a long payload is held as that place.
	Frame int64 `json:"-"`
	// PayloadAt is a decided TaskCreated's payload when the state does not
	// hold it (a requeue's): the store reads it into Payload before writing.
	PayloadAt *PayloadRef `json:"-"`
}

// FormatVersion is the WAL format version a record needs: 4 for a rate or
// a dependency, 3
// for a base, a redaction and a completion's result, 2 for the record types
// and fields of revision 2, else 1.
func (r Record) FormatVersion() int {
	if r.Type == QueueRated || r.After != nil || r.AfterEnded != nil || r.Dependency != "" {
		return 4
	}
	if r.Type.IsBase() || r.Type == TaskRedacted || r.Type == QueueLimited || r.Type == LeaseReleased || r.Type == QueuePaused || r.Type == QueueResumed ||
		r.Type == ScheduleAdded || r.Type == ScheduleRemoved || r.Schedule != "" || r.Result != "" {
		return 3
	}
	if r.Type == TaskAborted || r.NotBefore != nil || r.Queue != "" || r.Priority != nil || r.RequeuedFrom != "" {
		return 2
	}
	return 1
}

// EncodeRecord returns the record's body as written in the WAL: exactly what
// encoding/json writes for it (TestEncodeRecordWritesWhatJSONWrites), field
// by field in the struct's order, without reflection.
func EncodeRecord(r Record) ([]byte, error) {
	if r.PayloadAt != nil {
		return nil, fmt.Errorf("%s %s: its payload was not read from the WAL", r.Type, r.TaskID)
	}
	w := recordWriter{b: make([]byte, 0, 320+len(r.Payload)+len(r.Result)+len(r.Data))}
	w.b = append(w.b, '{')
	w.text("chain_from", r.ChainFrom)
	w.number("seq", r.Seq)
	w.number("at", r.At)
	w.key("type")
	w.quote(string(r.Type))
	w.text("actor", r.Actor)
	w.text("task_id", r.TaskID)
	w.text("payload", r.Payload)
	w.duration("window", r.Window)
	if p := r.RetryPolicy; p != nil {
		w.key("retry_policy")
		w.b = append(w.b, '{')
		w.number("max_attempts", int64(p.MaxAttempts))
		w.key("backoff")
		w.quote(p.Backoff.String())
		w.key("backoff_max")
		w.quote(p.BackoffMax.String())
		w.b = append(w.b, '}')
	}
	w.text("request_id", r.RequestID)
	w.text("lease_id", r.LeaseID)
	w.text("worker_id", r.WorkerID)
	w.nonZero("attempt", int64(r.Attempt))
	w.nonZero("expiry", r.Expiry)
	w.text("reason", r.Reason)
	w.flag("permanent", r.Permanent)
	w.given("not_before", r.NotBefore)
	w.text("queue", r.Queue)
	w.givenInt("priority", r.Priority)
	w.text("requeued_from", r.RequeuedFrom)
	w.text("domain", r.Domain)
	w.given("offset", r.Offset)
	w.text("token", r.Token)
	w.nonZero("acquired_at", r.AcquiredAt)
	w.nonZero("retry_count", int64(r.RetryCount))
	w.text("outcome", r.Outcome)
	w.given("hint", r.Hint)
	w.givenInt("max_retries", r.MaxRetries)
	w.list("after", r.After)
	w.list("after_ended", r.AfterEnded)
	w.text("dependency", r.Dependency)
	w.text("result", r.Result)
	w.givenInt("limit", r.Limit)
	w.text("rate", r.Rate)
	w.nonZero("burst", int64(r.Burst))
	w.given("until", r.Until)
	w.text("schedule", r.Schedule)
	w.duration("every", r.Every)
	w.text("cron", r.Cron)
	w.text("tz", r.TZ)
	w.text("catch_up", r.CatchUp)
	w.given("slot", r.Slot)
	w.nonZero("parts", int64(r.Parts))
	w.given("kept_from", r.KeptFrom)
	w.text("history", r.History)
	w.flag("cut", r.Cut)
	w.nonZero("part", int64(r.Part))
	w.text("data", r.Data)
	w.text("digest", r.Digest)
	w.text("hash", r.Hash)
	return append(w.b, '}'), nil
}

// recordWriter appends a record's fields as encoding/json does, leaving out
// the empty ones of omitempty fields.
type recordWriter struct{ b []byte }

func (w *recordWriter) key(k string) {
	if w.b[len(w.b)-1] != '{' {
		w.b = append(w.b, ',')
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, k...)
	w.b = append(w.b, '"', ':')
}

// quote appends s as a JSON string. Text of printable ASCII that JSON and
// HTML leave alone (ids, names, most payloads) is copied; anything else is
// escaped by encoding/json itself.
func (w *recordWriter) quote(s string) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			w.b = append(w.b, q...)
			return
		}
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *recordWriter) text(k, s string) {
	if s != "" {
		w.key(k)
		w.quote(s)
	}
}

func (w *recordWriter) number(k string, n int64) {
	w.key(k)
	w.b = strconv.AppendInt(w.b, n, 10)
}

func (w *recordWriter) nonZero(k string, n int64) {
	if n != 0 {
		w.number(k, n)
	}
}

func (w *recordWriter) given(k string, p *int64) {
	if p != nil {
		w.number(k, *p)
	}
}

func (w *recordWriter) givenInt(k string, p *int) {
	if p != nil {
		w.number(k, int64(*p))
	}
}

func (w *recordWriter) flag(k string, v bool) {
	if v {
		w.key(k)
		w.b = append(w.b, "true"...)
	}
}

func (w *recordWriter) duration(k string, d Duration) {
	if d != 0 {
		w.key(k)
		w.quote(d.String())
	}
}

func (w *recordWriter) list(k string, xs []string) {
	if len(xs) == 0 {
		return
	}
	w.key(k)
	w.b = append(w.b, '[')
	for i, x := range xs {
		if i > 0 {
			w.b = append(w.b, ',')
		}
		w.quote(x)
	}
	w.b = append(w.b, ']')
}
