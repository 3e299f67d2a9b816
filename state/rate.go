package state

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/leasewal/leasewal/internal/limits"
)

// Rated queues (format version 4): a queue's rate bounds how many of its
// tasks are leased in any span of time, by the generic cell rate algorithm
// (virtual scheduling): at most Burst + Count×t/Per grants in any span of
// length t. The algorithm's one number, the theoretical arrival time, is
// derived from the LeaseGranted records alone, so replay, every node of a
// cluster and verify agree on it; no timer, no token state outside the WAL.
//
// Times within the rule are counted in units of 1/Count ms, so that a rate
// of 7/s (an interval of 142.857… ms) is kept exactly: the interval is Per
// units, and a time t ms is t×Count units. The table's limits keep every
// product within an int64 (MaxTime × the largest Count, plus a burst of the
// longest Per).

// Rate is a queue's rate: Count grants per Per ms, Burst of them at once.
type Rate struct {
	Count int
	Per   int64 // 1000, 60000 or 3600000
	Burst int
}

// rateUnits are the spans a rate is given per, by their letter.
var rateUnits = []rateUnit{{"s", 1000}, {"m", 60_000}, {"h", 3_600_000}}

type rateUnit struct {
	letter string
	ms     int64
}

// ParseRate reads a rate's text: N/s, N/m or N/h, N from 1 to the table's
// most. Its burst is left 0 (the default, DefaultBurst).
func ParseRate(text string) (Rate, error) {
	count, unit, ok := strings.Cut(text, "/")
	n, err := strconv.ParseInt(count, 10, 64)
	if !ok || err != nil {
		return Rate{}, fmt.Errorf("the rate %q is not N/s, N/m or N/h (e.g. 10/s), or none", text)
	}
	if limits.Rate.Int(n) != nil {
		return Rate{}, fmt.Errorf("the rate %q counts %d grants: give %s a second, minute or hour (e.g. 10/s), or none", text, n, limits.Rate.Range())
	}
	for _, u := range rateUnits {
		if unit == u.letter {
			return Rate{Count: int(n), Per: u.ms}, nil
		}
	}
	return Rate{}, fmt.Errorf("the rate %q is per %q: give N/s, N/m or N/h (e.g. 10/s), or none", text, unit)
}

// String is the rate as ParseRate reads it ("10/s").
func (r Rate) String() string {
	for _, u := range rateUnits {
		if r.Per == u.ms {
			return strconv.Itoa(r.Count) + "/" + u.letter
		}
	}
	return strconv.Itoa(r.Count) + "/" + strconv.FormatInt(r.Per, 10) + "ms"
}

// DefaultBurst is a rate's burst when none is given: one second's worth of
// grants, at least 1.
func (r Rate) DefaultBurst() int {
	return max(1, int(int64(r.Count)*1000/r.Per))
}

// queueRate is a rated queue's rule as the records left it: its rate, and
// the theoretical arrival time tat of the next grant, in units of 1/Count
// ms.
type queueRate struct {
	Rate
	tat int64
}

// tolerance is how far before tat a grant may come, in units: a burst's
// worth of intervals but one.
func (q queueRate) tolerance() int64 { return int64(q.Burst-1) * q.Per }

// allowedAt is the first time, in ms, at which a grant of the queue is
// allowed: the ceiling of (tat - tolerance) / Count.
func (q queueRate) allowedAt() int64 {
	units := q.tat - q.tolerance()
	c := int64(q.Count)
	at := units / c
	if units%c > 0 {
		at++
	}
	return at
}

// granted is the rule's step for a grant at at: the next grant's
// theoretical time moves one interval past the later of at and where it
// stood.
func (q *queueRate) granted(at int64) {
	q.tat = max(q.tat, at*int64(q.Count)) + q.Per
}

// heldQueues is every rated queue that may not grant at now, with the time
// it may again (nil when none is held).
func (s *State) heldQueues(now int64) map[string]int64 {
	var held map[string]int64
	for q, r := range s.rates {
		if at := r.allowedAt(); at > now {
			if held == nil {
				held = map[string]int64{}
			}
			held[q] = at
		}
	}
	return held
}

// rateBound is when a task next eligible at at (0: not by time alone) may
// be granted in a queue held until until (0: not held).
func rateBound(at, until int64) int64 {
	if at == 0 {
		return 0
	}
	return max(at, until)
}

// rateMessage says why a lease of a queue at its rate waits.
func (s *State) rateMessage(queue string, at int64) string {
	return fmt.Sprintf("queue %s is at its rate of %s until %s", queue, s.rates[queue].text(), stamp(at))
}

// text is the rate with its burst: "10/s (burst 10)".
func (r Rate) text() string { return fmt.Sprintf("%s (burst %d)", r, r.Burst) }

// DecideQueueRate sets, or with rate nil lifts, the rate of queue; a burst
// of 0 is the rate's default. The same rate and burst again answers
// Duplicate and writes nothing; another starts the count afresh, its whole
// burst allowed at once.
func (s *State) DecideQueueRate(queue string, rate *Rate) (Decision, error) {
	if err := ValidateQueue(queue); err != nil {
		return Decision{}, refuse(InvalidInput, "queue", "%v", err)
	}
	d := Decision{Outcome: ResultOK}
	current, rated := s.rates[queue]
	if rate == nil {
		if !rated {
			d.Duplicate = true
			return d, nil
		}
		return write(Record{Type: QueueRated, Queue: queue}, d), nil
	}
	r := *rate
	if err := limits.Rate.Int(int64(r.Count)); err != nil {
		return Decision{}, refuse(InvalidInput, "rate", "%v", err)
	}
	if !slices.ContainsFunc(rateUnits, func(u rateUnit) bool { return u.ms == r.Per }) {
		return Decision{}, refuse(InvalidInput, "rate", "a rate is per second, minute or hour, not per %d ms", r.Per)
	}
	if r.Burst == 0 {
		r.Burst = r.DefaultBurst()
	}
	if err := limits.Burst.Int(int64(r.Burst)); err != nil {
		return Decision{}, refuse(InvalidInput, "burst", "%v", err)
	}
	if rated && current.Rate == r {
		d.Duplicate = true
		return d, nil
	}
	return write(Record{Type: QueueRated, Queue: queue, Rate: r.String(), Burst: r.Burst}, d), nil
}

// applyRated is the QueueRated rule: from its time on, the queue grants at
// most at its rate, its count started afresh (no rate when it is absent).
func (s *State) applyRated(r Record) error {
	if err := ValidateQueue(r.Queue); err != nil {
		return invalid("%v", err)
	}
	if r.TaskID != "" {
		return invalid("a QueueRated names a queue, not a task")
	}
	if r.Rate == "" {
		if r.Burst != 0 {
			return invalid("a QueueRated without a rate has no burst")
		}
		delete(s.rates, r.Queue)
		if len(s.rates) == 0 {
			s.rates = nil // as a snapshot loads it
		}
		return nil
	}
	rate, err := ParseRate(r.Rate)
	if err != nil {
		return invalid("%v", err)
	}
	if err := limits.Burst.Int(int64(r.Burst)); err != nil {
		return invalid("%v", err)
	}
	rate.Burst = r.Burst
	if s.rates == nil {
		s.rates = map[string]queueRate{}
	}
	s.rates[r.Queue] = queueRate{Rate: rate, tat: r.At * int64(rate.Count)}
	return nil
}

// QueueRate is a rated queue as it stands at a time.
type QueueRate struct {
	Queue string
	Rate
	// NextGrantAt is when the queue may grant again: at or before now when
	// it may now.
	NextGrantAt int64
}

// Rates is every rated queue, in name order.
func (s *State) Rates() []QueueRate {
	out := make([]QueueRate, 0, len(s.rates))
	for _, q := range slices.Sorted(maps.Keys(s.rates)) {
		r := s.rates[q]
		out = append(out, QueueRate{Queue: q, Rate: r.Rate, NextGrantAt: r.allowedAt()})
	}
	return out
}
