package cmd

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/store"
)

func (a *app) newBackupCmd() *cobra.Command {
	var caches bool
	c := &cobra.Command{
		Use:   "backup DEST [--caches]",
		Short: "Copy the WAL as it stands to DEST, consistently, while it is in use",
		Long: `Copy the WAL to DEST under its shared lock: writers (a server's batches too) wait
for the copy, readers do not. DEST gets the header and every record (not a torn
tail after them), written beside it, fsynced and linked in: after a crash DEST
holds the whole copy or does not exist. DEST must not exist. --caches copies the
checkpoint, archive and cold set beside it too, so that the copy starts as fast
as the original. Restore by pointing --wal at the copy (or moving it in place of
the WAL while nothing runs); 'leasewal --wal DEST verify' checks it.`,
		Example: `  leasewal backup /backups/q-$(date +%F).wal
  leasewal backup /backups/q.wal --caches && leasewal --wal /backups/q.wal verify`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("'leasewal backup' takes the path of the copy, e.g. 'leasewal backup /backups/q.wal'")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error { return runBackup(a.env, args[0], caches) },
	}
	c.Flags().BoolVar(&caches, "caches", false, "copy the checkpoint, archive and cold set too")
	return c
}

type backupView struct {
	Result  api.Outcome `json:"result"`
	Path    string      `json:"path"`
	Records int         `json:"records"`
	Bytes   int64       `json:"bytes"`
	Caches  []string    `json:"caches"`
}

func runBackup(e env, dest string, caches bool) error {
	if _, err := os.Stat(e.WAL); err != nil {
		return usageErr("no WAL to back up at %s: %v; check --wal", e.WAL, unwrapPathErr(err))
	}
	h := store.Open(e.storeOptions())
	defer h.Close()
	b, err := h.Backup(dest, caches)
	switch {
	case errors.Is(err, store.ErrBackupExists):
		return usageErr("%s exists: a backup never overwrites; give a new path", dest)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return usageErr("cannot write the backup %s: %v", dest, unwrapPathErr(errors.Unwrap(err)))
	case err != nil:
		return err
	}
	v := backupView{Result: api.ResultOK, Path: b.Path, Records: b.Records, Bytes: b.Bytes, Caches: b.Caches}
	if v.Caches == nil {
		v.Caches = []string{}
	}
	return e.print(answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "backup", v.Path, "records", fmt.Sprint(v.Records),
			"bytes", fmt.Sprint(v.Bytes), "caches", strings.Join(v.Caches, " "))
	}}, written{})
}
