package state

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/leasewal/leasewal/internal/limits"
)

// Paused queues (format version 3): a paused queue leases nothing, and while
// it is paused its tasks' execution windows stand still, so a deadline moves
// by the time the queue was paused after the window opened. A pause is a
// span of time; a queue keeps every span it was paused for, in order, so
// that a deadline is a function of the records alone, at any time.

// PauseSpan is a time a queue was, or is, paused.
type PauseSpan struct {
	From   int64
	To     int64 // MaxTime: until resumed
	Reason string
}

// Open reports whether the span lasts until a resume.
func (p PauseSpan) Open() bool { return p.To == MaxTime }

// queuePauses is a queue's pause spans, sorted and disjoint; the tasks of the
// queue share it, so that a pause or a resume moves every deadline at once.
type queuePauses struct {
	spans []PauseSpan
}

// stretch is the end of a window from available to deadline once the
// spans are counted out: each span that began before the (moving) deadline
// pushes it back by the part of the span after the window opened. A span
// still open counts until openEnd. It is a function of the window and the
// spans alone: a finished task's deadline moves with a later pause too, as
// its window would have.
func (p *queuePauses) stretch(available, deadline, openEnd int64) int64 {
	for _, sp := range p.spans {
		if sp.From >= deadline {
			break
		}
		to := sp.To
		if sp.Open() {
			to = openEnd
		}
		if to <= available {
			continue
		}
		if to == MaxTime {
			return MaxTime
		}
		deadline = addTime(deadline, to-max(sp.From, available))
	}
	return deadline
}

// at is the span the queue is paused by at time at, if any. Only the last
// span can hold a time a command decides at: a pause starts no earlier than
// the record before it.
func (p *queuePauses) at(at int64) (PauseSpan, bool) {
	if p == nil || len(p.spans) == 0 {
		return PauseSpan{}, false
	}
	last := p.spans[len(p.spans)-1]
	return last, last.From <= at && at < last.To
}

// last is the queue's latest span, if it was ever paused.
func (p *queuePauses) last() (PauseSpan, bool) {
	if p == nil || len(p.spans) == 0 {
		return PauseSpan{}, false
	}
	return p.spans[len(p.spans)-1], true
}

// attach gives a task that comes into memory its queue's pauses.
func (s *State) attach(t *Task) {
	if t != nil && s.pauses != nil {
		t.pauses = s.pauses[t.Queue]
	}
}

// pausesOf is queue's pause spans, created (and given to every task of the
// queue in memory) on its first pause.
func (s *State) pausesOf(queue string) *queuePauses {
	if p := s.pauses[queue]; p != nil {
		return p
	}
	if s.pauses == nil {
		s.pauses = map[string]*queuePauses{}
	}
	p := &queuePauses{}
	s.pauses[queue] = p
	for _, t := range s.tasks {
		if t.Queue == queue {
			t.pauses = p
		}
	}
	return p
}

// PausedAt is the span queue is paused by at now, if it is.
func (s *State) PausedAt(queue string, now int64) (PauseSpan, bool) {
	return s.pauses[queue].at(now)
}

// pausedQueues is every queue paused at now, with its span.
func (s *State) pausedQueues(now int64) map[string]PauseSpan {
	var out map[string]PauseSpan
	for q, p := range s.pauses {
		if sp, ok := p.at(now); ok {
			if out == nil {
				out = map[string]PauseSpan{}
			}
			out[q] = sp
		}
	}
	return out
}

// Pauses is every queue paused at now, by name.
func (s *State) Pauses(now int64) map[string]PauseSpan { return s.pausedQueues(now) }

// pauseMessage says why a lease of a paused queue waits: "queue mail is
// paused since … (reason), until resumed".
func pauseMessage(queue string, sp PauseSpan) string {
	msg := fmt.Sprintf("queue %s is paused since %s", queue, stamp(sp.From))
	if sp.Reason != "" {
		msg += " (" + sp.Reason + ")"
	}
	if sp.Open() {
		return msg + ", until resumed"
	}
	return msg + ", resumes at " + stamp(sp.To)
}

// afterPause is when a task of a queue paused by sp becomes eligible (0:
// not by time alone): at the pause's end, or later by its own time.
func afterPause(c *Task, sp PauseSpan, now int64) int64 {
	if sp.Open() || c.State.Terminal() {
		return 0
	}
	if c.leasable(now) {
		return sp.To
	}
	if at := c.nextEligibleAt(now); at != 0 {
		return max(at, sp.To)
	}
	return 0
}

// DecidePause pauses queue from now, for d (0: until resumed). Pausing a
// paused queue answers its pause as a Duplicate and writes nothing.
func (s *State) DecidePause(queue, reason string, d time.Duration, now int64) (Decision, error) {
	if err := ValidateQueue(queue); err != nil {
		return Decision{}, refuse(InvalidInput, "queue", "%v", err)
	}
	if d != 0 && limits.PauseFor.Duration(d) != nil {
		return Decision{}, refuse(InvalidInput, "duration", "a pause of %s: give %s, or none to pause until resumed", d, limits.PauseFor.Range())
	}
	if err := limits.PauseReason.Text(reason); err != nil {
		return Decision{}, refuse(InvalidInput, "reason", "the %v", err)
	}
	if _, paused := s.PausedAt(queue, now); paused {
		return Decision{Outcome: ResultOK, Duplicate: true}, nil
	}
	r := Record{Type: QueuePaused, Queue: queue, Reason: reason}
	if d > 0 {
		until := addTime(now, d.Milliseconds())
		r.Until = &until
	}
	return write(r, Decision{Outcome: ResultOK}), nil
}

// DecideResume ends queue's pause at now; a queue that is not paused is
// refused.
func (s *State) DecideResume(queue string, now int64) (Decision, error) {
	if err := ValidateQueue(queue); err != nil {
		return Decision{}, refuse(InvalidInput, "queue", "%v", err)
	}
	if _, paused := s.PausedAt(queue, now); !paused {
		msg := fmt.Sprintf("queue %s is not paused", queue)
		if last, ok := s.pauses[queue].last(); ok {
			msg += fmt.Sprintf(" (its last pause ended at %s)", stamp(last.To))
		}
		return Decision{}, refuse(NotAllowed, "queue", "%s", msg)
	}
	return write(Record{Type: QueueResumed, Queue: queue}, Decision{Outcome: ResultOK}), nil
}

// applyPaused is the QueuePaused rule: a queue not paused at the record's
// time is paused from it, until resumed or until its until.
func (s *State) applyPaused(r Record) error {
	if err := ValidateQueue(r.Queue); err != nil {
		return invalid("%v", err)
	}
	if r.TaskID != "" {
		return invalid("a QueuePaused names a queue, not a task")
	}
	if _, paused := s.PausedAt(r.Queue, r.At); paused {
		return invalid("queue %s is already paused", r.Queue)
	}
	to := MaxTime
	if r.Until != nil {
		if *r.Until <= r.At || *r.Until >= MaxTime {
			return invalid("until %d must be after the record's time %d and before the year 10000", *r.Until, r.At)
		}
		to = *r.Until
	}
	p := s.pausesOf(r.Queue)
	p.spans = append(p.spans, PauseSpan{From: r.At, To: to, Reason: r.Reason})
	return nil
}

// applyResumed is the QueueResumed rule: a paused queue's pause ends at the
// record's time.
func (s *State) applyResumed(r Record) error {
	if r.TaskID != "" {
		return invalid("a QueueResumed names a queue, not a task")
	}
	p := s.pauses[r.Queue]
	if _, paused := p.at(r.At); !paused {
		return invalid("queue %q is not paused", r.Queue)
	}
	p.spans[len(p.spans)-1].To = r.At
	return nil
}

// pausedQueueNames is every queue that was ever paused, sorted.
func (s *State) pausedQueueNames() []string { return slices.Sorted(maps.Keys(s.pauses)) }
