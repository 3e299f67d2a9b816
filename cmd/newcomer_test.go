package cmd

import (
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/internal/runner"
	"github.com/leasewal/leasewal/internal/testwait"
	"github.com/leasewal/leasewal/state"
)

// The rough edges of issue 22 that need more than a command line to show.

// Point 5: a wrong or missing token through --server is one line on stderr
// that names --token-file, nothing on stdout in table mode, and the error
// document in JSON.
func TestWrongTokenThroughServer(t *testing.T) {
	_, s := testServer(t, "secret")
	ts := httptest.NewServer(s)
	defer ts.Close()
	wrong := filepath.Join(t.TempDir(), "wrong")
	if err := os.WriteFile(wrong, []byte("nope\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := cli("--server", ts.URL, "--token-file", wrong, "inspect")
	if code != ExitUsage || out != "" || !strings.Contains(stderr, "refused the token") || !strings.Contains(stderr, "--token-file") || strings.Contains(stderr, "Authorization") {
		t.Fatalf("wrong token, table: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, stderr = cli("--server", ts.URL, "inspect")
	if code != ExitUsage || out != "" || !strings.Contains(stderr, "needs a token") {
		t.Fatalf("no token, table: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, _ = cli("--server", ts.URL, "--token-file", wrong, "-o", "json", "inspect")
	if code != ExitUsage || !strings.Contains(out, `"error":"Unauthorized"`) {
		t.Fatalf("wrong token, json: exit %d, stdout %q", code, out)
	}
}

// failedTask is a WAL whose one task FAILED with a long reason: its table
// row has LEASE, WORKER, EXPIRY and READY empty.
func failedTask(t *testing.T) string {
	t.Helper()
	walPath := filepath.Join(t.TempDir(), "q.wal")
	for _, args := range [][]string{
		{"submit", "--payload", "P", "--max-attempts", "1", "--now", "2026-01-01T00:00:00Z"},
		{"lease", "--worker", "W1", "--now", "+1s"},
		{"fail", "--task", "T1", "--lease", "L1", "--reason", "the upstream answered 503 three times", "--now", "+1s"},
	} {
		if code, _, stderr := cli(append([]string{"--wal", walPath}, args...)...); code != 0 {
			t.Fatalf("%v: %s", args, stderr)
		}
	}
	return walPath
}

// Point 9: a column empty in every row is dropped before any cell is cut,
// and the timestamps log --absolute was asked for are not cut.
func TestEmptyColumnsGoBeforeCellsAreCut(t *testing.T) {
	walPath := failedTask(t)
	t.Setenv("COLUMNS", "80")
	_, out, _ := cli("--wal", walPath, "inspect", "--state", "FAILED", "--now", "+1s")
	for _, empty := range []string{"LEASE", "WORKER", "EXPIRY", "READY"} {
		if strings.Contains(out, empty) {
			t.Errorf("the column %s, empty in every row, is still drawn:\n%s", empty, out)
		}
	}
	if !strings.Contains(out, "attempts exhausted: the upstream answered") {
		t.Errorf("the reason was cut while empty columns took room:\n%s", out)
	}
	_, out, _ = cli("--wal", walPath, "log", "--absolute")
	for _, stamp := range []string{"2026-01-01T00:00:00.000Z", "2026-01-01T00:00:01.000Z", "2026-01-01T00:00:02.000Z"} {
		if !strings.Contains(out, stamp) {
			t.Errorf("log --absolute cut the timestamp %s:\n%s", stamp, out)
		}
	}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if displayWidth(line) > 80 {
			t.Errorf("a line of %d cells on 80 columns: %q", displayWidth(line), line)
		}
	}
}

// Point 10: -o wide caps a cell and says so in it.
func TestWideCellHasACap(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	big := filepath.Join(t.TempDir(), "big")
	if err := os.WriteFile(big, []byte(strings.Repeat("y", state.MaxPayloadBytes)), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli("--wal", walPath, "submit", "--payload-file", big); code != 0 {
		t.Fatal(stderr)
	}
	_, out, _ := cli("--wal", walPath, "inspect", "T1", "-o", "wide")
	if len(out) > 20_000 || !regexp.MustCompile(`… \(65,[0-9]{3} bytes; -o json for all\)`).MatchString(out) {
		t.Fatalf("inspect -o wide of a 64 KiB payload: %d bytes, %q…", len(out), out[:min(len(out), 300)])
	}
	if _, out, _ = cli("--wal", walPath, "inspect", "T1", "-o", "json"); !strings.Contains(out, strings.Repeat("y", state.MaxPayloadBytes)) {
		t.Fatal("json lost the payload")
	}
}

// Point 11: log --follow draws the records so far and the new ones in one
// format: a header once, aligned columns, an empty cell keeping its place.
func TestFollowIsOneFormat(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	for _, args := range [][]string{{"submit", "--payload", "one"}, {"lease", "--worker", "W1"}} {
		if code, _, stderr := cli(append([]string{"--wal", walPath}, args...)...); code != 0 {
			t.Fatal(stderr)
		}
	}
	t.Setenv("COLUMNS", "120")
	out := &closingReader{want: "TaskCompleted"}
	done := make(chan string, 1)
	go func() {
		code, stderr := cliTo(nil, out, "--wal", walPath, "log", "--follow")
		done <- fmt.Sprintf("exit %d %s", code, stderr)
	}()
	testwait.Until(t, "the records so far", func() bool { return strings.Contains(out.String(), "LeaseGranted") }, out.String)
	if code, _, stderr := cli("--wal", walPath, "complete", "--task", "T1", "--lease", "L1"); code != 0 {
		t.Fatal(stderr)
	}
	if end := <-done; end != "exit 0 " {
		t.Fatalf("follow ended with %s", end)
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "SEQ") || strings.ContainsAny(out.String(), "│┌└") {
		t.Fatalf("want a header and 3 lines, no box:\n%s", out.String())
	}
	// Every line's ACTOR starts where the header's does, the completion's
	// empty WORKER cell included.
	actor := strings.Index(lines[0], "ACTOR") // the header is ASCII: a byte index is a column
	for _, line := range lines[1:] {
		if cells := []rune(line); len(cells) <= actor || cells[actor-1] != ' ' || cells[actor] == ' ' {
			t.Errorf("the actor is not under ACTOR:\n%s\n%s", lines[0], line)
		}
	}
}

// Point 13: run's lines keep their columns when the outcome is colored.
func TestRunLinesPadByDisplayWidth(t *testing.T) {
	var b strings.Builder
	for _, outcome := range []string{"RETRY", "COMMITTED", "LOST"} {
		exit := 0
		env{Config: Config{Color: true}}.printRunLine(&b, runner.Line{TaskID: "T1", LeaseID: "L1", Attempt: 1, Outcome: outcome, Exit: &exit, Seconds: 1})
	}
	var columns []int
	for _, line := range strings.Split(strings.TrimRight(b.String(), "\n"), "\n") {
		plain := regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(line, "")
		columns = append(columns, strings.Index(plain, "exit"))
	}
	if columns[0] != columns[1] || columns[1] != columns[2] {
		t.Fatalf("'exit' at columns %v:\n%s", columns, b.String())
	}
}

// Point 14: every mark of a timeline is distinct, in both glyph sets.
func TestTimelineMarksAreDistinct(t *testing.T) {
	for name, g := range map[string]glyphs{"ascii": asciiGlyphs, "unicode": unicodeGlyphs} {
		seen := map[string]string{g.mark: "a cancelled late completion"}
		for end, glyph := range g.end {
			if other, ok := seen[glyph]; ok {
				t.Errorf("%s: %q marks both %s and %s", name, glyph, end, other)
			}
			seen[glyph] = end
		}
	}
}

// TestARefusalNamesWhatToFix: an empty task, queue, name or file given as an
// argument is refused as bad usage (exit 2) naming that argument as the
// usage line does ("QUEUE is empty"); a refused value ends with the flag
// that gave it or the argument ("fix QUEUE"), never a flag the command does
// not have; what follows "--" is passed on as given, and nothing is written.
func TestARefusalNamesWhatToFix(t *testing.T) {
	walPath := failedTask(t)
	before, err := os.ReadFile(walPath)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"pause", ""}, "QUEUE is empty"},
		{[]string{"resume", ""}, "QUEUE is empty"},
		{[]string{"queue", "limit", "", "3"}, "QUEUE is empty"},
		{[]string{"queue", "rate", "mail", ""}, "RATE is empty"},
		{[]string{"inspect", "T1", ""}, "TASK is empty"},
		{[]string{"wait", "", "--timeout", "1s"}, "TASK is empty"},
		{[]string{"why", ""}, "TASK is empty"},
		{[]string{"requeue", ""}, "TASK is empty"},
		{[]string{"redact", "", "--reason", "gdpr"}, "TASK is empty"},
		{[]string{"schedule", "add", "", "--every", "1m", "--", "--payload", ""}, "NAME is empty"},
		{[]string{"schedule", "rm", ""}, "NAME is empty"},
		{[]string{"backup", ""}, "DEST is empty"},
		{[]string{"submit", "--payload", "x", "--request-id", "a\tb"}, "; fix --request-id\n"},
		{[]string{"lease", "--worker", "w", "--request-id", "a\tb"}, "; fix --request-id\n"},
		{[]string{"submit", "--payload", "x", "--queue", "a\tb"}, "; fix --queue\n"},
		{[]string{"lease", "--worker", "a\tb"}, "; fix --worker\n"},
		{[]string{"pause", "a\tb"}, "; fix QUEUE\n"},
		{[]string{"resume", "a\tb"}, "; fix QUEUE\n"},
		{[]string{"queue", "limit", "a\tb", "3"}, "; fix QUEUE\n"},
		{[]string{"queue", "rate", "a\tb", "5/s"}, "; fix QUEUE\n"},
	} {
		code, out, errOut := cli(append([]string{"--wal", walPath}, c.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, c.says) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("leasewal %q: exit %d, stdout %q, stderr %q; want exit 2 and one line saying %q", c.args, code, out, errOut, c.says)
		}
	}
	if after, err := os.ReadFile(walPath); err != nil || string(after) != string(before) {
		t.Errorf("the WAL changed (%v)", err)
	}
}
