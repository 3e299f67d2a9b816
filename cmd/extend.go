package cmd

import (
	"io"

	"github.com/spf13/cobra"

	"leasewal/state"
)

type leaseRef struct {
	taskID  string
	leaseID string
}

func (r *leaseRef) flags(c *cobra.Command) {
	c.Flags().StringVar(&r.taskID, "task", "", "the task (required)")
	c.Flags().StringVar(&r.leaseID, "lease", "", "the lease the caller holds (required)")
	_ = c.MarkFlagRequired("task")
	_ = c.MarkFlagRequired("lease")
}

type extendOptions struct {
	leaseRef
	duration string
}

func newExtendCmd(g *globals) *cobra.Command {
	o := &extendOptions{}
	c := &cobra.Command{
		Use:   "extend --task T --lease L",
		Short: "Extend a current lease (writes LeaseExtended)",
		Long: `Move a current, unexpired lease's expiry to now + --duration, capped at the
task's deadline. Writes one LeaseExtended record. A lease that is not current or
has expired gets CANCELLED, exit 3, and nothing is written.`,
		Example: `  leasewal extend --task T1 --lease L1 --duration 30s`,
		Args:    cobra.NoArgs,
		RunE:    func(*cobra.Command, []string) error { return runExtend(g, o) },
	}
	o.flags(c)
	c.Flags().StringVar(&o.duration, "duration", "30s", "new lease length, counted from now")
	return c
}

type extendedView struct {
	Result  state.Outcome `json:"result"`
	TaskID  string        `json:"task_id"`
	LeaseID string        `json:"lease_id"`
	Expiry  string        `json:"expiry"`
}

func runExtend(g *globals, o *extendOptions) error {
	d, err := parseDuration("duration", o.duration)
	if err != nil {
		return err
	}
	return g.write(func(s *session) error {
		dec, err := s.st.DecideExtend(o.taskID, o.leaseID, d, s.now)
		if err != nil {
			return err
		}
		if dec.Outcome == state.ResultCancelled {
			return g.emitCancelled(dec, "nothing was written: stop working on "+dec.TaskID)
		}
		if err := s.commit(dec.Records); err != nil {
			return err
		}
		t, _ := s.st.Task(o.taskID)
		v := extendedView{Result: dec.Outcome, TaskID: t.ID, LeaseID: t.Lease.ID, Expiry: state.FormatTime(t.Lease.Expiry)}
		g.emit(v, func(w io.Writer, p palette) {
			fields(w, "result", p.word(string(v.Result)), "task", v.TaskID, "lease", v.LeaseID, "expiry", v.Expiry)
		})
		return nil
	})
}
