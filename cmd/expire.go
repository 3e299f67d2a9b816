package cmd

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"leasewal/state"
)

func newExpireCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "expire",
		Short: "Record what time has revoked (writes LeaseExpired, TaskDead)",
		Long: `Write a LeaseExpired record for every current lease whose expiry has passed,
and a TaskDead record for every task whose execution window has closed. The
state is the same without these records (replay applies lapses of time by
itself); expire makes them visible in the log.`,
		Example: `  leasewal expire --now +1m`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runExpire(g) },
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

func runExpire(g *globals) error {
	return g.write(func(s *session) error {
		dec := s.st.DecideExpire(s.now)
		first := s.st.LastSeq() + 1
		if err := s.commit(dec.Records); err != nil {
			return err
		}
		v := expireView{Result: dec.Outcome, Transitions: []transitionView{}}
		for i, r := range dec.Records {
			t, _ := s.st.Task(r.TaskID)
			v.Transitions = append(v.Transitions, transitionView{Seq: first + int64(i), Type: string(r.Type), TaskID: r.TaskID, LeaseID: r.LeaseID, State: string(t.State)})
		}
		g.emit(v, func(w io.Writer, p palette) {
			if len(v.Transitions) == 0 {
				fmt.Fprintln(w, "nothing has expired")
				return
			}
			t := newTable(w, "SEQ", "RECORD", "TASK", "LEASE", "STATE")
			for _, tr := range v.Transitions {
				_ = t.Append(fmt.Sprint(tr.Seq), tr.Type, tr.TaskID, tr.LeaseID, p.word(tr.State))
			}
			_ = t.Render()
		})
		return nil
	})
}
