package state

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/leasewal/leasewal/internal/limits"
)

// The gate. Every record passes CheckRecord before it is applied, appended
// or proposed, and DecodeRecord checks every record it reads against the
// same table (internal/limits), so that nothing is written that a reader
// would refuse. The two differ only where older versions wrote more than
// the table now allows, which replay must keep reading (docs/wal-format.md):
// an actor of any length or character, a queue limit above the table's
// maximum (read as that maximum), a schedule's interval under a second, and
// a task's max_attempts above the table's maximum.

// CheckRecord is the gate's check of a record about to be written: every
// field against its limit, every string UTF-8 (one that is not would be
// written as U+FFFD and read back as another), as a new request must be.
func CheckRecord(r Record) error { return checkRecord(&r, false) }

// checkRecord checks r against the table; legacy, for a record read from a
// WAL, accepts what older versions wrote, and clamps a queue limit above the
// maximum to it.
func checkRecord(r *Record, legacy bool) error {
	for _, f := range [...]struct{ name, value string }{
		{"chain_from", r.ChainFrom}, {"type", string(r.Type)}, {"actor", r.Actor}, {"task_id", r.TaskID},
		{"payload", r.Payload}, {"request_id", r.RequestID}, {"lease_id", r.LeaseID}, {"worker_id", r.WorkerID},
		{"reason", r.Reason}, {"queue", r.Queue}, {"requeued_from", r.RequeuedFrom}, {"domain", r.Domain},
		{"token", r.Token}, {"outcome", r.Outcome}, {"result", r.Result}, {"schedule", r.Schedule},
		{"cron", r.Cron}, {"tz", r.TZ}, {"catch_up", r.CatchUp}, {"history", r.History}, {"data", r.Data},
		{"digest", r.Digest}, {"hash", r.Hash}, {"rate", r.Rate}, {"dependency", r.Dependency},
	} {
		if !utf8.ValidString(f.value) {
			return fmt.Errorf("%s is not UTF-8 text", f.name)
		}
	}
	if r.Actor != "" && !legacy {
		if err := limits.Actor.Text(r.Actor); err != nil {
			return err
		}
	}
	if r.Priority != nil {
		if err := limits.Priority.Int(int64(*r.Priority)); err != nil {
			return err
		}
	}
	if r.Limit != nil {
		if legacy && *r.Limit > int(limits.QueueLimit.Max) {
			r.Limit = ptr(int(limits.QueueLimit.Max))
		}
		if err := limits.QueueLimit.Int(int64(*r.Limit)); err != nil {
			return err
		}
	}
	if r.Rate != "" {
		if _, err := ParseRate(r.Rate); err != nil {
			return err
		}
	}
	if r.After != nil || r.AfterEnded != nil {
		if err := limits.After.Int(int64(len(r.After) + len(r.AfterEnded))); err != nil {
			return err
		}
		for _, id := range slices.Concat(r.After, r.AfterEnded) {
			if !utf8.ValidString(id) {
				return fmt.Errorf("after is not UTF-8 text")
			}
			if err := limits.TaskID.Text(id); err != nil {
				return err
			}
		}
	}
	if r.Burst != 0 {
		if err := limits.Burst.Int(int64(r.Burst)); err != nil {
			return err
		}
	}
	if legacy || r.Type.IsBase() {
		return nil
	}
	// What a new record holds, as a new request must give it.
	if r.RetryPolicy != nil {
		if err := limits.MaxAttempts.Int(int64(r.RetryPolicy.MaxAttempts)); err != nil {
			return err
		}
	}
	if r.Type == ScheduleAdded && r.Every != 0 {
		if err := limits.Every.Duration(time.Duration(r.Every)); err != nil {
			return err
		}
	}
	for _, f := range [...]struct {
		limit limits.Limit
		value string
	}{{limits.Cron, r.Cron}, {limits.TZ, r.TZ}, {limits.Domain, r.Domain}, {limits.Schedule, r.Schedule}} {
		if f.value != "" {
			if err := f.limit.Text(f.value); err != nil {
				return err
			}
		}
	}
	if r.MaxRetries != nil {
		if err := limits.MaxRetries.Int(int64(*r.MaxRetries)); err != nil {
			return err
		}
	}
	if r.Offset != nil {
		if err := limits.Offset.Int(*r.Offset); err != nil {
			return err
		}
	}
	for _, f := range [...]struct {
		limit limits.Limit
		value string
	}{{limits.Reason, r.Reason}, {limits.Result, r.Result}, {limits.Payload, r.Payload}} {
		if len(f.value) > int(f.limit.Max) {
			return f.limit.Text(f.value)
		}
	}
	return nil
}
