package cmd

import (
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/state"
)

// registerCompletions gives every --task, --lease, --domain, --worker,
// --queue, --state and --type flag in the tree, and the arguments of
// inspect, pause and resume, dynamic shell completion (cobra's `completion
// bash|zsh|fish` prints the scripts).
func (a *app) registerCompletions(root *cobra.Command) {
	byFlag := map[string]string{
		"task": service.CandidateTasks, "lease": service.CandidateLeases, "domain": service.CandidateDomains, "worker": service.CandidateWorkers,
		"queue": service.CandidateQueues,
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for name, kind := range byFlag {
			if c.Flags().Lookup(name) != nil {
				_ = c.RegisterFlagCompletionFunc(name, a.completion(kind))
			}
		}
		if c.Flags().Lookup("state") != nil {
			_ = c.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(
				[]string{"WAITING", "LEASED", "COMPLETED", "FAILED", "DEAD"}, cobra.ShellCompDirectiveNoFileComp))
		}
		if !c.HasParent() {
			_ = c.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
				[]string{"table", "wide", "json", "tsv", "prom", "html"}, cobra.ShellCompDirectiveNoFileComp))
		}
		if c.Flags().Lookup("for") != nil && c.Name() == "wait" {
			_ = c.RegisterFlagCompletionFunc("for", cobra.FixedCompletions(
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

// completion lists the candidates of a kind from the WAL, those that begin
// with what was typed.
func (a *app) completion(kind string) cobra.CompletionFunc {
	return func(c *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if err := a.resolve(); err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		task := ""
		if kind == service.CandidateLeases && c.Flags().Lookup("task") != nil {
			task, _ = c.Flags().GetString("task")
		}
		cands, err := a.env.local().Candidates(a.env.context(), kind, task, prefix)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, cand := range cands {
			if !strings.HasPrefix(cand.Value, prefix) {
				continue
			}
			if cand.About == "" {
				out = append(out, cand.Value)
			} else {
				out = append(out, cobra.CompletionWithDesc(cand.Value, cand.About))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}
