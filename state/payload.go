package state

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
)

// InlinePayloadBytes is the longest payload a state holds in memory: a
// longer one, read from a WAL, is held as where the WAL has it (a
// PayloadRef), so that what a replay or a server holds does not grow with
// the payloads' size. The store reads it back when an answer or a record
// needs the text.
const InlinePayloadBytes = 256

// Payload is a task's payload as the state holds it: its text, or where the
// WAL holds a text too long to keep in memory. A redacted task's is empty.
type Payload struct {
	text string
	ref  *PayloadRef
}

// PayloadRef is where a payload is in the WAL the state was read from: in
// the TaskCreated record whose frame starts at Frame, or, for a task a base
// brought, Skip bytes into the data of the BasePart whose frame starts at
// Frame (running on into the parts after it). Size and Sum (its SHA-256)
// let a decision compare payloads without reading them, and let the reader
// check what it read.
type PayloadRef struct {
	Frame int64
	Skip  int64 // -1: a TaskCreated's payload
	Size  int
	Sum   [sha256.Size]byte
}

// ErrPayloadNotHeld means a payload is in the WAL, not in memory: the
// store reads it (Payload.Ref).
var ErrPayloadNotHeld = errors.New("the payload is not held in memory")

// textPayload is a payload held in memory.
func textPayload(text string) Payload { return Payload{text: text} }

// referTo is a payload read from a WAL at ref, unless it is short enough
// to keep.
func referTo(text string, ref PayloadRef, inline int) Payload {
	if len(text) <= inline || ref.Frame <= 0 {
		return Payload{text: text}
	}
	ref.Size, ref.Sum = len(text), sha256.Sum256([]byte(text))
	return Payload{ref: &ref}
}

// Ref is where the WAL holds the payload, nil when it is held in memory.
func (p Payload) Ref() *PayloadRef { return p.ref }

// Text is the payload held in memory; ErrPayloadNotHeld when it is not.
func (p Payload) Text() (string, error) {
	if p.ref != nil {
		return "", ErrPayloadNotHeld
	}
	return p.text, nil
}

// Is reports whether the payload is text, held or not.
func (p Payload) Is(text string) bool {
	if p.ref == nil {
		return p.text == text
	}
	return p.ref.Size == len(text) && p.ref.Sum == sha256.Sum256([]byte(text))
}

// Check says whether text, read from the WAL, is the payload ref describes.
func (ref *PayloadRef) Check(text string) error {
	if len(text) != ref.Size || sha256.Sum256([]byte(text)) != ref.Sum {
		return fmt.Errorf("the payload read at offset %d is not the one replayed there (%d bytes): the WAL changed under this command; run it again", ref.Frame, ref.Size)
	}
	return nil
}

// MarshalJSON writes the text, or where the WAL holds it: a dump of a task
// says which.
func (p Payload) MarshalJSON() ([]byte, error) {
	if p.ref != nil {
		return json.Marshal(map[string]any{"frame": p.ref.Frame, "skip": p.ref.Skip, "size": p.ref.Size, "sha256": hex.EncodeToString(p.ref.Sum[:])})
	}
	return json.Marshal(p.text)
}
