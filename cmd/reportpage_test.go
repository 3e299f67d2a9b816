package cmd

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestTheReportDrawsEveryTask: a requeued task and a redacted one are drawn
// like any other (each was left out: the page replays a task from its own
// records, which name a first run and a payload it does not have), the
// counts are of every task, and --task draws that task alone: its records,
// its chart, its count of records shown; an unknown one is exit 4.
func TestTheReportDrawsEveryTask(t *testing.T) {
	wal := filepath.Join(t.TempDir(), "q.wal")
	for _, args := range [][]string{
		{"submit", "--payload", "first", "--now", "2026-01-01T00:00:00Z"},
		{"abort", "T1", "--reason", "wrong", "--now", "+1s"},
		{"requeue", "T1", "--now", "+1s"},                 // T2
		{"submit", "--payload", "secret", "--now", "+1s"}, // T3
		{"redact", "T3", "--reason", "pasted a password", "--now", "+1s"},
		{"submit", "--payload", "other", "--now", "+1s"}, // T4
		{"lease", "--worker", "W", "--task", "T4", "--now", "+1s"},
		{"complete", "--task", "T4", "--lease", "L1", "--now", "+2s"},
	} {
		if code, _, stderr := cli(append([]string{"--wal", wal}, args...)...); code != 0 {
			t.Fatal(args, stderr)
		}
	}
	code, page, stderr := cli("--wal", wal, "report", "--now", "+3s") // HTML without -o: the one format of report
	if code != 0 {
		t.Fatal(stderr)
	}
	for _, id := range []string{"T1", "T2", "T3", "T4"} {
		if !strings.Contains(page, `id="task-`+id+`"`) {
			t.Errorf("the page does not draw %s", id)
		}
	}
	count := func(page, st string) string {
		m := regexp.MustCompile(`data-state="` + st + `">` + st + ` <b>(\d+)</b>`).FindStringSubmatch(page)
		if m == nil {
			return "none"
		}
		return m[1]
	}
	if count(page, "WAITING") != "2" || count(page, "DEAD") != "1" || count(page, "COMPLETED") != "1" {
		t.Errorf("the counts: WAITING %s, DEAD %s, COMPLETED %s; want 2, 1, 1", count(page, "WAITING"), count(page, "DEAD"), count(page, "COMPLETED"))
	}
	if strings.Contains(page, "secret") {
		t.Error("the page shows a redacted payload")
	}
	code, page, stderr = cli("--wal", wal, "report", "-o", "html", "--task", "T4", "--now", "+3s")
	if code != 0 || !strings.Contains(page, `id="task-T4"`) || strings.Contains(page, `id="task-T1"`) || !strings.Contains(page, "(3 shown)") ||
		count(page, "COMPLETED") != "1" || count(page, "WAITING") != "0" {
		t.Fatalf("report --task T4: exit %d %s; want T4 alone, its 3 records", code, stderr)
	}
	if code, _, stderr := cli("--wal", wal, "report", "-o", "html", "--task", "T9"); code != ExitNotFound || !strings.Contains(stderr, `"T9"`) {
		t.Fatalf("report --task T9: exit %d %s", code, stderr)
	}
	if code, _, stderr := cli("--wal", wal, "report", "-o", "json"); code != ExitUsage || !strings.Contains(stderr, "writes one HTML page") {
		t.Fatalf("report -o json: exit %d %s", code, stderr)
	}
}
