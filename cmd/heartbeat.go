package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"leasewal/state"
)

// The worker registry is soft state (seed 004 §3.2): a side file beside the
// WAL, advisory only, never read by any decision, safe to delete.
const registrySuffix = ".workers"

func newHeartbeatCmd(g *globals) *cobra.Command {
	var worker string
	c := &cobra.Command{
		Use:   "heartbeat --worker W",
		Short: "Record that a worker is alive (writes nothing to the WAL)",
		Long: `Note the worker's heartbeat in the soft worker registry, a side file beside the
WAL (<wal>.workers) that is advisory only and safe to delete, and list the
leases the worker currently holds. Nothing is written to the WAL: liveness is
never authority, and a heartbeat does not extend a lease (use extend).`,
		Example: `  leasewal heartbeat --worker W1`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runHeartbeat(g, worker) },
	}
	c.Flags().StringVar(&worker, "worker", "", "the worker (required)")
	_ = c.MarkFlagRequired("worker")
	return c
}

type heldLease struct {
	TaskID  string `json:"task_id"`
	LeaseID string `json:"lease_id"`
	Expiry  string `json:"expiry"`
}

type heartbeatView struct {
	Result   state.Outcome `json:"result"`
	WorkerID string        `json:"worker_id"`
	At       string        `json:"at"`
	Leases   []heldLease   `json:"leases"`
}

func runHeartbeat(g *globals, worker string) error {
	if err := state.ValidateID("--worker", worker); err != nil {
		return usageErr("%v", err)
	}
	return g.read(func(s *session) error {
		v := heartbeatView{Result: state.ResultOK, WorkerID: worker, At: state.FormatTime(s.now), Leases: currentLeases(s.st, s.now)[worker]}
		if v.Leases == nil {
			v.Leases = []heldLease{}
		}
		if err := updateRegistry(g.sidePath(registrySuffix), worker, s.now); err != nil {
			fmt.Fprintf(g.stderr, "leasewal: warning: the worker registry was not updated (%v); it is advisory only\n", err)
		}
		g.emit(v, func(w io.Writer, p palette) {
			t := newTable(w, "WORKER", "TASK", "LEASE", "EXPIRY")
			for _, l := range v.Leases {
				_ = t.Append(worker, l.TaskID, l.LeaseID, l.Expiry)
			}
			if len(v.Leases) == 0 {
				_ = t.Append(worker, "-", "-", "-")
			}
			_ = t.Render()
		})
		return nil
	})
}

// currentLeases lists the leases current at now, by worker.
func currentLeases(st *state.State, now int64) map[string][]heldLease {
	out := map[string][]heldLease{}
	for _, t := range st.Live() { // only unfinished tasks hold leases
		if c := t.At(now); c.State == state.Leased {
			out[c.Lease.Worker] = append(out[c.Lease.Worker], heldLease{TaskID: t.ID, LeaseID: c.Lease.ID, Expiry: state.FormatTime(c.Lease.Expiry)})
		}
	}
	return out
}

type registryEntry struct {
	LastHeartbeat int64 `json:"last_heartbeat"`
}

// updateRegistry records a heartbeat under the registry file's own lock. A
// damaged registry is simply started afresh: it is soft state.
func updateRegistry(path, worker string, at int64) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	reg := readRegistryFrom(f)
	reg[worker] = registryEntry{LastHeartbeat: max(at, reg[worker].LastHeartbeat)}
	b, err := json.Marshal(reg)
	if err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err = f.WriteAt(b, 0)
	return err
}

// readRegistry reads the registry without locking it: it is advisory, and a
// half-written one reads as empty.
func readRegistry(path string) map[string]registryEntry {
	f, err := os.Open(path)
	if err != nil {
		return map[string]registryEntry{}
	}
	defer f.Close()
	return readRegistryFrom(f)
}

func readRegistryFrom(r io.Reader) map[string]registryEntry {
	reg := map[string]registryEntry{}
	if b, err := io.ReadAll(r); err != nil || json.Unmarshal(b, &reg) != nil {
		return map[string]registryEntry{}
	}
	return reg
}
