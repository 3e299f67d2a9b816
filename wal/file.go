package wal

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
)

// Mode says what a caller will do with an open WAL, and so which lock it holds.
type Mode int

const (
	// Read takes a shared lock: readers run alongside each other, never beside a writer.
	Read Mode = iota
	// Write takes the exclusive lock, held from replay through append and fsync.
	Write
)

// LockTimeoutError means another process held the WAL lock for longer than allowed.
type LockTimeoutError struct {
	Path   string
	Waited time.Duration
}

func (e *LockTimeoutError) Error() string {
	return fmt.Sprintf("the WAL %s is busy: another leasewal held its lock for the whole %s waited; retry, or raise --lock-timeout", e.Path, e.Waited)
}

// AppendError means an append failed and was rolled back: the record was not
// written and the operation did not happen.
type AppendError struct {
	Op         string
	Err        error
	RolledBack bool
}

func (e *AppendError) Error() string {
	if e.RolledBack {
		return fmt.Sprintf("writing the WAL failed during %s (%v); the WAL was restored to its previous size, so the operation did not happen: fix the cause (disk space, permissions, the disk itself) and retry", e.Op, e.Err)
	}
	return fmt.Sprintf("writing the WAL failed during %s (%v) and restoring its previous size also failed; run 'leasewal verify' before anything else", e.Op, e.Err)
}

func (e *AppendError) Unwrap() error { return e.Err }

// ErrCreateRace means another process created the WAL between our look and our
// create; the caller starts over on the file that now exists.
var ErrCreateRace = errors.New("the WAL was created concurrently")

// storage is the part of *os.File an append touches; tests replace it to
// inject short writes, ENOSPC and fsync failures.
type storage interface {
	io.WriterAt
	Truncate(size int64) error
	Sync() error
}

// Log is an open, locked WAL. Close releases the lock.
type Log struct {
	Path string
	Position
	Torn  *TornTail
	file  *os.File
	store storage
	mode  Mode
	fault *Fault // nil except in tests
}

// ErrStalePosition means a position recorded earlier (by a checkpoint) does
// not describe this WAL's prefix any more: the file is shorter, or the frame
// ending there is not the one that was recorded.
var ErrStalePosition = errors.New("the recorded position does not match the WAL")

// OpenAt opens and locks an existing WAL and reads the frames after from,
// handing each valid one to each (which may be nil) in order; a zero from
// reads the whole WAL. A caller passes a non-zero from when it already holds
// the state up to there (a checkpoint): from is checked first, the file must
// be at least that long and the frame ending there must carry the recorded
// chained checksum, which (the chain being what it is) vouches for the whole
// prefix. A missing file is reported as an error wrapping fs.ErrNotExist; the
// caller decides what that means.
func OpenAt(path string, mode Mode, lockTimeout time.Duration, from Position, each func(Frame) error) (*Log, error) {
	flags := os.O_RDONLY
	if mode == Write {
		flags = os.O_RDWR
	}
	f, err := os.OpenFile(path, flags, 0)
	if errors.Is(err, unix.EISDIR) {
		return nil, &NotRegularError{Path: path}
	}
	if err != nil {
		return nil, err
	}
	if err := checkRegular(f, path); err != nil {
		f.Close()
		return nil, err
	}
	how := unix.LOCK_SH
	if mode == Write {
		how = unix.LOCK_EX
	}
	if err := lock(f, path, how, lockTimeout); err != nil {
		f.Close()
		return nil, err
	}
	if each == nil {
		each = func(Frame) error { return nil }
	}
	if err := readHeader(f); err != nil {
		f.Close()
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if from.Count == 0 {
		from = start
	} else if err := checkPosition(f, st.Size(), from); err != nil {
		f.Close()
		return nil, err
	}
	pos, torn, err := scanFrames(f, st.Size()-from.End, from, each)
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Log{Path: path, Position: pos, Torn: torn, file: f, store: f, mode: mode}, nil
}

// checkPosition checks from against the file and leaves f positioned at from.End.
func checkPosition(f *os.File, size int64, from Position) error {
	n := from.End - from.LastOffset
	if from.End > size || from.LastOffset < start.End || n <= crcHexLen+2 || n > maxLine {
		return ErrStalePosition
	}
	line := make([]byte, n)
	if _, err := f.ReadAt(line, from.LastOffset); err != nil {
		return ErrStalePosition
	}
	if sum, ok := parseHex8(line[:crcHexLen]); !ok || sum != from.LastSum || line[n-1] != '\n' {
		return ErrStalePosition
	}
	if _, err := f.Seek(from.End, io.SeekStart); err != nil {
		return err
	}
	return nil
}

// NotRegularError means the WAL path names something other than a regular file.
type NotRegularError struct{ Path string }

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is not a regular file; point --wal at a WAL file", e.Path)
}

func checkRegular(f *os.File, path string) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return &NotRegularError{Path: path}
	}
	return nil
}

func lock(f *os.File, path string, how int, timeout time.Duration) error {
	start := time.Now()
	for wait := time.Millisecond; ; wait = min(wait*2, 50*time.Millisecond) {
		err := unix.Flock(int(f.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("locking %s: %w", path, err)
		}
		if time.Since(start) >= timeout {
			return &LockTimeoutError{Path: path, Waited: timeout}
		}
		time.Sleep(wait)
	}
}

// Close releases the lock and the file.
func (l *Log) Close() error { return l.file.Close() }

// Append writes one record body as a single frame and fsyncs it. A torn tail
// is first cut off and kept in a side file (see CutTorn). On any failure the
// file is truncated back to its previous size.
func (l *Log) Append(body []byte) (cut *CutResult, err error) {
	if l.mode != Write {
		return nil, errors.New("append on a WAL opened for reading")
	}
	if l.Torn != nil {
		if cut, err = l.CutTorn(); err != nil {
			return nil, err
		}
	}
	frame, sum, err := EncodeFrame(l.LastSum, body)
	if err != nil {
		return cut, err
	}
	if err := l.writeDurably(frame); err != nil {
		return cut, err
	}
	l.fault.reach("after-sync")
	l.Position = Position{Count: l.Count + 1, End: l.End + int64(len(frame)), LastSum: sum, LastOffset: l.End}
	return cut, nil
}

func (l *Log) writeDurably(frame []byte) error {
	l.fault.reach("before-write")
	n, err := writeFrame(l.store, frame, l.End, l.fault)
	if err == nil && n < len(frame) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return l.rollback("write", err)
	}
	l.fault.reach("after-write")
	if err := l.store.Sync(); err != nil {
		return l.rollback("fsync", err)
	}
	return nil
}

func (l *Log) rollback(op string, cause error) error {
	terr := l.store.Truncate(l.End)
	if terr == nil {
		terr = l.store.Sync()
	}
	return &AppendError{Op: op, Err: cause, RolledBack: terr == nil}
}

// CutResult says what a cut of a torn tail removed and where the bytes went.
type CutResult struct {
	Offset   int64
	Length   int64
	SavedAs  string
	Contents []byte
}

// CutTorn removes the torn tail, after saving its bytes durably beside the WAL
// as <wal>.torn-<offset> (or .torn-<offset>.<n> if that name is taken).
func (l *Log) CutTorn() (*CutResult, error) {
	if l.Torn == nil {
		return nil, nil
	}
	if l.mode != Write {
		return nil, errors.New("cutting a torn tail needs the WAL opened for writing")
	}
	contents := make([]byte, l.Torn.Length)
	if _, err := l.file.ReadAt(contents, l.Torn.Offset); err != nil {
		return nil, fmt.Errorf("reading the torn tail of %s: %w", l.Path, err)
	}
	saved, err := saveSideFile(l.Path, fmt.Sprintf(".torn-%d", l.Torn.Offset), contents)
	if err != nil {
		return nil, err
	}
	if err := l.store.Truncate(l.Torn.Offset); err != nil {
		return nil, fmt.Errorf("cutting the torn tail of %s: %w", l.Path, err)
	}
	if err := l.store.Sync(); err != nil {
		return nil, fmt.Errorf("syncing %s after cutting its torn tail: %w", l.Path, err)
	}
	res := &CutResult{Offset: l.Torn.Offset, Length: l.Torn.Length, SavedAs: saved, Contents: contents}
	l.Torn = nil
	return res, nil
}

func saveSideFile(walPath, suffix string, contents []byte) (string, error) {
	for n := 0; ; n++ {
		name := walPath + suffix
		if n > 0 {
			name = fmt.Sprintf("%s.%d", name, n)
		}
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("saving the torn tail: %w", err)
		}
		_, werr := f.Write(contents)
		if werr == nil {
			werr = f.Sync()
		}
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr == nil {
			werr = SyncDir(filepath.Dir(name))
		}
		if werr != nil {
			os.Remove(name)
			return "", fmt.Errorf("saving the torn tail to %s: %w", name, werr)
		}
		return name, nil
	}
}

// Create makes a new WAL holding the header and one record, atomically, and
// returns it open for writing: the file is written, locked and fsynced under a
// temporary name, then hard-linked into place (which fails if the path
// exists), then the directory is fsynced. No reader ever sees a WAL without
// its header, and the lock taken before the link covers the new path too.
// ErrCreateRace is returned if the WAL appeared meanwhile. fault is nil
// except in tests.
func Create(path string, body []byte, fault *Fault) (*Log, error) {
	frame, sum, err := EncodeFrame(headerSeed, body)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".creating-*")
	if err != nil {
		return nil, fmt.Errorf("creating the WAL: %w", err)
	}
	defer os.Remove(tmp.Name())
	l := &Log{Path: path, file: tmp, store: tmp, mode: Write}
	l.Inject(fault)
	if err := unix.Flock(int(tmp.Fd()), unix.LOCK_EX); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("locking the new WAL: %w", err)
	}
	if err := l.writeDurably(append(append([]byte{}, HeaderLine...), frame...)); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		tmp.Close()
		if errors.Is(err, fs.ErrExist) {
			return nil, ErrCreateRace
		}
		return nil, fmt.Errorf("creating the WAL: %w", err)
	}
	if err := SyncDir(dir); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("syncing the directory of the new WAL: %w", err)
	}
	fault.reach("after-sync")
	l.Position = Position{Count: 1, End: start.End + int64(len(frame)), LastSum: sum, LastOffset: start.End}
	return l, nil
}

// SyncDir fsyncs a directory, so that a file created or renamed in it survives a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
