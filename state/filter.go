package state

// A filter tells, from memory, that an archive holds no entry of a key
// hash: a Bloom filter of about ten bits a key (under 1% false positives).
// A replay from the WAL's start looks up every new task's request id in
// every run of its archive and cold set (Spill); without a filter each
// lookup reads a page of each run's index, and those pages stay with the
// process, so that what it holds grows with the backlog at 32 bytes a
// task. The filter costs a tenth of that, and a lookup of a key no run
// holds reads nothing.
type filter struct {
	bits []uint64
}

const filterBitsPerKey = 10

// filterProbes is how many bits a key sets: about ln 2 times the bits a key.
const filterProbes = 7

func newFilter(keys int) *filter {
	return &filter{bits: make([]uint64, max(1, (keys*filterBitsPerKey+63)/64))}
}

// probes hands fn the bits of h, by double hashing two halves of h mixed.
func (f *filter) probes(h uint64, fn func(bit uint64) bool) bool {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	n := uint64(len(f.bits)) * 64
	a, b := h&0xffffffff, h>>32|1
	for i := range uint64(filterProbes) {
		if !fn((a + i*b) % n) {
			return false
		}
	}
	return true
}

func (f *filter) add(h uint64) {
	f.probes(h, func(bit uint64) bool { f.bits[bit/64] |= 1 << (bit % 64); return true })
}

// mayHold is false when no key of hash h was added (nil holds them all).
func (f *filter) mayHold(h uint64) bool {
	return f == nil || f.probes(h, func(bit uint64) bool { return f.bits[bit/64]&(1<<(bit%64)) != 0 })
}
