package cmd

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoldenOutput pins the human output (ASCII: stdout is not a terminal) of
// the seed stories: timelines, inspect and log tables. Set
// LEASEWAL_UPDATE_GOLDEN=1 to rewrite testdata/golden.
func TestGoldenOutput(t *testing.T) {
	t.Setenv("COLUMNS", "80")
	t.Setenv("NO_COLOR", "")
	const at = "2026-01-01T00:10:00Z"
	cases := map[string][]string{
		"seed000_timeline":          {"--wal", seedsDir + "/lease_expiry.wal", "inspect", "T1", "--timeline", "--now", at},
		"seed000_explicit_timeline": {"--wal", seedsDir + "/lease_expiry_explicit.wal", "inspect", "T1", "--timeline", "--now", at},
		"seed001_timeline":          {"--wal", seedsDir + "/happy_path.wal", "inspect", "T1", "--timeline", "--now", at},
		"seed000_inspect":           {"--wal", seedsDir + "/lease_expiry.wal", "inspect", "--now", at},
		"seed000_inspect_T1":        {"--wal", seedsDir + "/lease_expiry.wal", "inspect", "T1", "--now", at},
		"seed000_log":               {"--wal", seedsDir + "/lease_expiry.wal", "log"},
		"seed001_inspect":           {"--wal", seedsDir + "/happy_path.wal", "inspect", "--now", at},
		"seed001_log":               {"--wal", seedsDir + "/happy_path.wal", "log", "--absolute"},
	}
	update := os.Getenv("LEASEWAL_UPDATE_GOLDEN") == "1"
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := Main(args, strings.NewReader(""), &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			if bytes.Contains(out.Bytes(), []byte("\x1b[")) {
				t.Fatal("colors in output that is not a terminal")
			}
			golden := filepath.Join("..", "testdata", "golden", name+".txt")
			if update {
				writeGolden(t, golden, out.Bytes())
			}
			want, _ := os.ReadFile(golden)
			if !bytes.Equal(out.Bytes(), want) {
				t.Fatalf("%s differs:\n--- got\n%s--- want\n%s", golden, out.String(), want)
			}
		})
	}
}
