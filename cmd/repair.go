package cmd

import (
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/store"
)

func (a *app) newRepairCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "repair",
		Short: "Cut a torn tail off the WAL, keeping the cut bytes beside it",
		Long: `Cut an unfinished append (a torn tail: bytes after the last complete record that
were never acknowledged) off the WAL, after saving them as <wal>.torn-<offset>.
Any writing command does the same by itself before it appends. Damage before the
last record is refused with exit 5: acknowledged records are never dropped.`,
		Example: `  leasewal repair`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runRepair(a.env) },
	}
}

type repairView struct {
	Result   api.Outcome `json:"result"`
	CutBytes int64       `json:"cut_bytes"`
	Offset   int64       `json:"offset,omitempty"`
	SavedAs  string      `json:"saved_as,omitempty"`
	Records  int         `json:"records"`
}

func runRepair(e env) error {
	if _, err := os.Stat(e.WAL); err != nil {
		return usageErr("no WAL to repair at %s: %v; check --wal", e.WAL, unwrapPathErr(err))
	}
	return e.write(func(tx *store.Tx) (answer, error) {
		cut, err := tx.CutTorn()
		if err != nil {
			return answer{}, err
		}
		v := repairView{Result: api.ResultOK, Records: tx.Records()}
		if cut != nil {
			v.CutBytes, v.Offset, v.SavedAs = cut.Length, cut.Offset, cut.SavedAs
		}
		return answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
			if cut == nil {
				_, err := fmt.Fprintf(w, "nothing to repair: %d records, no torn tail\n", v.Records)
				return err
			}
			_, err := fmt.Fprintf(w, "cut %d bytes at offset %d (never acknowledged), saved as %s; %d records kept\n", v.CutBytes, v.Offset, escape(v.SavedAs), v.Records)
			return err
		}}, nil
	})
}
