package parallel

import (
	"runtime"
	"sync"
	"testing"
)

func TestRangesCoverEachStepOnceInOrderedParts(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for _, n := range []int{0, 1, minPart - 1, minPart, 3*minPart + 1, 100_003} {
		seen := make([]int, n)
		var mu sync.Mutex
		var spans [][3]int
		Ranges(n, func(part, from, to int) {
			for i := from; i < to; i++ {
				seen[i]++
			}
			mu.Lock()
			spans = append(spans, [3]int{part, from, to})
			mu.Unlock()
		})
		for i, k := range seen {
			if k != 1 {
				t.Fatalf("n=%d: step %d ran %d times", n, i, k)
			}
		}
		want := min(4, n/minPart+1)
		if len(spans) != want {
			t.Fatalf("n=%d: %d parts, want %d", n, len(spans), want)
		}
		for _, s := range spans { // part p holds the p-th range of the steps
			if s[0] < 0 || s[0] >= want || s[1] != n*s[0]/want || s[2] != n*(s[0]+1)/want {
				t.Fatalf("n=%d: part %d ran [%d, %d)", n, s[0], s[1], s[2])
			}
		}
	}
}
