// Package limits is the one table of what a request and a record may hold:
// every length, range and character rule of every field. The request path
// checks typed fields against it, and the replay decoder checks every record
// it reads against it, so that nothing is written that a reader would
// refuse. It imports only the standard library, so that every package (the
// public api among them) can share it.
package limits

import (
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// Kind says how a Limit measures a value.
type Kind uint8

const (
	// Text is UTF-8 text of Min to Max bytes; any character.
	Text Kind = iota
	// Name is a caller-chosen identifier: UTF-8 of Min to Max bytes with no
	// control character.
	Name
	// Integer is a whole number from Min to Max.
	Integer
	// Duration is a Go duration from Min to Max nanoseconds.
	Duration
	// Time is a moment in unix milliseconds from Min to Max.
	Time
)

// Limit is one field's rule. Field is the field's name in the JSON
// vocabulary of requests and records.
type Limit struct {
	Field    string
	Kind     Kind
	Min, Max int64
}

// The range of every time leasewal keeps, in unix ms: the years 0001 to 9999.
const (
	MinTime int64 = -62135596800000 // 0001-01-01T00:00:00Z
	MaxTime int64 = 253402300799999 // 9999-12-31T23:59:59.999Z
)

// The numbers more than one limit, or a caller's constant, shares.
const (
	TextBytes   = 64 << 10 // a payload, a result, a reason
	NameBytes   = 200      // an identifier
	MinPriority = -1000
	MaxPriority = 1000
	// RecordBody is the most bytes of one record's body in the WAL: the
	// largest record leasewal writes (a 64 KiB text whose every byte JSON
	// escapes as \u00XX), with room to spare.
	RecordBody = 512 << 10
	// CatchUp is the most missed slots of one schedule that fire at once
	// ("catch_up": "all"): the latest ones.
	CatchUp = 100
)

// The fields. Names are checked by Text as well (their kind forbids control
// characters); the zero length of an optional field (an actor, a result, a
// pause's reason) means "none" and is checked by the caller's rules, not here.
var (
	Payload = Limit{"payload", Text, 1, TextBytes}
	Result  = Limit{"result", Text, 0, TextBytes}
	Reason  = Limit{"reason", Text, 1, TextBytes}
	// PauseReason is a pause's optional reason.
	PauseReason = Limit{"reason", Text, 0, TextBytes}

	Worker    = Limit{"worker", Name, 1, NameBytes}
	RequestID = Limit{"request_id", Name, 1, NameBytes}
	Queue     = Limit{"queue", Name, 1, NameBytes}
	Domain    = Limit{"domain", Name, 1, NameBytes}
	Schedule  = Limit{"name", Name, 1, NameBytes}
	TaskID    = Limit{"task", Name, 1, NameBytes}
	LeaseID   = Limit{"lease", Name, 1, NameBytes}
	Token     = Limit{"token", Name, 1, NameBytes}
	NodeID    = Limit{"id", Name, 1, NameBytes}
	// Actor is who a record was written for, audit only: a name like a
	// worker's (empty: the process's own).
	Actor = Limit{"actor", Name, 0, NameBytes}
	// Cron is a schedule's cron expression, and TZ its time zone's name.
	Cron = Limit{"cron", Name, 1, NameBytes}
	TZ   = Limit{"tz", Name, 1, NameBytes}

	Priority    = Limit{"priority", Integer, MinPriority, MaxPriority}
	MaxAttempts = Limit{"max_attempts", Integer, 1, math.MaxInt32}
	QueueLimit  = Limit{"limit", Integer, 1, math.MaxInt32}
	// Rate is a queue rate's count of grants per second, minute or hour,
	// and Burst how many may come at once: their products with any time
	// stay within an int64 (state/rate.go).
	Rate  = Limit{"rate", Integer, 1, 10_000}
	Burst = Limit{"burst", Integer, 1, 1_000_000}
	// After is how many tasks one task may wait for (after and after_ended
	// together): a fan-in of ten thousand.
	After      = Limit{"after", Integer, 1, 10_000}
	MaxRetries = Limit{"max_retries", Integer, 0, math.MaxInt32}
	Offset     = Limit{"offset", Integer, 0, math.MaxInt64}

	Window        = Limit{"window", Duration, int64(time.Millisecond), math.MaxInt64}
	Backoff       = Limit{"backoff", Duration, 0, math.MaxInt64}
	BackoffMax    = Limit{"backoff_max", Duration, 0, math.MaxInt64}
	LeaseDuration = Limit{"duration", Duration, int64(time.Millisecond), math.MaxInt64}
	Delay         = Limit{"delay", Duration, 0, math.MaxInt64}
	PauseFor      = Limit{"for", Duration, int64(time.Millisecond), math.MaxInt64}
	// Every is a schedule's interval: a second at least, so that a schedule
	// cannot flood its queue.
	Every = Limit{"every", Duration, int64(time.Second), math.MaxInt64}

	NotBefore = Limit{"not_before", Time, MinTime, MaxTime}

	// CatchUpAll is the most firings a schedule's "catch_up": "all" writes
	// at once; the rest are skipped (a second firing of the same slot is
	// never written).
	CatchUpAll = Limit{"catch_up_all", Integer, 1, CatchUp}

	// RecordBytes is the most bytes one record's body takes in the WAL
	// (the frame's length is checked before anything is allocated).
	RecordBytes = Limit{"record", Integer, 1, RecordBody}

	// BatchLines and BatchBytes bound one request of the batch door (a
	// server decides a batch at the cap in well under a second); a client
	// splits a bigger file into requests of that size.
	BatchLines = Limit{"batch_lines", Integer, 1, 20_000}
	BatchBytes = Limit{"batch_bytes", Integer, 1, 16 << 20}
	// BatchLine is the longest line of a batch: a payload at its limit with
	// every byte escaped, and the rest.
	BatchLine = Limit{"batch_line", Integer, 1, 512 << 10}
)

// Table is every limit, for the tests that walk it and for the docs.
var Table = []Limit{
	Payload, Result, Reason, PauseReason,
	Worker, RequestID, Queue, Domain, Schedule, TaskID, LeaseID, Token, NodeID, Actor, Cron, TZ,
	Priority, MaxAttempts, QueueLimit, Rate, Burst, After, MaxRetries, Offset,
	Window, Backoff, BackoffMax, LeaseDuration, Delay, PauseFor, Every,
	NotBefore, CatchUpAll, RecordBytes, BatchLines, BatchBytes, BatchLine,
}

// Error is a value outside its limit.
type Error struct {
	Field   string
	Problem string
}

func (e *Error) Error() string { return e.Field + " " + e.Problem }

func (l Limit) refuse(format string, args ...any) error {
	return &Error{Field: l.Field, Problem: fmt.Sprintf(format, args...)}
}

// Text checks text or a name: its length in bytes, UTF-8, and (for a Name)
// no control character.
func (l Limit) Text(s string) error {
	switch {
	case int64(len(s)) < l.Min && len(s) == 0:
		return l.refuse("must not be empty")
	case int64(len(s)) < l.Min:
		return l.refuse("is %d bytes, under the least of %d", len(s), l.Min)
	case int64(len(s)) > l.Max:
		return l.refuse("is %d bytes, over the limit of %d", len(s), l.Max)
	case !utf8.ValidString(s):
		return l.refuse("is not UTF-8 text")
	}
	if l.Kind == Name {
		for _, c := range s {
			if c < 0x20 || c == 0x7f {
				return l.refuse("contains a control character (%U)", c)
			}
		}
	}
	return nil
}

// Int checks a whole number.
func (l Limit) Int(n int64) error {
	if n < l.Min || n > l.Max {
		return l.refuse("is %d: give %s", n, l.Range())
	}
	return nil
}

// Duration checks a duration.
func (l Limit) Duration(d time.Duration) error {
	if int64(d) < l.Min || int64(d) > l.Max {
		return l.refuse("is %s: give %s", d, l.Range())
	}
	return nil
}

// Range says what the limit allows, in words.
func (l Limit) Range() string {
	switch l.Kind {
	case Text, Name:
		if l.Min == 0 {
			return fmt.Sprintf("at most %d bytes", l.Max)
		}
		return fmt.Sprintf("%d to %d bytes", l.Min, l.Max)
	case Duration:
		if l.Max == math.MaxInt64 {
			return fmt.Sprintf("%s or more", time.Duration(l.Min))
		}
		return fmt.Sprintf("%s to %s", time.Duration(l.Min), time.Duration(l.Max))
	case Time:
		return "a time in the years 0001 to 9999"
	}
	if l.Max == math.MaxInt64 {
		return strconv.FormatInt(l.Min, 10) + " or more"
	}
	return fmt.Sprintf("%d to %d", l.Min, l.Max)
}
