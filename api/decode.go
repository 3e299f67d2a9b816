package api

import (
	"bufio"
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
	if w.ws(); w.i < len(body) && body[w.i] == '{' {
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && !rv.IsNil() && rv.Elem().Kind() == reflect.Struct && !readsItself(rv.Elem().Type()) {
			w.fill = rv.Elem()
		}
	}
	walked := w.value(reflect.TypeOf(v))
	switch {
	case walked == errWalkStop:
	case walked != nil:
		return nil, walked
	}
	for _, r := range w.renames {
		old = append(old, r.from)
	}
	w.ws()
	if walked == nil && w.i == len(w.b) && w.filled && !w.left {
		return old, nil // every value set as encoding/json sets it
	}
	if len(w.renames) > 0 {
		body = w.renamed()
	}
	if walked == nil && w.i == len(w.b) {
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
// token allocated); a syntax error stops it, and is left to the decoder. So
// does a value nested deeper than encoding/json reads (maxDepth): a body of
// a megabyte of '[' would otherwise grow the walk's stack to 128 MB, and a
// few more to the runtime's limit, which ends the process.

var errWalkStop = errors.New("not JSON: left to the decoder")

// maxDepth is encoding/json's limit on nested objects and arrays: a value
// that the walk stops at for its depth, encoding/json refuses.
const maxDepth = 10_000

type keyWalker struct {
	b []byte
	i int
	// renames are the keys spelled the old way, to be read as the new.
	renames []rename
	// fill is the struct the top object is read into, its plain values
	// (assign) set as they are walked; filled says it was, and left that
	// a value was left to encoding/json, which then reads the whole.
	fill         reflect.Value
	filled, left bool
	// depth is how many objects and arrays hold the value walked.
	depth int
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

// keyName reads a key at i: a field's name itself, and the field, when
// it spells one without an escape (no copy of the key), else as str
// reads it.
func (w *keyWalker) keyName(fields map[string]jsonField) (string, jsonField, bool, error) {
	end := w.i + 1
	for end < len(w.b) && w.b[end] != '"' && w.b[end] != '\\' {
		end++
	}
	if end < len(w.b) && w.b[end] == '"' {
		if f, ok := fields[string(w.b[w.i+1:end])]; ok {
			w.i = end + 1
			return f.name, f, true, nil
		}
	}
	key, err := w.str()
	return key, jsonField{}, false, err
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

var (
	unmarshaler     = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]() // what encoding/json reads a string into
)

// readsItself says whether t (or a pointer to it) is a json.Unmarshaler.
func readsItself(t reflect.Type) bool {
	return t.Implements(unmarshaler) || reflect.PointerTo(t).Implements(unmarshaler)
}

func (w *keyWalker) value(t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && readsItself(t) {
		t = nil // its own reading (List): only its objects' keys are checked
	}
	w.ws()
	if w.i >= len(w.b) {
		return errWalkStop
	}
	switch w.b[w.i] {
	case '{', '[':
		if w.depth == maxDepth {
			return errWalkStop
		}
		w.depth++
		var err error
		if w.b[w.i] == '{' {
			err = w.object(t)
		} else {
			err = w.array(t)
		}
		w.depth--
		return err
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

func (w *keyWalker) array(t reflect.Type) error {
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
}

func (w *keyWalker) object(t reflect.Type) error {
	var fields map[string]jsonField
	if t != nil && t.Kind() == reflect.Struct {
		fields = jsonFields(t)
	}
	fill := w.fill // the top object's only
	w.fill = reflect.Value{}
	var elem reflect.Type
	if t != nil && t.Kind() == reflect.Map {
		elem = t.Elem()
	}
	var few [16]string
	seen := few[:0]
	var many map[string]bool // past a few keys: a body of many keys is not quadratic
	w.i++
	for {
		w.ws()
		if w.i >= len(w.b) {
			return errWalkStop
		}
		if w.b[w.i] == '}' && len(seen)+len(many) == 0 { // {}; one after a comma is not JSON
			w.i++
			w.filled = fill.IsValid()
			return nil
		}
		if w.b[w.i] != '"' {
			return errWalkStop
		}
		at := w.i + 1
		key, field, known, err := w.keyName(fields)
		if err != nil {
			return err
		}
		if fields != nil && !known {
			field, known = fields[key]
			if !known && strings.Contains(key, "-") && w.i-at-1 == len(key) {
				if field, known = fields[strings.ReplaceAll(key, "-", "_")]; known {
					w.renames = append(w.renames, rename{at: at, from: key, to: field.name})
					key = field.name
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
		if fields == nil {
			field = jsonField{typ: elem, index: -1}
		} else if !known {
			return &KeyError{Key: key}
		}
		w.ws()
		if w.i >= len(w.b) || w.b[w.i] != ':' {
			return errWalkStop
		}
		w.i++
		w.ws()
		if !fill.IsValid() || !w.assign(fill, field) {
			w.left = true
			if err := w.value(field.typ); err != nil {
				return err
			}
		}
		w.ws()
		switch {
		case w.i < len(w.b) && w.b[w.i] == ',':
			w.i++
		case w.i < len(w.b) && w.b[w.i] == '}':
			w.i++
			w.filled = fill.IsValid()
			return nil
		default:
			return errWalkStop
		}
	}
}

// assign sets dst's field f to the value at i, and passes over it, when
// encoding/json would read it without help: a string without an escape or
// a control character, an integer that fits, true or false, into a field
// of that kind or a pointer to one (a nil pointer given a new value, as
// encoding/json does), or null (a pointer, slice or map made nil, any
// other field left as it is). Else it leaves i where it was.
func (w *keyWalker) assign(dst reflect.Value, f jsonField) bool {
	if f.index < 0 || w.i >= len(w.b) {
		return false
	}
	v := dst.Field(f.index)
	if bytes.HasPrefix(w.b[w.i:], []byte("null")) {
		if !w.endsAt(w.i + 4) {
			return false
		}
		switch f.typ.Kind() {
		case reflect.Pointer, reflect.Slice, reflect.Map, reflect.Interface:
			v.SetZero()
		}
		w.i += 4
		return true
	}
	t := f.typ
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	end := w.i
	var text []byte
	var n int64
	switch c := w.b[w.i]; {
	case c == '"' && t.Kind() == reflect.String:
		for end++; end < len(w.b) && w.b[end] != '"'; end++ {
			if w.b[end] == '\\' || w.b[end] < 0x20 {
				return false
			}
		}
		if end == len(w.b) {
			return false
		}
		text = w.b[w.i+1 : end]
		end++
	case (c == 't' || c == 'f') && t.Kind() == reflect.Bool:
		text = []byte("false")
		if c == 't' {
			text, n = []byte("true"), 1
		}
		if !bytes.HasPrefix(w.b[w.i:], text) {
			return false
		}
		end += len(text)
	case (c == '-' || c >= '0' && c <= '9') && t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		if c == '-' {
			end++
		}
		digits := end
		for end < len(w.b) && w.b[end] >= '0' && w.b[end] <= '9' {
			end++
		}
		if end == digits || w.b[digits] == '0' && end-digits > 1 { // JSON has no leading zero
			return false
		}
		var err error
		if n, err = strconv.ParseInt(string(w.b[w.i:end]), 10, 64); err != nil || reflect.Zero(t).OverflowInt(n) {
			return false
		}
	default:
		return false
	}
	if !w.endsAt(end) {
		return false
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			v.Set(reflect.New(t))
		}
		v = v.Elem()
	}
	switch t.Kind() {
	case reflect.String:
		v.SetString(string(text))
	case reflect.Bool:
		v.SetBool(n == 1)
	default:
		v.SetInt(n)
	}
	w.i = end
	return true
}

// endsAt says whether a value may end at i: 1.5 or truex read as 1 or true
// is for the decoder to refuse.
func (w *keyWalker) endsAt(i int) bool {
	return i == len(w.b) || strings.IndexByte(",}] \t\n\r", w.b[i]) >= 0
}

// jsonName is a struct field's name in JSON ("" for an embedded struct,
// whose fields are its own), whether it is read from a quoted string
// (",string"), and whether JSON holds it at all.
func jsonName(f reflect.StructField) (name string, quoted, sent bool) {
	name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
	if name == "-" || !f.IsExported() {
		return "", false, false
	}
	if name == "" && !f.Anonymous {
		name = f.Name
	}
	return name, slices.Contains(strings.Split(opts, ","), "string"), true
}

// jsonField is a struct's field as encoding/json reads it: its name, its
// type, and its index for assign (-1: one assign leaves to encoding/json:
// of an embedded struct, read from a quoted string, or by a type's own
// UnmarshalJSON or UnmarshalText).
type jsonField struct {
	name  string
	typ   reflect.Type
	index int
}

// fieldsOf caches jsonFields by type.
var fieldsOf sync.Map

// jsonFields is a struct's fields by their JSON names, those of embedded
// structs included.
func jsonFields(t reflect.Type) map[string]jsonField {
	if m, ok := fieldsOf.Load(t); ok {
		return m.(map[string]jsonField)
	}
	out := map[string]jsonField{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, quoted, sent := jsonName(f)
		index, ft := i, f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if quoted || readsItself(ft) || ft.Implements(textUnmarshaler) || reflect.PointerTo(ft).Implements(textUnmarshaler) {
			index = -1
		}
		switch {
		case !sent:
		case name == "":
			for k, e := range jsonFields(f.Type) {
				out[k] = jsonField{name: k, typ: e.typ, index: -1}
			}
		default:
			out[name] = jsonField{name: name, typ: f.Type, index: index}
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
	bad, path := notUTF8(reflect.ValueOf(req))
	if !bad {
		return nil
	}
	path = strings.TrimPrefix(path, ".")
	if path == "" || strings.HasPrefix(path, "'s") {
		path = "the request" + path
	}
	return Usage("%s is not UTF-8 text: encode binary data (e.g. base64) first", path)
}

// notUTF8 says whether v holds a string that is not UTF-8, and the path to
// the first from v (.field, [index], .key, 's key "k"), made only once one
// is found: a batch's many requests are checked, and are text.
func notUTF8(v reflect.Value) (bool, string) {
	switch v.Kind() {
	case reflect.String:
		return !utf8.ValidString(v.String()), ""
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			return notUTF8(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 { // []byte: base64 in JSON
			return false, ""
		}
		for i := range v.Len() {
			if bad, path := notUTF8(v.Index(i)); bad {
				return true, "[" + strconv.Itoa(i) + "]" + path
			}
		}
	case reflect.Map:
		for it := v.MapRange(); it.Next(); {
			key := fmt.Sprint(it.Key().Interface())
			if !utf8.ValidString(key) {
				return true, "'s key " + strconv.QuoteToASCII(key)
			}
			if bad, path := notUTF8(it.Value()); bad {
				return true, "." + key + path
			}
		}
	case reflect.Struct:
		for _, f := range textFields(v.Type()) {
			if bad, path := notUTF8(v.Field(f.index)); bad {
				if f.name != "" { // an embedded struct's fields are its own
					path = "." + f.name + path
				}
				return true, path
			}
		}
	}
	return false, ""
}

// textField is a field of a struct that JSON sends and that may hold text:
// its index and its JSON name ("" for an embedded struct).
type textField struct {
	index int
	name  string
}

// textFieldsOf caches textFields by type.
var textFieldsOf sync.Map

// textFields is the fields of struct type t that notUTF8 looks into.
func textFields(t reflect.Type) []textField {
	if fs, ok := textFieldsOf.Load(t); ok {
		return fs.([]textField)
	}
	var fs []textField
	for i := range t.NumField() {
		f := t.Field(i)
		if name, _, sent := jsonName(f); sent && holdsText(f.Type) {
			fs = append(fs, textField{index: i, name: name})
		}
	}
	textFieldsOf.Store(t, fs)
	return fs
}

// holdsText says whether a value of type t may hold a string: not a
// number, a boolean or bytes.
func holdsText(t reflect.Type) bool {
	switch k := t.Kind(); {
	case k == reflect.Bool, k >= reflect.Int && k <= reflect.Complex128:
		return false
	case k == reflect.Slice || k == reflect.Array:
		return t.Elem().Kind() != reflect.Uint8
	}
	return true
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
			if maxTasks >= MaxBatchTasks { // the command line's bound: nothing sends more in parts
				return Usage("the batch holds more than %d tasks, the most one submit --batch-file takes: split the file into files of at most that many lines, each sent by a submit of its own (each all or none)", maxTasks)
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
// max_attempts or after would become every other line's (the command
// line's base always points to a max_attempts, to an after when --after
// is given).
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
			if old, err := DecodeStrict(lines[i], &out[i]); err == nil && len(old) == 0 {
				continue // as encoding/json reads it, and faster (FuzzDecodeStrict)
			}
			var zero T // encoding/json alone reads what is not strict JSON
			out[i] = zero
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
	sizes, errs := make([]int64, len(reqs)), make([]error, runtime.GOMAXPROCS(0))
	parallel.Ranges(len(reqs), func(part, from, to int) {
		for i := from; i < to && errs[part] == nil; i++ {
			var b []byte
			b, errs[part] = json.Marshal(reqs[i])
			sizes[i] = int64(len(b) + 1)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var parts [][2]int
	from, size := 0, int64(0)
	for i, n := range sizes {
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
