package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"leasewal/internal/histgen"
	"leasewal/state"
	"leasewal/store"
)

// TestListingsAreTheViewStreamed: the listings of inspect, streamed task by
// task, are byte for byte the JSON and the table of the whole view, for
// every --state.
func TestListingsAreTheViewStreamed(t *testing.T) {
	walPath := historyWAL(t, 2000)
	if code, out, errOut := cli("--wal", walPath, "--now", "2026-11-01T00:00:00Z", "submit", "--payload", "<a & b>", "-o", "json"); code != 0 {
		t.Fatal(out, errOut)
	}
	h := store.Open(store.Options{Path: walPath, LockTimeout: time.Second})
	defer h.Close()
	var st *state.State
	var now int64
	if err := h.Read(func(tx *store.Tx) error { st, now = tx.State, tx.Now; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, only := range []taskFilter{{}, {state: state.Waiting}, {state: state.Leased}, {state: state.Completed}, {state: state.Failed}, {state: state.Dead}, {queue: "default"}, {queue: "none"}, {state: state.Dead, queue: "default"}} {
		v, err := buildInspect(st, now, nil, only)
		if err != nil {
			t.Fatal(err)
		}
		v.Summary = summarize(st, now)
		a, err := listingAnswer(st, now, only)
		if err != nil {
			t.Fatal(err)
		}
		var want, got bytes.Buffer
		writeJSON(&want, v)
		if err := a.doc.(jsonStreamer).streamJSON(&got); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Fatalf("--state %q: streamed %d bytes differ from the view's %d", only, got.Len(), want.Len())
		}
		want.Reset()
		got.Reset()
		renderInspect(&want, palette{}, v)
		if err := a.table(&got, palette{}); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() || !strings.Contains(got.String(), "DEADLINE") && len(v.Tasks) > 0 {
			t.Fatalf("--state %q: the table drawn row by row differs from the view's:\n%s\n%s", only, got.String(), want.String())
		}
	}
}

// TestLogHoldsItsLinesUntilTheEnd: log -o json of a long history prints every
// record (its lines pass through a temporary file past the first MiB), and a
// damaged record near the end prints only the error, as every command does.
func TestLogHoldsItsLinesUntilTheEnd(t *testing.T) {
	walPath := historyWAL(t, 12000)
	code, out, errOut := cli("--wal", walPath, "log", "-o", "json")
	records := strings.Count(string(mustRead(t, walPath)), "\n") - 1
	if code != 0 || strings.Count(out, "\n") != records || len(out) < 2*spoolInMemory {
		t.Fatalf("log: exit %d, %d lines of %d records, %d bytes: %s", code, strings.Count(out, "\n"), records, len(out), errOut)
	}
	data := mustRead(t, walPath)
	lines := bytes.SplitAfter(data, []byte("\n"))
	lines[len(lines)-3][20] ^= 1 // the record before the last: damage, not a torn tail
	os.WriteFile(walPath, bytes.Join(lines, nil), 0o644)
	code, out, _ = cli("--wal", walPath, "log", "-o", "json")
	if code != ExitDamaged || strings.Count(out, "\n") != 1 || !strings.Contains(out, `"result":"ERROR"`) {
		t.Fatalf("log of a damaged WAL: exit %d, %d lines, starting %.200s", code, strings.Count(out, "\n"), out)
	}
}

// historyWAL writes a realistic history of about n records.
func historyWAL(t *testing.T, n int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "q.wal")
	if err := histgen.WriteFile(path, histgen.Options{Records: n, Waiting: 3}); err != nil {
		t.Fatal(err)
	}
	return path
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
