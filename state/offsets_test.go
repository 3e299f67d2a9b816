package state

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOffsetsAgainstAMap adds random offsets, dense and sparse, and checks
// the runs against a plain set after every Add.
func TestOffsetsAgainstAMap(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		var set Offsets
		want := map[int64]bool{}
		span := int64(1 + rng.IntN(64))
		for range 150 {
			x := rng.Int64N(span)
			set.Add(x)
			want[x] = true
			if !sameSet(&set, want) {
				t.Fatalf("seed %d after adding %d: runs %v, want %v", seed, x, set.runs, want)
			}
			for i := 1; i < len(set.runs); i++ {
				if set.runs[i].lo <= set.runs[i-1].hi+1 {
					t.Fatalf("seed %d: runs %v touch or overlap", seed, set.runs)
				}
			}
			if probe := rng.Int64N(span + 2); set.Has(probe) != want[probe] {
				t.Fatalf("seed %d: Has(%d) = %v", seed, probe, set.Has(probe))
			}
		}
	}
}

func TestOffsetsAtTheEdges(t *testing.T) {
	var set Offsets
	for _, x := range []int64{math.MaxInt64, 0, math.MaxInt64 - 1, 1} {
		set.Add(x)
	}
	if got := set.Sorted(); !slices.Equal(got, []int64{0, 1, math.MaxInt64 - 1, math.MaxInt64}) || len(set.runs) != 2 {
		t.Fatalf("edges: %v as runs %v", got, set.runs)
	}
}
