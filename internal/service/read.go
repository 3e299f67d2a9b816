package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// inspection is an inspect request read: what it shows, and from which
// state.
type inspection struct {
	ids   []string
	only  taskFilter
	until int64 // 0: the state now
	limit int   // the most tasks a listing hands out (0: all)
}

func readInspect(r api.InspectRequest) (inspection, error) {
	in := inspection{only: taskFilter{queue: r.Queue}, limit: r.Limit}
	var err error
	if in.only.states, err = parseStates("state", r.State); err != nil {
		return in, err
	}
	if r.Limit < 0 {
		return in, api.Usage("--limit %d: give a number of tasks, 1 or more (0: every one)", r.Limit)
	}
	in.ids = slices.Compact(slices.Clone(r.Tasks)) // a task named twice in a row is shown once
	if seen := map[string]bool{}; len(in.ids) > 1 {
		in.ids = slices.DeleteFunc(in.ids, func(id string) bool { dup := seen[id]; seen[id] = true; return dup })
	}
	if r.Timeline && len(in.ids) != 1 {
		return in, api.Usage("--timeline draws one task: name it, e.g. 'leasewal inspect T1 --timeline'")
	}
	if r.Until != nil {
		if *r.Until < 1 {
			return in, api.Usage("--until %d: give the seq of a record (1 or more)", *r.Until)
		}
		in.until = *r.Until
	}
	return in, nil
}

// inspectOn reads the state inspect shows: now, or right after record
// in.until (at its time); with one task named, its records too.
func (l *Local) inspectOn(ctx context.Context, in inspection, decide func(tx *store.Tx, at int64, records []state.Record) (any, error)) (any, error) {
	opts := l.store
	var taskRecords []state.Record // the records about the one task named
	if len(in.ids) == 1 || in.until != 0 {
		// A state of the past shows no payload redacted since: only then is
		// the WAL as it stands read first; the state now knows its own.
		var redacted map[string]string
		if in.until != 0 {
			var err error
			if redacted, err = l.redactedTasks(ctx); err != nil {
				return nil, err
			}
		}
		inner := decide
		decide = func(tx *store.Tx, at int64, records []state.Record) (any, error) {
			if in.until != 0 {
				tx.State.ForgetPayloads(redacted)
			} else {
				redacted = redactedIn(tx.State)
			}
			for i := range records {
				records[i] = masked(records[i], redacted)
			}
			return inner(tx, at, records)
		}
		onRecord := func(rec state.Record, _ *store.Tx) error {
			if len(in.ids) == 1 && rec.TaskID == in.ids[0] {
				taskRecords = append(taskRecords, rec)
			}
			if in.until != 0 && rec.Seq == in.until {
				return store.ErrStop // the state right after record --until
			}
			return nil
		}
		from := int64(1) // a task's records from its first
		if len(in.ids) == 0 {
			from = in.until
		}
		opts.FullReplay, opts.OnRecord = true, onRecord
		var answer any
		last, halted, err := store.ReadSegments(opts, from, func(stopped *store.Tx) (err error) {
			answer, err = decide(stopped, stopped.State.LastAt(), taskRecords) // a sealed segment holds record --until
			return err
		})
		if err != nil || halted {
			return answer, err
		}
		store.SkipThrough(&opts, last)
	}
	return l.operate(ctx, opts, false, "", func(tx *store.Tx) (any, error) {
		st, at := tx.State, tx.Now
		if in.until != 0 {
			if b := st.Base(); b != nil && in.until <= b.Seq {
				return nil, &state.Error{Kind: state.NotFound, Msg: fmt.Sprintf("--until %d: %s", in.until, b.Compacted())}
			}
			if st.LastSeq() < in.until {
				return nil, &state.Error{Kind: state.NotFound, Msg: fmt.Sprintf("--until %d: the WAL has records 1 to %d", in.until, st.LastSeq())}
			}
			at = st.LastAt()
		}
		return decide(tx, at, taskRecords)
	})
}

// Inspect shows the tasks named as they stand (a task named alone with
// its records), or every task (List streams them instead).
func (l *Local) Inspect(ctx context.Context, r api.InspectRequest) (api.Inspect, error) {
	in, err := readInspect(r)
	if err != nil {
		return api.Inspect{}, err
	}
	if len(in.ids) == 0 {
		v := api.Inspect{}
		err := l.List(ctx, r, api.Listing{
			Head: func(head api.Inspect) error { v = head; return nil },
			Task: func(t api.Task) error { v.Tasks = append(v.Tasks, t); return nil },
		})
		return v, err
	}
	return as[api.Inspect](l.inspectOn(ctx, in, func(tx *store.Tx, at int64, records []state.Record) (any, error) {
		v := api.Inspect{Result: api.ResultOK, At: api.FormatTime(at), Counts: map[string]int{}, Tasks: []api.Task{}}
		for _, id := range in.ids {
			t, err := tx.State.Task(id)
			if err != nil {
				return nil, err
			}
			tv, err := answers.Task(t, at, tx.Payload)
			if err != nil {
				return nil, err
			}
			if in.only.shows(tv) {
				v.Counts[tv.State]++
				v.Tasks = append(v.Tasks, tv)
			}
		}
		if len(in.ids) == 1 && len(v.Tasks) == 1 {
			v.Tasks[0].Records = make([]api.Record, 0, len(records))
			for _, r := range records {
				v.Tasks[0].Records = append(v.Tasks[0].Records, answers.Record(r))
			}
		}
		return v, nil
	}))
}

// List hands every task inspect lists to into, its head (counts and
// summary) first, one task at a time: a listing of a long history never
// holds every task's view in memory.
func (l *Local) List(ctx context.Context, r api.InspectRequest, into api.Listing) error {
	in, err := readInspect(r)
	if err != nil {
		return err
	}
	if len(in.ids) > 0 {
		v, err := l.Inspect(ctx, r)
		if err != nil {
			return err
		}
		return into.Hand(v)
	}
	_, err = l.inspectOn(ctx, in, func(tx *store.Tx, at int64, _ []state.Record) (any, error) {
		st := tx.State
		// Two passes, one to count and one to hand out, each reading the
		// tasks one at a time: a listing never holds the backlog.
		live := in.only.unfinishedOnly() // a finished task never waits or holds a lease again: the finished tasks are not read
		head := api.Inspect{Result: api.ResultOK, At: api.FormatTime(at), Counts: map[string]int{}, Summary: summarize(st, at, in.only.queue), Tasks: []api.Task{}}
		matched := 0
		err := st.EachTaskInAnyOrder(live, func(t *state.Task) bool {
			if in.only.showsAt(t, at) {
				head.Counts[string(t.At(at).State)]++
				matched++
			}
			return true
		})
		if err != nil {
			return nil, err
		}
		if in.limit > 0 {
			head.More = max(0, matched-in.limit)
		}
		if err := into.Head(head); err != nil {
			return nil, err
		}
		var handErr error
		handed := 0
		err = st.EachTask(live, func(t *state.Task) bool {
			if !in.only.showsAt(t, at) {
				return true // only the tasks shown read their payloads
			}
			var tv api.Task
			if tv, handErr = answers.Task(t, at, tx.Payload); handErr == nil {
				handErr = into.Task(tv)
			}
			handed++
			return handErr == nil && (in.limit == 0 || handed < in.limit)
		})
		return nil, cmp.Or(handErr, err)
	})
	return err
}

// taskFilter is what --state and --queue keep of a listing.
type taskFilter struct {
	states []state.TaskState // any of them; none: every state
	queue  string
}

// shows reports whether a task as viewed is listed.
func (f taskFilter) shows(tv api.Task) bool {
	return (len(f.states) == 0 || slices.Contains(f.states, state.TaskState(tv.State))) && (f.queue == "" || tv.Queue == f.queue)
}

// unfinishedOnly says whether the filter lists only tasks that wait or
// hold a lease.
func (f taskFilter) unfinishedOnly() bool {
	return len(f.states) > 0 && !slices.ContainsFunc(f.states, state.TaskState.Terminal)
}

// parseStates reads a list of task states (WAITING,LEASED), as --flag
// gives it; "" is none.
func parseStates(flag string, list api.List) ([]state.TaskState, error) {
	if list == "" {
		return nil, nil
	}
	var out []state.TaskState
	for _, name := range strings.Split(string(list), ",") {
		st, ok := state.ParseTaskState(strings.TrimSpace(name))
		if !ok {
			return nil, api.Usage("--%s %q: %q is not a state: use WAITING, LEASED, COMPLETED, FAILED or DEAD", flag, list, name)
		}
		if !slices.Contains(out, st) {
			out = append(out, st)
		}
	}
	return out, nil
}

// showsAt is shows for t as it stands at at, without its view.
func (f taskFilter) showsAt(t *state.Task, at int64) bool {
	c := t.At(at)
	return f.shows(api.Task{State: string(c.State), Queue: c.Queue})
}

// summarize is a listing's summary: of queue's tasks alone when one is
// named.
func summarize(st *state.State, at int64, queue string) *api.InspectSummary {
	sum := &api.InspectSummary{Queues: map[string]map[string]int{}}
	var nextExpiry, nextSeq, oldestSeq int64 // ties go to the task created first
	st.EachLive(func(t *state.Task) bool {   // only unfinished tasks wait or hold leases
		if queue != "" && t.Queue != queue {
			return true
		}
		c := t.At(at)
		if !c.State.Terminal() {
			if sum.Queues[c.Queue] == nil {
				sum.Queues[c.Queue] = map[string]int{}
			}
			sum.Queues[c.Queue][string(c.State)]++
		}
		switch seq := t.Seqs[0]; {
		case c.State == state.Leased:
			sum.CurrentLeases++
			if sum.NextExpiry == nil || c.Lease.Expiry < nextExpiry || c.Lease.Expiry == nextExpiry && seq < nextSeq {
				nextExpiry, nextSeq = c.Lease.Expiry, seq
				sum.NextExpiry = &api.HeldLease{TaskID: c.ID, LeaseID: c.Lease.ID, Expiry: api.FormatTime(nextExpiry)}
			}
		case c.State == state.Waiting && c.Blocked():
			sum.Blocked++
		case c.State == state.Waiting && (sum.OldestWaiting == nil || seq < oldestSeq):
			oldestSeq = seq
			sum.OldestWaiting = &api.OldestWaiting{TaskID: c.ID, CreatedAt: api.FormatTime(c.CreatedAt), AgeMs: at - c.CreatedAt}
		}
		return true
	})
	if paused := pausedList(st, at, queue); len(paused) > 0 {
		sum.Paused = paused
	}
	return sum
}

// pausedList is every queue paused at now (only the one named, if any), by
// name.
func pausedList(st *state.State, now int64, only string) []api.PausedQueue {
	out := []api.PausedQueue{}
	pauses := st.Pauses(now)
	for _, q := range slices.Sorted(maps.Keys(pauses)) {
		if only == "" || q == only {
			out = append(out, answers.Pause(q, pauses[q]))
		}
	}
	return out
}

// RegistryNote says what the worker registry is, and is not.
const RegistryNote = "the registry is advisory soft state: heartbeats never grant or keep a lease, only the WAL does"

// Workers shows every worker that heartbeated or holds a lease.
func (l *Local) Workers(ctx context.Context) (api.Workers, error) {
	h, done := l.handle(l.store)
	defer done()
	var v api.Workers
	err := h.Read(func(tx *store.Tx) error {
		reg := h.Workers(tx.Now)
		leases := CurrentLeases(tx.State, "", tx.Now)
		names := map[string]bool{}
		for w := range reg {
			names[w] = true
		}
		for w := range leases {
			names[w] = true
		}
		v = api.Workers{Result: api.ResultOK, At: api.FormatTime(tx.Now), Note: RegistryNote, Workers: []api.Worker{}}
		for _, w := range slices.Sorted(maps.Keys(names)) {
			wv := api.Worker{WorkerID: w, Leases: leases[w]}
			if wv.Leases == nil {
				wv.Leases = []api.HeldLease{}
			}
			if last, ok := reg[w]; ok {
				ago := tx.Now - last
				wv.LastHeartbeat, wv.HeartbeatAge = answers.Null(api.FormatTime(last)), &ago
			}
			v.Workers = append(v.Workers, wv)
		}
		return nil
	})
	return v, err
}

// logFilter decides which records log hands on.
type logFilter struct {
	r            api.LogRequest
	from         int64
	types        map[state.RecordType]bool
	since, until int64
	st           *state.State // as of the record being filtered
}

// newLogFilter reads a log request; --since and --until count from the
// time of the first record (first).
func newLogFilter(r api.LogRequest, first, now int64) (*logFilter, error) {
	f := &logFilter{r: r, from: max(r.From, 1), until: -1}
	if r.From < 0 || (r.To != 0 && r.To < f.from) {
		return nil, api.Usage("--from must be at least 1 and --to (if given) at least --from")
	}
	if r.Type != "" {
		for _, name := range strings.Split(string(r.Type), ",") {
			typ, ok := state.ParseRecordType(name)
			if !ok {
				return nil, api.Usage("--type %q is not a record type: use one of %s", name, strings.Join(state.RecordTypeNames(), ", "))
			}
			if f.types == nil {
				f.types = map[state.RecordType]bool{}
			}
			f.types[typ] = true
		}
	}
	var err error
	if r.Since != "" {
		if f.since, err = logTime("since", r.Since, first, now); err != nil {
			return nil, err
		}
	}
	if r.Until != "" {
		if f.until, err = logTime("until", r.Until, first, now); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// logTime reads a --since/--until time: RFC 3339, unix ms, a duration D
// or -D before now, or +D after first.
func logTime(flag, text string, first, now int64) (int64, error) {
	if n, err := strconv.ParseInt(text, 10, 64); err == nil && n >= 0 && n < 1e11 {
		seq := map[string]string{"since": "from", "until": "to"}[flag]
		return 0, api.Usage("--%s %q is a time, and this looks like a record's seq: did you mean --%s %s?", flag, text, seq, text)
	}
	if span, back := strings.CutPrefix(text, "-"); back || !strings.HasPrefix(text, "+") {
		if d, err := api.ParseSpan(span); err == nil && d >= 0 { // 1h or -1h: that long before now
			return max(now-d.Milliseconds(), state.MinTime), nil
		}
	}
	ms, err := api.ParseTimeFlag("--"+flag, text, first, first)
	if err != nil {
		return 0, api.Usage("--%s %q is not a time: use RFC 3339, unix milliseconds, 1h (that long ago) or +1h (after the first record)", flag, text)
	}
	return ms, nil
}

func (f *logFilter) keep(r state.Record) bool {
	o := f.r
	switch {
	case r.Seq < f.from || (o.To != 0 && r.Seq > o.To):
		return false
	case r.At < f.since || (f.until >= 0 && r.At > f.until):
		return false
	case f.types != nil && !f.types[r.Type]:
		return false
	case o.Task != "" && r.TaskID != o.Task:
		return false
	case o.Lease != "" && r.LeaseID != o.Lease:
		return false
	case o.Domain != "" && r.Domain != o.Domain:
		return false
	case o.Worker != "" && f.workerOf(r) != o.Worker:
		return false
	case o.Queue != "" && f.queueOf(r) != o.Queue:
		return false
	}
	return true
}

// queueOf is the queue of the task a record is about ("" for none).
func (f *logFilter) queueOf(r state.Record) string {
	if r.TaskID == "" {
		return ""
	}
	if t, err := f.st.Task(r.TaskID); err == nil {
		return t.Queue
	}
	return ""
}

// workerOf is the worker a record concerns: the one it names, or the one its
// lease was granted to.
func (f *logFilter) workerOf(r state.Record) string {
	if r.WorkerID != "" || r.LeaseID == "" {
		return r.WorkerID
	}
	if t, err := f.st.Task(r.TaskID); err == nil {
		if a := t.AttemptOf(r.LeaseID); a != nil {
			return a.Worker
		}
	}
	return ""
}

// Log hands each record that matches r to each, in order, as the replay
// reads it (a reader that must not show records before the end was found
// sound keeps them aside until Log returns). It answers where the log
// stands: its first record's time, and its last seq.
func (l *Local) Log(ctx context.Context, r api.LogRequest, each func(api.Record) error) (api.LogEnd, error) {
	now := clockNow(l.store)
	f, err := newLogFilter(r, 0, now) // the request's syntax, before reading anything
	if err != nil {
		return api.LogEnd{}, err
	}
	if r.Limit < 0 {
		return api.LogEnd{}, api.Usage("--limit %d: give a number of records, 1 or more (0: every one)", r.Limit)
	}
	var end api.LogEnd
	opts := l.store
	opts.FullReplay = true
	if r.From > 1 && !strings.HasPrefix(r.Since, "+") && !strings.HasPrefix(r.Until, "+") {
		// Only a time after the first record reads that record: else the
		// index, which ends before From, stands in for the records before it.
		opts.FullReplay, opts.ReplayFrom = false, r.From
	}
	redacted, err := l.redactedTasks(ctx)
	if err != nil {
		return api.LogEnd{}, err
	}
	first, stopped, toldTask, handed := int64(0), false, false, 0
	onRecord := func(rec state.Record, tx *store.Tx) error {
		rec = masked(rec, redacted)
		if first == 0 {
			first, end.FirstAt = rec.Seq, api.FormatTime(rec.At)
			if opts.FullReplay {
				if f, err = newLogFilter(r, rec.At, now); err != nil {
					return err
				}
			}
		}
		if r.To != 0 && rec.Seq > r.To {
			stopped = true
			return store.ErrStop // nothing after To is asked for
		}
		if f.st = tx.State; !f.keep(rec) {
			return nil
		}
		toldTask = toldTask || (r.Task != "" && rec.TaskID == r.Task)
		if err := each(answers.Record(rec)); err != nil {
			return err
		}
		if handed++; (r.To != 0 && rec.Seq >= r.To) || handed == r.Limit {
			stopped = true
			return store.ErrStop
		}
		return nil
	}
	// The records compaction sealed are read first, from their segments.
	opts.OnRecord = onRecord
	last, _, err := store.ReadSegments(opts, max(r.From, 1), nil)
	if err != nil || stopped {
		end.LastSeq = last // where reading stopped, as a stop in the WAL leaves it
		return end, err
	}
	store.SkipThrough(&opts, last)
	_, err = l.operate(ctx, opts, false, "", func(tx *store.Tx) (any, error) {
		end.LastSeq = tx.State.LastSeq()
		if b := tx.State.Base(); b != nil && (first == 0 || first > max(r.From, 1)) && r.From <= b.Seq {
			end.Compacted = b.Compacted()
			if last != 0 {
				end.Compacted += "; the segments left start at seq " + strconv.FormatInt(first, 10)
			}
		}
		if r.Task != "" && !toldTask { // a task compaction dropped is told from its segments
			if _, err := tx.State.Task(r.Task); err != nil {
				return nil, err
			}
		}
		return nil, nil
	})
	return end, err
}

// redactedTasks is every task whose payload was redacted, with why, as the
// WAL stands: a reader of records, or of a past state, shows none of their
// payloads.
func (l *Local) redactedTasks(ctx context.Context) (map[string]string, error) {
	out, err := l.operate(ctx, l.store, false, "", func(tx *store.Tx) (any, error) { return redactedIn(tx.State), nil })
	if err != nil {
		return nil, err
	}
	return out.(map[string]string), nil
}

// redactedIn is every task st says was redacted, with why.
func redactedIn(st *state.State) map[string]string {
	reasons := map[string]string{}
	for _, id := range st.Redacted() {
		reasons[id] = "redacted"
		if t, err := st.Task(id); err == nil {
			reasons[id] = t.Redacted
		}
	}
	return reasons
}

// masked is a record as a reader sees it: without the payload of a task
// redacted since.
func masked(rec state.Record, redacted map[string]string) state.Record {
	if _, gone := redacted[rec.TaskID]; gone && rec.Type == state.TaskCreated {
		rec.Payload = ""
	}
	return rec
}

// Changes signals on the channel whenever the WAL may have changed, until
// ctx is done: a reader that follows the log, or a worker waiting for a
// task, looks again then.
func (l *Local) Changes(ctx context.Context) (<-chan struct{}, error) {
	h := store.Open(l.store)
	w, err := h.Watch()
	var notFile *store.NotRegularError
	if errors.As(err, &notFile) {
		h.Close()
		return nil, err
	}
	if err != nil {
		h.Close()
		return nil, fmt.Errorf("watching %s for changes: %w", l.store.Path, err)
	}
	stop := context.AfterFunc(ctx, w.Interrupt)
	changed := make(chan struct{}, 1)
	go func() {
		defer h.Close()
		defer w.Close()
		defer stop()
		for ctx.Err() == nil {
			if yes, _ := w.Wait(time.Now().Add(time.Second)); yes {
				select {
				case changed <- struct{}{}:
				default:
				}
			}
		}
	}()
	return changed, nil
}

// Stats is the figures an operator watches: every queue's unfinished tasks
// (the MaxStatsQueues busiest by name, the rest summed; with r.Queue,
// that queue only) and the records of each type in the history.
func (l *Local) Stats(ctx context.Context, r api.StatsRequest) (api.Stats, error) {
	if r.Queue != "" {
		if err := state.ValidateQueue(r.Queue); err != nil {
			return api.Stats{}, api.Usage("--queue %q: %v", r.Queue, err)
		}
	}
	var recent time.Duration
	if r.Recent != "" {
		var err error
		if recent, err = api.ParseDuration("recent", r.Recent); err != nil || recent <= 0 {
			return api.Stats{}, api.Usage("--recent %q: give a span back from now, such as 1h or 15m", r.Recent)
		}
	}
	var now int64
	byQueue := map[string]*api.QueueStats{}
	out, err := l.operate(ctx, l.store, false, "", func(tx *store.Tx) (any, error) {
		now = tx.Now
		v := api.Stats{Result: api.ResultOK, At: api.FormatTime(tx.Now), LastSeq: tx.State.LastSeq(), Records: map[string]int64{}}
		for t, n := range tx.State.RecordCounts() {
			v.Records[string(t)] = n
		}
		for _, q := range tx.State.QueueStats(tx.Now) {
			if r.Queue != "" && q.Queue != r.Queue {
				continue
			}
			qs := api.QueueStats{Queue: q.Queue, Waiting: q.Waiting, Eligible: q.Eligible, Blocked: q.Blocked, Leased: q.Leased}
			if q.EligibleSince != 0 {
				qs.OldestEligibleAgeMs = max(0, tx.Now-q.EligibleSince)
			}
			byQueue[q.Queue] = &qs
		}
		v.Paused = pausedList(tx.State, tx.Now, r.Queue)
		v.Rated = []api.RatedQueue{}
		for _, q := range tx.State.Rates() {
			if r.Queue != "" && q.Queue != r.Queue {
				continue
			}
			rq := api.RatedQueue{Queue: q.Queue, Rate: q.Rate.String(), Burst: q.Burst, HeldBack: l.rateHolds.of(q.Queue)}
			if q.NextGrantAt > tx.Now {
				rq.NextGrantAt = answers.Null(answers.Stamp(q.NextGrantAt))
			}
			v.Rated = append(v.Rated, rq)
		}
		return v, nil
	})
	if err != nil {
		return api.Stats{}, err
	}
	v := out.(api.Stats)
	if recent > 0 {
		v.Recent = r.Recent
		if err := l.countFinished(ctx, r.Queue, now, recent, byQueue); err != nil {
			return api.Stats{}, err
		}
	}
	v.Queues = []api.QueueStats{}
	for _, name := range slices.Sorted(maps.Keys(byQueue)) {
		v.Queues = append(v.Queues, *byQueue[name])
	}
	v.Queues, v.Others = boundQueues(v.Queues)
	return v, nil
}

// endingTypes are the records that may end a task (whether it stays ended
// is the state's to say at now).
var endingTypes = []state.RecordType{state.TaskCompleted, state.TaskFailed, state.TaskDead, state.TaskAborted, state.LeaseExpired}

// countFinished counts, in each queue's Finished, the tasks that ended in
// the span of length recent before now: those a record of the span is
// about (read from the WAL's tail, not from every task) that are final at
// now and ended in it. A queue with no unfinished task gets a row too.
func (l *Local) countFinished(ctx context.Context, queue string, now int64, recent time.Duration, byQueue map[string]*api.QueueStats) error {
	since := now - recent.Milliseconds()
	ended := map[string]bool{}
	// The records of the span are the WAL's last ones: a scan finds them
	// without building a state, unless a compaction within the span sealed
	// some of them in the history, which log reads through.
	h := store.Open(l.store)
	whole, err := h.RecordsSince(since, func(rec state.Record) error {
		if slices.Contains(endingTypes, rec.Type) {
			ended[rec.TaskID] = true
		}
		return nil
	})
	h.Close()
	if err == nil && !whole {
		clear(ended)
		types := make([]string, len(endingTypes))
		for i, t := range endingTypes {
			types[i] = string(t)
		}
		_, err = l.Log(ctx, api.LogRequest{Since: api.FormatTime(since), Type: api.List(strings.Join(types, ","))},
			func(rec api.Record) error { ended[rec.TaskID] = true; return nil })
	}
	if err != nil {
		return err
	}
	for _, q := range byQueue {
		q.Finished = &api.Finished{}
	}
	_, err = l.operate(ctx, l.store, false, "", func(tx *store.Tx) (any, error) {
		for _, id := range slices.Sorted(maps.Keys(ended)) {
			t, err := tx.State.Task(id)
			if err != nil {
				continue // compacted meanwhile: it ended before the span
			}
			c := t.At(now)
			if !c.State.Terminal() || c.Ended < since || c.Ended > now || (queue != "" && c.Queue != queue) {
				continue // retried, ended outside the span, or of another queue
			}
			q := byQueue[c.Queue]
			if q == nil {
				q = &api.QueueStats{Queue: c.Queue, Finished: &api.Finished{}}
				byQueue[c.Queue] = q
			}
			switch c.State {
			case state.Completed:
				q.Finished.Completed++
			case state.Failed:
				q.Finished.Failed++
			default:
				q.Finished.Dead++
			}
		}
		return nil, nil
	})
	for _, q := range byQueue {
		q.Finished.CompletedPerMinute = float64(q.Finished.Completed) / recent.Minutes()
	}
	return err
}

// boundQueues keeps the api.MaxStatsQueues busiest queues (most unfinished
// tasks, then by name) and sums the rest.
func boundQueues(qs []api.QueueStats) ([]api.QueueStats, *api.OtherQueues) {
	if len(qs) <= api.MaxStatsQueues {
		return qs, nil
	}
	busy := func(q api.QueueStats) int { return q.Waiting + q.Leased }
	slices.SortStableFunc(qs, func(a, b api.QueueStats) int { return busy(b) - busy(a) })
	other := &api.OtherQueues{Queues: len(qs) - api.MaxStatsQueues}
	for _, q := range qs[api.MaxStatsQueues:] {
		other.Waiting, other.Eligible, other.Blocked, other.Leased = other.Waiting+q.Waiting, other.Eligible+q.Eligible, other.Blocked+q.Blocked, other.Leased+q.Leased
		other.OldestEligibleAgeMs = max(other.OldestEligibleAgeMs, q.OldestEligibleAgeMs)
	}
	kept := slices.Clone(qs[:api.MaxStatsQueues])
	slices.SortFunc(kept, func(a, b api.QueueStats) int { return strings.Compare(a.Queue, b.Queue) })
	return kept, other
}
