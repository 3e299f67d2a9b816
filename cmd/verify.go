package cmd

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/trace"
	"github.com/leasewal/leasewal/state"
)

func (a *app) newVerifyCmd() *cobra.Command {
	var expect string
	var history bool
	c := &cobra.Command{
		Use:   "verify [--expect FILE] [--history]",
		Short: "Check that the WAL obeys every rule and invariant",
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

type verifyView struct {
	Result    api.Outcome    `json:"result"`
	Records   int            `json:"records"`
	Tasks     int            `json:"tasks"`
	Counts    map[string]int `json:"counts"`
	TornBytes int64          `json:"torn_tail_bytes"`
	Expect    string         `json:"expect,omitempty"`
	Base      string         `json:"base,omitempty"`
	History   string         `json:"history,omitempty"`
}

func runVerify(e env, expectFile string, history bool) error {
	var want *trace.Expectation
	if expectFile != "" {
		var err error
		if want, err = trace.Read(expectFile); err != nil {
			return err
		}
	}
	if _, err := os.Stat(e.WAL); err != nil {
		return usageErr("no WAL to verify at %s: %v; check --wal", e.WAL, unwrapPathErr(err))
	}
	opts := e.storeOptions()
	opts.Verifier = state.NewVerifier()
	if want != nil {
		if err := checkedBy(&opts, want); err != nil {
			return err
		}
	}
	out, err := verifyWAL(opts, want, expectFile)
	if err != nil {
		return err
	}
	if history {
		// The WAL's own replay is let go first: the history's holds a state
		// of its own, one segment at a time.
		opts.Verifier = nil
		h := store.Open(opts)
		defer h.Close()
		check, err := h.VerifyHistory()
		if err != nil {
			return err
		}
		out.History = fmt.Sprintf("%d segments from seq %d, %d bases checked against the records before them", check.Segments, check.First, check.Derived)
		if check.First > 1 {
			out.History += fmt.Sprintf(" (the records before seq %d are no longer kept)", check.First)
		}
	}
	return e.print(answer{doc: out, outcome: out.Result, table: func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(out.Result), "records", fmt.Sprint(out.Records), "tasks", fmt.Sprint(out.Tasks),
			"torn tail bytes", fmt.Sprint(out.TornBytes), "expect", out.Expect, "base", out.Base, "history", out.History)
	}}, written{})
}

// verifyWAL replays the WAL through opts' Verifier and checks want (if
// any) against the state it leads to.
func verifyWAL(opts store.Options, want *trace.Expectation, expectFile string) (verifyView, error) {
	h := store.Open(opts)
	defer h.Close()
	var out verifyView
	err := h.Run(false, func(tx *store.Tx) error {
		counts, tasks := map[string]int{}, 0
		err := tx.State.EachTaskInAnyOrder(false, func(t *state.Task) bool {
			counts[string(t.At(tx.Now).State)]++
			tasks++
			return true
		})
		if err != nil {
			return err
		}
		out = verifyView{Result: api.ResultOK, Records: opts.Verifier.Records, Tasks: tasks, Counts: counts, TornBytes: tx.TornBytes()}
		if b := tx.State.Base(); b != nil {
			out.Base = b.Compacted()
		}
		if want != nil {
			if err := want.Check(tx, tx.Now); err != nil {
				return err
			}
			out.Expect = "matched " + expectFile
			if want.IsTrace() {
				out.Expect = fmt.Sprintf("matched %s (%d steps)", expectFile, want.Steps())
			}
		}
		return nil
	})
	return out, err
}

// checkedBy has the replay opts drives check want as it goes. A trace is
// checked against the whole story: the records a compaction sealed are read
// from their segments first.
func checkedBy(opts *store.Options, want *trace.Expectation) error {
	want.Hooks(opts)
	last, _, err := store.ReadSegments(*opts, 1, nil)
	if err != nil {
		return err
	}
	store.SkipThrough(opts, last)
	return nil
}
