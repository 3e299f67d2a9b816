package store

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"leasewal/wal"
)

// FS is the seam every file leasewal writes goes through, after
// hashicorp/raft-wal's VFS: the WAL's appends and truncates, the checkpoint,
// the archive, the torn-tail keepsakes and the worker registry. The real one
// is OS; tests wrap it to fail any of those writes in memory and check what
// each failure leaves behind.
type FS interface {
	// WriteFile replaces path with data atomically and durably.
	WriteFile(path string, data []byte) error
	// Keep creates name durably with what src holds, failing with fs.ErrExist if it exists.
	Keep(name string, src io.Reader) error
	// Remove removes path; a missing path is not an error.
	Remove(path string) error
	// WAL wraps the storage the WAL's appends, truncates and fsyncs go to.
	WAL(wal.Storage) wal.Storage
}

// OS is the file system itself.
type OS struct{}

// WriteFile writes a temporary file beside path, fsyncs it, renames it over
// path and fsyncs the directory: a reader sees the old file or the new one,
// never a mix, and a crash leaves at most a temporary file behind (removed by
// the next writer, see removeLeftovers).
func (OS) WriteFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		err = wal.SyncDir(dir)
	}
	return err
}

// Keep is wal.KeepFile.
func (OS) Keep(name string, src io.Reader) error { return wal.KeepFile(name, src) }

// Remove removes path.
func (OS) Remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// WAL is the storage itself.
func (OS) WAL(s wal.Storage) wal.Storage { return s }

func seamOf(fsys FS) wal.Seam {
	return wal.Seam{Wrap: fsys.WAL, Keep: fsys.Keep}
}
