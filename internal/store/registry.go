package store

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasewal/leasewal/wal"
)

// The worker registry is soft state: a side file beside the WAL, advisory
// only, never read by any decision, safe to delete. A heartbeat appends one
// line, "<unix ms> <worker>", under a shared lock; the file's first line,
// "leasewal-workers v1 <bytes>", is its size when it was last rewritten.
// Once it has grown to twice that (and at least registryFloor), the
// heartbeat that saw it rewrites it under the exclusive lock with each
// worker's latest heartbeat, dropping those not heard from for RegistryKeep:
// a heartbeat costs one append, and the rewrites, each of the workers
// still heard from, come after as many heartbeats as the last left lines.
const RegistrySuffix = ".workers"

// RegistryKeep is how long a worker not heard from stays in the registry.
const RegistryKeep = 24 * time.Hour

// registryFloor is the least size at which the registry is rewritten.
const registryFloor = 64 << 10

const registryMagic = "leasewal-workers v1 "

// Heartbeat records that worker was alive at at. An append that reached a
// file replaced meanwhile (rewritten by another heartbeat) is made again on
// the new one. A registry that is not one (an older version's, or damage)
// is rewritten afresh: it is soft state.
func (h *Handle) Heartbeat(worker string, at int64) error {
	path := h.side(RegistrySuffix)
	line := strconv.FormatInt(at, 10) + " " + worker + "\n"
	for range maxStartOvers {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		due, err := appendHeartbeat(f, path, line, h.opts.LockTimeout)
		if err == nil && due {
			err = h.rewriteRegistry(f, path, at)
		}
		f.Close()
		if !errors.Is(err, errRegistryReplaced) {
			return err
		}
	}
	return errRegistryReplaced
}

var errRegistryReplaced = errors.New("the worker registry kept being replaced")

// heldIsPath reports whether f, locked, is still the file at path.
func heldIsPath(f *os.File, path string) error {
	held, err := f.Stat()
	if err != nil {
		return err
	}
	if now, err := os.Stat(path); err != nil || !os.SameFile(held, now) {
		return errRegistryReplaced
	}
	return nil
}

// appendHeartbeat appends line under the shared lock and says whether the
// registry is due to be rewritten.
func appendHeartbeat(f *os.File, path, line string, timeout time.Duration) (due bool, err error) {
	if err := wal.FlockWait(f, unix.LOCK_SH, timeout); err != nil {
		return false, err
	}
	defer func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN) }()
	if err := heldIsPath(f, path); err != nil {
		return false, err
	}
	if _, err := f.WriteString(line); err != nil {
		return false, err
	}
	info, err := f.Stat()
	if err != nil {
		return false, err
	}
	head := make([]byte, len(registryMagic)+20)
	n, _ := f.ReadAt(head, 0)
	rewritten, ok := registrySize(head[:n])
	return !ok || info.Size() >= max(2*rewritten, registryFloor), nil
}

// registrySize reads the size the header says the file had when it was
// last rewritten; false when the file does not start with one.
func registrySize(head []byte) (int64, bool) {
	rest, ok := bytes.CutPrefix(head, []byte(registryMagic))
	if !ok {
		return 0, false
	}
	if i := bytes.IndexByte(rest, '\n'); i >= 0 {
		rest = rest[:i]
	}
	n, err := strconv.ParseInt(string(rest), 10, 64)
	return n, err == nil
}

// rewriteRegistry replaces the registry, under its exclusive lock, with each
// worker's latest heartbeat of the last RegistryKeep before now.
func (h *Handle) rewriteRegistry(f *os.File, path string, now int64) error {
	if err := wal.FlockWait(f, unix.LOCK_EX, h.opts.LockTimeout); err != nil {
		return err
	}
	if err := heldIsPath(f, path); err != nil {
		return nil // another heartbeat rewrote it; this one's line is in what it read
	}
	latest := readRegistry(io.NewSectionReader(f, 0, 1<<62), now)
	var body bytes.Buffer
	for w, at := range latest {
		fmt.Fprintf(&body, "%d %s\n", at, w)
	}
	header := registryMagic
	size := int64(len(header)) + int64(body.Len())
	size += int64(len(strconv.FormatInt(size, 10)) + 1)
	out := append([]byte(header+strconv.FormatInt(size, 10)+"\n"), body.Bytes()...)
	return h.opts.FS.WriteFile(path, out)
}

// Workers reads the registry at now: each worker heard from in the last
// RegistryKeep, and when it was last. It takes no lock: the registry is
// advisory, appended to by lines and replaced whole.
func (h *Handle) Workers(now int64) map[string]int64 {
	f, err := os.Open(h.side(RegistrySuffix))
	if err != nil {
		return map[string]int64{}
	}
	defer f.Close()
	return readRegistry(f, now)
}

// readRegistry is each worker's latest heartbeat in the last RegistryKeep
// before now; lines that do not read (a torn append, an older format) are
// skipped.
func readRegistry(r io.Reader, now int64) map[string]int64 {
	out := map[string]int64{}
	from := now - RegistryKeep.Milliseconds()
	lines := bufio.NewScanner(r)
	for lines.Scan() {
		at, worker, ok := bytes.Cut(lines.Bytes(), []byte(" "))
		ms, err := strconv.ParseInt(string(at), 10, 64)
		if !ok || err != nil || ms < from || len(worker) == 0 {
			continue
		}
		if w := string(worker); ms > out[w] {
			out[w] = ms
		}
	}
	return out
}
