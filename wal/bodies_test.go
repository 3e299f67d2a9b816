package wal

import (
	"bytes"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
)

// TestReadBodies: from where a frame starts, the bodies of it and of the
// frames after it, as written, until the reader says stop or the file ends;
// anywhere else, an error, never a body.
func TestReadBodies(t *testing.T) {
	bodies := [][]byte{[]byte(`{"seq":1}`), []byte(`{"seq":2,"payload":"` + strings.Repeat("p", 100_000) + `"}`), []byte(`{"seq":3}`)}
	file := HeaderLine(2)
	starts := []int64{}
	sum := HeaderSeed()
	for _, b := range bodies {
		starts = append(starts, int64(len(file)))
		var err error
		if file, sum, err = AppendFrame(file, sum, b); err != nil {
			t.Fatal(err)
		}
	}
	for i, start := range starts {
		var got [][]byte
		if err := ReadBodies(bytes.NewReader(file), start, func(b []byte) bool { got = append(got, slices.Clone(b)); return true }); err != nil {
			t.Fatalf("from frame %d: %v", i+1, err)
		}
		if !slices.EqualFunc(got, bodies[i:], bytes.Equal) {
			t.Fatalf("from frame %d: %d bodies, not the %d written", i+1, len(got), len(bodies)-i)
		}
		var first int
		if err := ReadBodies(bytes.NewReader(file), start, func([]byte) bool { first++; return false }); err != nil || first != 1 {
			t.Fatalf("from frame %d, stopping at once: %d bodies read, %v", i+1, first, err)
		}
	}
	for _, at := range []int64{starts[1] + 3, 2, starts[2] - 1} {
		err := ReadBodies(bytes.NewReader(file), at, func([]byte) bool { t.Fatalf("a body read from offset %d, where no frame starts", at); return false })
		if err == nil {
			t.Fatalf("offset %d, where no frame starts: no error", at)
		}
	}
	cut := file[:len(file)-4]
	if err := ReadBodies(bytes.NewReader(cut), starts[2], func([]byte) bool { return true }); err == nil {
		t.Fatal("a frame cut short read without an error")
	}
}

// TestHeaderSeed: the chain's seed and the header's length, constants, are
// the CRC32C and the length of the version-1 header line.
func TestHeaderSeed(t *testing.T) {
	line := HeaderLine(1)
	if sum := crc32.Checksum(line, crc32.MakeTable(crc32.Castagnoli)); HeaderSeed() != sum {
		t.Errorf("the seed is %#08x; the CRC32C of %q is %#08x", HeaderSeed(), line, sum)
	}
	if headerLen != len(line) {
		t.Errorf("headerLen is %d; %q is %d bytes", headerLen, line, len(line))
	}
}
