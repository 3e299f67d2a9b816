package cmd

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/state"
)

func (a *app) newScheduleCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "schedule",
		Short: "Periodic tasks: add, ls, rm",
		Long: `A schedule submits a task at each of its slots: every D from when it was
added, or at each time of a cron expression. Each firing is a TaskCreated with
request id NAME@SLOT, so a slot never fires twice. The firings due are written
by the next command that writes (a lease takes one at once), by expire, and on
time by a running serve; after a time with none of those, --catch-up says what
fires: last (default: the latest slot due, however late), none (only a slot
less than a minute late) or all (every slot due, the latest 100 at most).`,
		Example: `  leasewal schedule add digest --cron '0 7 * * mon-fri' --tz Europe/Paris -- --payload 'send digest' --queue mail
  leasewal schedule ls
  leasewal schedule rm digest`,
		Args: cobra.ArbitraryArgs,
		RunE: unknownCommand,
	}
	c.AddCommand(a.newScheduleAddCmd(), a.newScheduleLsCmd(), a.newScheduleRmCmd())
	return c
}

func (a *app) newScheduleAddCmd() *cobra.Command {
	req := api.ScheduleAddRequest{}
	c := &cobra.Command{
		Use:   "add NAME (--every D | --cron EXPR [--tz ZONE]) [--catch-up none|last|all] -- SUBMIT-FLAGS",
		Short: "Add a periodic task",
		Long: `Add a schedule: its first slot is after now. --every D fires every D from now;
--cron takes five fields (minute hour day-of-month month day-of-week) or a
descriptor (@hourly, @daily, @weekly, @monthly), in --tz (an IANA zone, default
UTC; across a DST change a local time that does not exist is skipped and one
that happens twice fires once). After -- come the flags of the task each firing
submits, as submit takes them (--payload, --payload-file, --window,
--max-attempts, --backoff, --backoff-max, --queue, --priority). The same
schedule again answers again (duplicate); the name with other options is
refused: 'schedule rm' it first.`,
		Example: `  leasewal schedule add tick --every 10m -- --payload 'check the mirrors'
  leasewal schedule add digest --cron '0 7 * * mon-fri' --tz Europe/Paris --catch-up none -- --payload 'send digest' --queue mail`,
		Args: func(c *cobra.Command, args []string) error {
			dash := c.ArgsLenAtDash()
			if len(args) == 0 || dash == 0 || (dash < 0 && len(args) != 1) || dash > 1 {
				return usageErr("'leasewal schedule add' takes a name, then -- and the task's submit flags, e.g. 'leasewal schedule add tick --every 10m -- --payload P'")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			req.Name, req.Actor = args[0], a.env.Actor
			var task []string
			if dash := c.ArgsLenAtDash(); dash > 0 {
				task = args[dash:]
			}
			o := submitOptions{}
			fs := pflag.NewFlagSet("the task's submit flags", pflag.ContinueOnError)
			fs.SetOutput(io.Discard)
			o.flags(fs)
			if err := fs.Parse(task); err != nil {
				return usageErr("after --: %v; give the task's flags as submit takes them", err)
			}
			if fs.NArg() > 0 {
				return usageErr("after --: %q is not a flag; give the task's flags as submit takes them", fs.Arg(0))
			}
			if o.batchFile != "" {
				return usageErr("a schedule submits one task per slot: --batch-file does not apply")
			}
			var err error
			if req.Task, err = o.request(a.env.stdin); err != nil {
				return err
			}
			return call(a.env, func(ctx context.Context, s api.Service) (api.ScheduleAdded, error) { return s.ScheduleAdd(ctx, req) },
				scheduleAddedTable, "add the same schedule again: it answers again and writes nothing", "")
		},
	}
	f := c.Flags()
	f.StringVar(&req.Every, "every", "", "fire every D from now (a duration such as 10m)")
	f.StringVar(&req.Cron, "cron", "", "fire at each time of a cron expression: 'MIN HOUR DOM MON DOW' or @hourly, @daily …")
	f.StringVar(&req.TZ, "tz", "", "the cron's time zone, an IANA name such as Europe/Paris (default UTC)")
	f.StringVar(&req.CatchUp, "catch-up", state.CatchUpLast, "after a time with nothing written: none, last or all (the latest 100 at most)")
	return c
}

func (a *app) newScheduleLsCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "ls",
		Short:   "List the schedules, with their last and next slots",
		Example: `  leasewal schedule ls -o json`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			a.env.noteMissingWAL()
			return call(a.env, func(ctx context.Context, s api.Service) (api.Schedules, error) {
				return s.ScheduleList(ctx, api.ScheduleListRequest{})
			}, schedulesTable, "", "")
		},
	}
}

func (a *app) newScheduleRmCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a schedule",
		Long: `Remove a schedule: none of its slots fires any more; the tasks it fired stay.
Adding the name again starts a new schedule, its first slot after the add.`,
		Example: `  leasewal schedule rm digest`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageErr("'leasewal schedule rm' takes one schedule name, e.g. 'leasewal schedule rm digest'")
			}
			return nil
		},
		RunE: func(_ *cobra.Command, args []string) error {
			req := api.ScheduleRemoveRequest{Name: args[0], Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.ScheduleRemoved, error) {
				return s.ScheduleRemove(ctx, req)
			},
				func(v api.ScheduleRemoved) func(io.Writer, palette) error {
					return func(w io.Writer, p palette) error {
						return fields(w, p, "result", string(v.Result), "schedule", v.Name)
					}
				}, "'leasewal schedule ls' lists the schedules", "")
		},
	}
}

// when is a schedule's rule in words: "every 10m0s" or "cron '0 7 * * *' in Europe/Paris".
func when(v api.Schedule) string {
	if v.Every != "" {
		return "every " + v.Every
	}
	s := fmt.Sprintf("cron '%s'", v.Cron)
	if v.TZ != "" {
		s += " in " + v.TZ
	}
	return s
}

func scheduleAddedTable(v api.ScheduleAdded) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		return fields(w, p, "result", string(v.Result), "schedule", v.Name, "when", when(v.Schedule), "catch up", v.CatchUp,
			"queue", v.Queue, "next slot", deref(v.NextSlot), "duplicate", fmt.Sprint(v.Duplicate))
	}
}

func schedulesTable(v api.Schedules) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		t := newTable(w, p, "SCHEDULE", "WHEN", "CATCH UP", "QUEUE", "PAYLOAD", "LAST SLOT", "NEXT SLOT")
		for _, s := range v.Schedules {
			if err := t.Append(escape(s.Name), escape(when(s)), s.CatchUp, escape(s.Queue), escape(s.Payload), deref(s.LastSlot), deref(s.NextSlot)); err != nil {
				return err
			}
		}
		return t.Render()
	}
}
