package state

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/leasewal/leasewal/internal/limits"
)

// The work-lease record types (docs/guarantees.md#work-lease). Each record carries its own
// outcome (the hint returned, retry or give-up), so replay never reads
// configuration.
const (
	WorkAcquired  RecordType = "WorkAcquired"
	WorkEnqueued  RecordType = "WorkEnqueued"
	WorkSucceeded RecordType = "WorkSucceeded"
	WorkFailed    RecordType = "WorkFailed"
)

// Work-lease answers (the JSON "result").
const (
	ResultAcquired         Outcome = "ACQUIRED"
	ResultAlreadyAcquired  Outcome = "ALREADY_ACQUIRED"
	ResultEnqueued         Outcome = "ENQUEUED"
	ResultAlreadyProcessed Outcome = "ALREADY_PROCESSED"
	ResultAlreadyFailed    Outcome = "ALREADY_FAILED"
	ResultNoBacklog        Outcome = "NO_BACKLOG"
	ResultNextHint         Outcome = "NEXT_HINT"
	ResultRetryScheduled   Outcome = "RETRY_SCHEDULED"
	ResultGiveUpNoBacklog  Outcome = "GIVE_UP_NO_BACKLOG"
	ResultGiveUpNextHint   Outcome = "GIVE_UP_NEXT_HINT"
)

// The outcomes a WorkFailed record can carry.
const (
	FailRetry  = "retry"
	FailGiveUp = "give_up"
)

// The work lease's six invariants, per domain, as RecordError reports them.
const (
	WorkInvSingle      = "work invariant 1: at most one in-flight offset per domain"
	WorkInvDisjoint    = "work invariant 2: the current offset, the backlog and the terminal sets are disjoint; no duplicates in the backlog"
	WorkInvFIFO        = "work invariant 3: the backlog is drained only from its head, by acquire"
	WorkInvIdempotence = "work invariant 4: a terminal offset is never re-enqueued nor re-acquired"
	WorkInvFencing     = "work invariant 5: succeed and fail need the lease's token"
	WorkInvMonitor     = "work invariant 6: a domain's lease record is never replaced while held (same offset, token and acquired_at)"
)

// WorkLease is a domain's in-flight offset.
type WorkLease struct {
	Offset     int64
	Token      string
	AcquiredAt int64
	RetryCount int
}

// Domain is one work-lease domain: one in-flight offset, a FIFO backlog
// without duplicates, and the terminal sets.
type Domain struct {
	Name      string
	Lease     *WorkLease
	Backlog   []int64
	Processed Offsets
	Failed    Offsets
}

func (d *Domain) terminal(offset int64) bool { return d.Processed.Has(offset) || d.Failed.Has(offset) }

// head is the backlog's first offset, the hint succeed and fail return.
func (d *Domain) head() (int64, bool) {
	if len(d.Backlog) == 0 {
		return 0, false
	}
	return d.Backlog[0], true
}

// Domain returns a domain by name.
func (s *State) Domain(name string) (*Domain, bool) {
	d, ok := s.domains[name]
	return d, ok
}

// Domains returns every domain in the order of its first record.
func (s *State) Domains() []*Domain { return s.domainOrder }

// domain returns the named domain, or a fresh empty one that is not yet part
// of the state (a domain exists from its first record on).
func (s *State) domain(name string) *Domain {
	if d, ok := s.domains[name]; ok {
		return d
	}
	return &Domain{Name: name}
}

func (s *State) keepDomain(d *Domain) {
	if _, ok := s.domains[d.Name]; !ok {
		s.domains[d.Name] = d
		s.domainOrder = append(s.domainOrder, d)
	}
}

// WorkDecision is what a work-lease call means: the record to append (nil for
// the calls that change nothing) and the answer.
type WorkDecision struct {
	Record  *Record
	Outcome Outcome
	Domain  string
	Offset  int64  // the offset the answer is about
	Token   string // for ACQUIRED and ALREADY_ACQUIRED
	Hint    *int64 // the backlog head after succeed or fail
	Retries int    // retry_count after RETRY_SCHEDULED
}

func ptr[T any](v T) *T { return &v }

// ValidateDomain checks a domain name: any non-empty text without control characters.
func ValidateDomain(name string) error { return ValidateID("domain", name) }

// DecideAcquire is the work lease's tryAcquire, in its order of checks.
func (s *State) DecideAcquire(domain string, offset int64) (WorkDecision, error) {
	if err := ValidateDomain(domain); err != nil {
		return WorkDecision{}, refuse(InvalidInput, "domain", "%v", err)
	}
	if offset < 0 {
		return WorkDecision{}, refuse(InvalidInput, "offset", "an offset must not be negative, got %d", offset)
	}
	d := s.domain(domain)
	answer := WorkDecision{Domain: domain, Offset: offset}
	switch {
	case d.Processed.Has(offset):
		answer.Outcome = ResultAlreadyProcessed
	case d.Failed.Has(offset):
		answer.Outcome = ResultAlreadyFailed
	case d.Lease != nil && d.Lease.Offset == offset:
		answer.Outcome, answer.Token = ResultAlreadyAcquired, d.Lease.Token
	case d.Lease != nil:
		answer.Outcome = ResultEnqueued
		if !slices.Contains(d.Backlog, offset) {
			answer.Record = &Record{Type: WorkEnqueued, Domain: domain, Offset: ptr(offset)}
		}
	default:
		if head, ok := d.head(); ok && head != offset {
			return WorkDecision{}, &Error{Kind: BacklogOrdering,
				Msg: fmt.Sprintf("domain %q: acquire of offset %d out of order: the backlog's head is %d (expected %d, got %d); acquire %d first", domain, offset, head, head, offset, head)}
		}
		answer.Outcome, answer.Token = ResultAcquired, "K"+strconv.FormatInt(s.lastTokenNum+1, 10)
		answer.Record = &Record{Type: WorkAcquired, Domain: domain, Offset: ptr(offset), Token: answer.Token}
	}
	return answer, nil
}

// heldLease checks a succeed or fail call against the domain's lease.
func (s *State) heldLease(domain, token string) (*Domain, error) {
	if err := ValidateDomain(domain); err != nil {
		return nil, refuse(InvalidInput, "token", "%v", err)
	}
	if err := limits.Token.Text(token); err != nil {
		return nil, refuse(InvalidInput, "token", "the %v", err)
	}
	if _, ok := idNumber(token, 'K'); !ok {
		return nil, refuse(InvalidInput, "token", "%q is not a work-lease token (K<n>)", token)
	}
	d := s.domain(domain)
	if d.Lease == nil {
		return nil, &Error{Kind: LeaseNotFound, Msg: fmt.Sprintf("domain %q has no lease; acquire an offset first", domain)}
	}
	if d.Lease.Token != token {
		return nil, &Error{Kind: TokenMismatch, Msg: fmt.Sprintf("domain %q: token %s is not the lease's token (offset %d is held under another token); a stale caller must stop", domain, token, d.Lease.Offset)}
	}
	return d, nil
}

// DecideSucceed is the work lease's succeed: the offset becomes processed, the lease
// is cleared, and the backlog's head is returned as a hint, not handed off.
func (s *State) DecideSucceed(domain, token string) (WorkDecision, error) {
	d, err := s.heldLease(domain, token)
	if err != nil {
		return WorkDecision{}, err
	}
	answer := WorkDecision{Domain: domain, Offset: d.Lease.Offset, Outcome: ResultNoBacklog}
	if head, ok := d.head(); ok {
		answer.Outcome, answer.Hint = ResultNextHint, ptr(head)
	}
	answer.Record = &Record{Type: WorkSucceeded, Domain: domain, Offset: ptr(d.Lease.Offset), Token: token,
		AcquiredAt: d.Lease.AcquiredAt, Hint: answer.Hint}
	return answer, nil
}

// DecideWorkFail is the work lease's fail: give up once retry_count has reached
// maxRetries, otherwise keep the lease and count the retry.
func (s *State) DecideWorkFail(domain, token string, maxRetries int) (WorkDecision, error) {
	if limits.MaxRetries.Int(int64(maxRetries)) != nil {
		return WorkDecision{}, refuse(InvalidInput, "max_retries", "max retries of %d: give %s", maxRetries, limits.MaxRetries.Range())
	}
	d, err := s.heldLease(domain, token)
	if err != nil {
		return WorkDecision{}, err
	}
	l := d.Lease
	rec := &Record{Type: WorkFailed, Domain: domain, Offset: ptr(l.Offset), Token: token, AcquiredAt: l.AcquiredAt, MaxRetries: ptr(maxRetries)}
	answer := WorkDecision{Domain: domain, Offset: l.Offset, Record: rec}
	if l.RetryCount < maxRetries {
		rec.Outcome, rec.RetryCount = FailRetry, l.RetryCount+1
		answer.Outcome, answer.Token, answer.Retries = ResultRetryScheduled, token, rec.RetryCount
		return answer, nil
	}
	rec.Outcome = FailGiveUp
	answer.Outcome = ResultGiveUpNoBacklog
	if head, ok := d.head(); ok {
		answer.Outcome, answer.Hint = ResultGiveUpNextHint, ptr(head)
	}
	rec.Hint = answer.Hint
	return answer, nil
}

func (s *State) applyWorkAcquired(r Record) error {
	d, off, err := s.workSubject(r)
	if err != nil {
		return err
	}
	n, ok := idNumber(r.Token, 'K')
	if !ok {
		return invalid("token %q is not of the form K<n>", r.Token)
	}
	if n <= s.lastTokenNum {
		return breaks(InvSequence, "token %s does not increase on the last token K%d", r.Token, s.lastTokenNum)
	}
	switch head, queued := d.head(); {
	case d.terminal(off):
		return breaks(WorkInvIdempotence, "offset %d of domain %q is already terminal", off, d.Name)
	case d.Lease != nil:
		return breaks(WorkInvSingle, "domain %q already has offset %d in flight", d.Name, d.Lease.Offset)
	case queued && head != off:
		return breaks(WorkInvFIFO, "domain %q acquires %d but its backlog's head is %d", d.Name, off, head)
	case queued:
		d.Backlog = d.Backlog[1:]
	}
	d.Lease = &WorkLease{Offset: off, Token: r.Token, AcquiredAt: r.At}
	s.lastTokenNum = n
	s.keepDomain(d)
	return nil
}

func (s *State) applyWorkEnqueued(r Record) error {
	d, off, err := s.workSubject(r)
	if err != nil {
		return err
	}
	switch {
	case d.terminal(off):
		return breaks(WorkInvIdempotence, "offset %d of domain %q is already terminal", off, d.Name)
	case d.Lease == nil:
		return invalid("domain %q has no lease, so an offset is acquired, not enqueued", d.Name)
	case d.Lease.Offset == off || slices.Contains(d.Backlog, off):
		return breaks(WorkInvDisjoint, "offset %d of domain %q is already in flight or queued", off, d.Name)
	}
	d.Backlog = append(d.Backlog, off)
	return nil
}

// finishing checks a WorkSucceeded or WorkFailed record against the lease it
// names: the token fences out stale callers, and the offset and acquired_at
// must be those of the lease record the domain holds.
func (s *State) finishing(r Record) (*Domain, error) {
	d, off, err := s.workSubject(r)
	if err != nil {
		return nil, err
	}
	l := d.Lease
	switch {
	case l == nil:
		return nil, invalid("domain %q has no lease", d.Name)
	case l.Token != r.Token:
		return nil, breaks(WorkInvFencing, "token %s is not the lease's token %s", r.Token, l.Token)
	case l.Offset != off || l.AcquiredAt != r.AcquiredAt:
		return nil, breaks(WorkInvMonitor, "the record names offset %d acquired at %d, but token %s holds offset %d acquired at %d",
			off, r.AcquiredAt, r.Token, l.Offset, l.AcquiredAt)
	}
	return d, nil
}

// checkHint checks the hint a record carries against the backlog's head.
func checkHint(d *Domain, hint *int64) error {
	head, ok := d.head()
	if ok != (hint != nil) || (ok && head != *hint) {
		return invalid("the recorded hint does not match the head of domain %q's backlog", d.Name)
	}
	return nil
}

func (s *State) applyWorkSucceeded(r Record) error {
	d, err := s.finishing(r)
	if err != nil {
		return err
	}
	if err := checkHint(d, r.Hint); err != nil {
		return err
	}
	d.Processed.Add(d.Lease.Offset)
	d.Lease = nil
	return nil
}

func (s *State) applyWorkFailed(r Record) error {
	d, err := s.finishing(r)
	if err != nil {
		return err
	}
	switch r.Outcome {
	case FailRetry:
		if r.RetryCount != d.Lease.RetryCount+1 || r.Hint != nil {
			return invalid("a retry of domain %q must count retry %d and carry no hint", d.Name, d.Lease.RetryCount+1)
		}
		d.Lease.RetryCount++
	case FailGiveUp:
		if err := checkHint(d, r.Hint); err != nil {
			return err
		}
		d.Failed.Add(d.Lease.Offset)
		d.Lease = nil
	default:
		return invalid("outcome %q is neither %s nor %s", r.Outcome, FailRetry, FailGiveUp)
	}
	return nil
}

// workSubject validates the fields every work record has.
func (s *State) workSubject(r Record) (*Domain, int64, error) {
	if err := ValidateDomain(r.Domain); err != nil {
		return nil, 0, invalid("%v", err)
	}
	if r.Offset == nil || *r.Offset < 0 {
		return nil, 0, invalid("a work record needs an offset of 0 or more")
	}
	if r.Type != WorkAcquired {
		if _, known := s.domains[r.Domain]; !known {
			return nil, 0, invalid("unknown domain %q", r.Domain)
		}
	}
	return s.domain(r.Domain), *r.Offset, nil
}
