package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/internal/trace"
)

func (a *app) newVerifyCmd() *cobra.Command {
	var expect string
	var history bool
	c := &cobra.Command{
		Use:   "verify [--expect FILE] [--history]",
		Short: "Check that the task log is intact and obeys every rule",
		Long: `Replay the whole WAL checking every frame's chained checksum, the sequence, each
record's preconditions and, after every record, every invariant. Exit 5 names
the first record that breaks one. Writes nothing.

--expect FILE also checks the WAL against FILE, which is either an expectation
trace (YAML or JSON: a list of steps, each 'after: SEQ', 'at: TIME' or
'final: true', with the tasks, domains or records that should hold there; every
difference is reported) or an 'inspect -o json' document, whose tasks are
compared at --now.

A compacted WAL starts with a base (see 'leasewal compact'): verify checks the
base's digest and every invariant of the state it holds, then the records after
it. --history also verifies the sealed segments in <wal>.history/, each as a WAL
of its own, and checks that each base is exactly the state the segment before
it leads to; a damaged segment fails with its name (exit 5) and never stops the
WAL itself from working.`,
		Example: `  leasewal verify
  leasewal verify --expect testdata/seeds/lease_expiry.trace.yaml --wal testdata/seeds/lease_expiry.wal
  leasewal verify --expect testdata/seeds/happy_path.expect.json --wal testdata/seeds/happy_path.wal --now 2026-01-01T00:01:00Z
  leasewal verify --history`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runVerify(a.env, expect, history) },
	}
	c.Flags().BoolVar(&history, "history", false, "also verify the sealed history segments and that each base follows from them")
	c.Flags().StringVar(&expect, "expect", "", "an expectation trace (YAML/JSON steps) or an 'inspect -o json' file to check the WAL against")
	return c
}

func runVerify(e env, expectFile string, history bool) error {
	var want *trace.Expectation
	if expectFile != "" {
		var err error
		if want, err = trace.Read(expectFile); err != nil {
			return err
		}
	}
	out, err := e.local().Verify(e.context(), want, expectFile, history)
	if err != nil {
		return err
	}
	return e.print(answer{doc: out, outcome: out.Result, table: func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(out.Result), "records", fmt.Sprint(out.Records), "tasks", fmt.Sprint(out.Tasks),
			"torn tail bytes", fmt.Sprint(out.TornBytes), "expect", out.Expect, "base", out.Base, "history", out.History)
	}}, written{})
}
