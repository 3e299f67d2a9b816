package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/leasewal/leasewal/wal"
)

// Backup is what Backup copied.
type Backup struct {
	Path    string
	Records int
	Bytes   int64
	Caches  []string // the cache files copied beside it
}

// ErrBackupExists is a backup whose destination exists: nothing is
// overwritten.
var ErrBackupExists = errors.New("the backup's destination exists")

// Backup copies the WAL as it stands, under the shared lock (writers wait
// for it, readers do not), to dest: its header and every record (not a
// torn tail after them), whole or not at all (see wal.WriteNew). With
// caches, the checkpoint, archive and cold set beside it are copied too,
// before the WAL, so that the copy starts as fast as the original; they
// describe a prefix of the copied records, as they describe the WAL's.
func (h *Handle) Backup(dest string, caches bool) (Backup, error) {
	dest = filepath.Clean(dest)
	b := Backup{Path: dest}
	err := h.Read(func(tx *Tx) error {
		if tx.log == nil {
			return fmt.Errorf("no WAL at %s: %w", h.opts.Path, fs.ErrNotExist)
		}
		if _, err := os.Lstat(dest); err == nil {
			return fmt.Errorf("%s: %w", dest, ErrBackupExists)
		}
		if caches {
			if err := h.backupCaches(dest, &b); err != nil {
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
		for _, c := range b.Caches { // caches without their WAL describe nothing
			os.Remove(c)
		}
		b.Caches = nil
	}
	return b, err
}

// backupCaches copies the checkpoint beside the WAL and the runs it names
// beside dest, the checkpoint last; a checkpoint that is missing or not
// intact is not copied (a copy would be ignored as it is).
func (h *Handle) backupCaches(dest string, b *Backup) error {
	checkpoint, err := os.ReadFile(h.side(CheckpointSuffix))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("copying %s: %w", h.side(CheckpointSuffix), err)
	}
	_, runs, _, ok := decodeCheckpoint(checkpoint)
	if !ok {
		return nil
	}
	copyTo := func(from, to string, src io.Reader) error {
		if _, err := wal.WriteNew(to, src); err != nil {
			return fmt.Errorf("copying %s: %w", from, err)
		}
		b.Caches = append(b.Caches, to)
		return nil
	}
	err = runs.each(func(cold bool, name uint64) error {
		from := h.runPath(cold, name)
		f, err := os.Open(from)
		if err != nil {
			return fmt.Errorf("copying %s: %w", from, err)
		}
		defer f.Close()
		return copyTo(from, runPath(dest, cold, name), f)
	})
	if err != nil {
		return err
	}
	return copyTo(h.side(CheckpointSuffix), dest+CheckpointSuffix, bytes.NewReader(checkpoint))
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
