package service

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/leasewal/leasewal/internal/store"
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
)

// Candidates lists the values of a kind for shell completion, read under a
// shared lock that it waits for at most half a second (a shell must not
// hang on a busy WAL): task ids, the ones still in play first; the leases
// of task, or else the current ones; domains; every worker that held a
// lease or heartbeated.
func (l *Local) Candidates(ctx context.Context, kind, task string) ([]Candidate, error) {
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
			var done []Candidate
			tasks, _ := st.Tasks()
			for _, t := range tasks {
				c := t.At(now)
				if c.State.Terminal() {
					done = append(done, Candidate{t.ID, string(c.State)})
				} else {
					out = append(out, Candidate{t.ID, string(c.State)})
				}
			}
			out = append(out, done...)
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
		case CandidateDomains:
			for _, d := range st.Domains() {
				out = append(out, Candidate{Value: d.Name})
			}
		case CandidateWorkers:
			seen := map[string]bool{}
			for w := range h.Workers(now) {
				seen[w] = true
			}
			tasks, _ := st.Tasks()
			for _, t := range tasks {
				for _, a := range t.Attempts {
					seen[a.Worker] = true
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
