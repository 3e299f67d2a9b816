package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"leasewal/state"
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
		RunE:    func(*cobra.Command, []string) error { return runExpire(a.env) },
	}
	return c
}

type transitionView struct {
	Seq     int64  `json:"seq"`
	Type    string `json:"type"`
	TaskID  string `json:"task_id"`
	LeaseID string `json:"lease_id,omitempty"`
	State   string `json:"state"`
}

type expireView struct {
	Result      state.Outcome    `json:"result"`
	Transitions []transitionView `json:"transitions"`
}

func runExpire(e env) error {
	return e.write(func(tx *store.Tx) (answer, error) {
		dec := tx.State.DecideExpire(tx.Now)
		if err := tx.Commit(dec.Records); err != nil {
			return answer{}, err
		}
		v := expireView{Result: dec.Outcome, Transitions: []transitionView{}}
		for i, r := range tx.Committed {
			v.Transitions = append(v.Transitions, transitionView{Seq: r.Seq, Type: string(r.Type), TaskID: r.TaskID, LeaseID: r.LeaseID, State: string(dec.States[i])})
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
