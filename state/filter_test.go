package state

import (
	"fmt"
	"testing"
)

// TestFilterHoldsItsKeysAndFewOthers: a filter says it may hold every key
// added to it, and of keys never added says so for about 1% (the rate ten
// bits a key and seven probes in a block of 512 give), so that lookups of new keys in a
// replay read no run's index.
func TestFilterHoldsItsKeysAndFewOthers(t *testing.T) {
	const keys = 50_000
	f := newFilter(keys)
	for i := range keys {
		f.add(keyHash(keySubmit, fmt.Sprintf("R%d", i)))
	}
	for i := range keys {
		if !f.mayHold(keyHash(keySubmit, fmt.Sprintf("R%d", i))) {
			t.Fatalf("the filter lost R%d", i)
		}
	}
	passed := 0
	for i := range keys {
		if f.mayHold(keyHash(keySubmit, fmt.Sprintf("R%d", keys+i))) {
			passed++
		}
	}
	rate := float64(passed) / keys
	if rate > 0.02 {
		t.Fatalf("%.2f%% of keys never added pass the filter (about 1%% expected)", rate*100)
	}
	t.Logf("%.2f%% of keys never added pass the filter", rate*100)
	var none *filter
	if !none.mayHold(keyHash(keyTask, "T1")) {
		t.Fatal("no filter (an archive read from disk) must let every lookup through")
	}
}
