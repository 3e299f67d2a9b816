package cmd

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
)

func (a *app) newWorkleaseCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "worklease",
		Short: "Per-domain FIFO work leases with fencing tokens",
		Long: `One in-flight offset per domain under a fencing token, a FIFO backlog without
duplicates, and terminal sets of processed and failed offsets, kept in the same
WAL under the same lock as the tasks. The orchestrator that calls these owns
backoff timing; succeed and fail only hint at the backlog's head and never hand off.
acquire writes WorkAcquired or WorkEnqueued, succeed WorkSucceeded, fail WorkFailed;
inspect writes nothing.`,
		Example: `  leasewal worklease acquire --domain orders --offset 41
  leasewal worklease succeed --domain orders --token K1
  leasewal worklease inspect --domain orders`,
		Args: cobra.ArbitraryArgs,
		RunE: unknownCommand,
	}
	c.AddCommand(a.newWorkAcquireCmd(), a.newWorkSucceedCmd(), a.newWorkFailCmd(), a.newWorkInspectCmd())
	return c
}

// workRecovery says how to learn a work-lease call's outcome again.
const workRecovery = "'leasewal worklease inspect --domain D' shows the domain as it now stands"

func workTable(v api.Work) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		retries := ""
		if v.RetryCount > 0 {
			retries = fmt.Sprint(v.RetryCount)
		}
		return fields(w, p, "result", string(v.Result), "domain", v.Domain, "offset", optInt(v.Offset),
			"token", v.Token, "retry count", retries, "processed", optInt(v.Processed), "failed", optInt(v.Failed))
	}
}

func optInt(p *int64) string {
	if p == nil {
		return ""
	}
	return fmt.Sprint(*p)
}

func (a *app) newWorkAcquireCmd() *cobra.Command {
	var domain string
	var offset int64
	c := &cobra.Command{
		Use:   "acquire --domain D --offset N",
		Short: "Try to acquire an offset (or queue behind the one in flight)",
		Long: `Seed 003's tryAcquire. A terminal offset: ALREADY_PROCESSED or ALREADY_FAILED.
While another offset is in flight: ENQUEUED at the backlog's tail (WorkEnqueued;
nothing is written if it is queued already). The in-flight offset again:
ALREADY_ACQUIRED with its token. With no lease: ACQUIRED with a new fencing
token (WorkAcquired), taking the backlog's head if there is a backlog; any other
offset then is a BacklogOrdering error, exit 7, and nothing is written.`,
		Example: `  leasewal worklease acquire --domain orders --offset 41`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			req := api.WorkAcquireRequest{Domain: domain, Offset: &offset, Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Work, error) { return s.WorkAcquire(ctx, req) }, workTable, workRecovery, "")
		},
	}
	c.Flags().StringVar(&domain, "domain", "", "the domain (any text; required)")
	c.Flags().Int64Var(&offset, "offset", -1, "the offset, 0 or more (required)")
	_ = c.MarkFlagRequired("domain")
	_ = c.MarkFlagRequired("offset")
	return c
}

func (a *app) newWorkSucceedCmd() *cobra.Command {
	var domain, token string
	c := &cobra.Command{
		Use:   "succeed --domain D --token K",
		Short: "Mark the in-flight offset processed",
		Long: `Seed 003's succeed: the in-flight offset becomes processed and the lease is
cleared. The answer is NO_BACKLOG, or NEXT_HINT with the backlog's head, which is
not handed off: acquire it next. No lease: LeaseNotFound; another token:
TokenMismatch; both exit 7 and write nothing.`,
		Example: `  leasewal worklease succeed --domain orders --token K3`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			req := api.WorkSucceedRequest{Domain: domain, Token: token, Actor: a.env.Actor}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Work, error) { return s.WorkSucceed(ctx, req) }, workTable, workRecovery, "")
		},
	}
	c.Flags().StringVar(&domain, "domain", "", "the domain (required)")
	c.Flags().StringVar(&token, "token", "", "the token acquire returned (required)")
	_ = c.MarkFlagRequired("domain")
	_ = c.MarkFlagRequired("token")
	return c
}

func (a *app) newWorkFailCmd() *cobra.Command {
	var domain, token string
	var maxRetries int
	c := &cobra.Command{
		Use:   "fail --domain D --token K [--max-retries 3]",
		Short: "Report a failed try of the in-flight offset",
		Long: `Seed 003's fail. While retry_count is below --max-retries: RETRY_SCHEDULED with
the new retry_count, and the lease is kept (acquired_at never changes; the
orchestrator computes its backoff from it). Otherwise the offset becomes failed,
the lease is cleared, and the answer is GIVE_UP_NO_BACKLOG or GIVE_UP_NEXT_HINT
with the backlog's head. The decision is written into the record, so replay never
reads --max-retries (config key worklease.max_retries, env
LEASEWAL_WORKLEASE_MAX_RETRIES).`,
		Example: `  leasewal worklease fail --domain orders --token K3 --max-retries 5`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			req := api.WorkFailRequest{Domain: domain, Token: token, Actor: a.env.Actor}
			if a.env.Server == "" || c.Flags().Changed("max-retries") { // else the server's own setting
				req.MaxRetries = &a.env.MaxRetries
			}
			return call(a.env, func(ctx context.Context, s api.Service) (api.Work, error) { return s.WorkFail(ctx, req) }, workTable, workRecovery, "")
		},
	}
	c.Flags().StringVar(&domain, "domain", "", "the domain (required)")
	c.Flags().StringVar(&token, "token", "", "the token acquire returned (required)")
	c.Flags().IntVar(&maxRetries, "max-retries", 3, "fails allowed before giving up")
	_ = c.MarkFlagRequired("domain")
	_ = c.MarkFlagRequired("token")
	_ = a.v.BindPFlag("worklease.max_retries", c.Flags().Lookup("max-retries"))
	return c
}

func (a *app) newWorkInspectCmd() *cobra.Command {
	var domain string
	c := &cobra.Command{
		Use:   "inspect [--domain D]",
		Short: "Show each domain's lease, backlog (in order), processed and failed offsets",
		Long: `Show every domain, or one: its lease (offset, token, acquired_at, retry_count),
its backlog in FIFO order, and its processed and failed offsets. Writes nothing.
An unknown --domain: exit 4.`,
		Example: `  leasewal worklease inspect --domain orders -o json`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			req := api.WorkInspectRequest{Domain: domain}
			a.env.noteMissingWAL()
			return call(a.env, func(ctx context.Context, s api.Service) (api.WorkInspect, error) { return s.WorkInspect(ctx, req) }, workInspectTable, "", "")
		},
	}
	c.Flags().StringVar(&domain, "domain", "", "only this domain")
	return c
}

func workInspectTable(v api.WorkInspect) func(io.Writer, palette) error {
	return func(w io.Writer, p palette) error {
		t := newTable(w, p, "DOMAIN", "IN FLIGHT", "TOKEN", "ACQUIRED AT", "RETRIES", "BACKLOG (FIFO)", "PROCESSED", "FAILED")
		for _, d := range v.Domains {
			inFlight, token, at, retries := "-", "", "", ""
			if l := d.Lease; l != nil {
				inFlight, token, at, retries = fmt.Sprint(l.Offset), l.Token, l.AcquiredAt, fmt.Sprint(l.RetryCount)
			}
			_ = t.Append(escape(d.Domain), inFlight, token, at, retries, joinOffsets(d.Backlog), joinOffsets(d.Processed), joinOffsets(d.Failed))
		}
		return t.Render()
	}
}

func joinOffsets(offs []int64) string {
	parts := make([]string, len(offs))
	for i, o := range offs {
		parts[i] = fmt.Sprint(o)
	}
	return strings.Join(parts, " ")
}
