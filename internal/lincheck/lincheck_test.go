package lincheck

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestLeaseAnsweredAfterItsLapse: a lease whose answer was lost and whose
// repeat (same request id) came after the lease it was granted had lapsed
// answers CANCELLED, naming that lease. The check takes the grant as the
// call's effect: a history with it is linearizable, and one naming a
// lease that was never granted is not. (A CI run once spent its five
// minutes searching such a history before normalization took it in.)
func TestLeaseAnsweredAfterItsLapse(t *testing.T) {
	const at = int64(1767225600000) // the one record: T1, submitted
	in := Input{Op: "lease", Worker: "W0", Req: "c0-1", Offset: 300 * time.Millisecond}
	check := func(out Output) porcupine.CheckResult {
		h := []porcupine.Operation{{ClientId: 0, Input: in, Call: 0, Output: out.Normalize(in), Return: 10}}
		res, _ := Check(at, h, time.Minute)
		return res
	}
	if res := check(Output{Result: "CANCELLED", Task: "T1", Lease: "L1"}); res != porcupine.Ok {
		t.Fatalf("the repeat of a lapsed lease: %s, want Ok", res)
	}
	if res := check(Output{Result: "CANCELLED", Task: "T1", Lease: "L2"}); res != porcupine.Illegal {
		t.Fatalf("a lease never granted: %s, want Illegal", res)
	}
}
