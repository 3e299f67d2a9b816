package wal

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"
)

// TestCRC32CIsTheStandardOne: the table a process's first bytes go through
// gives the standard library's CRC32C for any seed and input, and a chain
// of sums that crosses over to the processor's instruction is the same
// chain.
func TestCRC32CIsTheStandardOne(t *testing.T) {
	std := crc32.MakeTable(crc32.Castagnoli)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		p := make([]byte, rng.IntN(600))
		for i := range p {
			p[i] = byte(rng.Uint32())
		}
		seed := rng.Uint32()
		if got, want := softCRC32C(seed, p), crc32.Update(seed, std, p); got != want {
			t.Fatalf("%d bytes from %08x: %08x, want %08x", len(p), seed, got, want)
		}
	}
	softCRCUsed.Store(0) // as a new process (no test of this package runs in parallel)
	softCRCDone.Store(false)
	got, want := HeaderSeed(), HeaderSeed()
	for i := 0; !softCRCDone.Load() || i < 10; i++ {
		if i > 10_000 {
			t.Fatal("never crossed over to the instruction")
		}
		body := []byte(`{"seq":1,"at":1767225600000,"type":"TaskCreated","task_id":"T1","payload":"x"}`)
		body[7] = byte('0' + i%10)
		got, want = chain(got, body), crc32.Update(want, std, body)
		if got != want {
			t.Fatalf("frame %d: %08x, want %08x", i, got, want)
		}
	}
}
