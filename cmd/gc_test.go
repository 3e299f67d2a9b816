package cmd

import (
	"math"
	"testing"
)

// TestTheSoftLimitFollowsTheLiveHeap: after a collection the heap may grow
// by as much as it found live, and to 192 MiB whatever it found.
func TestTheSoftLimitFollowsTheLiveHeap(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int64
	}{
		{0, 192 * mib},
		{90 * mib, 192 * mib},
		{96 * mib, 192 * mib},
		{100 * mib, 200 * mib},
		{300 * mib, 600 * mib},
		{math.MaxUint64, math.MaxInt64 / 2 * 2},
	} {
		if got := limitFor(c.live); got != c.want {
			t.Errorf("live %d bytes: a limit of %d, want %d", c.live, got, c.want)
		}
	}
}

// TestAServersHeapGrowsToItsFloor: after a collection a server's heap may
// grow to 32 MiB before the next, and by as much as is live (GOGC 100) once
// that is more.
func TestAServersHeapGrowsToItsFloor(t *testing.T) {
	const mib = 1 << 20
	for _, c := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{1, 1<<20*100 - 100},
		{2 * mib, 1500},
		{4 * mib, 700},
		{10 * mib, 200},
		{16 * mib, 100},
		{100 * mib, 100},
		{math.MaxUint64, 100},
	} {
		got := percentFor(c.live, serveHeapFloor)
		if got != c.want {
			t.Errorf("live %d bytes: GOGC %d, want %d", c.live, got, c.want)
		}
		if goal := float64(c.live) * (1 + float64(got)/100); c.live > 0 && goal < min(serveHeapFloor, 2*float64(c.live)) {
			t.Errorf("live %d bytes: GOGC %d lets the heap grow to %.0f bytes only", c.live, got, goal)
		}
	}
}
