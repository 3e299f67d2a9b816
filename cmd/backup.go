package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

func (a *app) newBackupCmd() *cobra.Command {
	var withIndex bool
	c := &cobra.Command{
		Use:   "backup DEST [--index]",
		Short: "Copy the task log safely while it is in use",
		Long: `Copy the task log to DEST while it is in use: writers (a server too) wait for
the copy, readers do not. After a crash DEST holds the whole copy or does not
exist. DEST must not exist. --index copies the index beside it too
(DEST.index), so that the copy starts as fast as the original. Restore by
pointing --wal at the copy (or moving it in place of the WAL while nothing
runs); 'leasewal --wal DEST verify' checks it.`,
		Example: `  leasewal backup /backups/q-$(date +%F).wal
  leasewal backup /backups/q.wal --index && leasewal --wal /backups/q.wal verify`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("'leasewal backup' takes the path of the copy, e.g. 'leasewal backup /backups/q.wal'")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error { return runBackup(a.env, args[0], withIndex) },
	}
	c.Flags().BoolVar(&withIndex, "index", false, "copy the index too, so that the copy starts as fast")
	return c
}

func runBackup(e env, dest string, withIndex bool) error {
	v, err := e.local().Backup(e.context(), dest, withIndex)
	if err != nil {
		return err
	}
	return e.print(answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "backup", v.Path, "records", fmt.Sprint(v.Records),
			"bytes", fmt.Sprint(v.Bytes), "index", v.Index)
	}}, written{})
}
