package wal

import (
	"bufio"
	"bytes"
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

// AppendError means an append failed and was rolled back: the record was not
// written and the operation did not happen.
type AppendError struct {
	Op         string
	Err        error
	RolledBack bool
	// First and Last are the positions (1-based) of the records the append
	// held, which may be left in the WAL when the rollback failed too.
	First, Last int
	Restore     error // why the rollback failed
}

func (e *AppendError) Error() string {
	if e.RolledBack {
		return fmt.Sprintf("writing the WAL failed during %s (%v); the WAL was restored to its previous size, so the operation did not happen: fix the cause (disk space, permissions, the disk itself) and retry", e.Op, e.Err)
	}
	recs := fmt.Sprintf("record %d", e.First)
	if e.Last != e.First {
		recs = fmt.Sprintf("records %d to %d", e.First, e.Last)
	}
	return fmt.Sprintf("writing the WAL failed during %s (%v) and restoring its previous size also failed (%v): %s, never acknowledged, may be left in the WAL, whole or torn; run 'leasewal verify' before anything else (a torn one is cut by the next writer), and repeat the command with its request id", e.Op, e.Err, e.Restore, recs)
}

func (e *AppendError) Unwrap() error { return e.Err }

// ErrCreateRace means another process created the WAL between our look and our
// create; the caller starts over on the file that now exists.
var ErrCreateRace = errors.New("the WAL was created concurrently")

// Storage is the part of *os.File an append touches: the seam through which a
// caller (or a test) sees, or fails, every write, truncate and fsync of the WAL.
type Storage interface {
	io.WriterAt
	Truncate(size int64) error
	Sync() error
}

// Keeper writes a new side file beside the WAL (a torn tail's keepsake) durably
// from src, failing with an error wrapping fs.ErrExist if name exists.
type Keeper func(name string, src io.Reader) error

// Seam routes a log's writes through the caller's file system: Wrap sees the
// WAL's storage, Keep writes keepsakes. A zero Seam is the plain file system.
type Seam struct {
	Wrap func(Storage) Storage
	Keep Keeper
}

// Log is an open, locked WAL. Close releases the lock.
type Log struct {
	Path string
	Position
	Version int // the format version of the file's header
	Torn    *TornTail
	file    *os.File
	store   Storage
	mode    Mode
	fault   *Fault // nil except in tests
	keep    Keeper
}

// Route sends the log's later writes through seam.
func (l *Log) Route(seam Seam) {
	if seam.Wrap != nil {
		l.store = seam.Wrap(l.store)
	}
	l.keep = seam.Keep
}

// ErrStalePosition means a position recorded earlier (by an index) does
// not describe this WAL's prefix any more: the file is shorter, or the frame
// ending there is not the one that was recorded.
var ErrStalePosition = errors.New("the recorded position does not match the WAL")

// OpenAt opens and locks an existing WAL and reads the frames after from,
// handing each valid one to each (which may be nil) in order; a zero from
// reads the whole WAL. A caller passes a non-zero from when it already holds
// the state up to there (an index): from is checked first, the file must
// be at least that long and the frame ending there must carry the recorded
// chained checksum, which (the chain being what it is) vouches for the whole
// prefix. A missing file is reported as an error wrapping fs.ErrNotExist,
// an empty one as ErrEmptyFile; the caller decides what they mean.
func OpenAt(path string, mode Mode, lockTimeout time.Duration, from Position, each func(Frame) error) (*Log, error) {
	flags := os.O_RDONLY
	if mode == Write {
		flags = os.O_RDWR
	}
	// O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused below.
	f, err := os.OpenFile(path, flags|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, openError(path, err)
	}
	if err := checkRegular(f, path); err != nil {
		f.Close()
		return nil, err
	}
	how := unix.LOCK_SH
	if mode == Write {
		how = unix.LOCK_EX
	}
	if err := lockFair(f, path, how, lockTimeout); err != nil {
		f.Close()
		return nil, err
	}
	if err := checkSameFile(f, path); err != nil {
		f.Close()
		return nil, err
	}
	if each == nil {
		each = func(Frame) error { return nil }
	}
	version, err := readHeader(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	inner := each
	each = func(fr Frame) error {
		fr.Version = version
		return inner(fr)
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
	var pos Position
	var torn *TornTail
	if mode == Read {
		pos, torn, err = readUnlocked(f, path, st.Size(), from, lockTimeout, each)
	} else {
		pos, torn, err = scanFrames(f, st.Size()-from.End, from, each)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &Log{Path: path, Position: pos, Version: version, Torn: torn, file: f, store: f, mode: mode}, nil
}

// readUnlocked scans a reader's WAL without holding the lock, so that a long
// replay (verify of a million records) never keeps a writer waiting: the
// shared lock was held only to fix size, the end of what this reader reads.
// Every byte before the end of the valid records is immutable (writers only
// append after it, and cut only a torn tail, which lies after it), so a scan
// of [0, size) that finds only valid frames read exactly what a locked scan
// would have. If it meets anything else (a torn tail, or what looks like
// damage: a writer may have cut a torn tail and appended over it meanwhile),
// it takes the shared lock again and reads on from the last valid frame to
// the end of the file, as a locked reader does.
func readUnlocked(f *os.File, path string, size int64, from Position, lockTimeout time.Duration, each func(Frame) error) (Position, *TornTail, error) {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_UN); err != nil {
		return from, nil, err
	}
	pos, torn, err := scanFrames(io.LimitReader(f, size-from.End), size-from.End, from, each)
	var damage *DamageError
	if torn == nil && !errors.As(err, &damage) {
		return pos, torn, err
	}
	if err := lockFair(f, path, unix.LOCK_SH, lockTimeout); err != nil {
		return pos, nil, err
	}
	st, err := f.Stat()
	if err != nil {
		return pos, nil, err
	}
	if _, err := f.Seek(pos.End, io.SeekStart); err != nil {
		return pos, nil, err
	}
	return scanFrames(f, st.Size()-pos.End, pos, each)
}

// ErrReplaced means the path no longer names the file that was locked: it was
// renamed over or deleted while the caller waited for the lock. The caller
// starts over on what the path names now, so that nothing is ever written to
// a file behind the back of the one that replaced it.
var ErrReplaced = errors.New("the WAL was replaced while waiting for its lock")

// checkSameFile checks, under the lock, that path still names f.
func checkSameFile(f *os.File, path string) error {
	held, err := f.Stat()
	if err != nil {
		return err
	}
	now, err := os.Stat(path)
	if err != nil || !os.SameFile(held, now) {
		return ErrReplaced
	}
	return nil
}

// openError explains why path could not be opened. A missing file is
// reported wrapping fs.ErrNotExist (the caller decides what that means) only
// when the path could be created: a dangling symlink, a symlink loop or a
// missing directory never can, and would otherwise be retried forever.
func openError(path string, err error) error {
	switch {
	case errors.Is(err, unix.EISDIR):
		return &NotRegularError{Path: path, What: "a directory"}
	case errors.Is(err, unix.ELOOP):
		return &NotRegularError{Path: path, What: "a symlink loop"}
	case errors.Is(err, unix.ENXIO):
		return &NotRegularError{Path: path, What: "a socket or device"}
	case errors.Is(err, fs.ErrNotExist):
		if info, lerr := os.Lstat(path); lerr == nil && info.Mode()&fs.ModeSymlink != 0 {
			return &NotRegularError{Path: path, What: "a symlink to nothing"}
		}
		dir := filepath.Dir(path)
		if info, derr := os.Stat(dir); derr != nil || !info.IsDir() {
			return &NotRegularError{Path: path, What: "in a directory that does not exist (" + dir + ")"}
		}
	}
	return err
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
	sum, ok := parseHex8(line[:crcHexLen])
	if !ok || line[n-1] != '\n' || nextSeed(sum, line[crcHexLen+1:n-1]) != from.LastSum {
		return ErrStalePosition
	}
	first := make([]byte, crcHexLen)
	if _, err := f.ReadAt(first, start.End); err != nil {
		return ErrStalePosition
	}
	if generation, ok := parseHex8(first); !ok || generation != from.Generation {
		return ErrStalePosition
	}
	if _, err := f.Seek(from.End, io.SeekStart); err != nil {
		return err
	}
	return nil
}

// NotRegularError means the WAL path names something other than a regular
// file, or a file that cannot exist (its directory is missing).
type NotRegularError struct {
	Path string
	What string // "a FIFO", "a symlink to nothing", …
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a WAL file; point --wal at a regular file (or where one can be created)", e.Path, e.What)
}

func checkRegular(f *os.File, path string) error {
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		what := "not a regular file"
		switch {
		case st.Mode()&fs.ModeNamedPipe != 0:
			what = "a FIFO"
		case st.IsDir():
			what = "a directory"
		case st.Mode()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeSocket) != 0:
			what = "a socket or device"
		}
		return &NotRegularError{Path: path, What: what}
	}
	return nil
}

// Close releases the lock and the file.
func (l *Log) Close() error { return l.file.Close() }

// Append writes one record body of version 1 as a single frame and fsyncs it
// (see AppendBatch).
func (l *Log) Append(body []byte) (*CutResult, error) { return l.AppendBatch([][]byte{body}, 1) }

// AppendBatch writes the record bodies as consecutive frames in one write and
// makes them durable with one fsync: all of them or none. version is the
// format version the records need: a file of an older version is first
// upgraded in place (its header's digit rewritten and fsynced; the chain does
// not depend on it). A torn tail is first cut off and kept in a side file
// (see CutTorn). On any failure the file is truncated back to its previous size.
func (l *Log) AppendBatch(bodies [][]byte, version int) (cut *CutResult, err error) {
	before := l.Position
	if cut, err = l.Write(bodies, version); err != nil {
		return cut, err
	}
	if err := l.store.Sync(); err != nil {
		return cut, l.Abandon(before, err)
	}
	l.fault.Reach("after-sync")
	return cut, nil
}

// Write is AppendBatch without the fsync, for a writer that makes many
// batches durable in the background (a pipelined server): the frames are
// written after the ones before them and the position moves past them, but
// nothing is durable until Sync returns. On a failed write the file is cut
// back to where the batch began.
func (l *Log) Write(bodies [][]byte, version int) (cut *CutResult, err error) {
	if l.mode != Write {
		return nil, errors.New("append on a WAL opened for reading")
	}
	if version > Version {
		return nil, fmt.Errorf("records of format version %d cannot be written (this leasewal writes up to %d)", version, Version)
	}
	if version > l.Version {
		if err := l.upgrade(version); err != nil {
			return nil, err
		}
	}
	frames, pos, err := encodeFrames(nil, l.Position, bodies)
	if err != nil {
		return nil, err
	}
	if l.Torn != nil {
		if cut, err = l.CutTorn(); err != nil {
			return nil, err
		}
	}
	if err := l.writeAtEnd(frames, pos.Count-l.Count); err != nil {
		return cut, err
	}
	l.Position = pos
	return cut, nil
}

// Sync makes everything written so far durable.
func (l *Log) Sync() error {
	if err := l.store.Sync(); err != nil {
		return err
	}
	l.fault.Reach("after-sync")
	return nil
}

// Abandon cuts the file back to durable, a position Sync made durable
// earlier, after a Sync failed: what was written after it is not known to
// be on disk, and was never acknowledged. The log's position is durable's
// then.
func (l *Log) Abandon(durable Position, cause error) error {
	records := l.Count - durable.Count
	l.Position = durable
	return l.rollback("fsync", cause, int(records))
}

// encodeFrames chains the bodies' frames after pos and returns them as one
// buffer after prefix (a new WAL's header: not copied again to precede
// them), with the position after the last.
func encodeFrames(prefix []byte, pos Position, bodies [][]byte) ([]byte, Position, error) {
	if len(bodies) == 0 {
		return nil, pos, errors.New("nothing to append")
	}
	size := len(prefix)
	for _, body := range bodies {
		size += crcHexLen + 1 + len(body) + 1
	}
	frames := append(make([]byte, 0, size), prefix...)
	for _, body := range bodies {
		start := len(frames)
		var sum uint32
		var err error
		if frames, sum, err = AppendFrame(frames, pos.LastSum, body); err != nil {
			return nil, pos, err
		}
		pos = pos.advance(len(frames)-start, body, sum)
	}
	return frames, pos, nil
}

// upgrade rewrites the header's version digit in place and makes it durable.
// A crash after it leaves a file of the new version holding records of the
// old, which every reader of the new version reads.
func (l *Log) upgrade(version int) error {
	line := HeaderLine(version)
	at := int64(len(line) - 2) // the digit, before the newline
	if _, err := l.store.WriteAt(line[at:at+1], at); err != nil {
		return fmt.Errorf("upgrading the WAL's header to version %d: %w", version, err)
	}
	if err := l.store.Sync(); err != nil {
		return fmt.Errorf("upgrading the WAL's header to version %d: %w", version, err)
	}
	l.Version = version
	return nil
}

// writeDurably writes frame (records records) at the end and fsyncs it, or rolls back.
func (l *Log) writeDurably(frame []byte, records int) error {
	if err := l.writeAtEnd(frame, records); err != nil {
		return err
	}
	if err := l.store.Sync(); err != nil {
		return l.rollback("fsync", err, records)
	}
	return nil
}

// writeAtEnd writes frame (records records) at the end, or rolls back.
func (l *Log) writeAtEnd(frame []byte, records int) error {
	l.fault.Reach("before-write")
	written, err := writeFrame(l.store, frame, l.End, l.fault)
	if err == nil && written < len(frame) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return l.rollback("write", err, records)
	}
	l.fault.Reach("after-write")
	return nil
}

func (l *Log) rollback(op string, cause error, records int) error {
	terr := l.store.Truncate(l.End)
	if terr == nil {
		terr = l.store.Sync()
	}
	return &AppendError{Op: op, Err: cause, RolledBack: terr == nil, Restore: terr, First: l.Count + 1, Last: l.Count + records}
}

// CutResult says what a cut of a torn tail removed and where the bytes went.
type CutResult struct {
	Offset  int64
	Length  int64
	SavedAs string
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
	tail := io.NewSectionReader(l.file, l.Torn.Offset, l.Torn.Length)
	saved, err := saveSideFile(l.Path, fmt.Sprintf(".torn-%d", l.Torn.Offset), tail, l.keep)
	if err != nil {
		return nil, err
	}
	if err := l.store.Truncate(l.Torn.Offset); err != nil {
		return nil, fmt.Errorf("cutting the torn tail of %s: %w", l.Path, err)
	}
	if err := l.store.Sync(); err != nil {
		return nil, fmt.Errorf("syncing %s after cutting its torn tail: %w", l.Path, err)
	}
	res := &CutResult{Offset: l.Torn.Offset, Length: l.Torn.Length, SavedAs: saved}
	l.Torn = nil
	return res, nil
}

func saveSideFile(walPath, suffix string, contents *io.SectionReader, keep Keeper) (string, error) {
	if keep == nil {
		keep = KeepFile
	}
	for n := 0; ; n++ {
		name := walPath + suffix
		if n > 0 {
			name = fmt.Sprintf("%s.%d", name, n)
		}
		if _, err := contents.Seek(0, io.SeekStart); err != nil {
			return "", err
		}
		err := keep(name, contents)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return "", fmt.Errorf("saving the torn tail to %s: %w", name, err)
		}
		return name, nil
	}
}

// KeepFile is the plain Keeper: create name exclusively, copy src into it in
// pieces (a run of zeros, as a crash can leave, becomes a hole: a 1 GiB tail of
// zeros costs neither 1 GiB of memory nor of disk), fsync, fsync the
// directory; a failure removes what was begun.
func KeepFile(name string, src io.Reader) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	werr := copySparse(f, src)
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
	}
	return werr
}

// CreatingSuffix follows a WAL's name in the temporary name CreateBatch
// writes it under.
const CreatingSuffix = ".creating-"

// Create makes a new WAL of NewVersion holding the header and one record (see CreateBatch).
func Create(path string, body []byte, fault *Fault) (*Log, error) {
	return CreateBatch(path, [][]byte{body}, NewVersion, fault, Seam{})
}

// CreateBatch makes a new WAL holding the header and the records, atomically,
// and returns it open for writing: the file is written, locked and fsynced
// under a temporary name, then hard-linked into place (which fails if the
// path exists), then the directory is fsynced. No reader ever sees a WAL
// without its header, and the lock taken before the link covers the new path
// too. ErrCreateRace is returned if the WAL appeared meanwhile. If the
// directory cannot be made durable, the link is taken back: a WAL whose
// existence may not survive a crash was never acknowledged. fault is nil
// except in tests.
func CreateBatch(path string, bodies [][]byte, version int, fault *Fault, seam Seam) (*Log, error) {
	file, pos, err := encodeFrames(HeaderLine(version), start, bodies)
	if err != nil {
		return nil, err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+CreatingSuffix+"*")
	if err != nil {
		return nil, fmt.Errorf("creating the WAL: %w", openError(path, err))
	}
	defer os.Remove(tmp.Name())
	l := &Log{Path: path, Version: version, file: tmp, store: tmp, mode: Write}
	l.Route(seam)
	l.Inject(fault)
	if err := unix.Flock(int(tmp.Fd()), unix.LOCK_EX); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("locking the new WAL: %w", err)
	}
	if err := l.writeDurably(file, len(bodies)); err != nil {
		tmp.Close()
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			err = replaceEmpty(path, tmp.Name())
		}
		if err != nil {
			tmp.Close()
			return nil, err
		}
	}
	if err := syncDir(dir, fault); err != nil {
		tmp.Close()
		if rerr := os.Remove(path); rerr != nil {
			return nil, fmt.Errorf("the new WAL %s could not be made durable (fsync of its directory: %v) and could not be removed (%v): it holds the first record, which may or may not survive a crash; run 'leasewal verify' and repeat the command with the same request id", path, err, rerr)
		}
		return nil, &AppendError{Op: "fsync of the directory", Err: err, RolledBack: true}
	}
	fault.Reach("after-sync")
	l.Position = pos
	return l, nil
}

// emptyFileLock bounds the wait for an empty file's lock: only a reader
// that found it empty holds it, and for a moment.
const emptyFileLock = 10 * time.Second

// replaceEmpty puts the new WAL at tmp in place of the empty file at path
// (a mktemp's, a touch's), as sqlite3 takes an empty file for a new
// database: under the empty file's lock, and only while it is still empty
// and still at path, so that of two creators one replaces it and the other
// finds the WAL the first made (ErrCreateRace). Anything else at path is
// ErrCreateRace too: the WAL appeared meanwhile.
func replaceEmpty(path, tmp string) error {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return ErrCreateRace // gone or replaced meanwhile: look again
	}
	defer f.Close()
	if err := lockFair(f, path, unix.LOCK_EX, emptyFileLock); err != nil {
		return err
	}
	held, err := f.Stat()
	if err != nil || held.Size() != 0 || !held.Mode().IsRegular() {
		return ErrCreateRace
	}
	if now, err := os.Lstat(path); err != nil || !os.SameFile(held, now) {
		return ErrCreateRace
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("creating the WAL in place of the empty file: %w", err)
	}
	return nil
}

// syncDir is SyncDir, failing as a test asks.
func syncDir(dir string, fault *Fault) error {
	if fault != nil && fault.Action == "dirsync-eio" {
		return unix.EIO
	}
	return SyncDir(dir)
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

// copySparse copies src to f, seeking over blocks of zeros instead of
// writing them, and sets f's size at the end.
func copySparse(f *os.File, src io.Reader) error {
	buf := make([]byte, 64<<10)
	var size int64
	for {
		n, err := io.ReadFull(src, buf)
		if n > 0 {
			chunk := buf[:n]
			if bytes.Count(chunk, []byte{0}) == n {
				if _, serr := f.Seek(int64(n), io.SeekCurrent); serr != nil {
					return serr
				}
			} else if _, werr := f.Write(chunk); werr != nil {
				return werr
			}
			size += int64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return f.Truncate(size)
		}
		if err != nil {
			return err
		}
	}
}

// WriteNew writes src to dest, which must not exist, durably and whole or
// not at all: a file beside it, fsynced, linked in as dest, the directory
// fsynced. An error wrapping fs.ErrExist says dest exists.
func WriteNew(dest string, src io.Reader) (int64, error) {
	dir := filepath.Dir(dest)
	tmp, err := os.CreateTemp(dir, filepath.Base(dest)+".copying-*")
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, src)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp.Name(), dest)
		if err == nil {
			if err = SyncDir(dir); err != nil {
				os.Remove(dest) // a copy that may not survive a crash is no copy
			}
		}
	}
	return n, err
}

// Section reads the file's bytes from from to to, which must lie within its
// valid frames (which never change under a reader).
func (l *Log) Section(from, to int64) *io.SectionReader {
	return io.NewSectionReader(l.file, from, to-from)
}

// Frames hands each the frames between from and to, two positions of
// this log's valid frames (which never change under a reader, locked or
// not), checking each against the chain from from on; version is the
// file's format version when they were written (Version, which an append
// of a newer record changes).
func (l *Log) Frames(from, to Position, version int, each func(Frame) error) error {
	if from.Count == 0 {
		from = start
	}
	if to.End < from.End || to.Count < from.Count {
		return fmt.Errorf("frames from %d to %d: %w", from.End, to.End, ErrStalePosition)
	}
	pos, torn, err := scanFrames(l.Section(from.End, to.End), to.End-from.End, from, func(f Frame) error {
		f.Version = version
		return each(f)
	})
	switch {
	case err != nil:
		return err
	case torn != nil || pos != to:
		return fmt.Errorf("the frames from %d to %d are not those recorded: %w", from.End, to.End, ErrStalePosition)
	}
	return nil
}

// A Replacement is the new WAL a compaction writes beside the old one before
// it takes the lock: the header and the frames of a base, fsynced. Log.Replace
// then appends the old WAL's frames after the base's seq and renames it over
// the old WAL; Abandon removes it.
type Replacement struct {
	f       *os.File
	store   Storage // f, or f failing as the fault says
	end     int64   // the bytes written
	fault   *Fault
	version int // of its header
}

// StartReplacement writes a new WAL beside path: the header of version and
// the frames of the bodies handed to write, as they come, fsynced.
func StartReplacement(path string, version int, fault *Fault, bodies func(write func(body []byte) error) error) (*Replacement, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".compacting-*")
	if err != nil {
		return nil, fmt.Errorf("writing the new WAL beside %s: %w; the WAL is unchanged", path, err)
	}
	r := &Replacement{f: tmp, store: tmp, fault: fault, version: version}
	if fault != nil && fault.Point == "" {
		r.store = &faultyStore{Storage: tmp, action: fault.Action}
	}
	if err := r.write(version, bodies); err != nil {
		r.Abandon()
		return nil, fmt.Errorf("writing the new WAL beside %s: %w; the WAL is unchanged", path, err)
	}
	return r, nil
}

// Name is the replacement's file.
func (r *Replacement) Name() string { return r.f.Name() }

// Size is how many bytes it holds so far.
func (r *Replacement) Size() int64 { return r.end }

// Abandon removes the replacement, unless it has replaced the WAL.
func (r *Replacement) Abandon() {
	if r != nil && r.f != nil {
		r.f.Close()
		os.Remove(r.f.Name())
		r.f = nil
	}
}

// write writes and fsyncs the header and the frames of the bodies.
func (r *Replacement) write(version int, bodies func(write func(body []byte) error) error) error {
	out := &appender{w: r.store}
	w := bufio.NewWriterSize(out, 1<<20)
	frames := NewFrameWriter(w, version)
	written := 0
	err := bodies(func(body []byte) error {
		if err := frames.Write(body); err != nil {
			return err
		}
		if written++; written == 2 && r.fault != nil && r.fault.Point == "compact-partial" {
			if err := w.Flush(); err != nil {
				return err
			}
			r.fault.Reach("compact-partial")
		}
		return nil
	})
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = r.store.Sync()
	}
	r.end = out.off
	return err
}

// Replace puts the replacement r where the locked log is, with the log's
// frames from offset from on appended to it as they are (the records after
// the base's seq: the base's last record re-seeds the chain they continue),
// fsynced, renamed over the log's file, the directory fsynced. A crash at
// any point leaves the old WAL or the new one, each whole. The log stays
// open and locked on the old file, so that the commands waiting for its lock
// find it replaced (ErrReplaced) and start over on the new one; it must only
// be closed after. A log upgraded to a newer version since the replacement
// was started (by a record it appended) upgrades the replacement too.
func (l *Log) Replace(r *Replacement, from int64) error {
	dir := filepath.Dir(l.Path)
	defer r.Abandon() // nothing once renamed
	var err error
	if l.Version > r.version {
		_, err = r.store.WriteAt(HeaderLine(l.Version), 0)
	}
	out := &appender{w: r.store, off: r.end}
	if err == nil {
		_, err = io.Copy(out, l.Section(from, l.End))
	}
	if err == nil {
		err = r.store.Sync()
	}
	r.end = out.off
	if cerr := r.f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("writing the new WAL beside %s: %w; the WAL is unchanged", l.Path, err)
	}
	l.fault.Reach("compact-synced")
	if err := os.Rename(r.f.Name(), l.Path); err != nil {
		return fmt.Errorf("renaming the new WAL over %s: %w; the WAL is unchanged", l.Path, err)
	}
	l.fault.Reach("compact-renamed")
	if err := syncDir(dir, l.fault); err != nil {
		return fmt.Errorf("the new WAL replaced %s but its directory could not be fsynced (%w): after a crash the WAL may be the old one, which holds the same records", l.Path, err)
	}
	l.fault.Reach("compact-done")
	return nil
}

// appender writes a Storage from its start, in order.
type appender struct {
	w   io.WriterAt
	off int64
}

func (a *appender) Write(p []byte) (int, error) {
	n, err := a.w.WriteAt(p, a.off)
	a.off += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return n, err
}

// FrameWriter writes a WAL to w: its header, then a frame for each body,
// each chained from the frame before (or re-seeded by it).
type FrameWriter struct {
	w     io.Writer
	prev  uint32
	frame []byte
	err   error // the header's, if it could not be written
}

// NewFrameWriter writes the header of version to w.
func NewFrameWriter(w io.Writer, version int) *FrameWriter {
	_, err := w.Write(HeaderLine(version))
	return &FrameWriter{w: w, prev: headerSeed, err: err}
}

// Write writes body's frame.
func (fw *FrameWriter) Write(body []byte) error {
	if fw.err != nil {
		return fw.err
	}
	frame, sum, err := AppendFrame(fw.frame[:0], fw.prev, body)
	if err != nil {
		return err
	}
	fw.frame, fw.prev = frame, nextSeed(sum, body)
	_, err = fw.w.Write(frame)
	return err
}
