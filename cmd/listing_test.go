package cmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/histgen"
	"github.com/leasewal/leasewal/internal/service"
)

// TestListingsAreTheViewStreamed: the listings of inspect, streamed task by
// task, are byte for byte the JSON and the table of the whole view, for
// every --state.
func TestListingsAreTheViewStreamed(t *testing.T) {
	walPath := historyWAL(t, 2000)
	if code, out, errOut := cli("--wal", walPath, "--now", "2026-11-01T00:00:00Z", "submit", "--payload", "<a & b>", "-o", "json"); code != 0 {
		t.Fatal(out, errOut)
	}
	const at = "2026-11-01T00:00:00Z"
	svc := service.New(service.Options{WAL: service.WAL{Path: walPath, LockTimeout: time.Second,
		Clock: func(int64) (int64, error) { return api.ParseTime("2026-11-01T00:00:00.000Z"), nil }}})
	for _, only := range []api.InspectRequest{{}, {State: "WAITING"}, {State: "LEASED"}, {State: "COMPLETED"}, {State: "FAILED"}, {State: "DEAD"}, {Queue: "default"}, {Queue: "none"}, {State: "DEAD", Queue: "default"}} {
		v, err := svc.Inspect(context.Background(), only)
		if err != nil {
			t.Fatal(err)
		}
		args := []string{"--wal", walPath, "--now", at, "inspect"}
		if only.State != "" {
			args = append(args, "--state", string(only.State))
		}
		if only.Queue != "" {
			args = append(args, "--queue", only.Queue)
		}
		var want bytes.Buffer
		writeJSON(&want, v)
		code, got, errOut := cli(append(args, "-o", "json")...)
		if code != 0 || got != want.String() {
			t.Fatalf("%+v: exit %d, streamed %d bytes differ from the view's %d: %s", only, code, len(got), want.Len(), errOut)
		}
		want.Reset()
		renderInspect(&want, palette{}, v)
		code, got, errOut = cli(append(args, "-o", "wide")...)
		if code != 0 || got != want.String() || !strings.Contains(got, "DEADLINE") && len(v.Tasks) > 0 {
			t.Fatalf("%+v: exit %d, the table drawn row by row differs from the view's:\n%s\n%s%s", only, code, got, want.String(), errOut)
		}
	}
}

// TestLogHoldsItsLinesUntilTheEnd: log -o json of a long history prints every
// record (its lines pass through a temporary file past the first MiB), and a
// damaged record near the end prints only the error, as every command does.
func TestLogHoldsItsLinesUntilTheEnd(t *testing.T) {
	t.Parallel()
	walPath := historyWAL(t, 12000)
	code, out, errOut := cli("--wal", walPath, "log", "-o", "json")
	records := strings.Count(string(mustRead(t, walPath)), "\n") - 1
	if code != 0 || strings.Count(out, "\n") != records || len(out) < 2*spoolInMemory {
		t.Fatalf("log: exit %d, %d lines of %d records, %d bytes: %s", code, strings.Count(out, "\n"), records, len(out), errOut)
	}
	// The table and TSV hold their rows the same way, then draw them.
	var recs []api.Record
	svc := service.New(service.Options{WAL: service.WAL{Path: walPath, LockTimeout: time.Second}})
	if _, err := svc.Log(context.Background(), api.LogRequest{}, func(r api.Record) error { recs = append(recs, r); return nil }); err != nil {
		t.Fatal(err)
	}
	for _, p := range []palette{{tsv: true}, {}} {
		var want bytes.Buffer
		if err := renderLog(&want, p, recs, recs[0].AtMs()); err != nil {
			t.Fatal(err)
		}
		format := map[bool]string{true: "tsv", false: "wide"}[p.tsv]
		code, out, errOut := cli("--wal", walPath, "log", "-o", format)
		if code != 0 || out != want.String() || strings.Count(out, "\n") < records {
			t.Fatalf("log -o %s: exit %d, %d lines, %d bytes, not the %d of the records drawn at once: %s", format, code, strings.Count(out, "\n"), len(out), want.Len(), errOut)
		}
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
