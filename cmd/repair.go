package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func (a *app) newRepairCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "repair",
		Short: "Make the task log usable again after a crash cut a write short",
		Long: `Cut an unfinished append (a torn tail: bytes after the last complete record that
were never acknowledged) off the WAL, after saving them as <wal>.torn-<offset>.
Any writing command does the same by itself before it appends. Damage before the
last record is refused with exit 5: acknowledged records are never dropped.`,
		Example: `  leasewal repair`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runRepair(a.env) },
	}
}

func runRepair(e env) error {
	v, err := e.local().Repair(e.context())
	if err != nil {
		return err
	}
	return e.print(answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
		if v.CutBytes == 0 {
			_, err := fmt.Fprintf(w, "nothing to repair: %d records, no torn tail\n", v.Records)
			return err
		}
		_, err := fmt.Fprintf(w, "cut %d bytes at offset %d (never acknowledged), saved as %s; %d records kept\n", v.CutBytes, v.Offset, escape(v.SavedAs), v.Records)
		return err
	}}, written{})
}
