package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/state"
	"leasewal/store"
)

func (a *app) newHeartbeatCmd() *cobra.Command {
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
		RunE: func(*cobra.Command, []string) error {
			if a.env.Server != "" {
				return a.env.sendTyped("heartbeat", api.HeartbeatRequest{Worker: worker, Actor: a.env.Actor})
			}
			return runHeartbeat(a.env, worker)
		},
	}
	c.Flags().StringVar(&worker, "worker", "", "the worker (required)")
	_ = c.MarkFlagRequired("worker")
	return c
}

func runHeartbeat(e env, worker string) error {
	if err := state.ValidateID("--worker", worker); err != nil {
		return usageErr("%v", err)
	}
	h := store.Open(e.storeOptions())
	defer h.Close()
	return e.operateOn(h, false, func(tx *store.Tx) (answer, error) {
		v := api.Heartbeat{Result: state.ResultOK, WorkerID: worker, At: formatTime(tx.Now), Leases: currentLeases(tx.State, tx.Now)[worker]}
		if v.Leases == nil {
			v.Leases = []api.HeldLease{}
		}
		if err := h.Heartbeat(worker, tx.Now); err != nil {
			fmt.Fprintf(e.stderr, "leasewal: warning: the worker registry was not updated (%v); it is advisory only\n", err)
		}
		return answer{doc: v, outcome: v.Result, table: func(w io.Writer, p palette) error {
			t := newTable(w, p, "WORKER", "TASK", "LEASE", "EXPIRY")
			for _, l := range v.Leases {
				_ = t.Append(escape(worker), l.TaskID, l.LeaseID, l.Expiry)
			}
			if len(v.Leases) == 0 {
				none := "-" // TSV leaves an empty cell empty, as everywhere
				if p.tsv {
					none = ""
				}
				_ = t.Append(escape(worker), none, none, none)
			}
			return t.Render()
		}}, nil
	})
}

// currentLeases lists the leases current at now, by worker.
func currentLeases(st *state.State, now int64) map[string][]api.HeldLease {
	out := map[string][]api.HeldLease{}
	for _, t := range st.Live() { // only unfinished tasks hold leases
		if c := t.At(now); c.State == state.Leased {
			out[c.Lease.Worker] = append(out[c.Lease.Worker], api.HeldLease{TaskID: t.ID, LeaseID: c.Lease.ID, Expiry: formatTime(c.Lease.Expiry)})
		}
	}
	return out
}
