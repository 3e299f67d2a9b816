package api

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"reflect"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/leasewal/leasewal/internal/limits"
	"github.com/leasewal/leasewal/internal/parallel"
)

// DecodeStrict decodes one JSON object into v: keys are matched exactly
// (encoding/json alone takes "Payload" for "payload"), a key given twice in
// an object is refused (encoding/json alone keeps the last), as are unknown
// fields and anything after the object (ErrTrailing). A key of a request as
// older versions spelled it (request-id for request_id) is read as the
// field's, and returned in old; an object holding both spellings of one
// field is refused.
func DecodeStrict(body []byte, v any) (old []string, err error) {
	if !utf8.Valid(body) { // encoding/json would read its strings as others (U+FFFD)
		return nil, ErrNotUTF8
	}
	w := keyWalker{b: body}
	walked := w.value(reflect.TypeOf(v))
	switch {
	case walked == errWalkStop:
	case walked != nil:
		return nil, walked
	}
	if len(w.renames) > 0 {
		body = w.renamed()
		for _, r := range w.renames {
			old = append(old, r.from)
		}
	}
	if w.ws(); walked == nil && w.i == len(w.b) {
		// One value, its every key a field's: what DisallowUnknownFields
		// and the check for a second value would find is known.
		return old, json.Unmarshal(body, v)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return old, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return old, ErrTrailing
	}
	return old, nil
}

// OldSpelling is a key as versions before 0.2 spelled it, which
// DecodeStrict reads as the field's: the flag's name (request-id for
// request_id).
func OldSpelling(field string) string { return strings.ReplaceAll(field, "_", "-") }

// KeyError is a key of a request's JSON object that is given twice, or is
// no field's name exactly.
type KeyError struct {
	Key       string
	Duplicate bool
}

func (e *KeyError) Error() string {
	if e.Duplicate {
		return fmt.Sprintf("the key %q is given twice (or also as %q)", e.Key, OldSpelling(e.Key))
	}
	return fmt.Sprintf("json: unknown field %q", e.Key) // as encoding/json says it: the server names the flag
}

// The key walk (DecodeStrict) reads a JSON value as one of a type would be
// read: every object's keys distinct, and a struct's each exactly one of its
// fields' JSON names. It reads the bytes itself (a request's hot path: no
// token allocated); a syntax error stops it, and is left to the decoder.

var errWalkStop = errors.New("not JSON: left to the decoder")

type keyWalker struct {
	b []byte
	i int
	// renames are the keys spelled the old way, to be read as the new.
	renames []rename
}

// rename is a key at b[at:at+len(from)] (inside its quotes) to be read as to.
type rename struct {
	at       int
	from, to string
}

// renamed is the body with each old spelling of a key replaced by the new.
func (w *keyWalker) renamed() []byte {
	out := make([]byte, 0, len(w.b))
	last := 0
	for _, r := range w.renames {
		out = append(append(out, w.b[last:r.at]...), r.to...)
		last = r.at + len(r.from)
	}
	return append(out, w.b[last:]...)
}

func (w *keyWalker) ws() {
	for w.i < len(w.b) && (w.b[w.i] == ' ' || w.b[w.i] == '\t' || w.b[w.i] == '\n' || w.b[w.i] == '\r') {
		w.i++
	}
}

// str reads a string at i, unescaped only when it holds an escape.
func (w *keyWalker) str() (string, error) {
	start, escaped := w.i+1, false
	for w.i++; w.i < len(w.b); w.i++ {
		switch w.b[w.i] {
		case '\\':
			escaped = true
			w.i++
		case '"':
			w.i++
			raw := w.b[start : w.i-1]
			if !escaped {
				return string(raw), nil
			}
			var s string
			if json.Unmarshal(w.b[start-1:w.i], &s) != nil {
				return "", errWalkStop
			}
			return s, nil
		}
	}
	return "", errWalkStop
}

// skipStr passes over a string value at i (the decoder reads it).
func (w *keyWalker) skipStr() error {
	for w.i++; w.i < len(w.b); w.i++ {
		switch w.b[w.i] {
		case '\\':
			w.i++
		case '"':
			w.i++
			return nil
		}
	}
	return errWalkStop
}

var unmarshaler = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

func (w *keyWalker) value(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && (t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)) {
		t = nil // its own reading (List): only its objects' keys are checked
	}
	w.ws()
	if w.i >= len(w.b) {
		return errWalkStop
	}
	switch w.b[w.i] {
	case '{':
		return w.object(t)
	case '[':
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			elem = t.Elem()
		}
		w.i++
		for {
			w.ws()
			if w.i < len(w.b) && w.b[w.i] == ']' {
				w.i++
				return nil
			}
			if err := w.value(elem); err != nil {
				return err
			}
			w.ws()
			if w.i < len(w.b) && w.b[w.i] == ',' {
				w.i++
			} else if w.i >= len(w.b) || w.b[w.i] != ']' {
				return errWalkStop
			}
		}
	case '"':
		return w.skipStr()
	}
	start := w.i
	for w.i < len(w.b) && !strings.ContainsRune(",}] \t\n\r", rune(w.b[w.i])) {
		w.i++
	}
	if w.i == start {
		return errWalkStop
	}
	return nil
}

func (w *keyWalker) object(t reflect.Type) error {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	var elem reflect.Type
	if t != nil && t.Kind() == reflect.Map {
		elem = t.Elem()
	}
	var seen []string
	var many map[string]bool // past a few keys: a body of many keys is not quadratic
	w.i++
	for {
		w.ws()
		if w.i >= len(w.b) {
			return errWalkStop
		}
		if w.b[w.i] == '}' {
			w.i++
			return nil
		}
		if w.b[w.i] != '"' {
			return errWalkStop
		}
		at := w.i + 1
		key, err := w.str()
		if err != nil {
			return err
		}
		if fields != nil {
			if _, ok := fields[key]; !ok && strings.Contains(key, "-") && w.i-at-1 == len(key) {
				if _, isOld := fields[strings.ReplaceAll(key, "-", "_")]; isOld {
					w.renames = append(w.renames, rename{at: at, from: key, to: strings.ReplaceAll(key, "-", "_")})
					key = strings.ReplaceAll(key, "-", "_")
				}
			}
		}
		if many == nil && len(seen) == 16 {
			many = map[string]bool{}
			for _, k := range seen {
				many[k] = true
			}
		}
		if many != nil && many[key] || many == nil && slices.Contains(seen, key) {
			return &KeyError{Key: key, Duplicate: true} // twice, or in both spellings
		}
		if many != nil {
			many[key] = true
		} else {
			seen = append(seen, key)
		}
		field := elem
		if fields != nil {
			ft, ok := fields[key]
			if !ok {
				return &KeyError{Key: key}
			}
			field = ft
		}
		w.ws()
		if w.i >= len(w.b) || w.b[w.i] != ':' {
			return errWalkStop
		}
		w.i++
		if err := w.value(field); err != nil {
			return err
		}
		w.ws()
		if w.i < len(w.b) && w.b[w.i] == ',' {
			w.i++
		} else if w.i >= len(w.b) || w.b[w.i] != '}' {
			return errWalkStop
		}
	}
}

// fieldsOf caches jsonFields by type.
var fieldsOf sync.Map

// jsonFields is a struct's fields by their JSON names, those of embedded
// structs included.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	if m, ok := fieldsOf.Load(t); ok {
		return m.(map[string]reflect.Type)
	}
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch {
		case name == "-" || !f.IsExported():
		case f.Anonymous && name == "":
			maps.Copy(out, jsonFields(f.Type))
		case name == "":
			out[f.Name] = f.Type
		default:
			out[name] = f.Type
		}
	}
	fieldsOf.Store(t, out)
	return out
}

// NotUTF8 refuses a request holding a string that is not UTF-8 text, naming
// it by its JSON path (payload, ops[3].reason): encoding/json would send
// such a string as another, each bad byte made U+FFFD, so a client refuses
// it before sending, as a local command does.
func NotUTF8(req any) error {
	if path := notUTF8(reflect.ValueOf(req), ""); path != "" {
		return Usage("%s is not UTF-8 text: encode binary data (e.g. base64) first", path)
	}
	return nil
}

func notUTF8(v reflect.Value, path string) string {
	switch v.Kind() {
	case reflect.String:
		if !utf8.ValidString(v.String()) {
			return cmp.Or(path, "the request")
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return notUTF8(v.Elem(), path)
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 { // []byte: base64 in JSON
			return ""
		}
		for i := range v.Len() {
			if bad := notUTF8(v.Index(i), fmt.Sprintf("%s[%d]", path, i)); bad != "" {
				return bad
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			key := fmt.Sprint(it.Key().Interface())
			if !utf8.ValidString(key) {
				return cmp.Or(path, "the request") + "'s key " + strconv.QuoteToASCII(key)
			}
			if bad := notUTF8(it.Value(), path+"."+key); bad != "" {
				return bad
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" || !f.IsExported() {
				continue
			}
			if name == "" && !f.Anonymous {
				name = f.Name
			}
			inner := path
			if name != "" {
				inner = strings.TrimPrefix(path+"."+name, ".")
			}
			if bad := notUTF8(v.Field(i), inner); bad != "" {
				return bad
			}
		}
	}
	return ""
}

// ErrNotUTF8 is a body that is not UTF-8, as JSON must be.
var ErrNotUTF8 = errors.New("the body is not UTF-8 text, as JSON must be: encode binary data (e.g. base64) first")

// ErrTrailing is a body with something after its JSON object.
var ErrTrailing = errors.New("data after the JSON object")

// The batch door's limits: a batch a server takes in one request
// (internal/limits: the lines and bytes it decides in well under a
// second), a batch a command line decides on its own WAL, and the longest
// line (a payload at the 64 KiB limit, every byte escaped, and the rest).
// A client sends a bigger batch to a server as several requests, each
// within the server's limits and atomic (BatchParts).
var (
	MaxServerBatchTasks = int(limits.BatchLines.Max)
	MaxServerBatchBody  = limits.BatchBytes.Max
	MaxBatchLine        = int(limits.BatchLine.Max)
)

// MaxBatchTasks is the most tasks a batch of the command line holds.
const MaxBatchTasks = 1_000_000

// ReadBatch reads a batch of submits, one JSON object a line (NDJSON; an
// empty line is skipped), each over base, as it reads them: it calls each
// with the request and its line number, from 1, and stops at the first line
// that does not parse, or past maxTasks tasks. deprecated, if set, hears
// of each line that spells a key the old way. Lines are read a chunk at a
// time (batchChunk lines, chunkBytes), and a chunk's lines decoded on every
// processor: what a chunk holds is all a bad line costs before it is
// refused.
func ReadBatch(r io.Reader, base SubmitRequest, maxTasks int, deprecated func(line int, old []string), each func(req SubmitRequest, line int) error) error {
	scan := bufio.NewScanner(r)
	scan.Buffer(make([]byte, 64<<10), MaxBatchLine)
	c := batchLines{base: base}
	n, tasks := 0, 0
	for scan.Scan() {
		n++
		line := bytes.TrimSpace(scan.Bytes())
		if len(line) == 0 {
			continue
		}
		if tasks++; tasks > maxTasks {
			if err := c.decode(deprecated, each); err != nil {
				return err
			}
			return Usage("the batch holds more than %d tasks, the most one request takes: split it ('leasewal --server URL submit --batch-file' sends a bigger file in parts)", maxTasks)
		}
		if scan.Err() != nil { // the reading failed: the scanner hands over what it had of the last line
			c.cut = n
		}
		if c.add(line, n) {
			if err := c.decode(deprecated, each); err != nil {
				return err
			}
		}
	}
	if err := c.decode(deprecated, each); err != nil {
		return err
	}
	var tooLarge *http.MaxBytesError
	switch err := scan.Err(); {
	case err == nil:
	case errors.Is(err, bufio.ErrTooLong):
		return Usage("batch line %d is over %d bytes", n+1, MaxBatchLine)
	case errors.As(err, &tooLarge):
		return Usage("the batch is over %d bytes, the most one request takes: split it ('leasewal --server URL submit --batch-file' sends a bigger file in parts)", tooLarge.Limit)
	default:
		return Usage("reading the batch: %v", err)
	}
	if tasks == 0 {
		return Usage("the batch holds no task: give one JSON object per line")
	}
	return nil
}

// batchLines is a chunk of a batch's lines, read and not yet decoded.
type batchLines struct {
	base  SubmitRequest
	text  []byte
	ends  []int // where each line ends in text
	lines []int // each line's number
	cut   int   // a line a failed read cut short: its error is the reading's
	// what decode makes of them, kept for the next chunk
	reqs []SubmitRequest
	olds [][]string
	errs []error
}

// chunkBytes bounds a chunk's text: a batch of long lines is refused at
// its first bad one after a few MB read, not its whole body.
const chunkBytes = 4 << 20

// add keeps a copy of line (the scanner reuses its buffer) and says
// whether the chunk is full.
func (c *batchLines) add(line []byte, n int) bool {
	c.text = append(c.text, line...)
	c.ends, c.lines = append(c.ends, len(c.text)), append(c.lines, n)
	return len(c.lines) == batchChunk || len(c.text) >= chunkBytes
}

// decode decodes the chunk's lines and hands them to each in order,
// stopping at the first that does not parse but for a line cut short,
// whose error is the reading's, which the caller reports.
func (c *batchLines) decode(deprecated func(line int, old []string), each func(req SubmitRequest, line int) error) error {
	defer func() { c.text, c.ends, c.lines = c.text[:0], c.ends[:0], c.lines[:0] }()
	n := len(c.lines)
	c.reqs, c.olds, c.errs = slices.Grow(c.reqs[:0], n)[:n], slices.Grow(c.olds[:0], n)[:n], slices.Grow(c.errs[:0], n)[:n]
	reqs, olds, errs := c.reqs, c.olds, c.errs
	parallel.Ranges(n, func(_, from, to int) {
		for i := from; i < to; i++ {
			reqs[i] = c.fresh()
			olds[i], errs[i] = DecodeStrict(c.text[c.start(i):c.ends[i]], &reqs[i])
		}
	})
	for i, line := range c.lines {
		if len(olds[i]) > 0 && deprecated != nil {
			deprecated(line, olds[i])
		}
		if err := errs[i]; err != nil {
			if line == c.cut {
				return nil
			}
			return Usage("batch line %d: %v; each line is one JSON object such as {\"payload\":\"x\",\"request_id\":\"r1\"}", line, err)
		}
		if err := each(reqs[i], line); err != nil {
			return err
		}
	}
	return nil
}

// fresh is the base a line is decoded over, with its own copies of what
// the base points to: decoding writes through them (encoding/json sets a
// pointer's int and appends into a slice's array), and a line's
// max_attempts or after would become every other line's (--max-attempts
// and --after given as every line's default).
func (c *batchLines) fresh() SubmitRequest {
	r := c.base
	if r.MaxAttempts != nil {
		n := *r.MaxAttempts
		r.MaxAttempts = &n
	}
	r.After, r.AfterEnded = slices.Clone(r.After), slices.Clone(r.AfterEnded)
	return r
}

func (c *batchLines) start(i int) int {
	if i == 0 {
		return 0
	}
	return c.ends[i-1]
}

// EncodeLines writes n values, one JSON value a line (NDJSON, HTML
// characters left as they are, as in every answer), a batch's many on
// every processor.
func EncodeLines(n int, value func(i int) any) ([]byte, error) {
	parts, errs := make([]bytes.Buffer, runtime.GOMAXPROCS(0)), make([]error, runtime.GOMAXPROCS(0))
	parallel.Ranges(n, func(part, from, to int) {
		enc := json.NewEncoder(&parts[part])
		enc.SetEscapeHTML(false)
		for i := from; i < to && errs[part] == nil; i++ {
			errs[part] = enc.Encode(value(i))
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	all := parts[0].Bytes()
	for _, p := range parts[1:] {
		all = append(all, p.Bytes()...)
	}
	return all, nil
}

// DecodeLines decodes an answer of one JSON value a line (NDJSON) into
// Ts, in order, a batch's many lines on every processor.
func DecodeLines[T any](raw []byte) ([]T, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	lines := bytes.Split(raw, []byte{'\n'})
	out, errs := make([]T, len(lines)), make([]error, len(lines))
	parallel.Ranges(len(lines), func(_, from, to int) {
		for i := from; i < to; i++ {
			errs[i] = json.Unmarshal(lines[i], &out[i])
		}
	})
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
	}
	return out, nil
}

// CollectBatch is ReadBatch keeping every request and its line number.
func CollectBatch(r io.Reader, base SubmitRequest, maxTasks int, deprecated func(line int, old []string)) (reqs []SubmitRequest, lines []int, err error) {
	// The requests are gathered in chunks and put together once: a slice
	// grown a request at a time copies itself over and over on its way to
	// a million (about five times its final size in all).
	var chunks [][]SubmitRequest
	err = ReadBatch(r, base, maxTasks, deprecated, func(req SubmitRequest, line int) error {
		if n := len(chunks); n == 0 || len(chunks[n-1]) == cap(chunks[n-1]) {
			chunks = append(chunks, make([]SubmitRequest, 0, batchChunk))
		}
		chunks[len(chunks)-1] = append(chunks[len(chunks)-1], req)
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return slices.Concat(chunks...), lines, nil
}

// batchChunk is how many requests CollectBatch gathers in one piece.
const batchChunk = 4096

// BatchParts cuts a batch into the parts a client sends a server, each
// within the server's limits: [from, to) of reqs, as encoded by the
// client.
func BatchParts(reqs []SubmitRequest) ([][2]int, error) {
	var parts [][2]int
	from, size := 0, int64(0)
	for i, r := range reqs {
		b, err := json.Marshal(r)
		if err != nil {
			return nil, err
		}
		n := int64(len(b) + 1)
		if i > from && (i-from >= MaxServerBatchTasks || size+n > MaxServerBatchBody) {
			parts, from, size = append(parts, [2]int{from, i}), i, 0
		}
		size += n
	}
	if len(reqs) > 0 {
		parts = append(parts, [2]int{from, len(reqs)})
	}
	return parts, nil
}
