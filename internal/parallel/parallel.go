// Package parallel cuts a run of independent steps (a batch's lines to
// decode, its records to check) between the processors.
package parallel

import (
	"runtime"
	"sync"
)

// minPart is the fewest steps worth a goroutine of their own: a request's
// few run where they are.
const minPart = 256

// Ranges calls do over [0, n) in contiguous parts, one a processor when n
// is enough to pay for the goroutines, and returns once every part is done.
// part numbers the parts in order, from 0, below runtime.GOMAXPROCS(0).
func Ranges(n int, do func(part, from, to int)) {
	parts := min(runtime.GOMAXPROCS(0), n/minPart+1)
	if parts <= 1 {
		do(0, 0, n)
		return
	}
	var wg sync.WaitGroup
	for p := 1; p < parts; p++ {
		wg.Go(func() { do(p, n*p/parts, n*(p+1)/parts) })
	}
	do(0, 0, n/parts)
	wg.Wait()
}
