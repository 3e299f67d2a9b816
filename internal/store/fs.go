package store

import (
	"bufio"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/leasewal/leasewal/wal"
)

// FS is the seam the files leasewal writes go through, after
// hashicorp/raft-wal's VFS: the WAL's appends and truncates, the torn-tail
// keepsakes, scratch files and the worker registry. (The index writes
// through bbolt's own file and mapping: its crash images are made by
// killing the process, and it is never the truth.) The real one
// is OS; tests wrap it to fail any of those writes in memory and check what
// each failure leaves behind.
type FS interface {
	// WriteFile replaces path with data atomically and durably.
	WriteFile(path string, data []byte) error
	// WriteStream is WriteFile of what write streams.
	WriteStream(path string, write func(io.Writer) error) error
	// Keep creates name durably with what src holds, failing with fs.ErrExist if it exists.
	Keep(name string, src io.Reader) error
	// Scratch creates a temporary file beside path, read and written
	// through the file returned (a base's tasks while a compaction counts
	// them), which no one else opens, so it may be unlinked at once.
	Scratch(path string) (*os.File, error)
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
func (fsys OS) WriteFile(path string, data []byte) error {
	return fsys.WriteStream(path, func(w io.Writer) error { _, err := w.Write(data); return err })
}

// WriteStream is WriteFile of what write streams, buffered.
func (OS) WriteStream(path string, write func(io.Writer) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	buffered := bufio.NewWriterSize(tmp, 1<<20)
	err = write(buffered)
	if err == nil {
		err = buffered.Flush()
	}
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

// Scratch creates <path>.scratch-<random> and unlinks it: it lives as long
// as the file returned is open. Where the WAL's directory takes no new
// file (a reader of a WAL on read-only storage), it is created in the
// system's temporary directory instead.
func (OS) Scratch(path string) (*os.File, error) {
	f, err := scratchFile(path)
	if err != nil {
		return nil, err
	}
	// Unlinked at once, so that nothing is left if the process dies. A
	// writer that removes what a crash left may have unlinked it already:
	// the file is this one's all the same.
	if err := os.Remove(f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		f.Close()
		return nil, err
	}
	return f, nil
}

// scratchFile creates <path>.scratch-<random>, or in the system's
// temporary directory where the WAL's takes no new file.
func scratchFile(path string) (*os.File, error) {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+scratchInfix+"*")
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		f, err = os.CreateTemp("", "leasewal"+scratchInfix+"*")
	}
	return f, err
}

// scratchInfix names a scratch file: <wal>.scratch-<random>.
const scratchInfix = ".scratch-"

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
