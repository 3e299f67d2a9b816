package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func (a *app) newReindexCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "reindex",
		Short: "Build the task log's index again from the log",
		Long: `Build the index beside the WAL (<wal>.index) again from the WAL alone, and put it
in place of the one there. The index is derived: commands build it when it is
missing, of another WAL, or damaged, and say so. reindex does it now, under the
WAL's exclusive lock: writers (a server too) wait, readers read on.`,
		Example: `  leasewal reindex`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runReindex(a.env) },
	}
}

func runReindex(e env) error {
	v, err := e.local().Reindex(e.context())
	if err != nil {
		return err
	}
	return e.print(answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
		if v.Index == "" {
			_, err := fmt.Fprintln(w, "no record yet: nothing to index")
			return err
		}
		return fields(w, p, "result", string(v.Result), "index", v.Index, "records", fmt.Sprint(v.Records), "bytes", fmt.Sprint(v.Bytes))
	}}, written{})
}
