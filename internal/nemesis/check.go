package nemesis

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// record is the part of a WAL record the invariants read, parsed from the
// WAL's text here rather than by package state, which they check.
type record struct {
	Seq       int64  `json:"seq"`
	At        int64  `json:"at"`
	Type      string `json:"type"`
	TaskID    string `json:"task_id"`
	RequestID string `json:"request_id"`
	LeaseID   string `json:"lease_id"`
	Expiry    int64  `json:"expiry"`
	Domain    string `json:"domain"`
	Token     string `json:"token"`
}

// Summary is what Check counted.
type Summary struct {
	Records, Tasks, Grants int
}

// Check reads a WAL's records and reports the first broken invariant:
// seqs run 1, 2, 3 …; time never runs backwards; lease ids strictly
// increase; a task is granted a lease only when its previous one has ended
// (by a record, or by its expiry having passed); an extension or a release
// is under the task's current lease; a domain's fencing tokens strictly increase; and
// each id in acked (the request ids the clients were answered for) created
// exactly one task.
func Check(wal []byte, acked []string) (Summary, error) {
	var sum Summary
	lines := bytes.Split(bytes.TrimRight(wal, "\n"), []byte("\n"))
	if len(lines) == 0 || !bytes.HasPrefix(lines[0], []byte("leasewal-wal ")) {
		return sum, fmt.Errorf("no WAL header")
	}
	type lease struct {
		id     string
		expiry int64
	}
	var (
		lastAt    int64
		lastLease int
		current   = map[string]lease{} // task → its lease, while one is held
		tokens    = map[string]int64{}
		created   = map[string]int{} // request id → tasks created
	)
	for i, line := range lines[1:] {
		_, body, ok := bytes.Cut(line, []byte(" "))
		var r record
		if !ok || json.Unmarshal(body, &r) != nil {
			return sum, fmt.Errorf("line %d does not parse: %q", i+2, line)
		}
		where := fmt.Sprintf("seq %d (%s %s)", r.Seq, r.Type, r.TaskID)
		if r.Seq != int64(i+1) {
			return sum, fmt.Errorf("%s: seq %d follows %d", where, r.Seq, i)
		}
		if r.At < lastAt {
			return sum, fmt.Errorf("%s: time runs backwards, %d after %d", where, r.At, lastAt)
		}
		lastAt = r.At
		sum.Records++
		switch r.Type {
		case "TaskCreated":
			sum.Tasks++
			if r.RequestID != "" {
				created[r.RequestID]++
			}
		case "LeaseGranted":
			sum.Grants++
			n, err := strconv.Atoi(strings.TrimPrefix(r.LeaseID, "L"))
			if err != nil || n <= lastLease {
				return sum, fmt.Errorf("%s: lease %s granted after L%d", where, r.LeaseID, lastLease)
			}
			lastLease = n
			if held, ok := current[r.TaskID]; ok && held.expiry > r.At {
				return sum, fmt.Errorf("%s: lease %s granted while %s holds the task until %d", where, r.LeaseID, held.id, held.expiry)
			}
			current[r.TaskID] = lease{r.LeaseID, r.Expiry}
		case "LeaseExtended":
			held, ok := current[r.TaskID]
			if !ok || held.id != r.LeaseID || held.expiry <= r.At {
				return sum, fmt.Errorf("%s: lease %s extended, but the task's lease is %+v", where, r.LeaseID, held)
			}
			current[r.TaskID] = lease{r.LeaseID, r.Expiry}
		case "LeaseReleased":
			held, ok := current[r.TaskID]
			if !ok || held.id != r.LeaseID || held.expiry <= r.At {
				return sum, fmt.Errorf("%s: lease %s released, but the task's lease is %+v", where, r.LeaseID, held)
			}
			delete(current, r.TaskID)
		case "LeaseExpired", "TaskCompleted", "TaskFailed", "TaskDead", "TaskAborted":
			delete(current, r.TaskID)
		case "WorkAcquired":
			n, err := strconv.ParseInt(strings.TrimPrefix(r.Token, "K"), 10, 64)
			if err != nil || n <= tokens[r.Domain] {
				return sum, fmt.Errorf("%s: domain %s's token %s after %d", where, r.Domain, r.Token, tokens[r.Domain])
			}
			tokens[r.Domain] = n
		}
	}
	for _, id := range acked {
		if created[id] != 1 {
			return sum, fmt.Errorf("the acknowledged submit %s created %d tasks", id, created[id])
		}
	}
	return sum, nil
}
