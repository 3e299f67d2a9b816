package state

import "slices"

// Offsets is a set of work offsets, kept as sorted, disjoint, non-touching
// runs [lo, hi]. A domain's finished offsets are mostly consecutive, so a
// domain that has processed a million offsets costs a few runs, in memory and
// in the index and in a base, not a million entries.
type Offsets struct {
	runs []offsetRun
	n    int
}

type offsetRun struct{ lo, hi int64 }

// find returns the index of the first run that ends at or after x.
func (o *Offsets) find(x int64) int {
	i, _ := slices.BinarySearchFunc(o.runs, x, func(r offsetRun, x int64) int {
		if r.hi < x {
			return -1
		}
		return 1
	})
	return i
}

// Has reports whether x is in the set.
func (o *Offsets) Has(x int64) bool {
	i := o.find(x)
	return i < len(o.runs) && o.runs[i].lo <= x
}

// Add puts x in the set.
func (o *Offsets) Add(x int64) {
	i := o.find(x)
	if i < len(o.runs) && o.runs[i].lo <= x {
		return
	}
	o.n++
	joinsPrev := i > 0 && o.runs[i-1].hi == x-1
	joinsNext := i < len(o.runs) && o.runs[i].lo == x+1
	switch {
	case joinsPrev && joinsNext:
		o.runs[i-1].hi = o.runs[i].hi
		o.runs = slices.Delete(o.runs, i, i+1)
	case joinsPrev:
		o.runs[i-1].hi = x
	case joinsNext:
		o.runs[i].lo = x
	default:
		o.runs = slices.Insert(o.runs, i, offsetRun{x, x})
	}
}

// Len is the number of offsets in the set.
func (o *Offsets) Len() int { return o.n }

// Sorted returns every offset in the set, in increasing order.
func (o *Offsets) Sorted() []int64 {
	out := make([]int64, 0, o.n)
	for _, r := range o.runs {
		for x := r.lo; ; x++ { // stops at hi without overflowing when hi is MaxInt64
			out = append(out, x)
			if x == r.hi {
				break
			}
		}
	}
	return out
}
