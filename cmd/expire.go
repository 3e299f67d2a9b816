package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/store"
)

func (a *app) newExpireCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "expire",
		Short: "Record what time has revoked (writes LeaseExpired, TaskDead)",
		Long: `Write a LeaseExpired record for every current lease whose expiry has passed,
and a TaskDead record for every task whose execution window has closed. The
state is the same without these records (replay applies lapses of time by
itself); expire makes them visible in the log. All of them are appended in one
write with one fsync: all or none.`,
		Example: `  leasewal expire --now +1m`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if a.env.Server != "" {
				return a.env.sendTyped("expire", api.ExpireRequest{Actor: a.env.Actor})
			}
			return runExpire(a.env)
		},
	}
	return c
}

func runExpire(e env) error {
	return e.write(func(tx *store.Tx) (answer, error) {
		dec := tx.State.DecideExpire(tx.Now)
		if err := tx.Commit(dec.Records); err != nil {
			return answer{}, err
		}
		v := api.Expired{Result: dec.Outcome, Transitions: []api.Transition{}}
		for i, r := range tx.Committed {
			v.Transitions = append(v.Transitions, api.Transition{Seq: r.Seq, Type: string(r.Type), TaskID: r.TaskID, LeaseID: r.LeaseID, State: string(dec.States[i])})
		}
		return answer{doc: v, outcome: v.Result, recovery: "'leasewal log --type LeaseExpired,TaskDead' lists what expire wrote", table: func(w io.Writer, p palette) error {
			if len(v.Transitions) == 0 {
				_, err := fmt.Fprintln(w, "nothing has expired")
				return err
			}
			t := newTable(w, p, "SEQ", "RECORD", "TASK", "LEASE", "STATE")
			for _, tr := range v.Transitions {
				_ = t.Append(fmt.Sprint(tr.Seq), tr.Type, tr.TaskID, tr.LeaseID, p.word(tr.State))
			}
			return t.Render()
		}}, nil
	})
}
