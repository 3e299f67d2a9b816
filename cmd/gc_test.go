package cmd

import (
	"math"
	"testing"
)

// TestTheSoftLimitFollowsTheLiveHeap: after a collection the heap may grow
// by half of what it found live, and to 192 MiB whatever it found.
func TestTheSoftLimitFollowsTheLiveHeap(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int64
	}{
		{0, 192 * mib},
		{100 * mib, 192 * mib},
		{128 * mib, 192 * mib},
		{130 * mib, 195 * mib},
		{300 * mib, 450 * mib},
		{math.MaxUint64, math.MaxInt64 / 2 * 3 / 2},
	} {
		if got := limitFor(c.live); got != c.want {
			t.Errorf("live %d bytes: a limit of %d, want %d", c.live, got, c.want)
		}
	}
}
