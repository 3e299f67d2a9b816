package cmd

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"leasewal/state"
	"leasewal/wal"
)

func newRepairCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "repair",
		Short: "Cut a torn tail off the WAL, keeping the cut bytes beside it",
		Long: `Cut an unfinished append (a torn tail: bytes after the last complete record that
were never acknowledged) off the WAL, after saving them as <wal>.torn-<offset>.
Any writing command does the same by itself before it appends. Damage before the
last record is refused with exit 5: acknowledged records are never dropped.`,
		Example: `  leasewal repair`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runRepair(g) },
	}
}

type repairView struct {
	Result   state.Outcome `json:"result"`
	CutBytes int64         `json:"cut_bytes"`
	Offset   int64         `json:"offset,omitempty"`
	SavedAs  string        `json:"saved_as,omitempty"`
	Records  int           `json:"records"`
}

func runRepair(g *globals) error {
	if _, err := os.Stat(g.walPath); err != nil {
		return usageErr("no WAL to repair at %s: %v; check --wal", g.walPath, unwrapPathErr(err))
	}
	s, err := g.openSession(wal.Write)
	if err != nil {
		return err
	}
	defer s.close()
	cut, err := s.log.CutTorn()
	if err != nil {
		return err
	}
	v := repairView{Result: state.ResultOK, Records: s.log.Count}
	if cut != nil {
		v.CutBytes, v.Offset, v.SavedAs = cut.Length, cut.Offset, cut.SavedAs
	}
	g.emit(v, func(w io.Writer, p palette) {
		if cut == nil {
			fmt.Fprintf(w, "nothing to repair: %d records, no torn tail\n", v.Records)
			return
		}
		fmt.Fprintf(w, "cut %d bytes at offset %d (never acknowledged), saved as %s; %d records kept\n", v.CutBytes, v.Offset, v.SavedAs, v.Records)
	})
	return nil
}
