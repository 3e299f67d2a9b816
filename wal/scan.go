package wal

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// Frame is one valid record frame.
type Frame struct {
	Index  int    // 1-based position in the file
	Offset int64  // byte offset of the frame's first byte
	Body   []byte // the record body, aliasing the scanned buffer
}

// TornTail is an unacknowledged remnant after the last valid frame: what a crash
// in the middle of an append leaves. It is never part of the history.
type TornTail struct {
	Offset int64 // where the remnant starts (the end of the valid prefix)
	Length int64
}

// Scanned is a WAL read into memory: its valid frames and any torn tail.
type Scanned struct {
	Frames  []Frame
	End     int64  // end of the last valid frame
	LastSum uint32 // checksum of the last valid frame: the seed of the next
	Torn    *TornTail
}

// FormatError means the file is not a leasewal WAL this version can read.
type FormatError struct{ Reason string }

func (e *FormatError) Error() string { return e.Reason }

// DamageError means the file is damaged before its last record: acknowledged
// records are at stake, so nothing is dropped or repaired automatically.
type DamageError struct {
	Index  int   // 1-based position of the first bad frame
	Offset int64 // its byte offset
	Reason string
}

func (e *DamageError) Error() string {
	return fmt.Sprintf("record %d at byte offset %d is damaged (%s) and valid records follow it", e.Index, e.Offset, e.Reason)
}

// ErrEmptyFile is reported for a zero-length file: leasewal never leaves one
// behind (creation is atomic), so it is not a WAL.
var ErrEmptyFile = errors.New("the file is empty, so it is not a leasewal WAL (leasewal creates its WAL atomically, header first)")

// Scan validates data as a whole WAL. It never panics on any input.
func Scan(data []byte) (*Scanned, error) {
	if err := checkHeader(data); err != nil {
		return nil, err
	}
	out := &Scanned{End: int64(len(HeaderLine)), LastSum: headerSeed}
	pos := len(HeaderLine)
	for pos < len(data) {
		nl := bytes.IndexByte(data[pos:], '\n')
		if nl < 0 {
			return out, classifyBad(out, data, pos, len(data), "incomplete frame")
		}
		line := data[pos : pos+nl]
		body, sum, reason := checkFrame(out.LastSum, line)
		if reason != "" {
			return out, classifyBad(out, data, pos, pos+nl+1, reason)
		}
		out.Frames = append(out.Frames, Frame{Index: len(out.Frames) + 1, Offset: int64(pos), Body: body})
		out.LastSum = sum
		pos += nl + 1
		out.End = int64(pos)
	}
	return out, nil
}

func checkHeader(data []byte) error {
	if len(data) == 0 {
		return ErrEmptyFile
	}
	if bytes.HasPrefix(data, HeaderLine) {
		return nil
	}
	firstLine := data
	if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
		firstLine = data[:nl]
	}
	if v, ok := bytes.CutPrefix(firstLine, []byte(Magic+" v")); ok {
		if n, err := strconv.Atoi(string(v)); err == nil && n != Version {
			return &FormatError{Reason: fmt.Sprintf("WAL format version %d is not supported (this leasewal reads version %d); use a matching leasewal release", n, Version)}
		}
	}
	return &FormatError{Reason: fmt.Sprintf("not a leasewal WAL: the first line must be %q", bytes.TrimSuffix(HeaderLine, []byte("\n")))}
}

// checkFrame validates one line (without its newline) against the chain.
func checkFrame(prev uint32, line []byte) (body []byte, sum uint32, reason string) {
	if len(line) > crcHexLen+1+MaxBodySize {
		return nil, 0, fmt.Sprintf("frame of %d bytes exceeds the limit of %d bytes", len(line), crcHexLen+1+MaxBodySize)
	}
	if len(line) < crcHexLen+2 || line[crcHexLen] != ' ' {
		return nil, 0, "malformed frame"
	}
	stated, ok := parseHex8(line[:crcHexLen])
	if !ok {
		return nil, 0, "malformed checksum field"
	}
	body = line[crcHexLen+1:]
	if chain(prev, body) != stated {
		return nil, 0, "checksum mismatch"
	}
	return body, stated, ""
}

// classifyBad decides whether the bad bytes starting at pos are a torn tail
// (nothing acknowledged follows them) or damage to acknowledged records.
// lineEnd is the end of the bad line, newline included.
func classifyBad(out *Scanned, data []byte, pos, lineEnd int, reason string) error {
	damage := &DamageError{Index: len(out.Frames) + 1, Offset: int64(pos), Reason: reason}
	line := bytes.TrimSuffix(data[pos:lineEnd], []byte("\n"))
	if len(line) > crcHexLen+1+MaxBodySize && looksLikeFrame(line) {
		return damage // a writer never produces such a frame, so this is not a torn append
	}
	if hasValidFramePrefix(out.LastSum, line) {
		damage.Reason = "a valid record runs into the next one: its line end is damaged"
		return damage
	}
	if followedByFrames(data[lineEnd:]) {
		return damage
	}
	out.Torn = &TornTail{Offset: int64(pos), Length: int64(len(data) - pos)}
	return nil
}

// hasValidFramePrefix reports whether line begins with a complete valid frame
// followed by more bytes, as when a record's newline itself was damaged.
func hasValidFramePrefix(prev uint32, line []byte) bool {
	if len(line) < crcHexLen+2 || line[crcHexLen] != ' ' {
		return false
	}
	stated, ok := parseHex8(line[:crcHexLen])
	if !ok {
		return false
	}
	body := line[crcHexLen+1:]
	sum := prev
	for i := 0; i < len(body)-1; i++ {
		sum = chain(sum, body[i:i+1])
		if body[i] == '}' && sum == stated {
			return true
		}
	}
	return false
}

// followedByFrames reports whether rest holds anything shaped like a record:
// a complete frame-shaped line, or a final fragment that starts like one.
func followedByFrames(rest []byte) bool {
	for len(rest) > 0 {
		nl := bytes.IndexByte(rest, '\n')
		if nl < 0 {
			return len(rest) > crcHexLen+1 && rest[crcHexLen] == ' ' && rest[crcHexLen+1] == '{' && isHex8(rest[:crcHexLen])
		}
		if looksLikeFrame(rest[:nl]) {
			return true
		}
		rest = rest[nl+1:]
	}
	return false
}

func isHex8(b []byte) bool {
	_, ok := parseHex8(b)
	return ok
}
