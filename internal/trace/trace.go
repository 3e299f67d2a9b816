// Package trace is verify --expect: a story a WAL must tell, checked
// during the one replay verify makes.
package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/answers"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/suggest"
	"github.com/leasewal/leasewal/state"
)

// An expectation trace (verify --expect, docs/reference.md#verifying-a-recorded-path) is a list of steps, each
// naming a point of the replay and what should hold there, any subset of
// fields:
//
//	- after: 2            # just after record 2, at its time
//	  tasks: {T1: {state: LEASED, attempt: 1, current_lease: L1}}
//	- at: 2026-01-01T00:00:35Z   # after every record at or before, lapses applied then
//	  tasks: {T1: {state: WAITING}}
//	- after: 5
//	  records: [TaskCreated, LeaseGranted, LeaseGranted, TaskCompleted, TaskCancelled]
//	- final: true         # after the last record, at its time (never the clock)
//	  domains: {orders: {lease: null, backlog: [42], processed: [41]}}
//
// It is checked during the one replay verify makes; every difference is
// reported. The whole 'inspect -o json' document of earlier releases is
// still accepted: its tasks are compared at --now.

// step is one step of a trace.
type step struct {
	label      string
	after      int64 // > 0 for an after step
	at         int64 // for an at step
	isAt       bool
	final      bool
	tasks      map[string]map[string]any
	domains    map[string]map[string]any
	records    []string
	hasRecords bool
}

// Mismatch is one difference between a trace and the WAL.
type Mismatch struct {
	Step     string `json:"step"`
	Path     string `json:"path"`
	Expected any    `json:"expected"`
	Got      any    `json:"got"`
}

func (m Mismatch) String() string {
	e, _ := json.Marshal(m.Expected)
	g, _ := json.Marshal(m.Got)
	return fmt.Sprintf("%s: %s: expected %s, got %s", m.Step, m.Path, e, g)
}

// MismatchError is a WAL that differs from its --expect file: every
// difference.
type MismatchError struct {
	File       string
	Mismatches []Mismatch
}

func (e *MismatchError) Error() string {
	if len(e.Mismatches) == 1 {
		return fmt.Sprintf("1 difference against %s: %s", e.File, e.Mismatches[0])
	}
	return fmt.Sprintf("%d differences against %s; first: %s", len(e.Mismatches), e.File, e.Mismatches[0])
}

// Error is an --expect file that cannot be read, or cannot be checked
// against this WAL: bad usage (exit 2), nothing compared.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

func fileErr(format string, args ...any) error { return &Error{msg: fmt.Sprintf(format, args...)} }

// The task fields a trace may name, and the view's field each one reads.
var traceTaskFields = map[string]string{
	"state": "state", "attempt": "attempt", "lease_id": "lease_id", "current_lease": "lease_id",
	"worker_id": "worker_id", "worker": "worker_id", "expiry": "expiry", "deadline": "deadline",
	"not_before": "not_before", "reason": "reason", "queue": "queue", "priority": "priority",
}

var traceTimeFields = map[string]bool{"expiry": true, "deadline": true, "not_before": true}

var traceDomainFields = map[string]bool{"lease": true, "backlog": true, "processed": true, "failed": true}

// Expectation is an --expect file: a trace (its steps, checked as the
// replay goes), or the whole 'inspect -o json' document of earlier releases
// (its tasks compared at the end, at --now).
type Expectation struct {
	File    string
	checker checker
	tasks   []map[string]any // the document's, when it is one
	isTrace bool
	steps   int
}

// Read reads --expect FILE: a trace (a list of steps, YAML or JSON), or
// the whole 'inspect -o json' document.
func Read(path string) (*Expectation, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fileErr("cannot read --expect %s: %v", path, err)
	}
	var doc any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fileErr("--expect %s is neither YAML nor JSON: %v", path, err)
	}
	switch d := doc.(type) {
	case map[string]any:
		var want struct {
			Tasks []map[string]any `json:"tasks"`
		}
		if err := json.Unmarshal(b, &want); err != nil {
			return nil, fileErr("--expect %s is not 'inspect -o json' output: %v", path, err)
		}
		for i, t := range want.Tasks {
			if id, _ := t["task_id"].(string); id == "" {
				return nil, fileErr("--expect %s: task %d has no task_id", path, i+1)
			}
		}
		return &Expectation{File: path, tasks: want.Tasks}, nil
	case []any:
		steps, err := parseTrace(d)
		if err != nil {
			return nil, fileErr("--expect %s: %v", path, err)
		}
		return &Expectation{File: path, checker: checker{steps: steps}, isTrace: true, steps: len(steps)}, nil
	}
	return nil, fileErr("--expect %s: give a list of steps (after:, at:, final:) or an 'inspect -o json' document", path)
}

// Steps is how many steps a trace has (0 for a document).
func (x *Expectation) Steps() int { return x.steps }

// Step is one step of a trace as a person reads it: its label (the one its
// differences name) and what it expects, in a line.
type Step struct {
	Label   string
	Expects string
}

// Outline is every step of a trace, in order (none for a document).
func (x *Expectation) Outline() []Step {
	out := make([]Step, 0, len(x.checker.steps))
	for _, s := range x.checker.steps {
		var parts []string
		for _, group := range []map[string]map[string]any{s.tasks, s.domains} {
			for _, id := range slices.Sorted(maps.Keys(group)) {
				var fields []string
				for _, name := range slices.Sorted(maps.Keys(group[id])) {
					v, _ := json.Marshal(group[id][name])
					fields = append(fields, name+" "+string(v))
				}
				parts = append(parts, id+": "+strings.Join(fields, ", "))
			}
		}
		if s.hasRecords {
			parts = append(parts, "records "+strings.Join(s.records, ", "))
		}
		out = append(out, Step{Label: s.label, Expects: strings.Join(parts, "; ")})
	}
	return out
}

// IsTrace says whether the file is a trace.
func (x *Expectation) IsTrace() bool { return x.isTrace }

// Hooks has a trace checked as the replay opts drives goes, record by
// record.
func (x *Expectation) Hooks(opts *store.Options) {
	if x.isTrace {
		opts.BeforeRecord = x.checker.before
		opts.OnRecord = x.checker.afterRecord
	}
}

// Check ends the check once every record is applied (st, at now): a trace's
// last steps, or the document's tasks. It returns an *Error when the file
// cannot be checked against this WAL, a *MismatchError with every
// difference, or nil.
func (x *Expectation) Check(tx *store.Tx, now int64) error {
	if x.isTrace {
		if err := x.checker.end(tx); err != nil {
			return err
		}
	} else {
		tasks, err := tx.State.Tasks()
		if err != nil {
			return err
		}
		got := make([]api.Task, len(tasks))
		for i, t := range tasks {
			if got[i], err = answers.Task(t, now, tx.Payload); err != nil {
				return err
			}
		}
		x.checker.diffs = compareTasks(x.tasks, got)
	}
	if len(x.checker.diffs) > 0 {
		return &MismatchError{File: x.File, Mismatches: x.checker.diffs}
	}
	return nil
}

// compareTasks compares, for every task the document names, every field it
// gives with the task as the WAL has it at --now, and returns every
// difference. A task the document does not name is not compared.
func compareTasks(want []map[string]any, got []api.Task) []Mismatch {
	byID := map[string]map[string]any{}
	for _, tv := range got {
		byID[tv.TaskID] = jsonMap(tv)
	}
	var diffs []Mismatch
	for _, w := range want {
		id := w["task_id"].(string)
		g, ok := byID[id]
		if !ok {
			diffs = append(diffs, Mismatch{Step: "at now", Path: id, Expected: "a task"})
			continue
		}
		for _, key := range slices.Sorted(maps.Keys(w)) {
			if key != "records" && !reflect.DeepEqual(w[key], g[key]) {
				diffs = append(diffs, Mismatch{Step: "at now", Path: id + "." + key, Expected: w[key], Got: g[key]})
			}
		}
	}
	return diffs
}

func parseTrace(list []any) ([]step, error) {
	var steps []step
	for i, item := range list {
		m, ok := item.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("step %d is not a map", i+1)
		}
		s := step{}
		points := 0
		for key, v := range m {
			switch key {
			case "after":
				n, ok := wholeNumber(v)
				if !ok || n < 1 {
					return nil, fmt.Errorf("step %d: after: give a record's seq (1 or more), got %v", i+1, v)
				}
				s.after, s.label = n, fmt.Sprintf("after seq %d", n)
				points++
			case "at":
				ms, err := traceTime(v)
				if err != nil {
					return nil, fmt.Errorf("step %d: at: %v", i+1, err)
				}
				s.at, s.isAt, s.label = ms, true, "at "+api.FormatTime(ms)
				points++
			case "final":
				if v != true {
					return nil, fmt.Errorf("step %d: final: give true", i+1)
				}
				s.final, s.label = true, "final"
				points++
			case "tasks", "domains":
				entries, ok := v.(map[string]any)
				if !ok {
					return nil, fmt.Errorf("step %d: %s: give a map of ids to fields", i+1, key)
				}
				parsed := map[string]map[string]any{}
				for id, fields := range entries {
					f, ok := fields.(map[string]any)
					if !ok {
						return nil, fmt.Errorf("step %d: %s.%s: give a map of fields", i+1, key, id)
					}
					for name, value := range f {
						known := slices.Collect(maps.Keys(traceDomainFields))
						if key == "tasks" {
							known = slices.Collect(maps.Keys(traceTaskFields))
						}
						if !slices.Contains(known, name) {
							return nil, fmt.Errorf("step %d: %s.%s: unknown field %q%s", i+1, key, id, name, didYouMean(name, known))
						}
						if key == "tasks" && name == "state" { // any case, as inspect --state takes it
							text, _ := value.(string)
							st, ok := state.ParseTaskState(text)
							if !ok {
								return nil, fmt.Errorf("step %d: tasks.%s.state: %v is not a state (WAITING, LEASED, COMPLETED, FAILED or DEAD)", i+1, id, value)
							}
							f[name] = string(st)
						}
					}
					parsed[id] = f
				}
				if key == "tasks" {
					s.tasks = parsed
				} else {
					s.domains = parsed
				}
			case "records":
				types, ok := v.([]any)
				if !ok {
					return nil, fmt.Errorf("step %d: records: give a list of record types", i+1)
				}
				s.hasRecords, s.records = true, []string{}
				for _, t := range types {
					name, _ := t.(string)
					typ, ok := state.ParseRecordType(name)
					if !ok {
						return nil, fmt.Errorf("step %d: records: %v is not a record type", i+1, t)
					}
					s.records = append(s.records, string(typ))
				}
			default:
				return nil, fmt.Errorf("step %d: unknown key %q%s (use after, at or final, with tasks, domains or records)", i+1, key,
					didYouMean(key, []string{"after", "at", "final", "tasks", "domains", "records"}))
			}
		}
		if points != 1 {
			return nil, fmt.Errorf("step %d: give exactly one of after, at and final", i+1)
		}
		steps = append(steps, s)
	}
	return steps, nil
}

func wholeNumber(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case float64:
		return int64(n), n == math.Trunc(n)
	}
	return 0, false
}

// traceTime reads a time of a trace: RFC 3339 (YAML may have read it as a
// timestamp already) or unix ms.
func traceTime(v any) (int64, error) {
	switch t := v.(type) {
	case time.Time:
		return t.UnixMilli(), nil
	case string:
		return textTime(t)
	}
	if n, ok := wholeNumber(v); ok {
		return n, nil
	}
	return 0, fmt.Errorf("%v is not a time", v)
}

// checker checks a trace's steps, in order, as the replay goes.
type checker struct {
	steps   []step
	records []string
	diffs   []Mismatch
	err     error // a trace that cannot be checked against this WAL: exit 2
}

// before runs before record r is applied: every at step whose time is
// before r's is due now.
func (c *checker) before(r state.Record, tx *store.Tx) error {
	for len(c.steps) > 0 && c.err == nil {
		s := c.steps[0]
		switch {
		case s.isAt && s.at < r.At:
			c.check(s, tx, s.at)
		case s.after > 0 && s.after < r.Seq:
			c.err = fileErr("--expect: step %q comes after a later point of the WAL: give the steps in order", s.label)
		default:
			return c.err
		}
		c.steps = c.steps[1:]
	}
	return c.err
}

// afterRecord runs once record r is applied.
func (c *checker) afterRecord(r state.Record, tx *store.Tx) error {
	c.records = append(c.records, string(r.Type))
	for len(c.steps) > 0 && c.steps[0].after == r.Seq {
		c.check(c.steps[0], tx, r.At)
		c.steps = c.steps[1:]
	}
	return c.err
}

// end checks what is left once every record is applied.
func (c *checker) end(tx *store.Tx) error {
	st := tx.State
	for _, s := range c.steps {
		if c.err != nil {
			break
		}
		switch {
		case s.after > 0:
			c.err = fileErr("--expect: step %q: the WAL has records 1 to %d", s.label, st.LastSeq())
		case s.isAt:
			c.check(s, tx, max(s.at, st.LastAt()))
		default:
			c.check(s, tx, st.LastAt())
		}
	}
	c.steps = nil
	return c.err
}

func (c *checker) differ(step, path string, want, got any) {
	c.diffs = append(c.diffs, Mismatch{Step: step, Path: path, Expected: want, Got: got})
}

// check compares one step with the state st, viewed at time at.
func (c *checker) check(s step, tx *store.Tx, at int64) {
	st := tx.State
	if s.hasRecords {
		got := c.records
		if !slices.Equal(s.records, got) {
			c.differ(s.label, "records", s.records, slices.Clone(got))
		}
	}
	for _, id := range slices.Sorted(maps.Keys(s.tasks)) {
		t, err := st.Task(id)
		if err != nil {
			c.differ(s.label, id, "a task", nil)
			continue
		}
		tv, err := answers.Task(t, at, tx.Payload)
		if err != nil {
			c.err = err
			return
		}
		view := jsonMap(tv)
		want := s.tasks[id]
		for _, name := range slices.Sorted(maps.Keys(want)) {
			field := traceTaskFields[name]
			c.compare(s.label, id+"."+name, want[name], view[field], traceTimeFields[field])
		}
	}
	for _, name := range slices.Sorted(maps.Keys(s.domains)) {
		d, ok := st.Domain(name)
		if !ok {
			c.differ(s.label, name, "a domain", nil)
			continue
		}
		view := jsonMap(answers.Domain(d))
		want := s.domains[name]
		for _, field := range slices.Sorted(maps.Keys(want)) {
			c.compare(s.label, name+"."+field, want[field], view[field], false)
		}
	}
}

// compare reports want and got unless they are equal as JSON values (times
// compared as instants, whatever their form).
func (c *checker) compare(step, path string, want, got any, isTime bool) {
	want = normalize(want)
	if isTime && want != nil {
		if ms, err := traceTime(want); err == nil {
			want = api.FormatTime(ms)
		}
	}
	if want == nil && got == "" { // an absent reason is no reason
		got = nil
	}
	if !subsetOf(want, got) {
		c.differ(step, path, want, got)
	}
}

// subsetOf reports whether want holds in got: equal values, or, for a map,
// every field want gives equal in got (a lease may name only its offset).
func subsetOf(want, got any) bool {
	w, wok := want.(map[string]any)
	g, gok := got.(map[string]any)
	if !wok || !gok {
		return reflect.DeepEqual(want, got)
	}
	for k, v := range w {
		if !subsetOf(v, g[k]) {
			return false
		}
	}
	return true
}

// normalize turns a YAML value into the JSON value it would be.
func normalize(v any) any {
	switch x := v.(type) {
	case time.Time:
		return api.FormatTime(x.UnixMilli())
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = normalize(x[i])
		}
		return out
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = normalize(e)
		}
		return out
	}
	return v
}

func jsonMap(v any) map[string]any {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	var m map[string]any
	_ = json.Unmarshal(b.Bytes(), &m)
	return m
}

// didYouMean is "; did you mean X?" for the known word closest to word, or
// nothing.
func didYouMean(word string, known []string) string {
	if best := suggest.Closest(word, known); best != "" {
		return fmt.Sprintf("; did you mean %q?", best)
	}
	return ""
}

// textTime reads a trace's time written as text: RFC 3339 or unix
// milliseconds, within the years 0001 to 9999.
func textTime(text string) (int64, error) {
	ms, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		t, perr := time.Parse(time.RFC3339Nano, text)
		if perr != nil {
			return 0, fmt.Errorf("%q is not a time: use RFC 3339 (2026-01-01T00:00:30Z) or unix milliseconds", text)
		}
		ms = t.UnixMilli()
	}
	if ms < state.MinTime || ms > state.MaxTime {
		return 0, fmt.Errorf("%q is outside the years 0001 to 9999", text)
	}
	return ms, nil
}
