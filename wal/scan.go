package wal

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Frame is one valid record frame.
type Frame struct {
	Index   int      // 1-based position in the file
	Offset  int64    // byte offset of the frame's first byte
	Body    []byte   // the record body; valid only until the next frame is read
	Version int      // the format version of the file's header
	After   Position // where the valid prefix ends with this frame
}

// Position is where a valid prefix of frames ends: how many frames it holds,
// its length in bytes, the seed of the next frame (the checksum of the last
// one, unless that one re-seeds the chain: see nextSeed), where that last frame
// starts, and the file's generation: the checksum of its first frame, which a
// compaction changes (its base's first frame is new), so that a position taken
// on one generation is never trusted on another.
type Position struct {
	Count      int
	End        int64
	LastSum    uint32
	LastOffset int64
	Generation uint32
}

// advance is the position after a valid frame of n bytes (its newline
// included) whose body is body and whose checksum is sum.
func (p Position) advance(n int, body []byte, sum uint32) Position {
	next := Position{Count: p.Count + 1, End: p.End + int64(n), LastSum: nextSeed(sum, body), LastOffset: p.End, Generation: p.Generation}
	if p.Count == 0 {
		next.Generation = sum
	}
	return next
}

// start is the position of a WAL holding only its header.
var start = Position{End: int64(headerLen), LastSum: headerSeed}

// TornTail is an unacknowledged remnant after the last valid frame: what a crash
// in the middle of an append leaves. It is never part of the history.
type TornTail struct {
	Offset int64 // where the remnant starts (the end of the valid prefix)
	Length int64
}

// Scanned is a WAL read into memory: its version, valid frames and any torn tail.
type Scanned struct {
	Position
	Version int
	Frames  []Frame
	Torn    *TornTail
}

// FormatError means the file is not a leasewal WAL this version can read.
type FormatError struct{ Reason string }

func (e *FormatError) Error() string { return e.Reason }

// DamageError means the file is damaged before its last record: acknowledged
// records are at stake, so nothing is dropped or repaired automatically.
type DamageError struct {
	Index   int   // 1-based position of the first bad frame
	Offset  int64 // its byte offset
	Reason  string
	Follows bool // records follow it (else it is itself what a writer never writes)
}

func (e *DamageError) Error() string {
	if e.Follows {
		return fmt.Sprintf("record %d at byte offset %d is damaged (%s) and valid records follow it", e.Index, e.Offset, e.Reason)
	}
	return fmt.Sprintf("record %d at byte offset %d is damaged: %s", e.Index, e.Offset, e.Reason)
}

// ErrEmptyFile is reported for a zero-length file. leasewal never leaves one
// behind (creation is atomic); a person makes one (mktemp) to name a new
// WAL, which the store reads as a WAL with no record yet, and the first
// write replaces (CreateBatch).
var ErrEmptyFile = errors.New("the file is empty: no record was ever written to it")

// Scan validates data as a whole WAL and returns its frames. It never panics
// on any input.
func Scan(data []byte) (*Scanned, error) {
	out := &Scanned{}
	r := bytes.NewReader(data)
	version, err := readHeader(r)
	if err != nil {
		return nil, err
	}
	out.Version = version
	pos, torn, err := scanFrames(r, int64(len(data)), start, func(f Frame) error {
		f.Body = bytes.Clone(f.Body)
		out.Frames = append(out.Frames, f)
		return nil
	})
	out.Position, out.Torn = pos, torn
	return out, err
}

// readHeader checks the header line at the start of r and returns the version.
// ReadVersion reads a WAL's header from r: its format version.
func ReadVersion(r io.Reader) (int, error) { return readHeader(r) }

func readHeader(r io.Reader) (int, error) {
	head := make([]byte, headerLen)
	n, err := io.ReadFull(r, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, err
	}
	return checkHeader(head[:n])
}

func checkHeader(data []byte) (int, error) {
	if len(data) == 0 {
		return 0, ErrEmptyFile
	}
	for v := 1; v <= Version; v++ {
		if bytes.HasPrefix(data, HeaderLine(v)) {
			return v, nil
		}
	}
	firstLine := data
	if nl := bytes.IndexByte(data, '\n'); nl >= 0 {
		firstLine = data[:nl]
	}
	if v, ok := bytes.CutPrefix(firstLine, []byte(Magic+" v")); ok {
		if n, err := strconv.Atoi(string(v)); err == nil && (n < 1 || n > Version) {
			return 0, &FormatError{Reason: fmt.Sprintf("WAL format version %d is not supported (this leasewal reads versions 1 to %d); use a matching leasewal release", n, Version)}
		}
	}
	return 0, &FormatError{Reason: fmt.Sprintf("not a leasewal WAL: the first line must be %q", bytes.TrimSuffix(HeaderLine(Version), []byte("\n")))}
}

// ErrStopAfter, returned by a read's each, ends the read after that frame:
// the log opened stands there, whatever follows it in the file.
var ErrStopAfter = errors.New("the read stops after this frame")

// maxLine is the longest line a valid frame can have, newline included.
const maxLine = crcHexLen + 1 + MaxBodySize + 1

// scanFrames reads frames from r, which is positioned at from.End, handing
// each valid one to each. It stops at the end of the file, at an error from
// each, or at a bad frame: a torn tail if nothing acknowledged follows it,
// else a DamageError. size is the file's size, to size the read buffer. It
// never panics on any input.
func scanFrames(r io.Reader, size int64, from Position, each func(Frame) error) (Position, *TornTail, error) {
	pos := from
	br := bufio.NewReaderSize(r, int(min(max(size, 16), 1<<20)))
	for {
		line, err := br.ReadSlice('\n')
		if len(line) == 0 && errors.Is(err, io.EOF) {
			return pos, nil, nil
		}
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
			return pos, nil, err
		}
		complete := err == nil
		var reason string
		var body []byte
		var sum uint32
		if complete {
			body, sum, reason = checkFrame(pos.LastSum, line[:len(line)-1])
		} else if errors.Is(err, bufio.ErrBufferFull) {
			reason = fmt.Sprintf("frame longer than the limit of %d bytes", maxLine)
		} else {
			reason = "incomplete frame"
		}
		if reason != "" {
			torn, err := classifyBad(pos, bytes.Clone(line), complete, br, reason)
			return pos, torn, err
		}
		after := pos.advance(len(line), body, sum)
		err = each(Frame{Index: pos.Count + 1, Offset: pos.End, Body: body, After: after})
		if errors.Is(err, ErrStopAfter) {
			return after, nil, nil
		}
		if err != nil {
			return pos, nil, err
		}
		pos = after
	}
}

// checkFrame validates one line (without its newline) against the chain.
func checkFrame(prev uint32, line []byte) (body []byte, sum uint32, reason string) {
	if len(line) > maxLine-1 {
		return nil, 0, fmt.Sprintf("frame of %d bytes exceeds the limit of %d bytes", len(line), maxLine-1)
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

// classifyBad decides whether the bytes from a bad frame at pos to the end of
// the file are a torn tail (nothing acknowledged follows the bad frame) or
// damage to acknowledged records. first is the bad frame's line as read
// (whole when complete, else the first buffer of it); rest reads the bytes
// after it. The rest is streamed, never held: a tail of any length costs a
// bounded amount of memory.
//
// A tail of any length with nothing shaped like a record in it is torn: a
// crash can leave zeros or garbage past the end of an append, and since
// nothing in it was ever acknowledged, cutting it loses nothing.
func classifyBad(pos Position, first []byte, complete bool, rest *bufio.Reader, reason string) (*TornTail, error) {
	damage := &DamageError{Index: pos.Count + 1, Offset: pos.End, Reason: reason}
	line := bytes.TrimSuffix(first, []byte("\n"))
	length := int64(len(first))
	if !complete {
		// The line did not fit the buffer: skip to its end, keeping its last
		// byte (an oversized frame ends with '}' like any record).
		n, last, err := skipLine(rest)
		if err != nil {
			return nil, err
		}
		length += n
		if len(line) > crcHexLen+2 && line[crcHexLen] == ' ' && line[crcHexLen+1] == '{' && isHex8(line[:crcHexLen]) && last == '}' {
			damage.Reason = fmt.Sprintf("a record of more than %d bytes, which leasewal never writes", maxLine-1)
			return nil, damage // a frame no writer produces, whole: not a torn append
		}
	} else if len(line) > maxLine-1 && looksLikeFrame(line) {
		damage.Reason = fmt.Sprintf("a record of %d bytes, over the limit of %d, which leasewal never writes", len(line), maxLine-1)
		return nil, damage // a frame no writer produces, whole: not a torn append
	} else if hasValidFramePrefix(pos.LastSum, line) {
		damage.Reason = "a valid record runs into the next one: its line end is damaged"
		damage.Follows = true
		return nil, damage
	}
	n, follows, err := scanForFrames(rest)
	if err != nil {
		return nil, err
	}
	if follows {
		damage.Follows = true
		return nil, damage
	}
	return &TornTail{Offset: pos.End, Length: length + n}, nil
}

// skipLine reads through the next newline (or the end), returning how many
// bytes it read and the last byte before the newline.
func skipLine(r *bufio.Reader) (int64, byte, error) {
	var n int64
	var last byte
	for {
		chunk, err := r.ReadSlice('\n')
		n += int64(len(chunk))
		if body := bytes.TrimSuffix(chunk, []byte("\n")); len(body) > 0 {
			last = body[len(body)-1]
		}
		switch {
		case err == nil, errors.Is(err, io.EOF):
			return n, last, nil
		case !errors.Is(err, bufio.ErrBufferFull):
			return n, last, err
		}
	}
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

// scanForFrames reads r to its end and reports whether it holds anything
// shaped like a record: a complete frame-shaped line, or a final fragment
// (or an over-long line) that starts like one. It returns how many bytes it read.
func scanForFrames(r *bufio.Reader) (int64, bool, error) {
	var n int64
	for {
		line, err := r.ReadSlice('\n')
		n += int64(len(line))
		switch {
		case err == nil:
			if looksLikeFrame(line[:len(line)-1]) {
				return n, true, nil
			}
		case errors.Is(err, io.EOF), errors.Is(err, bufio.ErrBufferFull):
			if len(line) > crcHexLen+1 && line[crcHexLen] == ' ' && line[crcHexLen+1] == '{' && isHex8(line[:crcHexLen]) {
				return n, true, nil
			}
			if errors.Is(err, io.EOF) {
				return n, false, nil
			}
			skipped, _, err := skipLine(r)
			if err != nil {
				return n, false, err
			}
			n += skipped
		default:
			return n, false, err
		}
	}
}

func isHex8(b []byte) bool {
	_, ok := parseHex8(b)
	return ok
}
