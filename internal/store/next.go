package store

import "github.com/leasewal/leasewal/state"

// NextRequestID is the request id of the lease a completion of leaseID
// takes for its worker: a completion repeated after a lost answer takes
// the same next lease again, not a second one.
func NextRequestID(leaseID string) string { return "next-after-" + leaseID }

// CompleteAndLease completes taskID under leaseID and, whatever became of
// the completion (the worker is free either way), leases the next eligible
// task to next.Worker, on the state that includes the completion, both
// committed in tx: inside a batch (WriteBatch) one write and one fsync.
// next is validated before anything is decided, so that an error leaves
// nothing committed.
func (tx *Tx) CompleteAndLease(taskID, leaseID, result string, next state.LeaseRequest) (done, leased state.Decision, err error) {
	if !tx.staging { // not in a batch: one of its own, so that both records go in one write
		tx.staging = true
		done, leased, err = tx.CompleteAndLease(taskID, leaseID, result, next)
		if flushErr := tx.flushStaged(); err == nil {
			err = flushErr
		}
		return done, leased, err
	}
	next.TaskID, next.RequestID = "", NextRequestID(leaseID)
	if err := state.ValidateLeaseRequest(next); err != nil {
		return done, leased, err
	}
	if done, err = tx.State.DecideComplete(taskID, leaseID, result, tx.Now); err != nil {
		return done, leased, err
	}
	if err := tx.Commit(done.Records); err != nil {
		return done, leased, err
	}
	if leased, err = tx.State.DecideLease(next, tx.Now); err != nil {
		return done, leased, err
	}
	if leased.Outcome == state.ResultLeased {
		err = tx.Commit(leased.Records)
	}
	return done, leased, err
}
