package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// DecodeRecord parses a record body. It is a hand-written parser for the one
// shape records have, because replay decodes every record of the WAL on every
// command: it is about ten times faster than encoding/json. It is strict:
// keys must match exactly, integers must be integers, and an unknown field is
// refused, so that a record from a newer format or a hand edit is never
// half-understood. A fuzz test holds it to encoding/json: whatever it accepts,
// encoding/json accepts with the same result.
func DecodeRecord(body []byte) (Record, error) {
	d := decoder{b: body}
	var r Record
	err := d.object(func(key []byte) error { return d.recordField(&r, key) })
	if err == nil {
		d.ws()
		if d.i < len(d.b) {
			err = errors.New("trailing data after its JSON object")
		}
	}
	if err != nil {
		return Record{}, fmt.Errorf("record is not valid JSON of a known shape: %w", err)
	}
	if err := checkRecord(&r, true); err != nil {
		return Record{}, fmt.Errorf("record is outside the limits of its fields: %w", err)
	}
	return r, nil
}

type decoder struct {
	b []byte
	i int
}

var errSyntax = errors.New("invalid JSON")

func (d *decoder) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips white space and returns the next byte without consuming it.
func (d *decoder) next() byte {
	d.ws()
	if d.i >= len(d.b) {
		return 0
	}
	return d.b[d.i]
}

func (d *decoder) consume(c byte) error {
	if d.next() != c {
		return fmt.Errorf("%w: expected %q at byte %d", errSyntax, c, d.i)
	}
	d.i++
	return nil
}

// object parses {"key": value, ...}, handing each key to field, which must
// consume the value.
func (d *decoder) object(field func(key []byte) error) error {
	if err := d.consume('{'); err != nil {
		return err
	}
	if d.next() == '}' {
		d.i++
		return nil
	}
	for {
		key, err := d.rawString()
		if err != nil {
			return err
		}
		if err := d.consume(':'); err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
		switch d.next() {
		case ',':
			d.i++
		case '}':
			d.i++
			return nil
		default:
			return fmt.Errorf("%w: expected ',' or '}' at byte %d", errSyntax, d.i)
		}
	}
}

// rawString returns the bytes between the quotes of a string with no escapes
// (keys never have them).
func (d *decoder) rawString() ([]byte, error) {
	if err := d.consume('"'); err != nil {
		return nil, err
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], nil
		case c == '\\' || c < 0x20:
			return nil, fmt.Errorf("unexpected key or character at byte %d", d.i)
		}
		d.i++
	}
	return nil, fmt.Errorf("%w: unterminated string", errSyntax)
}

// null consumes a null literal if one is next.
func (d *decoder) null() bool {
	if d.next() == 'n' && bytes.HasPrefix(d.b[d.i:], []byte("null")) {
		d.i += 4
		return true
	}
	return false
}

// str parses a string value. Strings with escapes or that are not valid UTF-8
// go through encoding/json, so that their meaning is exactly JSON's.
func (d *decoder) str() (string, error) {
	if d.null() {
		return "", nil
	}
	if d.next() != '"' {
		return "", fmt.Errorf("%w: expected a string at byte %d", errSyntax, d.i)
	}
	start := d.i
	d.i++
	plain := true
	for d.i < len(d.b) {
		c := d.b[d.i]
		switch {
		case c == '"':
			d.i++
			if raw := d.b[start+1 : d.i-1]; plain && utf8.Valid(raw) {
				return string(raw), nil
			}
			var s string
			err := json.Unmarshal(d.b[start:d.i], &s)
			return s, err
		case c == '\\':
			plain = false
			d.i += 2
			continue
		case c < 0x20:
			return "", fmt.Errorf("%w: control character in a string at byte %d", errSyntax, d.i)
		}
		d.i++
	}
	return "", fmt.Errorf("%w: unterminated string", errSyntax)
}

// integer parses a JSON number that must be an integer.
func (d *decoder) integer() (int64, error) {
	d.ws()
	start := d.i
	if d.i < len(d.b) && d.b[d.i] == '-' {
		d.i++
	}
	digits := d.i
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		d.i++
	}
	switch {
	case d.i == digits:
		return 0, fmt.Errorf("%w: expected a number at byte %d", errSyntax, start)
	case d.b[digits] == '0' && d.i-digits > 1:
		return 0, fmt.Errorf("%w: leading zero at byte %d", errSyntax, start)
	case d.i < len(d.b) && (d.b[d.i] == '.' || d.b[d.i] == 'e' || d.b[d.i] == 'E'):
		return 0, fmt.Errorf("number at byte %d is not an integer", start)
	}
	// Accumulate negatively so that the smallest int64 fits; no allocation,
	// unlike strconv on a converted string.
	var n int64
	for _, c := range d.b[digits:d.i] {
		digit := int64(c - '0')
		if n < (math.MinInt64+digit)/10 {
			return 0, fmt.Errorf("number at byte %d is out of range", start)
		}
		n = n*10 - digit
	}
	if digits == start { // no minus sign
		if n == math.MinInt64 {
			return 0, fmt.Errorf("number at byte %d is out of range", start)
		}
		n = -n
	}
	return n, nil
}

func (d *decoder) optInteger() (*int64, error) {
	if d.null() {
		return nil, nil
	}
	n, err := d.integer()
	return &n, err
}

func (d *decoder) boolean() (bool, error) {
	switch d.next() {
	case 't':
		if bytes.HasPrefix(d.b[d.i:], []byte("true")) {
			d.i += 4
			return true, nil
		}
	case 'f':
		if bytes.HasPrefix(d.b[d.i:], []byte("false")) {
			d.i += 5
			return false, nil
		}
	case 'n':
		if d.null() {
			return false, nil
		}
	}
	return false, fmt.Errorf("%w: expected true or false at byte %d", errSyntax, d.i)
}

func (d *decoder) duration() (Duration, error) {
	if d.next() != '"' {
		return 0, fmt.Errorf("duration at byte %d must be a string like \"30s\"", d.i)
	}
	s, err := d.str()
	if err != nil {
		return 0, err
	}
	v, err := time.ParseDuration(s)
	return Duration(v), err
}

func (d *decoder) setInt(dst *int) error {
	if d.null() {
		return nil
	}
	n, err := d.integer()
	*dst = int(n)
	return err
}

func (d *decoder) setInt64(dst *int64) error {
	if d.null() {
		return nil
	}
	n, err := d.integer()
	*dst = n
	return err
}

func (d *decoder) setString(dst *string) (err error) {
	*dst, err = d.str()
	return err
}

func (d *decoder) recordField(r *Record, key []byte) (err error) {
	switch string(key) { // the compiler does not allocate for this conversion
	case "seq":
		return d.setInt64(&r.Seq)
	case "at":
		return d.setInt64(&r.At)
	case "type":
		var s string
		s, err = d.str()
		r.Type = RecordType(s)
	case "actor":
		return d.setString(&r.Actor)
	case "task_id":
		return d.setString(&r.TaskID)
	case "payload":
		return d.setString(&r.Payload)
	case "window":
		r.Window, err = d.duration()
	case "retry_policy":
		if r.RetryPolicy != nil { // encoding/json would merge the two; refuse instead
			return errors.New("retry_policy is given twice")
		}
		r.RetryPolicy, err = d.retryPolicy()
	case "request_id":
		return d.setString(&r.RequestID)
	case "lease_id":
		return d.setString(&r.LeaseID)
	case "worker_id":
		return d.setString(&r.WorkerID)
	case "attempt":
		return d.setInt(&r.Attempt)
	case "expiry":
		return d.setInt64(&r.Expiry)
	case "reason":
		return d.setString(&r.Reason)
	case "permanent":
		r.Permanent, err = d.boolean()
	case "not_before":
		r.NotBefore, err = d.optInteger()
	case "queue":
		return d.setString(&r.Queue)
	case "priority":
		var n *int64
		if n, err = d.optInteger(); n != nil {
			r.Priority = ptr(int(*n))
		}
	case "requeued_from":
		return d.setString(&r.RequeuedFrom)
	case "domain":
		return d.setString(&r.Domain)
	case "offset":
		r.Offset, err = d.optInteger()
	case "token":
		return d.setString(&r.Token)
	case "acquired_at":
		return d.setInt64(&r.AcquiredAt)
	case "retry_count":
		return d.setInt(&r.RetryCount)
	case "outcome":
		return d.setString(&r.Outcome)
	case "hint":
		r.Hint, err = d.optInteger()
	case "max_retries":
		var n *int64
		if n, err = d.optInteger(); n != nil {
			r.MaxRetries = ptr(int(*n))
		}
	case "result":
		return d.setString(&r.Result)
	case "limit":
		var n *int64
		if n, err = d.optInteger(); n != nil {
			r.Limit = ptr(int(*n)) // checked, or clamped, by checkRecord
		}
	case "after":
		r.After, err = d.strs()
	case "after_ended":
		r.AfterEnded, err = d.strs()
	case "dependency":
		return d.setString(&r.Dependency)
	case "rate":
		return d.setString(&r.Rate)
	case "burst":
		return d.setInt(&r.Burst)
	case "until":
		r.Until, err = d.optInteger()
	case "schedule":
		return d.setString(&r.Schedule)
	case "every":
		r.Every, err = d.duration()
	case "cron":
		return d.setString(&r.Cron)
	case "tz":
		return d.setString(&r.TZ)
	case "catch_up":
		return d.setString(&r.CatchUp)
	case "slot":
		r.Slot, err = d.optInteger()
	case "chain_from":
		return d.setString(&r.ChainFrom)
	case "parts":
		return d.setInt(&r.Parts)
	case "kept_from":
		r.KeptFrom, err = d.optInteger()
	case "history":
		return d.setString(&r.History)
	case "cut":
		r.Cut, err = d.boolean()
	case "part":
		return d.setInt(&r.Part)
	case "data":
		return d.setString(&r.Data)
	case "digest":
		return d.setString(&r.Digest)
	case "hash":
		return d.setString(&r.Hash)
	default:
		return fmt.Errorf("unknown field %q", key)
	}
	return err
}

// strs parses an array of strings (null: none). Its length is bounded by
// the body's, which the frame's limit bounds.
func (d *decoder) strs() ([]string, error) {
	if d.null() {
		return nil, nil
	}
	if err := d.consume('['); err != nil {
		return nil, err
	}
	out := []string{}
	if d.next() == ']' {
		d.i++
		return out, nil
	}
	for {
		s, err := d.str()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
		switch d.next() {
		case ',':
			d.i++
		case ']':
			d.i++
			return out, nil
		default:
			return nil, fmt.Errorf("%w: expected ',' or ']' at byte %d", errSyntax, d.i)
		}
	}
}

func (d *decoder) retryPolicy() (*RetryPolicy, error) {
	if d.null() {
		return nil, nil
	}
	p := &RetryPolicy{}
	err := d.object(func(key []byte) (err error) {
		switch string(key) {
		case "max_attempts":
			return d.setInt(&p.MaxAttempts)
		case "backoff":
			p.Backoff, err = d.duration()
		case "backoff_max":
			p.BackoffMax, err = d.duration()
		default:
			return fmt.Errorf("unknown field %q in retry_policy", key)
		}
		return err
	})
	return p, err
}

// PeekAt reads a record's time from the start of its body as EncodeRecord
// writes it ({"seq":N,"at":M,…}) without decoding the rest; false for a
// body that does not start so (then decode it).
func PeekAt(body []byte) (int64, bool) {
	rest, ok := bytes.CutPrefix(body, []byte(`{"seq":`))
	if !ok {
		return 0, false
	}
	i := bytes.IndexByte(rest, ',')
	if i < 0 {
		return 0, false
	}
	rest, ok = bytes.CutPrefix(rest[i+1:], []byte(`"at":`))
	if !ok {
		return 0, false
	}
	end := bytes.IndexAny(rest, ",}")
	if end < 0 {
		return 0, false
	}
	at, err := strconv.ParseInt(string(rest[:end]), 10, 64)
	return at, err == nil
}
