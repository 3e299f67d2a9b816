package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// soaking says the full sizes were asked for (LEASEWAL_SOAK=1, as .ci/run
// sets it): the tests whose cost grows fastest run smaller without it.
func soaking() bool { return os.Getenv("LEASEWAL_SOAK") == "1" }

// t0 is 2026-01-01T00:00:00Z, the start of every test story.
const t0 = int64(1767225600000)

func sec(n float64) int64 { return t0 + int64(n*1000) }

func policy(maxAttempts int, backoff, backoffMax time.Duration) *RetryPolicy {
	return &RetryPolicy{MaxAttempts: maxAttempts, Backoff: Duration(backoff), BackoffMax: Duration(backoffMax)}
}

func created(id string, at int64, window time.Duration, p *RetryPolicy) Record {
	return Record{At: at, Type: TaskCreated, TaskID: id, Payload: "P", Window: Duration(window), RetryPolicy: p, RequestID: "R-" + id}
}

func granted(task, lease, worker string, attempt int, at, expiry int64) Record {
	return Record{At: at, Type: LeaseGranted, TaskID: task, LeaseID: lease, WorkerID: worker, Attempt: attempt, Expiry: expiry}
}

func extended(task, lease string, at, expiry int64) Record {
	return Record{At: at, Type: LeaseExtended, TaskID: task, LeaseID: lease, Expiry: expiry}
}

func onLease(typ RecordType, task, lease string, at int64) Record {
	return Record{At: at, Type: typ, TaskID: task, LeaseID: lease}
}

func failed(task, lease string, at int64, permanent bool) Record {
	return Record{At: at, Type: TaskFailed, TaskID: task, LeaseID: lease, Reason: "boom", Permanent: permanent}
}

func dead(task string, at int64) Record {
	return Record{At: at, Type: TaskDead, TaskID: task, Reason: "execution window closed"}
}

// applyAll numbers the records and applies them through a Verifier, failing
// the test on any refusal or broken invariant.
func applyAll(t *testing.T, recs ...Record) *Verifier {
	t.Helper()
	v := NewVerifier()
	for i, r := range recs {
		r.Seq = int64(i + 1)
		if err := v.Step(r); err != nil {
			t.Fatalf("record %d: %v", i+1, err)
		}
	}
	return v
}

// refused applies story, then bad, which must be refused with a RecordError
// and leave the state exactly as it was; it returns the error.
func refused(t *testing.T, story []Record, bad Record) *RecordError {
	t.Helper()
	v := applyAll(t, story...)
	before := snapshot(v.State)
	err := v.State.Apply(next(v.State, bad))
	var re *RecordError
	if !errors.As(err, &re) {
		t.Fatalf("want a RecordError, got %v", err)
	}
	if after := snapshot(v.State); after != before {
		t.Fatalf("a refused record changed the state:\n before %s\n after  %s", before, after)
	}
	return re
}

// next numbers r as the record after the state's last.
func next(s *State, r Record) Record {
	r.Seq = s.LastSeq() + 1
	return r
}

// keyed puts the keys a loaded snapshot indexes lazily into their maps, so
// that a loaded state compares with a replayed one field by field.
func keyed(s *State) *State {
	s.keySubmits()
	s.keyLeases()
	return s
}

// snapshot renders everything a State holds, for before/after comparisons.
func snapshot(s *State) string {
	keyed(s)
	b, err := json.Marshal(struct {
		Tasks                      []*Task
		Submits                    map[string]*Task
		LeaseRequests              string
		LeaseTask                  map[string]string
		Seq, At, LeaseNum, TaskNum int64
	}{s.order, s.submits, fmt.Sprint(s.leaseRequests), s.leaseTask, s.lastSeq, s.lastAt, s.lastLeaseNum, s.lastTaskNum})
	if err != nil {
		panic(err)
	}
	return string(b)
}

// allTasks is s.Tasks(), with damage as no tasks: the tests that list tasks
// check damage through Damage.
func allTasks(s *State) []*Task {
	tasks, _ := s.Tasks()
	return tasks
}

// snap is the snapshot of a state that holds every task in memory: its
// head, its tasks, its live list and its tail, as a base holds them.
func snap(s *State) []byte {
	if s.src != nil {
		panic("snap of a state over a source")
	}
	version := s.snapshotVersion()
	e := &encoder{deps: version >= 7}
	s.encodeHead(e, version)
	index := make(map[*Task]uint32, len(s.order))
	e.length(len(s.order), s.order == nil)
	for i, t := range s.order {
		index[t] = uint32(i)
		e.task(t)
	}
	var live []uint32
	if s.live != nil {
		live = make([]uint32, len(s.live))
		for i, t := range s.live {
			live[i] = index[t]
		}
	}
	e.liveList(live, s.ended)
	s.encodeTail(e, version)
	return e.b
}
