package cmd

import (
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// completer lists candidates for one flag or argument from the WAL.
type completer func(c completion, cmd *cobra.Command) []string

// completion is what a completer reads: the state at now, and the registry.
type completion struct {
	st      *state.State
	now     int64
	workers map[string]int64
}

// registerCompletions gives every --task, --lease, --domain, --worker,
// --state and --type flag in the tree, and inspect's arguments, dynamic shell
// completion (cobra's `completion bash|zsh|fish` prints the scripts).
func (a *app) registerCompletions(root *cobra.Command) {
	byFlag := map[string]completer{
		"task": completeTasks, "lease": completeLeases, "domain": completeDomains, "worker": completeWorkers,
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for name, fn := range byFlag {
			if c.Flags().Lookup(name) != nil {
				_ = c.RegisterFlagCompletionFunc(name, a.completion(fn))
			}
		}
		if c.Flags().Lookup("state") != nil {
			_ = c.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(
				[]string{"WAITING", "LEASED", "COMPLETED", "FAILED", "DEAD"}, cobra.ShellCompDirectiveNoFileComp))
		}
		if c.Flags().Lookup("type") != nil {
			_ = c.RegisterFlagCompletionFunc("type", cobra.FixedCompletions(state.RecordTypeNames(), cobra.ShellCompDirectiveNoFileComp))
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completion reads the WAL under a shared lock, waiting at most a moment: a
// shell must not hang on a busy WAL.
func (a *app) completion(fn completer) cobra.CompletionFunc {
	return func(c *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if err := a.resolve(); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		opts := a.env.storeOptions()
		opts.LockTimeout = min(opts.LockTimeout, 500*time.Millisecond)
		opts.Warn = nil
		h := store.Open(opts)
		defer h.Close()
		var cands []string
		err := h.Read(func(tx *store.Tx) error {
			cands = fn(completion{st: tx.State, now: tx.Now, workers: h.Workers(tx.Now)}, c)
			return nil
		})
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, cand := range cands {
			if strings.HasPrefix(cand, prefix) {
				out = append(out, cand)
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeTasks lists task ids, the ones still in play first, with their state.
func completeTasks(s completion, _ *cobra.Command) []string {
	var live, done []string
	tasks, _ := s.st.Tasks()
	for _, t := range tasks {
		c := t.At(s.now)
		entry := cobra.CompletionWithDesc(t.ID, string(c.State))
		if c.State.Terminal() {
			done = append(done, entry)
		} else {
			live = append(live, entry)
		}
	}
	return append(live, done...)
}

// completeLeases lists the leases of --task if it is given, else the current leases.
func completeLeases(s completion, c *cobra.Command) []string {
	var out []string
	if id, _ := c.Flags().GetString("task"); id != "" {
		if t, err := s.st.Task(id); err == nil {
			for _, a := range t.At(s.now).Attempts {
				out = append(out, cobra.CompletionWithDesc(a.LeaseID, a.Worker))
			}
		}
		return out
	}
	for worker, leases := range service.CurrentLeases(s.st, s.now) {
		for _, l := range leases {
			out = append(out, cobra.CompletionWithDesc(l.LeaseID, l.TaskID+" "+worker))
		}
	}
	slices.Sort(out)
	return out
}

func completeDomains(s completion, _ *cobra.Command) []string {
	var out []string
	for _, d := range s.st.Domains() {
		out = append(out, d.Name)
	}
	return out
}

// completeWorkers lists every worker that has held a lease or heartbeated.
func completeWorkers(s completion, _ *cobra.Command) []string {
	seen := map[string]bool{}
	for w := range s.workers {
		seen[w] = true
	}
	tasks, _ := s.st.Tasks()
	for _, t := range tasks {
		for _, a := range t.Attempts {
			seen[a.Worker] = true
		}
	}
	out := make([]string, 0, len(seen))
	for w := range seen {
		out = append(out, w)
	}
	slices.Sort(out)
	return out
}
