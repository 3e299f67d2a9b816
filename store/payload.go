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
	path string
	f    *os.File
}

func (p *payloadFile) read(ref *state.PayloadRef) (string, error) {
	if p.f == nil {
		f, err := os.Open(p.path)
		if err != nil {
			return "", fmt.Errorf("reading a payload back: %w", err)
		}
		p.f = f
	}
	return readPayload(p.f, p.path, ref)
}

// readPayload reads from the WAL (or segment) file the payload a state
// holds as where it is there (state.PayloadRef): a TaskCreated's payload
// from its frame, a base's task's from the data of its parts. What it reads
// is checked against the reference's length and SHA-256, so a file replaced
// under it gives an error, never another payload.
func readPayload(file io.ReaderAt, name string, ref *state.PayloadRef) (string, error) {
	var text []byte
	var bad error
	err := wal.ReadBodies(file, ref.Frame, func(body []byte) bool {
		r, err := state.DecodeRecord(body)
		switch {
		case err != nil:
			bad = err
		case ref.Skip < 0 && r.Type == state.TaskCreated:
			text = []byte(r.Payload)
		case ref.Skip >= 0 && r.Type == state.BasePart: // the parts' data from the first one's start: sliced below
			var chunk []byte
			if chunk, bad = base64.StdEncoding.DecodeString(r.Data); bad == nil {
				text = append(text, chunk...)
			}
		default:
			bad = fmt.Errorf("a %s record, not what holds the payload", r.Type)
		}
		return bad == nil && ref.Skip >= 0 && int64(len(text)) < ref.Skip+int64(ref.Size)
	})
	if err = cmp.Or(err, bad); err == nil && ref.Skip >= 0 {
		if int64(len(text)) < ref.Skip+int64(ref.Size) {
			err = fmt.Errorf("the base ends before the payload does")
		} else {
			text = text[ref.Skip : ref.Skip+int64(ref.Size)]
		}
	}
	if err == nil {
		err = ref.Check(string(text))
	}
	if err != nil {
		return "", fmt.Errorf("reading the payload at offset %d of %s back: %w", ref.Frame, name, err)
	}
	return string(text), nil
}

func (p *payloadFile) close() {
	if p.f != nil {
		p.f.Close()
		p.f = nil
	}
}
