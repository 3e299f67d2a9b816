package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/leasewal/leasewal/internal/index"
	"github.com/leasewal/leasewal/wal"
)

// Backup is what Backup copied.
type Backup struct {
	Path    string
	Records int
	Bytes   int64
	Index   string // the index copied beside it ("": none)
}

// ErrBackupExists is a backup whose destination exists: nothing is
// overwritten.
var ErrBackupExists = errors.New("the backup's destination exists")

// Backup copies the WAL as it stands, under the shared lock (writers wait
// for it, readers do not), to dest: its header and every record (not a
// torn tail after them), whole or not at all (see wal.WriteNew). With
// withIndex, the index beside it is copied too, before the WAL, so that the
// copy starts as fast as the original; it holds a prefix of the copied
// records, as it does of the WAL's.
func (h *Handle) Backup(dest string, withIndex bool) (Backup, error) {
	dest = filepath.Clean(dest)
	b := Backup{Path: dest}
	err := h.Read(func(tx *Tx) error {
		if tx.log == nil {
			return fmt.Errorf("no WAL at %s: %w", h.opts.Path, fs.ErrNotExist)
		}
		if _, err := os.Lstat(dest); err == nil {
			return fmt.Errorf("%s: %w", dest, ErrBackupExists)
		}
		if withIndex {
			if err := h.backupIndex(dest, &b); err != nil {
				return err
			}
		}
		report := &progressReport{report: h.opts.Progress, total: tx.log.End}
		n, err := wal.WriteNew(dest, &reportingReader{r: tx.log.Section(0, tx.log.End), report: report})
		report.end()
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w", dest, ErrBackupExists)
		}
		b.Records, b.Bytes = tx.log.Count, n
		return err
	})
	if err != nil {
		if b.Index != "" { // an index without its WAL describes nothing
			os.Remove(b.Index)
		}
		b.Index = ""
	}
	return b, err
}

// backupIndex copies the index beside the WAL beside dest, as one read
// transaction of it sees it: it holds a prefix of the records the WAL's
// copy holds, as it does of the WAL's. A missing or unusable index is not
// copied (a copy would be built again as it is).
func (h *Handle) backupIndex(dest string, b *Backup) error {
	db, err := index.Open(h.indexPath(), false, h.opts.LockTimeout)
	if err != nil {
		return nil
	}
	defer db.Close()
	if _, _, err := db.Meta(); err != nil {
		return nil
	}
	to := dest + index.Suffix
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(db.CopyTo(pw)) }()
	_, err = wal.WriteNew(to, pr)
	pr.Close()
	if err != nil {
		return fmt.Errorf("copying %s: %w", h.indexPath(), err)
	}
	b.Index = to
	return nil
}

// reportingReader reports the bytes read through it.
type reportingReader struct {
	r      io.Reader
	done   int64
	report *progressReport
}

func (r *reportingReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.done += int64(n)
	r.report.at(r.done)
	return n, err
}
