package state

// A filter tells, from memory, that an archive holds no entry of a key
// hash: a Bloom filter of about ten bits a key (about 1% false positives).
// A replay from the WAL's start looks up every new task's request id in
// every run of its archive and cold set (Spill); without a filter each
// lookup reads a page of each run's index, and those pages stay with the
// process, so that what it holds grows with the backlog at 32 bytes a
// task. The filter costs a tenth of that, and a lookup of a key no run
// holds reads nothing.
//
// It is blocked: a key's bits all fall in one block of 512 bits (a cache
// line), so that a lookup costs one read of memory, not one per bit, at a
// false-positive rate a little above an unblocked filter's.
type filter struct {
	bits []uint64 // blocks of filterBlockWords
}

const (
	filterBitsPerKey = 10
	filterProbes     = 7 // about ln 2 times the bits a key; 7 positions of 9 bits fit in a mixed hash
	filterBlockWords = 8
)

func newFilter(keys int) *filter {
	blocks := max(1, (keys*filterBitsPerKey+filterBlockWords*64-1)/(filterBlockWords*64))
	return &filter{bits: make([]uint64, blocks*filterBlockWords)}
}

// mix spreads a key hash's bits (the MurmurHash3 finalizer): FNV-1a's low
// bits alone are poor.
func mix(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	return h ^ h>>33
}

// locate is where h's block starts in bits, and its positions in the block,
// 9 bits each.
func (f *filter) locate(h uint64) (block int, positions uint64) {
	h = mix(h)
	blocks := uint64(len(f.bits) / filterBlockWords)
	return int((h&0xffffffff)*blocks>>32) * filterBlockWords, mix(h ^ 0x9e3779b97f4a7c15)
}

func (f *filter) add(h uint64) {
	block, positions := f.locate(h)
	for range filterProbes {
		f.bits[block+int(positions&511)/64] |= 1 << (positions & 63)
		positions >>= 9
	}
}

// mayHold is false when no key of hash h was added (nil holds them all).
func (f *filter) mayHold(h uint64) bool {
	if f == nil {
		return true
	}
	block, positions := f.locate(h)
	for range filterProbes {
		if f.bits[block+int(positions&511)/64]&(1<<(positions&63)) == 0 {
			return false
		}
		positions >>= 9
	}
	return true
}
