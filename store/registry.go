package store

import (
	"encoding/json"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"leasewal/wal"
)

// The worker registry is soft state (seed 004 §3.2): a side file beside the
// WAL, advisory only, never read by any decision, safe to delete.
const RegistrySuffix = ".workers"

type registryEntry struct {
	LastHeartbeat int64 `json:"last_heartbeat"`
}

// Heartbeat records that worker was alive at at. Concurrent heartbeats
// serialize on the registry file's own lock; the file is replaced through
// the FS seam, so a heartbeat that locked a file since replaced starts over
// on the new one instead of losing the other worker's entry. A damaged
// registry is started afresh: it is soft state.
func (h *Handle) Heartbeat(worker string, at int64) error {
	path := h.side(RegistrySuffix)
	for range maxStartOvers {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return err
		}
		err = h.rewriteRegistry(f, path, worker, at)
		f.Close()
		if !errors.Is(err, errRegistryReplaced) {
			return err
		}
	}
	return errRegistryReplaced
}

var errRegistryReplaced = errors.New("the worker registry kept being replaced")

func (h *Handle) rewriteRegistry(f *os.File, path, worker string, at int64) error {
	if err := wal.FlockWait(f, unix.LOCK_EX, h.opts.LockTimeout); err != nil {
		return err
	}
	if held, err := f.Stat(); err != nil {
		return err
	} else if now, err := os.Stat(path); err != nil || !os.SameFile(held, now) {
		return errRegistryReplaced
	}
	reg := readRegistryFrom(f)
	reg[worker] = registryEntry{LastHeartbeat: max(at, reg[worker].LastHeartbeat)}
	b, err := json.Marshal(reg)
	if err != nil {
		return err
	}
	return h.opts.FS.WriteFile(path, b)
}

// Workers reads the registry, worker by worker, their last heartbeat's time.
// It takes no lock: the registry is advisory, and it is replaced whole, never
// written in place.
func (h *Handle) Workers() map[string]int64 {
	out := map[string]int64{}
	f, err := os.Open(h.side(RegistrySuffix))
	if err != nil {
		return out
	}
	defer f.Close()
	for w, e := range readRegistryFrom(f) {
		out[w] = e.LastHeartbeat
	}
	return out
}

func readRegistryFrom(r io.Reader) map[string]registryEntry {
	reg := map[string]registryEntry{}
	if b, err := io.ReadAll(r); err != nil || json.Unmarshal(b, &reg) != nil {
		return map[string]registryEntry{}
	}
	return reg
}
