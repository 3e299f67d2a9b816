package cmd

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestGoldenOutput pins the human output (ASCII: stdout is not a terminal) of
// the seed stories: timelines, inspect and log tables. Set
// LEASEWAL_UPDATE_GOLDEN=1 to rewrite testdata/golden.
func TestGoldenOutput(t *testing.T) {
	t.Setenv("NO_COLOR", "")
	const at = "2026-01-01T00:10:00Z"
	cases := map[string][]string{
		"seed000_timeline_60":       {"--wal", seedsDir + "/lease_expiry.wal", "inspect", "T1", "--timeline", "--now", at, "COLUMNS=60"},
		"seed000_timeline_200":      {"--wal", seedsDir + "/lease_expiry.wal", "inspect", "T1", "--timeline", "--now", at, "COLUMNS=200"},
		"seed000_inspect_T1_60":     {"--wal", seedsDir + "/lease_expiry.wal", "inspect", "T1", "--now", at, "COLUMNS=60"},
		"seed000_inspect_T1_200":    {"--wal", seedsDir + "/lease_expiry.wal", "inspect", "T1", "--now", at, "COLUMNS=200"},
		"seed000_log_60":            {"--wal", seedsDir + "/lease_expiry.wal", "log", "COLUMNS=60"},
		"seed000_log_200":           {"--wal", seedsDir + "/lease_expiry.wal", "log", "COLUMNS=200"},
		"seed000_log_tsv":           {"--wal", seedsDir + "/lease_expiry.wal", "log", "-o", "tsv"},
		"seed000_inspect_wide":      {"--wal", seedsDir + "/lease_expiry.wal", "inspect", "--now", at, "-o", "wide", "--no-headers"},
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
			columns := 80
			if last := args[len(args)-1]; strings.HasPrefix(last, "COLUMNS=") {
				columns, _ = strconv.Atoi(strings.TrimPrefix(last, "COLUMNS="))
				args = args[:len(args)-1]
			}
			t.Setenv("COLUMNS", strconv.Itoa(columns))
			var out, errOut bytes.Buffer
			if code := Main(args, strings.NewReader(""), &out, &errOut); code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			if bytes.Contains(out.Bytes(), []byte("\x1b[")) {
				t.Fatal("colors in output that is not a terminal")
			}
			if !slices.Contains(args, "wide") && !slices.Contains(args, "tsv") {
				for _, line := range strings.Split(out.String(), "\n") {
					if displayWidth(line) > columns {
						t.Fatalf("a line of %d cells on a %d-column terminal: %q", displayWidth(line), columns, line)
					}
				}
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

// TestNoLineWiderThanTheTerminal: for random histories and random widths,
// every line of every table and timeline fits the terminal.
func TestNoLineWiderThanTheTerminal(t *testing.T) {
	walPath := historyWAL(t, 600)
	rng := rand.New(rand.NewPCG(7, 7))
	lines := 0
	for range 25 {
		columns := 40 + rng.IntN(160)
		t.Setenv("COLUMNS", strconv.Itoa(columns))
		task := fmt.Sprintf("T%d", 1+rng.IntN(60))
		for _, args := range [][]string{{"inspect"}, {"inspect", task}, {"inspect", task, "--timeline"}, {"log", "--task", task}, {"worklease", "inspect"}, {"inspect", "--workers"}} {
			var out, errOut bytes.Buffer
			code := Main(append([]string{"--wal", walPath, "--now", "2026-11-01T00:00:00Z"}, args...), strings.NewReader(""), &out, &errOut)
			if code != 0 && code != ExitNotFound {
				t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
			}
			for _, line := range strings.Split(out.String(), "\n") {
				lines++
				if displayWidth(line) > columns {
					t.Fatalf("%v on %d columns: a line of %d: %q", args, columns, displayWidth(line), line)
				}
			}
		}
	}
	t.Logf("%d lines of tables and timelines, each within its terminal's width", lines)
}

// TestWideCharactersFitTheTerminal: a payload and a queue of East Asian
// wide characters, two cells each (counted here without leasewal's or
// tablewriter's width code), are cut to the terminal's width, a cut
// payload ending with "…".
func TestWideCharactersFitTheTerminal(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	for _, args := range [][]string{{"--payload", strings.Repeat("漢", 40)}, {"--payload", "short", "--queue", "キュー"}} {
		if code, _, stderr := cli(append([]string{"--wal", walPath, "submit"}, args...)...); code != 0 {
			t.Fatal(stderr)
		}
	}
	cells := func(line string) int {
		n := 0
		for _, r := range line {
			n++
			if strings.ContainsRune("漢キュー", r) {
				n++
			}
		}
		return n
	}
	for _, columns := range []int{40, 60, 100, 140} {
		t.Setenv("COLUMNS", strconv.Itoa(columns))
		for _, args := range [][]string{{"inspect"}, {"inspect", "T1"}, {"inspect", "T1", "--timeline"}, {"log"}} {
			var out, errOut bytes.Buffer
			if code := Main(append([]string{"--wal", walPath}, args...), strings.NewReader(""), &out, &errOut); code != 0 {
				t.Fatalf("%v: exit %d: %s", args, code, errOut.String())
			}
			for _, line := range strings.Split(out.String(), "\n") {
				if cells(line) > columns {
					t.Errorf("%v on %d columns: a line of %d cells: %q", args, columns, cells(line), line)
				}
			}
			if columns == 100 && args[0] == "log" && !strings.Contains(out.String(), strings.Repeat("漢", 10)+"…") {
				t.Errorf("log on 100 columns does not show T1's payload cut with …:\n%s", out.String())
			}
		}
	}
}
