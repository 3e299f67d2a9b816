package store_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// hourly writes the same tasks to each WAL at now: submitted, leased and
// completed.
func hourly(t *testing.T, now time.Time, hour int, wals ...string) {
	t.Helper()
	at := now.Format(time.RFC3339)
	for i := range 4 {
		for _, path := range wals {
			step := func(args ...string) string {
				t.Helper()
				code, out, errOut := cli(append([]string{"--wal", path, "--now", at, "-o", "json"}, args...)...)
				if code != 0 {
					t.Fatalf("%v: exit %d %s %s", args, code, out, errOut)
				}
				return out
			}
			step("submit", "--payload", fmt.Sprintf("hour %d task %d", hour, i), "--request-id", fmt.Sprintf("h%d-%d", hour, i))
			var lease struct{ TaskID, LeaseID string }
			out := step("lease", "--worker", "W")
			lease.TaskID = jsonField(t, out, "task_id")
			lease.LeaseID = jsonField(t, out, "lease_id")
			step("complete", "--task", lease.TaskID, "--lease", lease.LeaseID)
		}
	}
}

// jsonField is a string field of a JSON object.
func jsonField(t *testing.T, doc, field string) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(doc), &m); err != nil {
		t.Fatalf("%v: %s", err, doc)
	}
	s, _ := m[field].(string)
	return s
}

// recordAt is the time of the record seq of the WAL at path, as log says.
func recordAt(t *testing.T, path string, seq int64) time.Time {
	t.Helper()
	code, out, errOut := cli("--wal", path, "log", "--from", fmt.Sprint(seq), "--to", fmt.Sprint(seq), "-o", "json")
	if code != 0 {
		t.Fatalf("log of seq %d: exit %d %s %s", seq, code, out, errOut)
	}
	at, err := time.Parse(time.RFC3339Nano, jsonField(t, strings.SplitN(out, "\n", 2)[0], "at"))
	if err != nil {
		t.Fatalf("log of seq %d: %v: %s", seq, err, out)
	}
	return at
}

// secondType is the type of the second record of the segment at path.
func secondType(t *testing.T, path string) string {
	t.Helper()
	lines := strings.SplitN(string(mustRead(t, path)), "\n", 4)
	if len(lines) < 3 {
		t.Fatalf("%s holds fewer than two records", path)
	}
	return jsonField(t, lines[2][9:], "type")
}

// TestHistoryKeepsItsRetentionAndEachBaseOnce compacts a WAL every two
// hours, with a history retention of three, beside a copy never compacted.
// After each compaction: every segment but the oldest leaves its base out
// (a tail: its second record is its BaseEnd); the oldest starts exactly at
// the first record of the retention, though that falls inside the segment
// it was sealed in (the one before was written before the retention
// started); the history verifies, each base derived from the records before
// it; and log reads the same records from the history as from the copy.
func TestHistoryKeepsItsRetentionAndEachBaseOnce(t *testing.T) {
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.wal"), filepath.Join(dir, "b.wal")
	start, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
	cuts := 0
	for hour := range 12 {
		now := start.Add(time.Duration(hour) * time.Hour)
		hourly(t, now, hour, a, b)
		if hour%2 == 0 {
			continue
		}
		compactAt := now.Add(30 * time.Minute)
		code, compacted, errOut := cli("--wal", b, "--now", compactAt.Format(time.RFC3339), "compact", "--keep-finished", "2h", "--keep-history", "3h", "-o", "json")
		if code != 0 {
			t.Fatalf("hour %d: compact: exit %d %s %s", hour, code, compacted, errOut)
		}
		segs := store.Segments(b + store.HistorySuffix)
		if !strings.Contains(compacted, fmt.Sprintf(`"history_from":%d,`, segs[0].First)) {
			t.Fatalf("hour %d: compact says %s; the history starts at seq %d", hour, compacted, segs[0].First)
		}
		for i, s := range segs {
			if typ := secondType(t, s.Path); (i > 0) != (typ == "BaseEnd") {
				t.Fatalf("hour %d: segment %d of %d, %s, has a %s second: only the oldest should hold its base", hour, i+1, len(segs), filepath.Base(s.Path), typ)
			}
		}
		cut := compactAt.Add(-3 * time.Hour)
		first := segs[0].First
		if recordAt(t, a, first).Before(cut) || (first > 1 && !recordAt(t, a, first-1).Before(cut)) {
			t.Fatalf("hour %d: the history starts at seq %d (%v), the retention at %v", hour, first, recordAt(t, a, first), cut)
		}
		if first > 1 && (first-1)%24 != 0 {
			cuts++ // not where a segment was sealed: every two hours, 24 records
		}
		if code, out, errOut := cli("--wal", b, "verify", "--history", "-o", "json"); code != 0 || !strings.Contains(out, fmt.Sprintf("%d segments from seq %d", len(segs), first)) {
			t.Fatalf("hour %d: verify --history: exit %d %s %s", hour, code, out, errOut)
		}
		_, want, _ := cli("--wal", a, "log", "--from", fmt.Sprint(first), "-o", "json")
		if code, got, errOut := cli("--wal", b, "log", "-o", "json"); code != 0 || got != want {
			t.Fatalf("hour %d: log through the history: exit %d %s\n%.500s\nwant\n%.500s", hour, code, errOut, got, want)
		}
	}
	if cuts < 3 {
		t.Fatalf("the history was cut inside a segment %d times: the test needs more", cuts)
	}
}

// TestTailSegmentsAreChecked: a tail whose base's digest was changed (its
// frames chained again, so that only the base derived from the segment
// before can tell) fails verify --history, naming it; a tail whose segment
// before is gone fails it, and log, with a message that says so; the WAL
// itself goes on working.
func TestTailSegmentsAreChecked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "q.wal")
	start, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
	for hour := range 3 {
		hourly(t, start.Add(time.Duration(hour)*time.Hour), hour, path)
		if c, err := handle(path, nil).Compact(keepAll); err != nil || c.Segment == "" {
			t.Fatalf("compact: %+v %v", c, err)
		}
	}
	segs := store.Segments(path + store.HistorySuffix)
	if len(segs) != 3 || secondType(t, segs[2].Path) != "BaseEnd" {
		t.Fatalf("segments %+v: want three, the last a tail", segs)
	}
	tail := segs[2].Path
	original := mustRead(t, tail)
	lines := strings.SplitAfter(string(original), "\n")
	var out bytes.Buffer
	frames := wal.NewFrameWriter(&out, wal.Version)
	for i, line := range lines[1:3] {
		body := strings.TrimSuffix(line[9:], "\n")
		if i == 1 {
			digest := jsonField(t, body, "digest")
			body = strings.Replace(body, digest, strings.Repeat("0", len(digest)), 1)
		}
		if err := frames.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	out.WriteString(strings.Join(lines[3:], ""))
	if err := os.WriteFile(tail, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := cli("--wal", path, "verify"); code != 0 {
		t.Fatalf("verify of the WAL alone: exit %d %s %s", code, out, errOut)
	}
	code, _, errOut := cli("--wal", path, "verify", "--history")
	if code != 5 || !strings.Contains(errOut, filepath.Base(tail)) || !strings.Contains(errOut, "is not the state the segment before leads to") {
		t.Fatalf("verify --history of a tail whose base was changed: exit %d %q", code, errOut)
	}
	if err := os.WriteFile(tail, original, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{segs[1].Path, segs[0].Path} { // the segment before the last, then the first: the oldest left is a tail
		if err := os.Remove(gone); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"verify", "--history"}, {"log"}} {
			code, _, errOut := cli(append([]string{"--wal", path}, args...)...)
			if code == 0 || !strings.Contains(errOut, filepath.Base(tail)) || !strings.Contains(errOut, "the segment before it") || !strings.Contains(errOut, "is gone") {
				t.Fatalf("%v without %s: exit %d %q", args, filepath.Base(gone), code, errOut)
			}
		}
	}
	for _, args := range [][]string{{"--now", "+1s", "submit", "--payload", "p"}, {"inspect"}, {"verify"}} {
		if code, out, errOut := cli(append([]string{"--wal", path}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d %s %s", args, code, out, errOut)
		}
	}
}

// TestACutLeftBesideItsSegment: a crash after the segment cut where the
// retention starts took its place, before the segment it was cut from was
// removed, leaves both; the history reads and verifies as if only the cut
// one were there, and the next compaction removes the other. A crash
// before the segments older than the cut expired leaves them before it:
// the history verifies, from the cut on, and the next compaction removes
// them too.
func TestACutLeftBesideItsSegment(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "q.wal")
	start, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
	compact := func(hour int, keep string) string {
		at := start.Add(time.Duration(hour)*time.Hour + 30*time.Minute).Format(time.RFC3339)
		code, out, errOut := cli("--wal", path, "--now", at, "compact", "--keep-finished", "1h", "--keep-history", keep)
		if code != 0 {
			t.Fatalf("compact: exit %d %s %s", code, out, errOut)
		}
		return out
	}
	for hour := range 2 {
		hourly(t, start.Add(time.Duration(hour)*time.Hour), hour, path)
	}
	compact(1, "2h") // one segment, hours 0 and 1
	before := store.Segments(path + store.HistorySuffix)
	saved := mustRead(t, before[0].Path)
	hourly(t, start.Add(2*time.Hour), 2, path)
	compact(2, "2h") // the retention starts at 0:30: the segment is cut at hour 0's end
	after := store.Segments(path + store.HistorySuffix)
	if len(after) != 2 || after[0].First == before[0].First || after[0].Last != before[0].Last {
		t.Fatalf("segments %+v, then %+v: the first should have been cut", before, after)
	}
	_, wantLog, _ := cli("--wal", path, "log", "-o", "json")
	if err := os.WriteFile(before[0].Path, saved, 0o600); err != nil { // as a crash before its removal leaves it
		t.Fatal(err)
	}
	if segs := store.Segments(path + store.HistorySuffix); len(segs) != 2 || segs[0] != after[0] {
		t.Fatalf("the segments listed beside a cut one left: %+v", segs)
	}
	if code, out, errOut := cli("--wal", path, "verify", "--history"); code != 0 {
		t.Fatalf("verify --history: exit %d %s %s", code, out, errOut)
	}
	if code, got, errOut := cli("--wal", path, "log", "-o", "json"); code != 0 || got != wantLog {
		t.Fatalf("log: exit %d %s\n%.300s\nwant\n%.300s", code, errOut, got, wantLog)
	}
	hourly(t, start.Add(3*time.Hour), 3, path)
	compact(3, "3h") // nothing expires
	if _, err := os.Stat(before[0].Path); !os.IsNotExist(err) {
		t.Fatalf("the segment a cut covers is still there after the next compaction: %v", err)
	}

	hourly(t, start.Add(4*time.Hour), 4, path)
	hourly(t, start.Add(5*time.Hour), 5, path)
	compact(5, "100h") // hour 1 (its cut), 2 and 3 (tails), 4 and 5 (a tail)
	older := store.Segments(path + store.HistorySuffix)
	kept := [][]byte{mustRead(t, older[0].Path), mustRead(t, older[1].Path)}
	hourly(t, start.Add(6*time.Hour), 6, path)
	compact(6, "2h")            // the retention starts at 4:30: hours 1 to 4 expire, hour 5 starts the history
	for i, data := range kept { // as a crash before the expiry, which goes newest first, removed them leaves them
		if err := os.WriteFile(older[i].Path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	segs := store.Segments(path + store.HistorySuffix)
	if len(older) != 4 || len(segs) != 4 || segs[0] != older[0] || segs[1] != older[1] || segs[2].First != older[3].First+12 {
		t.Fatalf("segments %+v, then %+v: want the two oldest left before the cut of hours 4 and 5", older, segs)
	}
	code, out, errOut := cli("--wal", path, "verify", "--history", "-o", "json")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("from seq %d", segs[2].First)) {
		t.Fatalf("verify --history with expired segments left before a cut: exit %d %s %s", code, out, errOut)
	}
	if code, _, errOut := cli("--wal", path, "log"); code != 0 {
		t.Fatalf("log with expired segments left before a cut: exit %d %s", code, errOut)
	}
	hourly(t, start.Add(7*time.Hour), 7, path)
	compact(7, "3h")
	for _, s := range older[:2] {
		if _, err := os.Stat(s.Path); !os.IsNotExist(err) {
			t.Fatalf("an expired segment left before a cut is still there after the next compaction: %v", err)
		}
	}
}

// TestHistoryReadAcrossACompaction: a compaction that expires history
// while a reader reads it (the segment it would read next deleted, the one
// after, a tail, rewritten whole) does not fail the reader: it starts over
// from a new listing after the last record it handed on, and hands on each
// record left once, in order, up to the last the new listing holds.
func TestHistoryReadAcrossACompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	start, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
	compact := func(hour int, keep string) {
		t.Helper()
		at := start.Add(time.Duration(hour)*time.Hour + 30*time.Minute).Format(time.RFC3339)
		if code, out, errOut := cli("--wal", path, "--now", at, "compact", "--keep-finished", "1h", "--keep-history", keep); code != 0 {
			t.Fatalf("compact: exit %d %s %s", code, out, errOut)
		}
	}
	for hour := range 6 {
		hourly(t, start.Add(time.Duration(hour)*time.Hour), hour, path)
		if hour%2 == 1 {
			compact(hour, "100h")
		}
	}
	before := store.Segments(path + store.HistorySuffix)
	if len(before) != 3 {
		t.Fatalf("segments %+v: want three", before)
	}
	hourly(t, start.Add(6*time.Hour), 6, path)
	var seqs []int64
	var compacted string // the hook runs on the replay's applying goroutine: no t.Fatal there
	opts := store.Options{Path: path, LockTimeout: time.Minute, OnRecord: func(r state.Record, _ *store.Tx) error {
		if len(seqs) == 0 { // the retention starts at 3:30: hours 0 to 3 expire, hour 4 starts the history
			code, out, errOut := cli("--wal", path, "--now", start.Add(6*time.Hour+30*time.Minute).Format(time.RFC3339), "compact", "--keep-finished", "1h", "--keep-history", "3h")
			compacted = fmt.Sprint(code, " ", out, errOut)
		}
		seqs = append(seqs, r.Seq)
		return nil
	}}
	last, halted, err := store.ReadSegments(opts, 1, nil)
	if !strings.HasPrefix(compacted, "0 ") {
		t.Fatalf("the compaction during the read: %s", compacted)
	}
	after := store.Segments(path + store.HistorySuffix)
	if err != nil || halted || len(after) != 2 || after[0] != before[2] {
		t.Fatalf("ReadSegments across a compaction: %v (halted %v); segments %+v, then %+v", err, halted, before, after)
	}
	want := slices.Concat(seqsFrom(before[0].First, before[0].Last), seqsFrom(after[0].First, after[1].Last)) // the first read before it expired
	if !slices.Equal(seqs, want) || last != want[len(want)-1] {
		t.Fatalf("the records handed on: %v, last %d; want %v", seqs, last, want)
	}
}

// seqsFrom is the seqs from first to last.
func seqsFrom(first, last int64) []int64 {
	var out []int64
	for seq := first; seq <= last; seq++ {
		out = append(out, seq)
	}
	return out
}

// TestHistoryAfterADroppedCompaction: a WAL compacted once with --drop,
// then with its history kept: the oldest segment starts with the base whose
// history was dropped, the tails after it are read through it, and the
// history verifies.
func TestHistoryAfterADroppedCompaction(t *testing.T) {
	path := filepath.Join(t.TempDir(), "q.wal")
	start, _ := time.Parse(time.RFC3339, "2026-01-01T00:00:00Z")
	for hour := range 4 {
		hourly(t, start.Add(time.Duration(hour)*time.Hour), hour, path)
		args := []string{"--wal", path, "--now", start.Add(time.Duration(hour)*time.Hour + 30*time.Minute).Format(time.RFC3339), "compact"}
		if hour == 0 {
			args = append(args, "--drop")
		}
		if code, out, errOut := cli(args...); code != 0 {
			t.Fatalf("%v: exit %d %s %s", args, code, out, errOut)
		}
	}
	segs := store.Segments(path + store.HistorySuffix)
	if len(segs) != 3 || secondType(t, segs[2].Path) != "BaseEnd" {
		t.Fatalf("segments %+v: want three, the last a tail", segs)
	}
	if code, out, errOut := cli("--wal", path, "verify", "--history", "-o", "json"); code != 0 || !strings.Contains(out, "3 segments from seq 13") {
		t.Fatalf("verify --history: exit %d %s %s", code, out, errOut)
	}
	if code, out, errOut := cli("--wal", path, "log", "-o", "json"); code != 0 || strings.Count(out, "\n") != 36 {
		t.Fatalf("log: exit %d, %d lines %s", code, strings.Count(out, "\n"), errOut)
	}
}
