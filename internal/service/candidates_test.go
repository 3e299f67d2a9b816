package service

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasewal/leasewal/state"
)

// TestTaskCandidatesAreBounded: a completion lists at most maxCandidates
// task ids, those in play first, each in creation order; the prefix of a
// number is looked up by number (T15: T15, T150 to T159, T1500), and a
// prefix no task id begins with lists none.
func TestTaskCandidatesAreBounded(t *testing.T) {
	st, now := state.New(), int64(1767225600000)
	apply := func(d state.Decision, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range d.Records {
			r.Seq, r.At = st.LastSeq()+1, now
			if err := st.Apply(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	for range 1500 {
		apply(st.DecideSubmit(state.Submit{Payload: "p", Window: state.NoWindow, Policy: state.RetryPolicy{MaxAttempts: 1}}, now))
	}
	apply(st.DecideLease(state.LeaseRequest{Worker: "W", Duration: time.Minute}, now))
	apply(st.DecideComplete("T1", "L1", "", now))
	ids := func(prefix string) (out string) {
		for _, c := range taskCandidates(st, prefix, now) {
			out += c.Value + " "
		}
		return out
	}
	if all := taskCandidates(st, "", now); len(all) != maxCandidates || all[0].Value != "T2" || all[len(all)-1].Value != fmt.Sprint("T", maxCandidates+1) {
		t.Fatalf("%d candidates from %v to %v; want %d, T2 to T%d: those in play first", len(all), all[0], all[len(all)-1], maxCandidates, maxCandidates+1)
	}
	if got, want := ids("T15"), "T15 T150 T151 T152 T153 T154 T155 T156 T157 T158 T159 T1500 "; got != want {
		t.Fatalf("T15: %q, want %q", got, want)
	}
	if got := taskCandidates(st, "T1", now); len(got) != 1+10+100+501 || got[len(got)-1].Value != "T1" || got[len(got)-1].About != "COMPLETED" {
		t.Fatalf("T1: %d candidates ending %+v; want 612 (T1, T10 to T19, T100 to T199, T1000 to T1500), T1 COMPLETED last", len(got), got[len(got)-1])
	}
	for _, prefix := range []string{"T0", "X", "T-1", "T99999"} {
		if got := ids(prefix); got != "" {
			t.Fatalf("%q: %q, want none", prefix, got)
		}
	}
}
