package store

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"io"
	"os"

	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// payloadFile reads back the payloads a state read from the WAL (or a
// segment) at path holds as where they are there, when no open log of that
// file is at hand (a replay's hooks, verify --history's segments). It keeps
// the file open until closed.
type payloadFile struct {
	path   string
	f      *os.File
	source *payloadSource
}

func (p *payloadFile) read(ref *state.PayloadRef) (string, error) {
	if p.f == nil {
		f, err := os.Open(p.path)
		if err != nil {
			return "", fmt.Errorf("reading a payload back: %w", err)
		}
		p.f, p.source = f, newPayloadSource(f, p.path)
	}
	return p.source.read(ref)
}

func (p *payloadFile) close() {
	if p.f != nil {
		p.f.Close()
		p.f, p.source = nil, nil
	}
}

// payloadSource reads from one WAL (or segment) file the payloads a state
// holds as where they are there (state.PayloadRef): a TaskCreated's payload
// from its frame, a base's task's from the data of its parts. What it reads
// is checked against the reference's length and SHA-256, so a file replaced
// under it gives an error, never another payload.
//
// It keeps the last base parts it decoded: a base's tasks are read in the
// order it holds them (a listing, the next base), so the payloads read one
// after the other mostly lie in the same part, which would otherwise be read
// and decoded (up to 256 KiB) again for each one.
type payloadSource struct {
	file  io.ReaderAt
	name  string
	parts [2]decodedPart // the last two decoded, the older one replaced first
	older int
}

// decodedPart is a BasePart's data, the frame it is in and the next one's.
type decodedPart struct {
	frame, next int64
	data        []byte
}

func newPayloadSource(file io.ReaderAt, name string) *payloadSource {
	return &payloadSource{file: file, name: name}
}

func (p *payloadSource) read(ref *state.PayloadRef) (string, error) {
	text, err := p.text(ref)
	if err == nil {
		err = ref.Check(text)
	}
	if err != nil {
		return "", fmt.Errorf("reading the payload at offset %d of %s back: %w", ref.Frame, p.name, err)
	}
	return text, nil
}

func (p *payloadSource) text(ref *state.PayloadRef) (string, error) {
	if ref.Skip < 0 {
		r, _, err := p.recordAt(ref.Frame, state.TaskCreated)
		return r.Payload, err
	}
	// The parts' data from the first one's start, sliced.
	var text []byte
	end := ref.Skip + int64(ref.Size)
	for frame := ref.Frame; int64(len(text)) < end; {
		part, err := p.part(frame)
		if err != nil {
			return "", err
		}
		if len(text) == 0 && end <= int64(len(part.data)) {
			return string(part.data[ref.Skip:end]), nil // within one part: no copy of it
		}
		text, frame = append(text, part.data...), part.next
	}
	return string(text[ref.Skip:end]), nil
}

// part is the BasePart whose frame starts at frame, decoded.
func (p *payloadSource) part(frame int64) (decodedPart, error) {
	for _, d := range p.parts {
		if d.data != nil && d.frame == frame {
			return d, nil
		}
	}
	r, next, err := p.recordAt(frame, state.BasePart)
	d := decodedPart{frame: frame, next: next}
	if err == nil {
		d.data, err = base64.StdEncoding.DecodeString(r.Data)
	}
	if err != nil {
		return d, err
	}
	p.parts[p.older], p.older = d, 1-p.older
	return d, nil
}

// recordAt is the record whose frame starts at frame, which must be of type
// want, and where the frame after it starts.
func (p *payloadSource) recordAt(frame int64, want state.RecordType) (r state.Record, next int64, err error) {
	found, bad := false, error(nil)
	err = wal.ReadBodies(p.file, frame, func(body []byte) bool {
		r, bad = state.DecodeRecord(body)
		found, next = true, frame+wal.FrameSize(body)
		return false
	})
	switch {
	case err != nil || bad != nil:
		return r, 0, cmp.Or(err, bad)
	case !found:
		return r, 0, fmt.Errorf("the file ends before the payload does")
	case r.Type != want:
		return r, 0, fmt.Errorf("a %s record, not the %s that holds the payload", r.Type, want)
	}
	return r, next, nil
}
