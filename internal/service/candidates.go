package service

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// Candidate is a value a shell may complete, with what it is.
type Candidate struct {
	Value, About string
}

// The kinds of value Candidates lists.
const (
	CandidateTasks   = "task"
	CandidateLeases  = "lease"
	CandidateDomains = "domain"
	CandidateWorkers = "worker"
	CandidateQueues  = "queue"
)

// maxCandidates is the most task ids a completion lists: more than a shell
// shows, and few enough that a WAL of millions of tasks is not read whole.
const maxCandidates = 1000

// Candidates lists the values of a kind for shell completion, read under a
// shared lock that it waits for at most half a second (a shell must not
// hang on a busy WAL): task ids that begin with prefix (taskCandidates);
// the leases of task, or else the current ones; domains; every worker that
// heartbeated, holds a lease, or held one of the latest maxCandidates
// tasks; the queues that hold tasks or are paused, limited or rated.
func (l *Local) Candidates(ctx context.Context, kind, task, prefix string) ([]Candidate, error) {
	opts := l.store
	opts.LockTimeout = min(opts.LockTimeout, 500*time.Millisecond)
	opts.Warn = nil
	h := store.Open(opts)
	defer h.Close()
	var out []Candidate
	err := h.Read(func(tx *store.Tx) error {
		st, now := tx.State, tx.Now
		switch kind {
		case CandidateTasks:
			out = taskCandidates(st, prefix, now)
		case CandidateLeases:
			if task != "" {
				if t, err := st.Task(task); err == nil {
					for _, a := range t.At(now).Attempts {
						out = append(out, Candidate{a.LeaseID, a.Worker})
					}
				}
				return nil
			}
			for worker, leases := range CurrentLeases(st, "", now) {
				for _, l := range leases {
					out = append(out, Candidate{l.LeaseID, l.TaskID + " " + worker})
				}
			}
			slices.SortFunc(out, func(a, b Candidate) int { return strings.Compare(a.Value, b.Value) })
		case CandidateQueues:
			names, _ := st.QueuesWithTasks()
			seen := map[string]bool{}
			for _, q := range names {
				seen[q] = true
			}
			for q := range st.Pauses(now) {
				seen[q] = true
			}
			for q := range st.Limits() {
				seen[q] = true
			}
			for _, r := range st.Rates() {
				seen[r.Queue] = true
			}
			for _, q := range slices.Sorted(maps.Keys(seen)) {
				out = append(out, Candidate{Value: q})
			}
		case CandidateDomains:
			for _, d := range st.Domains() {
				out = append(out, Candidate{Value: d.Name})
			}
		case CandidateWorkers:
			seen := map[string]bool{}
			for w := range h.Workers(now) {
				seen[w] = true
			}
			st.EachLeased("", func(t *state.Task) bool { seen[t.Lease.Worker] = true; return true })
			for n := st.LastTaskNumber(); n > max(0, st.LastTaskNumber()-maxCandidates); n-- { // the latest tasks' workers
				if t, err := st.Task("T" + strconv.FormatInt(n, 10)); err == nil {
					for _, a := range t.Attempts {
						seen[a.Worker] = true
					}
				}
			}
			for w := range seen {
				out = append(out, Candidate{Value: w})
			}
			slices.SortFunc(out, func(a, b Candidate) int { return strings.Compare(a.Value, b.Value) })
		}
		return nil
	})
	return out, err
}

// taskCandidates are at most maxCandidates ids of tasks that begin with
// prefix, those still in play at now first, then the ended, each in
// creation order. The prefix of a number (T12) is looked up by number: T12,
// T120 to T129, T1200 to T1299, …; "" and "T" list the first tasks in play,
// then the first ended.
func taskCandidates(st *state.State, prefix string, now int64) []Candidate {
	var live, ended []Candidate
	add := func(t *state.Task) {
		if c := t.At(now); c.State.Terminal() {
			ended = append(ended, Candidate{t.ID, string(c.State)})
		} else {
			live = append(live, Candidate{t.ID, string(c.State)})
		}
	}
	digits := strings.TrimPrefix(prefix, "T")
	switch first, err := strconv.ParseInt(digits, 10, 64); {
	case prefix != "" && digits == prefix: // not a task id's beginning
	case digits == "":
		st.EachLive(func(t *state.Task) bool {
			if !t.State.Terminal() {
				add(t)
			}
			return len(live)+len(ended) < maxCandidates
		})
		_ = st.EachTask(false, func(t *state.Task) bool {
			if t.State.Terminal() && len(live)+len(ended) < maxCandidates {
				add(t)
			}
			return len(live)+len(ended) < maxCandidates
		})
	case err == nil && first > 0 && strconv.FormatInt(first, 10) == digits:
		last, looked := st.LastTaskNumber(), 0 // a compaction leaves numbers that name no task: looked bounds the lookups
		more := func() bool { return len(live)+len(ended) < maxCandidates && looked < 10*maxCandidates }
		for from, span := first, int64(1); from <= last && more(); from, span = from*10, span*10 {
			for n := from; n < from+span && n <= last && more(); n++ {
				looked++
				if t, err := st.Task("T" + strconv.FormatInt(n, 10)); err == nil {
					add(t)
				}
			}
		}
	}
	slices.SortFunc(live, byNumber)
	slices.SortFunc(ended, byNumber)
	return append(live, ended...)
}

func byNumber(a, b Candidate) int { return cmp.Compare(state.Number(a.Value), state.Number(b.Value)) }
