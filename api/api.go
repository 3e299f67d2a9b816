// Package api is leasewal's typed interface, as plain types: the requests
// each operation takes, the answers it gives, and the errors, each with the
// exit code the command line exits with. The HTTP API carries them as JSON
// (the field names are the command's flag names), the Go client
// (leasewal/client) sends and receives them, and the command line prints
// them. Like River's rivertype, it holds no behaviour beyond what a value
// says of itself.
package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// The exit codes: every command exits with one of these, and every answer
// of the HTTP API carries one (the Leasewal-Exit header).
const (
	ExitOK          = 0
	ExitInternal    = 1
	ExitUsage       = 2
	ExitCancelled   = 3
	ExitNotFound    = 4
	ExitDamaged     = 5
	ExitLocked      = 6
	ExitContract    = 7
	ExitAnswerLost  = 8
	ExitWaitedOut   = 9
	ExitUnknownSent = 10
	ExitTasksFailed = 11 // run: some of the tasks it leased ended FAILED
)

// LinesUpgrade is the protocol of the lines door: GET /v1/lines with
// "Connection: Upgrade" and "Upgrade: leasewal-lines" switches an HTTP/1.1
// connection to one request a line, "<operation> <JSON body>\n", each
// answered by "<HTTP status> <exit code> <JSON answer>\n" before the next
// line is read, as POST /v1/<operation> would answer it. It takes the
// LineOperations, a lease only without a wait.
const LinesUpgrade = "leasewal-lines"

// LineOperations are the operations the lines door takes: those that never
// wait and whose answer is one JSON object.
var LineOperations = []string{"submit", "lease", "extend", "complete", "fail", "release", "heartbeat"}

// Outcome is an answer's result (its JSON "result").
type Outcome string

// The outcomes of the answers.
const (
	ResultAck         Outcome = "ACK"
	ResultLeased      Outcome = "LEASED"
	ResultEmpty       Outcome = "EMPTY"
	ResultExtended    Outcome = "EXTENDED"
	ResultCancelled   Outcome = "CANCELLED"
	ResultCommitted   Outcome = "COMMITTED"
	ResultRetry       Outcome = "RETRY"
	ResultFailed      Outcome = "FAILED"
	ResultOK          Outcome = "OK"
	ResultReleased    Outcome = "RELEASED"
	ResultTimeout     Outcome = "TIMEOUT"
	ResultUnreachable Outcome = "UNREACHABLE"
	ResultInterrupted Outcome = "INTERRUPTED"
	// A work lease's outcomes.
	ResultAcquired         Outcome = "ACQUIRED"
	ResultAlreadyAcquired  Outcome = "ALREADY_ACQUIRED"
	ResultEnqueued         Outcome = "ENQUEUED"
	ResultAlreadyProcessed Outcome = "ALREADY_PROCESSED"
	ResultAlreadyFailed    Outcome = "ALREADY_FAILED"
	ResultNoBacklog        Outcome = "NO_BACKLOG"
	ResultNextHint         Outcome = "NEXT_HINT"
	ResultRetryScheduled   Outcome = "RETRY_SCHEDULED"
	ResultGiveUpNoBacklog  Outcome = "GIVE_UP_NO_BACKLOG"
	ResultGiveUpNextHint   Outcome = "GIVE_UP_NEXT_HINT"
)

// SubmitRequest creates a task (submit).
type SubmitRequest struct {
	Payload     string `json:"payload"`
	Window      string `json:"window,omitempty"`       // a duration such as 5m; default none: no deadline
	MaxAttempts *int   `json:"max_attempts,omitempty"` // default 3
	Backoff     string `json:"backoff,omitempty"`
	BackoffMax  string `json:"backoff_max,omitempty"`
	RequestID   string `json:"request_id,omitempty"` // idempotency key
	Delay       string `json:"delay,omitempty"`
	NotBefore   string `json:"not_before,omitempty"` // RFC 3339 or unix ms
	Queue       string `json:"queue,omitempty"`
	Priority    int    `json:"priority,omitempty"`
	// After names the tasks it waits to see COMPLETED (one that ends
	// otherwise ends it DEAD), AfterEnded those it waits to see end: task
	// ids, or, in a batch, request ids of its earlier lines. Its delay and
	// window count from when the last is met.
	After      []string `json:"after,omitempty"`
	AfterEnded []string `json:"after_ended,omitempty"`
	Actor      string   `json:"actor,omitempty"` // recorded for audit only
}

// LeaseRequest leases the next eligible task to a worker (lease).
type LeaseRequest struct {
	Worker    string `json:"worker"`
	Duration  string `json:"duration,omitempty"` // default 30s
	Queue     List   `json:"queue,omitempty"`    // the queues to take from (default: all)
	Task      string `json:"task,omitempty"`     // this task rather than the next eligible one
	RequestID string `json:"request_id,omitempty"`
	// Wait, if set, waits up to this long for a task; the server waits at
	// most five minutes a request, and the client repeats it until Wait
	// has run out.
	Wait  string `json:"wait,omitempty"`
	Actor string `json:"actor,omitempty"`
}

// ExtendRequest extends a current lease (extend).
type ExtendRequest struct {
	Task     string `json:"task"`
	Lease    string `json:"lease"`
	Duration string `json:"duration,omitempty"` // default 30s
	Actor    string `json:"actor,omitempty"`
}

// CompleteRequest commits a task's result under its current lease (complete).
type CompleteRequest struct {
	Task  string `json:"task"`
	Lease string `json:"lease"`
	// Result is what the worker reports (at most 64 KiB of UTF-8); a
	// repeat must give the same one.
	Result string `json:"result,omitempty"`
	// Next, if set, also leases the next eligible task to a worker, in the
	// same write and fsync, whatever became of the completion (the worker
	// is free either way): one request and one fsync a task for a worker
	// that goes on. Repeated after a lost answer, it answers the same next
	// lease (its request id is next-after-<lease>).
	Next  *NextLease `json:"next,omitempty"`
	Actor string     `json:"actor,omitempty"`
}

// NextLease is the lease a completion takes next (CompleteRequest.Next).
type NextLease struct {
	Worker   string `json:"worker"`
	Duration string `json:"duration,omitempty"` // default 30s
	Queue    List   `json:"queue,omitempty"`
}

// Next is the next lease of a completion that asked for one: the lease, or
// none (nothing was eligible) and when a task becomes eligible, if known.
type Next struct {
	Lease          *Lease  `json:"lease"`
	NextEligibleAt *string `json:"next_eligible_at"`
}

// FailRequest reports a failed attempt under the current lease (fail).
type FailRequest struct {
	Task      string `json:"task"`
	Lease     string `json:"lease"`
	Reason    string `json:"reason"`
	Permanent bool   `json:"permanent,omitempty"`
	Actor     string `json:"actor,omitempty"`
}

// ReleaseRequest gives the current lease back (release): the task waits
// Delay (default none) and the attempt does not count.
type ReleaseRequest struct {
	Task  string `json:"task"`
	Lease string `json:"lease"`
	Delay string `json:"delay,omitempty"`
	Actor string `json:"actor,omitempty"`
}

// HeartbeatRequest notes that a worker is alive (heartbeat); it writes
// nothing to the WAL.
type HeartbeatRequest struct {
	Worker string `json:"worker"`
	Actor  string `json:"actor,omitempty"`
}

// ExpireRequest records what time has revoked (expire).
type ExpireRequest struct {
	Actor string `json:"actor,omitempty"`
}

// AbortRequest ends a waiting or leased task (abort): DEAD, its lease no
// longer counts.
type AbortRequest struct {
	Task   string `json:"task"`
	Reason string `json:"reason"`
	Actor  string `json:"actor,omitempty"`
}

// RedactRequest has a task's payload no longer served (redact): a secret
// pasted into a payload can be removed; the next compaction drops it from
// the WAL.
type RedactRequest struct {
	Task   string `json:"task"`
	Reason string `json:"reason"`
	Actor  string `json:"actor,omitempty"`
}

// QueueLimitRequest sets (Limit 1 or more) or lifts (Limit absent) the
// most current leases of a queue (queue limit).
type QueueLimitRequest struct {
	Queue string `json:"queue"`
	Limit *int   `json:"limit,omitempty"`
	Actor string `json:"actor,omitempty"`
}

// QueueLimit is a queue's limit set or lifted (OK), or found as asked
// already (Duplicate).
type QueueLimit struct {
	Result    Outcome `json:"result"`
	Queue     string  `json:"queue"`
	Limit     *int    `json:"limit"` // null: none
	Duplicate bool    `json:"duplicate"`
}

// QueueRateRequest sets or lifts the rate of a queue (queue rate): at most
// Burst + rate × t of its tasks leased in any span t. Rate is N/s, N/m or
// N/h, or none to lift it; Burst absent is one second's worth (at least 1).
type QueueRateRequest struct {
	Queue string `json:"queue"`
	Rate  string `json:"rate"`
	Burst *int   `json:"burst,omitempty"`
	Actor string `json:"actor,omitempty"`
}

// QueueRate is a queue's rate set or lifted (OK), or found as asked already
// (Duplicate).
type QueueRate struct {
	Result    Outcome `json:"result"`
	Queue     string  `json:"queue"`
	Rate      *string `json:"rate"`  // null: none
	Burst     int     `json:"burst"` // 0 with no rate
	Duplicate bool    `json:"duplicate"`
}

// RatedQueue is a queue's rate as stats shows it.
type RatedQueue struct {
	Queue string `json:"queue"`
	Rate  string `json:"rate"`
	Burst int    `json:"burst"`
	// NextGrantAt is when the rate allows a grant again (null: now).
	NextGrantAt *string `json:"next_grant_at"`
	// HeldBack is how many leases the rate answered EMPTY since the
	// server started (null: not counted, as by a one-shot command).
	HeldBack *int64 `json:"held_back"`
}

// PauseRequest pauses a queue (pause): it leases nothing, and its tasks'
// windows stand still, for For (empty: until a resume).
type PauseRequest struct {
	Queue  string `json:"queue"`
	For    string `json:"for,omitempty"`
	Reason string `json:"reason,omitempty"`
	Actor  string `json:"actor,omitempty"`
}

// ResumeRequest ends a queue's pause (resume).
type ResumeRequest struct {
	Queue string `json:"queue"`
	Actor string `json:"actor,omitempty"`
}

// PausedQueue is a queue's pause: since when, until when (null: until a
// resume), and why.
type PausedQueue struct {
	Queue  string  `json:"queue"`
	Since  string  `json:"since"`
	Until  *string `json:"until"`
	Reason string  `json:"reason"`
}

// Paused answers a pause (OK): the queue's pause as it stands, a
// Duplicate when the queue was paused already.
type Paused struct {
	Result Outcome `json:"result"`
	PausedQueue
	Duplicate bool `json:"duplicate"`
}

// Resumed answers a resume (OK): the pause that ended.
type Resumed struct {
	Result Outcome `json:"result"`
	PausedQueue
	ResumedAt string `json:"resumed_at"`
}

// ScheduleAddRequest adds a periodic task (schedule add): every Every, or
// at each time of the Cron expression in TZ; each firing submits Task.
type ScheduleAddRequest struct {
	Name    string        `json:"name"`
	Every   string        `json:"every,omitempty"`
	Cron    string        `json:"cron,omitempty"`
	TZ      string        `json:"tz,omitempty"`
	CatchUp string        `json:"catch_up,omitempty"` // none, last (default) or all
	Task    SubmitRequest `json:"task"`
	Actor   string        `json:"actor,omitempty"`
}

// ScheduleRemoveRequest removes a schedule (schedule rm).
type ScheduleRemoveRequest struct {
	Name  string `json:"name"`
	Actor string `json:"actor,omitempty"`
}

// ScheduleListRequest lists the schedules (schedule ls).
type ScheduleListRequest struct{}

// Schedule is a periodic task: when it fires, what it submits, when it
// last fired and when it fires next.
type Schedule struct {
	Name        string  `json:"name"`
	Every       string  `json:"every,omitempty"`
	Cron        string  `json:"cron,omitempty"`
	TZ          string  `json:"tz,omitempty"`
	CatchUp     string  `json:"catch_up"`
	Payload     string  `json:"payload"`
	Queue       string  `json:"queue"`
	Priority    int     `json:"priority"`
	Window      string  `json:"window"`
	MaxAttempts int     `json:"max_attempts"`
	AddedAt     string  `json:"added_at"`
	LastSlot    *string `json:"last_slot"`
	NextSlot    *string `json:"next_slot"`
}

// ScheduleAdded answers a schedule add (OK), a Duplicate when the same
// schedule exists.
type ScheduleAdded struct {
	Result Outcome `json:"result"`
	Schedule
	Duplicate bool `json:"duplicate"`
}

// ScheduleRemoved answers a schedule rm (OK).
type ScheduleRemoved struct {
	Result Outcome `json:"result"`
	Name   string  `json:"name"`
}

// Schedules lists every schedule (OK), by name.
type Schedules struct {
	Result    Outcome    `json:"result"`
	At        string     `json:"at"`
	Schedules []Schedule `json:"schedules"`
}

// RequeueRequest runs a FAILED or DEAD task again, as a new task (requeue);
// its answer is an Ack.
type RequeueRequest struct {
	Task      string `json:"task"`
	RequestID string `json:"request_id,omitempty"`
	// WithDependents runs again, in the same write, the tasks the task's
	// end ended (and theirs in turn), each waiting for the new task.
	WithDependents bool   `json:"with_dependents,omitempty"`
	Actor          string `json:"actor,omitempty"`
}

// RequeueAllRequest runs again every FAILED or DEAD task it selects that
// was not requeued yet, each as a new task, in one write (requeue --state).
type RequeueAllRequest struct {
	State List   `json:"state"`           // FAILED, DEAD or both
	Queue string `json:"queue,omitempty"` // "": every queue
	Limit int    `json:"limit,omitempty"` // at most this many (the first created); default and most 20,000
	Actor string `json:"actor,omitempty"`
}

// RequeuedAll answers a bulk requeue (OK): each new task and the task it
// runs again, and how many selected tasks are left for another requeue.
type RequeuedAll struct {
	Result Outcome       `json:"result"`
	Tasks  []RequeuedOne `json:"tasks"`
	More   int           `json:"more"` // selected past the limit: a requeue again takes them
}

// RequeuedOne is a new task of a bulk requeue.
type RequeuedOne struct {
	TaskID       string `json:"task_id"`
	RequeuedFrom string `json:"requeued_from"`
}

// CompactRequest compacts the WAL (compact): the finished tasks that ended
// within KeepFinished stay (default 7d), the history segments older than
// KeepHistory are deleted (default 30d), Drop keeps no history at all.
type CompactRequest struct {
	KeepFinished string `json:"keep_finished,omitempty"`
	KeepHistory  string `json:"keep_history,omitempty"`
	Drop         bool   `json:"drop,omitempty"`
	Actor        string `json:"actor,omitempty"`
}

// Compacted is a compaction's answer (OK): the records it replaced (0:
// nothing followed the last one), the bytes and tasks before and after,
// the history segment it sealed and those it deleted.
type Compacted struct {
	Result       Outcome  `json:"result"`
	Seq          int64    `json:"seq"`
	At           string   `json:"at"`
	KeptFrom     string   `json:"kept_from"`
	Records      int      `json:"records"`
	BytesBefore  int64    `json:"bytes_before"`
	BytesAfter   int64    `json:"bytes_after"`
	TasksKept    int      `json:"tasks_kept"`
	TasksDropped int      `json:"tasks_dropped"`
	Segment      string   `json:"segment"`
	Expired      []string `json:"expired"`
	HistoryFrom  int64    `json:"history_from"` // the first record the history holds (0: none)
	// Redacted counts the redacted tasks whose payloads the history may
	// still hold.
	Redacted int `json:"redacted"`
}

// WhyRequest asks why a task is where it is, and when it can run (why).
type WhyRequest struct {
	Task string `json:"task"`
}

// Ack is the answer of a submit (or a requeue): the task it created, or
// the one its request id created before (Duplicate).
type Ack struct {
	Result       Outcome  `json:"result"`
	TaskID       string   `json:"task_id"`
	RequestID    string   `json:"request_id"`
	Duplicate    bool     `json:"duplicate"`
	Queue        string   `json:"queue"`
	Priority     int      `json:"priority"`
	AvailableAt  *string  `json:"available_at"` // null: when what it waits for is met
	Deadline     *string  `json:"deadline"`     // null: the task has no window (yet)
	RequeuedFrom string   `json:"requeued_from,omitempty"`
	WaitingFor   []string `json:"waiting_for,omitempty"`
	// A requeue's: the tasks its old task's end ended, run again with it
	// (with_dependents), or, without, those that stay DEAD.
	Dependents     []RequeuedOne `json:"dependents,omitempty"`
	DeadDependents []string      `json:"dead_dependents,omitempty"`
	Window         string        `json:"window"` // the execution window, such as 5m0s, or none
	MaxAttempts    int           `json:"max_attempts"`
}

// Lease is a lease granted (LEASED).
type Lease struct {
	Result    Outcome `json:"result"`
	TaskID    string  `json:"task_id"`
	LeaseID   string  `json:"lease_id"`
	WorkerID  string  `json:"worker_id"`
	Attempt   int     `json:"attempt"`
	Expiry    string  `json:"expiry"`
	Deadline  *string `json:"deadline"` // the task's: its window closes then, whatever the lease (null: no window)
	Payload   string  `json:"payload"`
	Duplicate bool    `json:"duplicate"`
}

// Empty is a lease that found no task (EMPTY, exit 4). The Go client
// returns it as the error of Lease.
type Empty struct {
	Result         Outcome `json:"result"`
	TaskID         string  `json:"task_id,omitempty"`
	Reason         string  `json:"reason"`
	NextEligibleAt *string `json:"next_eligible_at"` // when a task becomes eligible, if known
	Live           int     `json:"live"`             // tasks not yet ended
}

func (e *Empty) Error() string { return "EMPTY: " + e.Reason }

// Cancelled is a call under a lease that is not the task's authority any
// more (CANCELLED, exit 3): what it reported was recorded as cancelled. The
// Go client returns it as the error of Extend, Complete and Fail.
type Cancelled struct {
	Result  Outcome `json:"result"`
	TaskID  string  `json:"task_id"`
	LeaseID string  `json:"lease_id"`
	Reason  string  `json:"reason"`
	Next    *Next   `json:"next,omitempty"` // a completion's that asked for it
}

func (e *Cancelled) Error() string {
	return fmt.Sprintf("CANCELLED: lease %s of %s is not the task's authority any more: %s", e.LeaseID, e.TaskID, e.Reason)
}

// Extended is a lease extended (EXTENDED).
type Extended struct {
	Result  Outcome `json:"result"`
	TaskID  string  `json:"task_id"`
	LeaseID string  `json:"lease_id"`
	Expiry  string  `json:"expiry"`
}

// Committed is a task completed (COMMITTED).
type Committed struct {
	Result    Outcome `json:"result"`
	TaskID    string  `json:"task_id"`
	LeaseID   string  `json:"lease_id"`
	Duplicate bool    `json:"duplicate"`
	Next      *Next   `json:"next,omitempty"` // when the request asked for it
}

// Failed is a failed attempt recorded (RETRY: the task waits for another
// attempt; FAILED: it has none left).
type Failed struct {
	Result    Outcome `json:"result"`
	TaskID    string  `json:"task_id"`
	LeaseID   string  `json:"lease_id"`
	State     string  `json:"state"`
	Attempt   int     `json:"attempt"`
	NotBefore string  `json:"not_before,omitempty"`
	Duplicate bool    `json:"duplicate"`
}

// Released is the answer to a release: the task is WAITING from NotBefore,
// with Attempt attempts counted so far.
type Released struct {
	Result    Outcome `json:"result"`
	TaskID    string  `json:"task_id"`
	LeaseID   string  `json:"lease_id"`
	State     string  `json:"state"`
	Attempt   int     `json:"attempt"`
	NotBefore string  `json:"not_before"`
	Duplicate bool    `json:"duplicate"`
}

// HeldLease is a lease a worker holds.
type HeldLease struct {
	TaskID  string `json:"task_id"`
	LeaseID string `json:"lease_id"`
	Expiry  string `json:"expiry"`
}

// Heartbeat is a heartbeat noted (OK), with the leases the worker holds.
type Heartbeat struct {
	Result   Outcome     `json:"result"`
	WorkerID string      `json:"worker_id"`
	At       string      `json:"at"`
	Leases   []HeldLease `json:"leases"`
}

// Transition is a record expire wrote: a lease that lapsed, a task whose
// window closed, and the task's state after it.
type Transition struct {
	Seq     int64  `json:"seq"`
	Type    string `json:"type"`
	TaskID  string `json:"task_id"`
	LeaseID string `json:"lease_id,omitempty"`
	State   string `json:"state"`
}

// Expired is expire's answer (OK): what it wrote, perhaps nothing.
type Expired struct {
	Result      Outcome      `json:"result"`
	Transitions []Transition `json:"transitions"`
}

// Aborted is a task aborted (OK), or found aborted already (Duplicate).
type Aborted struct {
	Result    Outcome `json:"result"`
	TaskID    string  `json:"task_id"`
	State     string  `json:"state"`
	Reason    string  `json:"reason"`
	LeaseID   *string `json:"lease_id"` // the lease that stopped counting, if any
	Duplicate bool    `json:"duplicate"`
}

// Redacted is a task's payload redacted (OK), or found redacted already
// (Duplicate, with the first reason).
type Redacted struct {
	Result    Outcome `json:"result"`
	TaskID    string  `json:"task_id"`
	State     string  `json:"state"`
	Reason    string  `json:"reason"`
	Duplicate bool    `json:"duplicate"`
}

// QueueListRequest lists the queues (queue ls).
type QueueListRequest struct{}

// QueueList is the queues that hold a task not ended as recorded, by name
// (OK): read from the index's keys, without reading a task, whatever the
// backlog; stats counts them.
type QueueList struct {
	Result Outcome  `json:"result"`
	Queues []string `json:"queues"`
}

// StatsRequest asks for the figures an operator watches (stats, GET
// /metrics): of every queue, or of one.
type StatsRequest struct {
	Queue string `json:"queue,omitempty"`
	// Recent is a span back from now (1h): each queue also counts the
	// tasks that finished in it, from the records of that span; "": none.
	Recent string `json:"recent,omitempty"`
}

// Stats is the figures an operator watches (OK): the unfinished tasks of
// each queue, how long the oldest eligible one has waited, and how many
// records of each type the WAL's history holds (counters that compaction
// keeps). Queues lists the MaxStatsQueues busiest queues by name; the rest
// are summed in Others (no queue's name can be taken for it), so that a
// monitoring system's series stay bounded.
type Stats struct {
	Result  Outcome          `json:"result"`
	At      string           `json:"at"`
	LastSeq int64            `json:"last_seq"`
	Recent  string           `json:"recent,omitempty"` // the span each queue's Finished counts
	Queues  []QueueStats     `json:"queues"`
	Others  *OtherQueues     `json:"others"` // null: every queue is named
	Paused  []PausedQueue    `json:"paused"`
	Rated   []RatedQueue     `json:"rated"`
	Records map[string]int64 `json:"records"`
}

// MaxStatsQueues is how many queues Stats names; the others are summed.
const MaxStatsQueues = 50

// OtherQueues sums the queues Stats does not name.
type OtherQueues struct {
	Queues   int `json:"queues"`
	Waiting  int `json:"waiting"`
	Eligible int `json:"eligible"`
	Blocked  int `json:"blocked"`
	Leased   int `json:"leased"`
	// OldestEligibleAgeMs is the longest any of them has had a task
	// eligible.
	OldestEligibleAgeMs int64 `json:"oldest_eligible_age_ms"`
}

// QueueStats is one queue's unfinished tasks.
type QueueStats struct {
	Queue    string `json:"queue"`
	Waiting  int    `json:"waiting"`
	Eligible int    `json:"eligible"` // waiting and leasable now
	Blocked  int    `json:"blocked"`  // waiting for another task (among waiting)
	Leased   int    `json:"leased"`
	// OldestEligibleAgeMs is how long the task eligible longest has been
	// eligible (0: none is): the queue's latency.
	OldestEligibleAgeMs int64 `json:"oldest_eligible_age_ms"`
	// Finished is the tasks that ended within the request's Recent span
	// (null: none asked for).
	Finished *Finished `json:"finished,omitempty"`
}

// Finished is how many of a queue's tasks ended in a span, in each final
// state, and its completions per minute over the span (its throughput).
type Finished struct {
	Completed          int     `json:"completed"`
	Failed             int     `json:"failed"`
	Dead               int     `json:"dead"`
	CompletedPerMinute float64 `json:"completed_per_minute"`
}

// Why says why a task is where it is (OK): in a sentence, and in fields.
type Why struct {
	Result     Outcome `json:"result"`
	TaskID     string  `json:"task_id"`
	State      string  `json:"state"`
	Eligible   bool    `json:"eligible"`
	EligibleAt *string `json:"eligible_at"`
	Ahead      int     `json:"ahead"`   // tasks a lease would take first
	Because    string  `json:"because"` // a word: eligible, delayed, leased, …
	Queue      string  `json:"queue"`
	Priority   int     `json:"priority"`
	Sentence   string  `json:"sentence"`
	// WaitingFor is what it waits for (because waiting_for_dependencies),
	// each as it stands; Dependents the unfinished tasks that wait for it.
	WaitingFor []Dependency `json:"waiting_for,omitempty"`
	Dependents []string     `json:"dependents,omitempty"`
}

// Dependency is a task another waits for, as it stands: its state, whether
// any end meets it (after_ended) or only COMPLETED, and what it waits for
// in turn.
type Dependency struct {
	TaskID     string   `json:"task_id"`
	State      string   `json:"state"`
	AfterEnded bool     `json:"after_ended"`
	WaitingFor []string `json:"waiting_for,omitempty"`
}

// Error is a refusal or a failure: what the command line prints as JSON on
// stdout with -o json, and the HTTP API answers. Kind is the error's kind
// (Usage, NotFound, RequestConflict, …); Exit its exit code.
type Error struct {
	Result  string `json:"result"` // ERROR
	Kind    string `json:"error"`
	Message string `json:"message"`
	Seq     *int64 `json:"seq,omitempty"`
	Exit    int    `json:"-"` // carried by the Leasewal-Exit header
}

func (e *Error) Error() string { return e.Kind + ": " + e.Message }

// List is a comma-separated list; in JSON a string ("mail,img") or an
// array of strings (["mail","img"]).
type List string

func (l *List) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = List(one)
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return errors.New("give a string or an array of strings")
	}
	*l = List(strings.Join(many, ","))
	return nil
}

// WaitRequest waits until every named task is in one of the states (wait).
// A server waits at most five minutes a request; the client repeats it
// until Timeout has run out.
type WaitRequest struct {
	Tasks   []string `json:"tasks"`
	For     List     `json:"for,omitempty"`     // default COMPLETED,FAILED,DEAD
	Timeout string   `json:"timeout,omitempty"` // default: for ever; "0s" looks once
}

// InspectRequest shows tasks as they stand, or right after record Until
// (inspect).
type InspectRequest struct {
	Tasks    []string `json:"tasks,omitempty"` // default: every task
	State    List     `json:"state,omitempty"` // only tasks in one of these states
	Queue    string   `json:"queue,omitempty"`
	Limit    int      `json:"limit,omitempty"` // list at most this many (the first created); 0: every one
	Until    *int64   `json:"until,omitempty"`
	Workers  bool     `json:"workers,omitempty"`  // the soft worker registry instead (a Workers answer)
	Timeline bool     `json:"timeline,omitempty"` // one task's life drawn (a table); in JSON the same as for one task
}

// LogRequest asks for the records that match every filter given (log);
// the answer is one Record per line. Following is the client's loop: ask
// again From the seq after the last record it has.
type LogRequest struct {
	Task     string `json:"task,omitempty"`
	From     int64  `json:"from,omitempty"` // default 1
	To       int64  `json:"to,omitempty"`   // default: the last record
	Type     List   `json:"type,omitempty"` // record types
	Worker   string `json:"worker,omitempty"`
	Lease    string `json:"lease,omitempty"`
	Domain   string `json:"domain,omitempty"`
	Queue    string `json:"queue,omitempty"`
	Since    string `json:"since,omitempty"`    // RFC 3339, unix ms, 1h (that long ago), or +1h after the first record
	Until    string `json:"until,omitempty"`    // likewise
	Limit    int    `json:"limit,omitempty"`    // at most this many records (the first that match); 0: every one
	Absolute bool   `json:"absolute,omitempty"` // a table's times as timestamps, not offsets
}

// WorkAcquireRequest tries to acquire an offset of a domain (worklease acquire).
type WorkAcquireRequest struct {
	Domain string `json:"domain"`
	Offset *int64 `json:"offset"` // 0 or more
	Actor  string `json:"actor,omitempty"`
}

// WorkSucceedRequest marks the in-flight offset processed (worklease succeed).
type WorkSucceedRequest struct {
	Domain string `json:"domain"`
	Token  string `json:"token"`
	Actor  string `json:"actor,omitempty"`
}

// WorkFailRequest reports a failed try of the in-flight offset (worklease fail).
type WorkFailRequest struct {
	Domain     string `json:"domain"`
	Token      string `json:"token"`
	MaxRetries *int   `json:"max_retries,omitempty"` // default: the server's worklease.max_retries (3)
	Actor      string `json:"actor,omitempty"`
}

// WorkInspectRequest shows every domain, or one (worklease inspect).
type WorkInspectRequest struct {
	Domain string `json:"domain,omitempty"`
}

// Task is a task as it stands at a time (inspect, wait).
type Task struct {
	TaskID      string  `json:"task_id"`
	State       string  `json:"state"`
	Attempt     int     `json:"attempt"`
	MaxAttempts int     `json:"max_attempts"`
	LeaseID     *string `json:"lease_id"`
	WorkerID    *string `json:"worker_id"`
	Expiry      *string `json:"expiry"`
	Deadline    *string `json:"deadline"` // null: the task has no window
	NotBefore   *string `json:"not_before"`
	CreatedAt   string  `json:"created_at"`
	Queue       string  `json:"queue"`
	Priority    int     `json:"priority"`
	AvailableAt *string `json:"available_at"` // null: when what it waits for is met
	Payload     string  `json:"payload"`
	Redacted    string  `json:"redacted,omitempty"` // why its payload is no longer served
	Result      string  `json:"result,omitempty"`   // what its completing worker reported
	Reason      string  `json:"reason,omitempty"`
	Requeued    string  `json:"requeued_from,omitempty"`
	// After and AfterEnded are what it was submitted to wait for;
	// WaitingFor those it still waits for (its not_before and available_at
	// count from when the last is met).
	After      []string `json:"after,omitempty"`
	AfterEnded []string `json:"after_ended,omitempty"`
	WaitingFor []string `json:"waiting_for,omitempty"`
	Records    []Record `json:"records,omitempty"` // when one task is named: its records
}

// Record is a WAL record as log and inspect show it: every field of the
// record (docs/wal-format.md), its times as RFC 3339 instead of unix
// milliseconds.
type Record struct {
	ChainFrom    string       `json:"chain_from,omitempty"`
	Seq          int64        `json:"seq"`
	Type         string       `json:"type"`
	Actor        string       `json:"actor,omitempty"`
	TaskID       string       `json:"task_id,omitempty"`
	Payload      string       `json:"payload,omitempty"`
	Window       string       `json:"window,omitempty"`
	RetryPolicy  *RetryPolicy `json:"retry_policy,omitempty"`
	RequestID    string       `json:"request_id,omitempty"`
	LeaseID      string       `json:"lease_id,omitempty"`
	WorkerID     string       `json:"worker_id,omitempty"`
	Attempt      int          `json:"attempt,omitempty"`
	Reason       string       `json:"reason,omitempty"`
	Permanent    bool         `json:"permanent,omitempty"`
	Queue        string       `json:"queue,omitempty"`
	Priority     *int         `json:"priority,omitempty"`
	RequeuedFrom string       `json:"requeued_from,omitempty"`
	Domain       string       `json:"domain,omitempty"`
	Offset       *int64       `json:"offset,omitempty"`
	Token        string       `json:"token,omitempty"`
	RetryCount   int          `json:"retry_count,omitempty"`
	Outcome      string       `json:"outcome,omitempty"`
	Hint         *int64       `json:"hint,omitempty"`
	MaxRetries   *int         `json:"max_retries,omitempty"`
	Result       string       `json:"result,omitempty"`
	Limit        *int         `json:"limit,omitempty"`
	After        []string     `json:"after,omitempty"`
	AfterEnded   []string     `json:"after_ended,omitempty"`
	Dependency   string       `json:"dependency,omitempty"`
	Rate         string       `json:"rate,omitempty"`
	Burst        int          `json:"burst,omitempty"`
	Schedule     string       `json:"schedule,omitempty"`
	Every        string       `json:"every,omitempty"`
	Cron         string       `json:"cron,omitempty"`
	TZ           string       `json:"tz,omitempty"`
	CatchUp      string       `json:"catch_up,omitempty"`
	Parts        int          `json:"parts,omitempty"`
	KeptFrom     *int64       `json:"kept_from,omitempty"`
	History      string       `json:"history,omitempty"`
	Cut          bool         `json:"cut,omitempty"`
	Part         int          `json:"part,omitempty"`
	Data         string       `json:"data,omitempty"`
	Digest       string       `json:"digest,omitempty"`
	Hash         string       `json:"hash,omitempty"`

	At         string `json:"at"`
	Expiry     string `json:"expiry,omitempty"`
	AcquiredAt string `json:"acquired_at,omitempty"`
	NotBefore  string `json:"not_before,omitempty"`
	Until      string `json:"until,omitempty"`
	Slot       string `json:"slot,omitempty"`
}

// RetryPolicy is a task's retry policy as a record holds it.
type RetryPolicy struct {
	MaxAttempts int    `json:"max_attempts"`
	Backoff     string `json:"backoff"`
	BackoffMax  string `json:"backoff_max"`
}

// AtMs is the record's time in unix milliseconds.
func (r Record) AtMs() int64 { return ParseTime(r.At) }

// Inspect is inspect's answer (OK): the tasks shown, counted by state.
type Inspect struct {
	Result  Outcome         `json:"result"`
	At      string          `json:"at"`
	Counts  map[string]int  `json:"counts"`
	Summary *InspectSummary `json:"summary,omitempty"` // when every task is listed
	More    int             `json:"more,omitempty"`    // tasks counted but not listed (limit)
	Tasks   []Task          `json:"tasks"`             // last: a listing streams them
}

// InspectSummary is what a reader wants at a glance: how many leases are
// out, what has waited longest, and what expires next.
type InspectSummary struct {
	CurrentLeases int            `json:"current_leases"`
	Blocked       int            `json:"blocked"` // waiting for another task
	OldestWaiting *OldestWaiting `json:"oldest_waiting"`
	NextExpiry    *HeldLease     `json:"next_expiry"`
	// Queues counts the live tasks of each queue by state.
	Queues map[string]map[string]int `json:"queues"`
	// Paused is every paused queue (absent: none).
	Paused []PausedQueue `json:"paused,omitempty"`
}

// OldestWaiting is the task that has waited longest.
type OldestWaiting struct {
	TaskID    string `json:"task_id"`
	CreatedAt string `json:"created_at"`
	AgeMs     int64  `json:"age_ms"`
}

// Wait is wait's answer: OK, TIMEOUT or UNREACHABLE (exit 9), INTERRUPTED,
// with each task as inspect shows it.
type Wait struct {
	Result Outcome `json:"result"`
	Tasks  []Task  `json:"tasks"`
	At     string  `json:"at"` // when it last looked
}

// Outcome is the wait's result, which picks its exit code.
func (w Wait) Outcome() Outcome { return w.Result }

// Worker is a worker in the soft registry, with the leases it holds.
type Worker struct {
	WorkerID      string      `json:"worker_id"`
	LastHeartbeat *string     `json:"last_heartbeat"`
	HeartbeatAge  *int64      `json:"heartbeat_age_ms"`
	Leases        []HeldLease `json:"leases"`
}

// Workers is inspect --workers' answer (OK).
type Workers struct {
	Result  Outcome  `json:"result"`
	At      string   `json:"at"`
	Note    string   `json:"note"`
	Workers []Worker `json:"workers"`
}

// Work is the answer of worklease acquire, succeed and fail; for succeed
// and fail, Offset is the backlog's head (a hint) and the finished offset is
// Processed or Failed.
type Work struct {
	Result     Outcome `json:"result"`
	Domain     string  `json:"domain"`
	Offset     *int64  `json:"offset,omitempty"`
	Token      string  `json:"token,omitempty"`
	RetryCount int     `json:"retry_count,omitempty"`
	Processed  *int64  `json:"processed,omitempty"`
	Failed     *int64  `json:"failed,omitempty"`
}

// WorkLease is a domain's in-flight offset.
type WorkLease struct {
	Offset     int64  `json:"offset"`
	Token      string `json:"token"`
	AcquiredAt string `json:"acquired_at"`
	RetryCount int    `json:"retry_count"`
}

// Domain is a work-lease domain: its lease, backlog (FIFO), processed and
// failed offsets.
type Domain struct {
	Domain    string     `json:"domain"`
	Lease     *WorkLease `json:"lease"`
	Backlog   []int64    `json:"backlog"`
	Processed []int64    `json:"processed"`
	Failed    []int64    `json:"failed"`
}

// WorkInspect is worklease inspect's answer (OK).
type WorkInspect struct {
	Result  Outcome  `json:"result"`
	Domains []Domain `json:"domains"`
}

// timeLayout is how every time of the API is written: RFC 3339 in UTC,
// with milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z"

// FormatTime writes a time in unix milliseconds as the API writes times.
func FormatTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(timeLayout) }

// ParseTime reads a time as the API writes it, in unix milliseconds; 0
// for "" or anything else.
func ParseTime(text string) int64 {
	t, err := time.Parse(timeLayout, text)
	if err != nil {
		return 0
	}
	return t.UnixMilli()
}
