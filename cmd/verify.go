package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"reflect"

	"github.com/spf13/cobra"

	"leasewal/state"
	"leasewal/wal"
)

func newVerifyCmd(g *globals) *cobra.Command {
	var expect string
	c := &cobra.Command{
		Use:   "verify [--expect FILE]",
		Short: "Check that the WAL obeys every rule and invariant",
		Long: `Replay the whole WAL checking every frame's chained checksum, the sequence, each
record's preconditions and, after every record, every invariant. Exit 5 names
the first record that breaks one. --expect FILE also compares the tasks at
--now with FILE, in the form 'inspect -o json' prints. Writes nothing.`,
		Example: `  leasewal verify
  leasewal verify --expect testdata/seed001_happy.expect.json --now 2026-01-01T00:01:00Z`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runVerify(g, expect) },
	}
	c.Flags().StringVar(&expect, "expect", "", "compare the final tasks with this inspect -o json file")
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

// expectMismatch is a final state that differs from the --expect file.
type expectMismatch struct{ msg string }

func (e *expectMismatch) Error() string { return e.msg }

func runVerify(g *globals, expectFile string) error {
	var want *inspectView
	if expectFile != "" {
		w, err := readExpect(expectFile)
		if err != nil {
			return err
		}
		want = w
	}
	if _, err := os.Stat(g.walPath); err != nil {
		return usageErr("no WAL to verify at %s: %v; check --wal", g.walPath, unwrapPathErr(err))
	}
	v := state.NewVerifier()
	s, err := g.openReplaying(wal.Read, v.State, v.Step, wal.Position{})
	if err != nil {
		return err
	}
	defer s.close()
	tasks := s.st.Tasks()
	out := verifyView{Result: state.ResultOK, Records: v.Records, Tasks: len(tasks), Counts: countStates(tasks, s.now, "")}
	if s.log != nil && s.log.Torn != nil {
		out.TornBytes = s.log.Torn.Length
	}
	if want != nil {
		got, _ := buildInspect(s.st, s.now, nil, "")
		if err := compareTasks(want.Tasks, got.Tasks); err != nil {
			return err
		}
		out.Expect = "matched " + expectFile
	}
	g.emit(out, func(w io.Writer, p palette) {
		fields(w, "result", p.word(string(out.Result)), "records", fmt.Sprint(out.Records), "tasks", fmt.Sprint(out.Tasks),
			"torn tail bytes", fmt.Sprint(out.TornBytes), "expect", out.Expect)
	})
	return nil
}

func readExpect(path string) (*inspectView, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, usageErr("cannot read --expect %s: %v", path, unwrapPathErr(err))
	}
	var want inspectView
	if err := json.Unmarshal(b, &want); err != nil {
		return nil, usageErr("--expect %s is not 'inspect -o json' output: %v", path, err)
	}
	return &want, nil
}

func compareTasks(want, got []taskView) error {
	for i := range max(len(want), len(got)) {
		switch {
		case i >= len(want):
			return &expectMismatch{fmt.Sprintf("the WAL has an unexpected task %s", got[i].TaskID)}
		case i >= len(got):
			return &expectMismatch{fmt.Sprintf("expected task %s is missing from the WAL", want[i].TaskID)}
		}
		w, g := want[i], got[i]
		w.Records, g.Records = nil, nil
		if !reflect.DeepEqual(w, g) {
			wj, _ := json.Marshal(w)
			gj, _ := json.Marshal(g)
			return &expectMismatch{fmt.Sprintf("task %s differs from the expected state: expected %s, got %s", w.TaskID, wj, gj)}
		}
	}
	return nil
}
