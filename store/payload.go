package store

import (
	"cmp"
	"encoding/base64"
	"fmt"
	"io"
	"os"

	"leasewal/state"
	"leasewal/wal"
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
		var text string
		var bad error
		err := wal.ReadBodies(p.file, ref.Frame, func(body []byte) bool {
			r, err := state.DecodeRecord(body)
			switch {
			case err != nil:
				bad = err
			case r.Type != state.TaskCreated:
				bad = fmt.Errorf("a %s record, not what holds the payload", r.Type)
			default:
				text = r.Payload
			}
			return false
		})
		return text, cmp.Or(err, bad)
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
	d := decodedPart{frame: frame}
	var bad error
	err := wal.ReadBodies(p.file, frame, func(body []byte) bool {
		r, err := state.DecodeRecord(body)
		switch {
		case err != nil:
			bad = err
		case r.Type != state.BasePart:
			bad = fmt.Errorf("the base ends before the payload does: a %s record, not a part", r.Type)
		default:
			d.data, bad = base64.StdEncoding.DecodeString(r.Data)
			d.next = frame + wal.FrameSize(body)
		}
		return false
	})
	if err = cmp.Or(err, bad); err == nil && d.data == nil {
		err = fmt.Errorf("the base ends before the payload does")
	}
	if err != nil {
		return d, err
	}
	p.parts[p.older], p.older = d, 1-p.older
	return d, nil
}
