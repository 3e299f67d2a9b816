// Package wal is leasewal's log file: a header, then one checksummed frame per
// record. It knows bytes, frames and locks; what a record means is for the caller.
//
// File layout (text, so that grep and jq work on it while debugging):
//
//	leasewal-wal v3\n          (v1 or v2 in a file that was never compacted)
//	<crc32c, 8 lowercase hex> <record body: one JSON object, no newline>\n
//	...
//
// Each frame's checksum is CRC32C (Castagnoli) of its body, seeded with the
// previous frame's checksum; the first frame is seeded with the CRC32C of the
// version-1 header line, for every version: the versions differ in which
// records they may hold, not in framing, so a file is upgraded in place by
// rewriting the one digit of its header. A spliced, reordered or stale frame
// cannot validate.
//
// One frame may re-seed the chain: a body that begins with
// {"chain_from":"<8 lowercase hex>" is followed by a frame chained from that
// checksum instead of its own. A compaction ends its base with one, naming the
// checksum of the last record the base replaces, so that the records after it
// keep their frames byte for byte (nextSeed).
package wal

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"sync"
	"sync/atomic"

	"github.com/leasewal/leasewal/internal/limits"
)

// Magic is the first word of the header line.
const Magic = "leasewal-wal"

// Version is the newest format version this code reads and writes; it reads
// every version from 1. Version 3 is a compacted WAL: it starts with a base;
// version 4 adds queue rates.
const Version = 4

// BaseVersion is the version of a WAL that starts with a base and holds
// nothing newer.
const BaseVersion = 3

// NewVersion is the version of a new WAL: the newest for a WAL that does not
// start with a base.
const NewVersion = 2

// MaxBodySize bounds one record body (the table's, internal/limits); the
// scanner checks a frame's length against it before trusting anything else
// in the frame.
const MaxBodySize = limits.RecordBody

// crcHexLen is the width of the checksum field that opens every frame.
const crcHexLen = 8

// UpdateCRC32C is crc32.Update with CRC32C's table (the WAL's frames, the
// index's tasks). The standard library's uses the processor's instruction,
// but prepares its tables first, in about 0.13 ms: a twentieth of a
// one-shot command, which checksums a few kilobytes. So a process's first
// softCRCBytes go through eight tables of 256 entries (slicing by 8, as
// the standard library does without the instruction: about 0.5 ns a byte,
// the tables made in microseconds), and the instruction takes over past
// them (a replay, verify), where its preparation is paid back. Both give
// the same sums.
func UpdateCRC32C(crc uint32, p []byte) uint32 {
	if softCRCDone.Load() {
		return crc32.Update(crc, castagnoli(), p)
	}
	if softCRCUsed.Add(int64(len(p))) > softCRCBytes {
		softCRCDone.Store(true) // once: the hand-over
		return crc32.Update(crc, castagnoli(), p)
	}
	return softCRC32C(crc, p)
}

// softCRCBytes is how much a process checksums before it prepares the
// instruction's tables: about what their preparation costs at the soft
// rate (so a process pays at most twice the best of the two).
const softCRCBytes = 256 << 10

// softCRC32C is UpdateCRC32C through the tables, eight bytes at a time.
func softCRC32C(crc uint32, p []byte) uint32 {
	t := softCRCTables()
	crc = ^crc
	for ; len(p) >= 8; p = p[8:] {
		crc ^= uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
		crc = t[0][p[7]] ^ t[1][p[6]] ^ t[2][p[5]] ^ t[3][p[4]] ^
			t[4][crc>>24] ^ t[5][crc>>16&0xff] ^ t[6][crc>>8&0xff] ^ t[7][crc&0xff]
	}
	for _, b := range p {
		crc = t[0][byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

var (
	castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })
	// softCRCTables[0] is the byte-at-a-time table; [k] advances a byte's
	// checksum through k more zero bytes.
	softCRCTables = sync.OnceValue(func() *[8][256]uint32 {
		var t [8][256]uint32
		for i := range t[0] {
			crc := uint32(i)
			for range 8 {
				if crc&1 == 1 {
					crc = crc>>1 ^ crc32.Castagnoli
				} else {
					crc >>= 1
				}
			}
			t[0][i] = crc
		}
		for i := range t[0] {
			crc := t[0][i]
			for k := 1; k < 8; k++ {
				crc = t[0][crc&0xff] ^ crc>>8
				t[k][i] = crc
			}
		}
		return &t
	})
	softCRCUsed atomic.Int64
	softCRCDone atomic.Bool
)

// HeaderLine is the exact first line of a WAL of version v (1 to Version).
func HeaderLine(v int) []byte { return []byte(fmt.Sprintf("%s v%d\n", Magic, v)) }

// headerLen is the length of every header line.
const headerLen = len(Magic + " v1\n")

// headerSeed seeds the checksum chain, tying the first frame to the header:
// the CRC32C of the version-1 header line, whatever the file's version
// (TestHeaderSeed computes it).
const headerSeed uint32 = 0xb22db522

// HeaderSeed is the checksum chain's seed: the first frame continues from it.
func HeaderSeed() uint32 { return headerSeed }

// reseedPrefix opens the body of a frame that re-seeds the chain.
const reseedPrefix = `{"chain_from":"`

// nextSeed is the seed of the frame after one with body and checksum sum.
func nextSeed(sum uint32, body []byte) uint32 {
	rest, ok := bytes.CutPrefix(body, []byte(reseedPrefix))
	if !ok || len(rest) < crcHexLen+1 || rest[crcHexLen] != '"' {
		return sum
	}
	if seed, ok := parseHex8(rest[:crcHexLen]); ok {
		return seed
	}
	return sum
}

// chain returns the checksum of body continuing from prev.
func chain(prev uint32, body []byte) uint32 {
	return UpdateCRC32C(prev, body)
}

// EncodeFrame returns the full frame for body, continuing the chain from prev,
// and the frame's own checksum (the seed of the next frame).
func EncodeFrame(prev uint32, body []byte) ([]byte, uint32, error) {
	return AppendFrame(make([]byte, 0, crcHexLen+1+len(body)+1), prev, body)
}

// AppendFrame is EncodeFrame appending the frame to dst.
func AppendFrame(dst []byte, prev uint32, body []byte) ([]byte, uint32, error) {
	if len(body) == 0 {
		return dst, 0, fmt.Errorf("empty record body")
	}
	if len(body) > MaxBodySize {
		return dst, 0, fmt.Errorf("record body of %d bytes exceeds the limit of %d bytes", len(body), MaxBodySize)
	}
	if bytes.IndexByte(body, '\n') >= 0 {
		return dst, 0, fmt.Errorf("record body contains a newline")
	}
	sum := chain(prev, body)
	var be [4]byte
	binary.BigEndian.PutUint32(be[:], sum)
	dst = append(hex.AppendEncode(dst, be[:]), ' ') // %08x, without fmt's cost a frame
	dst = append(dst, body...)
	dst = append(dst, '\n')
	return dst, sum, nil
}

// parseHex8 decodes exactly eight lowercase hex digits.
func parseHex8(b []byte) (uint32, bool) {
	if len(b) != crcHexLen {
		return 0, false
	}
	var v uint32
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uint32(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uint32(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}

// looksLikeFrame reports whether line has the shape of a frame (checksum field,
// space, a JSON object). Garbage a crash leaves behind (zeros, a stale block, the
// back half of a split record) almost never has it; a real record always does,
// even one whose line end an editor turned into CRLF.
func looksLikeFrame(line []byte) bool {
	line = bytes.TrimSuffix(line, []byte("\r"))
	if len(line) < crcHexLen+3 || line[crcHexLen] != ' ' || line[crcHexLen+1] != '{' || line[len(line)-1] != '}' {
		return false
	}
	_, ok := parseHex8(line[:crcHexLen])
	return ok
}

// FrameSize is the length of body's frame in a WAL.
func FrameSize(body []byte) int64 { return int64(crcHexLen + 1 + len(body) + 1) }
