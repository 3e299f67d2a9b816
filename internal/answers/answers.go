// Package answers turns state's values into the API's answers (leasewal/api):
// a task as it stands at a time, a work-lease domain, a record with its
// times written out. What a command prints, the HTTP API answers and verify
// --expect compares is what these say.
package answers

import (
	"fmt"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/state"
)

// Payloads reads a payload the state holds as where the WAL has it
// (store.Tx.Payload).
type Payloads func(state.Payload) (string, error)

// Task is t as it stands at time at (lapses of time applied).
func Task(t *state.Task, at int64, payloads Payloads) (api.Task, error) {
	payload, err := payloads(t.Payload)
	if err != nil {
		return api.Task{}, fmt.Errorf("%s: %w", t.ID, err)
	}
	c := t.At(at)
	v := api.Task{TaskID: c.ID, State: string(c.State), Attempt: c.Attempt, MaxAttempts: c.Policy.MaxAttempts,
		Deadline: Deadline(c.DeadlineAt(at)), CreatedAt: api.FormatTime(c.CreatedAt), Payload: payload, Reason: c.EndReason,
		Queue: c.Queue, Priority: c.Priority, Requeued: c.RequeuedFrom, Redacted: c.Redacted, Result: c.Result}
	if c.Lease != nil {
		v.LeaseID, v.WorkerID, v.Expiry = Null(c.Lease.ID), Null(c.Lease.Worker), Null(api.FormatTime(c.Lease.Expiry))
	}
	for _, d := range c.Deps {
		if d.Ended {
			v.AfterEnded = append(v.AfterEnded, d.ID)
		} else {
			v.After = append(v.After, d.ID)
		}
	}
	for _, d := range c.Waits() {
		if !c.State.Terminal() {
			v.WaitingFor = append(v.WaitingFor, d.ID)
		}
	}
	if !c.Pending() {
		v.AvailableAt = Null(api.FormatTime(c.AvailableAt))
		if c.State == state.Waiting {
			v.NotBefore = Null(api.FormatTime(c.NotBefore))
		}
	}
	return v, nil
}

// Lease is a LEASED decision.
func Lease(d state.Decision, payloads Payloads) (api.Lease, error) {
	payload, err := payloads(d.Payload)
	if err != nil {
		return api.Lease{}, fmt.Errorf("%s: %w", d.TaskID, err)
	}
	return api.Lease{Result: api.Outcome(d.Outcome), TaskID: d.TaskID, LeaseID: d.LeaseID, WorkerID: d.Worker, Attempt: d.Attempt,
		Expiry: api.FormatTime(d.Expiry), Deadline: Deadline(d.Deadline), Payload: payload, Duplicate: d.Duplicate}, nil
}

// Domain is a work-lease domain: its lease, backlog, processed and failed
// offsets.
func Domain(d *state.Domain) api.Domain {
	v := api.Domain{Domain: d.Name, Backlog: append([]int64{}, d.Backlog...), Processed: d.Processed.Sorted(), Failed: d.Failed.Sorted()}
	if l := d.Lease; l != nil {
		v.Lease = &api.WorkLease{Offset: l.Offset, Token: l.Token, AcquiredAt: api.FormatTime(l.AcquiredAt), RetryCount: l.RetryCount}
	}
	return v
}

// Record is r with its times written out.
func Record(r state.Record) api.Record {
	v := api.Record{ChainFrom: r.ChainFrom, Seq: r.Seq, Type: string(r.Type), Actor: r.Actor, TaskID: r.TaskID, Payload: r.Payload,
		RequestID: r.RequestID, LeaseID: r.LeaseID, WorkerID: r.WorkerID, Attempt: r.Attempt, Reason: r.Reason, Permanent: r.Permanent,
		Queue: r.Queue, Priority: r.Priority, RequeuedFrom: r.RequeuedFrom, Domain: r.Domain, Offset: r.Offset, Token: r.Token,
		RetryCount: r.RetryCount, Outcome: r.Outcome, Hint: r.Hint, MaxRetries: r.MaxRetries, Result: r.Result, Limit: r.Limit, Rate: r.Rate, Burst: r.Burst,
		After: r.After, AfterEnded: r.AfterEnded, Dependency: r.Dependency,
		Schedule: r.Schedule, Cron: r.Cron, TZ: r.TZ, CatchUp: r.CatchUp, Parts: r.Parts, KeptFrom: r.KeptFrom, History: r.History,
		Cut: r.Cut, Part: r.Part, Data: r.Data, Digest: r.Digest, Hash: r.Hash,
		At: api.FormatTime(r.At), Expiry: Stamp(r.Expiry), AcquiredAt: Stamp(r.AcquiredAt)}
	if r.Window != 0 {
		v.Window = state.WindowText(r.Window)
	}
	if r.Every != 0 {
		v.Every = r.Every.String()
	}
	if p := r.RetryPolicy; p != nil {
		v.RetryPolicy = &api.RetryPolicy{MaxAttempts: p.MaxAttempts, Backoff: p.Backoff.String(), BackoffMax: p.BackoffMax.String()}
	}
	if r.NotBefore != nil {
		v.NotBefore = api.FormatTime(*r.NotBefore)
	}
	if r.Until != nil {
		v.Until = api.FormatTime(*r.Until)
	}
	if r.Slot != nil {
		v.Slot = api.FormatTime(*r.Slot)
	}
	return v
}

// StateRecord is the record an api.Record shows (Record's inverse): what a
// client replays to draw a task it read from a server.
func StateRecord(v api.Record) state.Record {
	r := state.Record{ChainFrom: v.ChainFrom, Seq: v.Seq, Type: state.RecordType(v.Type), Actor: v.Actor, TaskID: v.TaskID, Payload: v.Payload,
		RequestID: v.RequestID, LeaseID: v.LeaseID, WorkerID: v.WorkerID, Attempt: v.Attempt, Reason: v.Reason, Permanent: v.Permanent,
		Queue: v.Queue, Priority: v.Priority, RequeuedFrom: v.RequeuedFrom, Domain: v.Domain, Offset: v.Offset, Token: v.Token,
		RetryCount: v.RetryCount, Outcome: v.Outcome, Hint: v.Hint, MaxRetries: v.MaxRetries, Result: v.Result, Limit: v.Limit, Rate: v.Rate, Burst: v.Burst,
		After: v.After, AfterEnded: v.AfterEnded, Dependency: v.Dependency,
		Schedule: v.Schedule, Cron: v.Cron, TZ: v.TZ, CatchUp: v.CatchUp, Parts: v.Parts, KeptFrom: v.KeptFrom, History: v.History,
		Cut: v.Cut, Part: v.Part, Data: v.Data, Digest: v.Digest, Hash: v.Hash,
		At: api.ParseTime(v.At), Expiry: api.ParseTime(v.Expiry), AcquiredAt: api.ParseTime(v.AcquiredAt),
		Window: window(v.Window), Every: duration(v.Every)}
	if p := v.RetryPolicy; p != nil {
		r.RetryPolicy = &state.RetryPolicy{MaxAttempts: p.MaxAttempts, Backoff: duration(p.Backoff), BackoffMax: duration(p.BackoffMax)}
	}
	for _, t := range []struct {
		text string
		dst  **int64
	}{{v.NotBefore, &r.NotBefore}, {v.Until, &r.Until}, {v.Slot, &r.Slot}} {
		if t.text != "" {
			ms := api.ParseTime(t.text)
			*t.dst = &ms
		}
	}
	return r
}

// window reads a window as Record writes it ("none": NoWindow).
func window(text string) state.Duration {
	if text == "none" {
		return state.NoWindow
	}
	return duration(text)
}

// Deadline is a task's deadline as the answers show it: null for a task
// without a window.
func Deadline(ms int64) *string {
	if ms == state.NoDeadline {
		return nil
	}
	return Null(api.FormatTime(ms))
}

// duration reads a duration as a record writes it ("": none).
func duration(text string) state.Duration {
	d, _ := time.ParseDuration(text)
	return state.Duration(d)
}

// Stamp writes a time that may be unset (0: "").
func Stamp(ms int64) string {
	if ms == 0 {
		return ""
	}
	return api.FormatTime(ms)
}

// Null is s, or null for "".
func Null(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Pause is a queue's pause as the answers show it.
func Pause(queue string, sp state.PauseSpan) api.PausedQueue {
	v := api.PausedQueue{Queue: queue, Since: api.FormatTime(sp.From), Reason: sp.Reason}
	if !sp.Open() {
		until := api.FormatTime(sp.To)
		v.Until = &until
	}
	return v
}

// Schedule is a schedule as the answers show it, with its next slot (0:
// none).
func Schedule(sc state.Schedule, next int64) api.Schedule {
	t := sc.Template
	v := api.Schedule{Name: sc.Name, Cron: sc.Cron, TZ: sc.TZ, CatchUp: sc.CatchUp, Payload: t.Payload, Queue: t.Queue, Priority: t.Priority,
		Window: state.WindowText(t.Window), MaxAttempts: t.Policy.MaxAttempts, AddedAt: api.FormatTime(sc.AddedAt),
		LastSlot: Null(Stamp(sc.LastSlot)), NextSlot: Null(Stamp(next))}
	if sc.Every > 0 {
		v.Every = sc.Every.String()
	}
	return v
}

// EndMarks is the mark of each way an attempt ends, as the terminal's
// timeline (in color) and the HTML report draw it: one legend for both.
var EndMarks = map[string]string{state.EndCompleted: "✔", state.EndExpired: "✕", state.EndFailed: "✘", state.EndRetry: "↻",
	state.EndDead: "†", state.EndAborted: "⊘", state.EndReleased: "↩"}

// The other marks both draw.
const (
	MarkCancelled = "!" // a late completion, cancelled
	MarkDeadline  = "┃"
	MarkCurrent   = "▷" // a lease still current
)
