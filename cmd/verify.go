package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"reflect"
	"slices"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/state"
	"leasewal/store"
)

func (a *app) newVerifyCmd() *cobra.Command {
	var expect string
	c := &cobra.Command{
		Use:   "verify [--expect FILE]",
		Short: "Check that the WAL obeys every rule and invariant",
		Long: `Replay the whole WAL checking every frame's chained checksum, the sequence, each
record's preconditions and, after every record, every invariant. Exit 5 names
the first record that breaks one. Writes nothing.

--expect FILE also checks the WAL against FILE, which is either an expectation
trace (YAML or JSON: a list of steps, each 'after: SEQ', 'at: TIME' or
'final: true', with the tasks, domains or records that should hold there; every
difference is reported) or an 'inspect -o json' document, whose tasks are
compared at --now.`,
		Example: `  leasewal verify
  leasewal verify --expect testdata/seeds/lease_expiry.trace.yaml --wal testdata/seeds/lease_expiry.wal
  leasewal verify --expect testdata/seeds/happy_path.expect.json --wal testdata/seeds/happy_path.wal --now 2026-01-01T00:01:00Z`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runVerify(a.env, expect) },
	}
	c.Flags().StringVar(&expect, "expect", "", "an expectation trace (YAML/JSON steps) or an 'inspect -o json' file to check the WAL against")
	return c
}

type verifyView struct {
	Result    state.Outcome  `json:"result"`
	Records   int            `json:"records"`
	Tasks     int            `json:"tasks"`
	Counts    map[string]int `json:"counts"`
	TornBytes int64          `json:"torn_tail_bytes"`
	Expect    string         `json:"expect,omitempty"`
}

func runVerify(e env, expectFile string) error {
	var trace []traceStep
	var want *expectDoc
	if expectFile != "" {
		var err error
		if trace, want, err = readExpectFile(expectFile); err != nil {
			return err
		}
	}
	if _, err := os.Stat(e.WAL); err != nil {
		return usageErr("no WAL to verify at %s: %v; check --wal", e.WAL, unwrapPathErr(err))
	}
	opts := e.storeOptions()
	opts.Verifier = state.NewVerifier()
	checker := &traceChecker{steps: trace}
	if trace != nil {
		checker.hooks(&opts)
	}
	return e.operate(opts, false, func(tx *store.Tx) (answer, error) {
		tasks, err := tx.State.Tasks()
		if err != nil {
			return answer{}, err
		}
		out := verifyView{Result: state.ResultOK, Records: opts.Verifier.Records, Tasks: len(tasks), Counts: countStates(tasks, tx.Now, taskFilter{}), TornBytes: tx.TornBytes()}
		switch {
		case trace != nil:
			if err := checker.end(tx.State); err != nil {
				return answer{}, err
			}
			out.Expect = fmt.Sprintf("matched %s (%d steps)", expectFile, len(trace))
		case want != nil:
			got, err := buildInspect(tx.State, tx.Now, nil, taskFilter{})
			if err != nil {
				return answer{}, err
			}
			checker.diffs = compareTasks(want.Tasks, got.Tasks)
			out.Expect = "matched " + expectFile
		}
		if len(checker.diffs) > 0 {
			return answer{}, &expectMismatch{file: expectFile, mismatches: checker.diffs}
		}
		return answer{doc: out, outcome: out.Result, table: func(w io.Writer, p palette) error {
			return fields(w, p, "result", string(out.Result), "records", fmt.Sprint(out.Records), "tasks", fmt.Sprint(out.Tasks),
				"torn tail bytes", fmt.Sprint(out.TornBytes), "expect", out.Expect)
		}}, nil
	})
}

func readExpect(path string) (*expectDoc, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErr("cannot read --expect %s: %v", path, unwrapPathErr(err))
	}
	var want expectDoc
	if err := json.Unmarshal(b, &want); err != nil {
		return nil, usageErr("--expect %s is not 'inspect -o json' output: %v", path, err)
	}
	for i, t := range want.Tasks {
		if id, _ := t["task_id"].(string); id == "" {
			return nil, usageErr("--expect %s: task %d has no task_id", path, i+1)
		}
	}
	return &want, nil
}

// expectDoc is an 'inspect -o json' document as verify --expect reads it:
// each task's fields as given, so that a file may give any subset of them.
type expectDoc struct {
	Tasks []map[string]any `json:"tasks"`
}

// compareTasks compares, for every task the document names, every field it
// gives with the task as the WAL has it at --now, and returns every
// difference. A task the document does not name is not compared.
func compareTasks(want []map[string]any, got []api.Task) []mismatch {
	byID := map[string]map[string]any{}
	for _, tv := range got {
		byID[tv.TaskID] = jsonMap(tv)
	}
	var diffs []mismatch
	for _, w := range want {
		id := w["task_id"].(string)
		g, ok := byID[id]
		if !ok {
			diffs = append(diffs, mismatch{Step: "at now", Path: id, Expected: "a task"})
			continue
		}
		for _, key := range slices.Sorted(maps.Keys(w)) {
			if key != "records" && !reflect.DeepEqual(w[key], g[key]) {
				diffs = append(diffs, mismatch{Step: "at now", Path: id + "." + key, Expected: w[key], Got: g[key]})
			}
		}
	}
	return diffs
}
