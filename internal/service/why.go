package service

import (
	"fmt"
	"strings"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/state"
)

// whySentence says w in one sentence a person can act on.
func whySentence(w state.Why, now int64) string {
	t := w.Task
	at := func(ms int64) string {
		if ms > now {
			return fmt.Sprintf("%s (in %s)", api.FormatTime(ms), api.Age(ms-now))
		}
		return api.FormatTime(ms)
	}
	requeue := fmt.Sprintf("; 'leasewal requeue %s' runs it again as a new task", t.ID)
	switch w.Because {
	case state.BecauseEligible:
		where := fmt.Sprintf("queue %s, priority %d", t.Queue, t.Priority)
		if w.Ahead == 0 {
			return fmt.Sprintf("%s is WAITING and eligible: a lease of queue %s takes it next (%s)", t.ID, t.Queue, where)
		}
		return fmt.Sprintf("%s is WAITING and eligible: %d %s of higher priority or older %s ahead of it in queue %s (%s)",
			t.ID, w.Ahead, api.Plural(w.Ahead, "task", "tasks"), api.Plural(w.Ahead, "is", "are"), t.Queue, where)
	case state.BecauseQueueFull:
		s := fmt.Sprintf("%s is WAITING and eligible, but %s: a lease of queue %s takes a task once one of them ends", t.ID, w.Limit, t.Queue)
		if !t.HasDeadline() {
			return s
		}
		return s + fmt.Sprintf("; its execution window keeps running (deadline %s)", at(t.DeadlineAt(now)))
	case state.BecauseRated:
		return fmt.Sprintf("%s is WAITING and eligible, but queue %s is at its rate of %s: a lease of it may take a task again at %s",
			t.ID, t.Queue, w.Rate, at(w.EligibleAt))
	case state.BecauseDelayed:
		return fmt.Sprintf("%s is WAITING until %s: it was submitted with a delay (queue %s)", t.ID, at(w.EligibleAt), t.Queue)
	case state.BecauseBackoff:
		s := fmt.Sprintf("%s is WAITING until %s, backoff after attempt %d of %d", t.ID, at(w.EligibleAt), t.Attempt, t.Policy.MaxAttempts)
		if l := w.LastEnd; l != nil && l.Reason != "" {
			s += fmt.Sprintf(" (it failed: %s)", l.Reason)
		} else if l != nil && l.End == state.EndExpired {
			s += fmt.Sprintf(" (lease %s of %s expired)", l.LeaseID, l.Worker)
		}
		return s
	case state.BecausePaused:
		s := fmt.Sprintf("%s is WAITING: %s", t.ID, pauseSentence(t.Queue, *w.Pause, at))
		switch {
		case !t.HasDeadline():
			return s
		case w.Pause.Open():
			return s + fmt.Sprintf("; its execution window stands still while paused (deadline %s if it resumed now)", at(t.DeadlineAt(now)))
		default:
			return s + fmt.Sprintf("; its execution window stands still while paused (deadline %s)", at(t.Deadline()))
		}
	case state.BecauseReleased:
		l := w.LastEnd
		return fmt.Sprintf("%s is WAITING until %s: %s gave lease %s back (released; that attempt does not count, %d of %d used)",
			t.ID, at(w.EligibleAt), l.Worker, l.LeaseID, t.Attempt, t.Policy.MaxAttempts)
	case state.BecauseLeased:
		ext := "not extended"
		switch w.Extensions {
		case 1:
			ext = "extended once"
		case 0:
		default:
			ext = fmt.Sprintf("extended %d times", w.Extensions)
		}
		return fmt.Sprintf("%s is LEASED by %s under %s until %s, attempt %d of %d, %s", t.ID, t.Lease.Worker, t.Lease.ID, at(t.Lease.Expiry), t.Attempt, t.Policy.MaxAttempts, ext)
	case state.BecauseCompleted:
		l := w.LastEnd
		return fmt.Sprintf("%s is COMPLETED: %s finished it under %s at %s", t.ID, l.Worker, l.LeaseID, api.FormatTime(l.EndedAt))
	case state.BecauseFailed:
		return fmt.Sprintf("%s is FAILED: %s%s", t.ID, t.EndReason, requeue)
	case state.BecauseAttemptsExhausted:
		return fmt.Sprintf("%s is DEAD: %s (%d of %d attempts)%s", t.ID, t.EndReason, t.Attempt, t.Policy.MaxAttempts, requeue)
	case state.BecauseAborted, state.BecauseDependency:
		return fmt.Sprintf("%s is DEAD: %s%s", t.ID, t.EndReason, requeue)
	case state.BecauseBlocked:
		return fmt.Sprintf("%s is WAITING for %s; its delay and window start when the last is met", t.ID, waitsSentence(w.Waits))
	}
	return fmt.Sprintf("%s is DEAD: its execution window closed at %s after %d of %d attempts%s", t.ID, api.FormatTime(t.Deadline()), t.Attempt, t.Policy.MaxAttempts, requeue)
}

// waitsSentence says what a task waits for, one level deep: "T3 to
// complete (T3 is WAITING for T1), T4 to end (T4 is LEASED)".
func waitsSentence(waits []state.WaitFor) string {
	parts := make([]string, len(waits))
	for i, w := range waits {
		verb := "complete"
		if w.Ended {
			verb = "end"
		}
		parts[i] = fmt.Sprintf("%s to %s (%s is %s", w.Task.ID, verb, w.Task.ID, w.Task.State)
		if w.Task.State.Terminal() {
			parts[i] += ": the next 'leasewal expire' records what that means"
		}
		if len(w.Waits) > 0 {
			ids := make([]string, len(w.Waits))
			for j, d := range w.Waits {
				ids[j] = d.ID
			}
			parts[i] += " for " + strings.Join(ids, ", ")
		}
		parts[i] += ")"
	}
	return strings.Join(parts, ", ")
}

// pauseSentence says a queue's pause: "queue mail is paused since … (why),
// until resumed" or "…, resumes at … (in 5m)".
func pauseSentence(queue string, sp state.PauseSpan, at func(int64) string) string {
	s := fmt.Sprintf("queue %s is paused since %s", queue, api.FormatTime(sp.From))
	if sp.Reason != "" {
		s += " (" + sp.Reason + ")"
	}
	if sp.Open() {
		return s + ", until resumed ('leasewal resume " + queue + "')"
	}
	return s + ", resumes at " + at(sp.To)
}
