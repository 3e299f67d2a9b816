package state

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/leasewal/leasewal/internal/limits"
)

// Periodic tasks (format version 3). A schedule is a record (ScheduleAdded,
// ScheduleRemoved); each of its firings is a TaskCreated stamped at the time
// it was written, naming the schedule and its slot (the time it was due),
// with request id NAME@SLOT. The last slot fired is kept in the state, so a
// slot never fires twice whatever request ids are remembered. Which slots are
// due is decided at a given time (DueFirings), like every decision; replay
// applies the firings as written.

// Catch-up policies: what fires after a time with no writing command.
const (
	CatchUpNone = "none" // only a slot less than catchUpGrace late
	CatchUpLast = "last" // the latest slot due, however late
	CatchUpAll  = "all"  // every slot due, at most MaxCatchUp of them
)

// MaxCatchUp is the most slots of one schedule that fire at once with
// --catch-up all: the latest ones; older ones are skipped.
const MaxCatchUp = limits.CatchUp

// catchUpGrace is how late a slot may fire with --catch-up none.
const catchUpGrace = int64(time.Minute / time.Millisecond)

// ScheduleSpec is what a schedule add asks for.
type ScheduleSpec struct {
	Name     string
	Every    Duration // or
	Cron     string   // a standard five-field expression or a descriptor (@hourly)
	TZ       string   // the cron's time zone ("": UTC)
	CatchUp  string
	Template Submit // what each firing submits (no request id, delay or not-before)
}

// Schedule is a schedule as the records left it.
type Schedule struct {
	ScheduleSpec
	AddedAt  int64
	LastSlot int64 // the last slot fired (0: none yet)
}

// Zones resolves a time zone name; the caller's choice of tzdata, so that
// state reads no files. Replay never needs it: a firing names its slot.
type Zones func(name string) (*time.Location, error)

// slots computes a schedule's slots: next is the first slot after t (0 for
// none ever).
type slots struct {
	every int64
	added int64
	cron  cron.Schedule
	loc   *time.Location
}

func (sc *Schedule) slots(zones Zones) (slots, error) {
	if sc.Every > 0 {
		return slots{every: sc.Every.Millis(), added: sc.AddedAt}, nil
	}
	expr, err := parseCron(sc.Cron)
	if err != nil {
		return slots{}, err
	}
	loc := time.UTC
	if sc.TZ != "" {
		if loc, err = zones(sc.TZ); err != nil {
			return slots{}, fmt.Errorf("unknown time zone %q: give an IANA name such as Europe/Paris", sc.TZ)
		}
	}
	return slots{cron: expr, loc: loc, added: sc.AddedAt}, nil
}

func parseCron(expr string) (cron.Schedule, error) {
	if strings.Contains(expr, "TZ=") {
		return nil, fmt.Errorf("cron expression %q names a time zone: give the zone apart from the expression", expr)
	}
	s, err := cron.ParseStandard(expr)
	if err != nil {
		return nil, fmt.Errorf("cron expression %q: %v (five fields: minute hour day-of-month month day-of-week, or @hourly, @daily …)", expr, err)
	}
	return s, nil
}

// next is the first slot strictly after t, never before the schedule was
// added (0: none before the year 10000).
func (sl slots) next(t int64) int64 {
	t = max(t, sl.added)
	if sl.every > 0 {
		k := (t-sl.added)/sl.every + 1
		if k > (MaxTime-sl.added)/sl.every {
			return 0
		}
		return sl.added + k*sl.every
	}
	prev := time.UnixMilli(t).In(sl.loc)
	n := sl.cron.Next(prev)
	if wall := "2006-01-02 15:04"; !n.IsZero() && n.Format(wall) == prev.Format(wall) {
		n = sl.cron.Next(n) // the same local time again as clocks go back: it fired at its first occurrence
	}
	if n.IsZero() || n.UnixMilli() > MaxTime {
		return 0
	}
	return n.UnixMilli()
}

// due lists the slots after from and no later than now, oldest first: at
// most limit of them, the latest. A cron is searched back from now in
// growing windows, so that a long gap costs the slots it keeps, not every
// slot since from.
func (sl slots) due(from, now int64, limit int) []int64 {
	if sl.every > 0 {
		first := sl.next(from)
		if first == 0 || first > now {
			return nil
		}
		last := sl.added + (now-sl.added)/sl.every*sl.every
		start := max(first, last-int64(limit-1)*sl.every)
		var out []int64
		for s := start; s <= last; s += sl.every {
			out = append(out, s)
		}
		return out
	}
	day := int64(24 * time.Hour / time.Millisecond)
	for _, back := range []int64{day / 24, day, 35 * day, 400 * day, MaxTime} {
		start := max(from, now-back)
		if now-back < from || back == MaxTime {
			start = from
		}
		var out []int64
		for s := sl.next(start); s != 0 && s <= now; s = sl.next(s) {
			out = append(out, s)
			if len(out) > limit {
				out = out[1:]
			}
		}
		if len(out) >= limit || start == from {
			return out
		}
	}
	return nil
}

// slotID is the request id of a schedule's firing for slot.
func slotID(name string, slot int64) string { return name + "@" + stamp(slot) }

// isSlotID reports whether a request id has the form a firing's takes.
func isSlotID(req string) bool {
	i := strings.LastIndexByte(req, '@')
	if i < 1 {
		return false
	}
	_, err := time.Parse("2006-01-02T15:04:05.000Z", req[i+1:])
	return err == nil
}

// Schedules is every schedule, by name.
func (s *State) Schedules() []Schedule {
	out := make([]Schedule, 0, len(s.schedules))
	for _, name := range slices.Sorted(maps.Keys(s.schedules)) {
		out = append(out, *s.schedules[name])
	}
	return out
}

// validSchedule checks a schedule's spec, wherever it comes from.
func validSchedule(sp ScheduleSpec) error {
	if err := ValidateID("schedule name", sp.Name); err != nil {
		return err
	}
	if strings.Contains(sp.Name, "@") {
		return fmt.Errorf("schedule name %q contains @, which its firings' request ids use", sp.Name)
	}
	switch {
	case (sp.Every > 0) == (sp.Cron != ""):
		return fmt.Errorf("a schedule needs either an interval or a cron expression")
	case sp.Every < 0 || (sp.Every == 0 && sp.Cron == ""):
		return fmt.Errorf("a schedule's interval must be positive")
	case sp.Every > 0 && sp.Every.Millis() == 0:
		return fmt.Errorf("a schedule's interval of %s is under a millisecond", time.Duration(sp.Every))
	case sp.TZ != "" && sp.Cron == "":
		return fmt.Errorf("a schedule's time zone goes with a cron expression only")
	case sp.CatchUp != CatchUpNone && sp.CatchUp != CatchUpLast && sp.CatchUp != CatchUpAll:
		return fmt.Errorf("a schedule's catch-up %q is none of none, last or all", sp.CatchUp)
	}
	if sp.Cron != "" {
		if _, err := parseCron(sp.Cron); err != nil {
			return err
		}
	}
	t := sp.Template
	if t.RequestID != "" || t.Delay != 0 || t.NotBefore != 0 {
		return fmt.Errorf("a schedule's task has no request id, delay or not-before: each firing is due at its slot")
	}
	_, err := validSubmit(t)
	return err
}

// DecideScheduleAdd adds a schedule at now; the same schedule again is a
// Duplicate, the name with other options a conflict. Its first slot is
// after now.
func (s *State) DecideScheduleAdd(sp ScheduleSpec, zones Zones, now int64) (Decision, error) {
	if sp.CatchUp == "" {
		sp.CatchUp = CatchUpLast
	}
	if sp.Template.Queue == "" {
		sp.Template.Queue = DefaultQueue
	}
	if err := validSchedule(sp); err != nil {
		var refusal *Error
		if errors.As(err, &refusal) {
			return Decision{}, refusal
		}
		return Decision{}, refuse(InvalidInput, "schedule", "%v", err)
	}
	for _, f := range [...]struct {
		limit limits.Limit
		value string
	}{{limits.Cron, sp.Cron}, {limits.TZ, sp.TZ}} {
		if f.value != "" {
			if err := f.limit.Text(f.value); err != nil {
				return Decision{}, refuse(InvalidInput, "schedule", "the %v", err)
			}
		}
	}
	if sp.Every != 0 && limits.Every.Duration(time.Duration(sp.Every)) != nil {
		return Decision{}, refuse(InvalidInput, "schedule", "an interval of %s is too short: a schedule fires at most once a second (give %s)", time.Duration(sp.Every), limits.Every.Range())
	}
	if sp.Template.After != nil || sp.Template.AfterEnded != nil {
		return Decision{}, refuse(InvalidInput, "after", "a schedule's task waits for nothing: each firing is a task of its own")
	}
	if old, ok := s.schedules[sp.Name]; ok {
		if !reflect.DeepEqual(old.ScheduleSpec, sp) {
			return Decision{}, refuse(RequestConflict, "schedule", "schedule %q exists with other options; 'leasewal schedule rm %s' first to replace it", sp.Name, sp.Name)
		}
		return Decision{Outcome: ResultOK, Duplicate: true}, nil
	}
	sl, err := (&Schedule{ScheduleSpec: sp, AddedAt: now}).slots(zones)
	if err != nil {
		return Decision{}, refuse(InvalidInput, "schedule", "%v", err)
	}
	if sl.next(now) == 0 {
		return Decision{}, refuse(InvalidInput, "schedule", "cron expression %q never fires: check its day of month and month", sp.Cron)
	}
	t := sp.Template
	policy, priority := t.Policy, t.Priority
	return write(Record{Type: ScheduleAdded, Schedule: sp.Name, Every: sp.Every, Cron: sp.Cron, TZ: sp.TZ, CatchUp: sp.CatchUp,
		Payload: t.Payload, Window: t.Window, RetryPolicy: &policy, Queue: t.Queue, Priority: &priority}, Decision{Outcome: ResultOK}), nil
}

// DecideScheduleRemove removes a schedule: no slot of it fires any more.
func (s *State) DecideScheduleRemove(name string) (Decision, error) {
	if _, ok := s.schedules[name]; !ok {
		return Decision{}, refuse(NotFound, "schedule", "no schedule %q; 'leasewal schedule ls' lists them", name)
	}
	return write(Record{Type: ScheduleRemoved, Schedule: name}, Decision{Outcome: ResultOK}), nil
}

// NextSlot is a schedule's next slot after now (0: none).
func (s *State) NextSlot(sc Schedule, zones Zones, now int64) int64 {
	sl, err := sc.slots(zones)
	if err != nil {
		return 0
	}
	return sl.next(max(now, sc.LastSlot))
}

// NextFiringAt is the earliest slot of any schedule after now (0: none): a
// server's timer, and a waiting worker, wake then.
func (s *State) NextFiringAt(zones Zones, now int64) int64 {
	next := int64(0)
	for _, sc := range s.schedules {
		if at := s.NextSlot(*sc, zones, now); at != 0 && (next == 0 || at < next) {
			next = at
		}
	}
	return next
}

// DueFirings is the TaskCreated records of every slot due by now that has
// not fired, schedule by schedule in name order, as each one's catch-up
// policy picks them. A schedule whose time zone cannot be resolved fires
// nothing.
func (s *State) DueFirings(zones Zones, now int64) []Record {
	var recs []Record
	next := s.lastTaskNum + 1
	for _, name := range slices.Sorted(maps.Keys(s.schedules)) {
		sc := s.schedules[name]
		sl, err := sc.slots(zones)
		if err != nil {
			continue
		}
		limit := MaxCatchUp
		if sc.CatchUp != CatchUpAll {
			limit = 1
		}
		due := sl.due(max(sc.LastSlot, sc.AddedAt), now, limit)
		if sc.CatchUp == CatchUpNone && len(due) > 0 && now-due[0] >= catchUpGrace {
			due = nil
		}
		for _, slot := range due {
			t := sc.Template
			policy, priority, at := t.Policy, t.Priority, now
			recs = append(recs, Record{Type: TaskCreated, TaskID: fmt.Sprintf("T%d", next), Payload: t.Payload, Window: t.Window,
				RetryPolicy: &policy, RequestID: slotID(name, slot), NotBefore: &at, Queue: t.Queue, Priority: &priority,
				Schedule: name, Slot: &slot})
			next++
		}
	}
	return recs
}

// applyScheduleAdded is the ScheduleAdded rule: a new schedule, its first
// slot after the record's time.
func (s *State) applyScheduleAdded(r Record) error {
	if r.TaskID != "" || r.RetryPolicy == nil || r.Priority == nil {
		return invalid("a ScheduleAdded names a schedule and the task it submits: retry_policy and priority included")
	}
	sp := ScheduleSpec{Name: r.Schedule, Every: r.Every, Cron: r.Cron, TZ: r.TZ, CatchUp: r.CatchUp,
		Template: Submit{Payload: r.Payload, Window: r.Window, Policy: *r.RetryPolicy, Queue: r.Queue, Priority: *r.Priority}}
	if err := validSchedule(sp); err != nil {
		return invalid("%v", err)
	}
	if _, ok := s.schedules[sp.Name]; ok {
		return invalid("schedule %q already exists", sp.Name)
	}
	if s.schedules == nil {
		s.schedules = map[string]*Schedule{}
	}
	s.schedules[sp.Name] = &Schedule{ScheduleSpec: sp, AddedAt: r.At}
	return nil
}

// applyScheduleRemoved is the ScheduleRemoved rule.
func (s *State) applyScheduleRemoved(r Record) error {
	if _, ok := s.schedules[r.Schedule]; !ok {
		return invalid("no schedule %q", r.Schedule)
	}
	delete(s.schedules, r.Schedule)
	if len(s.schedules) == 0 {
		s.schedules = nil // as a snapshot loads it
	}
	return nil
}

// firing checks a firing's TaskCreated against its schedule, and returns
// the schedule, whose LastSlot the caller sets once the task is created.
// Replay trusts the slot's place in the schedule (time zone data may differ
// between machines); that it follows the last one, is no later than the
// record and names the schedule's task is checked.
func (s *State) firing(r Record) (*Schedule, error) {
	sc, ok := s.schedules[r.Schedule]
	switch {
	case !ok:
		return nil, invalid("a firing of schedule %q, which does not exist", r.Schedule)
	case r.Slot == nil || *r.Slot <= max(sc.LastSlot, sc.AddedAt) || *r.Slot > r.At:
		return nil, invalid("schedule %q's slot must follow its last slot (%d) and come no later than the firing (%d)", r.Schedule, sc.LastSlot, r.At)
	case r.RequestID != slotID(r.Schedule, *r.Slot):
		return nil, invalid("a firing's request id must be %q", slotID(r.Schedule, *r.Slot))
	}
	t := sc.Template
	if r.Payload != t.Payload || r.Window != t.Window || r.RetryPolicy == nil || *r.RetryPolicy != t.Policy || r.Queue != t.Queue || r.Priority == nil || *r.Priority != t.Priority {
		return nil, invalid("a firing of schedule %q must submit the schedule's task", r.Schedule)
	}
	return sc, nil
}
