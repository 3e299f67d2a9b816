package cmd

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/api"
)

// The seed traces are acceptance tests. Each golden WAL in testdata/seeds is
// written by leasewal's own commands (rebuilt here byte for byte), passes
// verify --expect, and after each record shows the seed's "State After Apply".
// Set LEASEWAL_UPDATE_GOLDEN=1 to rewrite the golden files.

const seedsDir = "../testdata/seeds"

// seedStep is one "State After Apply" block of a seed.
type seedStep struct {
	until   int64  // inspect --until this record ...
	now     string // ... or, with until 0, the WAL cut after record cut inspected at now
	cut     int
	state   string
	attempt int
	lease   string
}

type seedTrace struct {
	name     string
	commands [][]string // each run with --wal, --actor seed
	exitCode []int
	finalNow string
	steps    []seedStep
}

// The seeds' submits name the window and backoff their WALs were written
// with (a 5m window, no backoff), which are not the defaults.
var seedTraces = []seedTrace{
	{
		name: "happy_path", // seed 001
		commands: [][]string{
			{"submit", "--payload", "P", "--window", "5m", "--backoff", "0s", "--backoff-max", "0s", "--request-id", "R1", "--now", "2026-01-01T00:00:00Z"},
			{"lease", "--worker", "W1", "--duration", "30s", "--now", "2026-01-01T00:00:01Z"},
			{"complete", "--task", "T1", "--lease", "L1", "--now", "2026-01-01T00:00:20Z"},
		},
		exitCode: []int{0, 0, 0},
		finalNow: "2026-01-01T00:10:00Z",
		steps: []seedStep{
			{until: 1, state: "WAITING", attempt: 0},
			{until: 2, state: "LEASED", attempt: 1, lease: "L1"},
			{until: 3, state: "COMPLETED", attempt: 1},
		},
	},
	{
		name: "lease_expiry", // seed 000 as the seed writes it: no record between the grants
		commands: [][]string{
			{"submit", "--payload", "P", "--window", "5m", "--backoff", "0s", "--backoff-max", "0s", "--now", "2026-01-01T00:00:00Z"},
			{"lease", "--worker", "W1", "--duration", "30s", "--now", "2026-01-01T00:00:00Z"},
			{"lease", "--worker", "W2", "--duration", "30s", "--now", "2026-01-01T00:00:40Z"},
			{"complete", "--task", "T1", "--lease", "L2", "--now", "2026-01-01T00:00:50Z"},
			{"complete", "--task", "T1", "--lease", "L1", "--now", "2026-01-01T00:00:55Z"},
		},
		exitCode: []int{0, 0, 0, 0, 3},
		finalNow: "2026-01-01T00:10:00Z",
		steps: []seedStep{
			{until: 1, state: "WAITING", attempt: 0},
			{until: 2, state: "LEASED", attempt: 1, lease: "L1"},
			{cut: 2, now: "2026-01-01T00:00:31Z", state: "WAITING", attempt: 1}, // step 4: the expiry is a fact of time
			{until: 3, state: "LEASED", attempt: 2, lease: "L2"},
			{until: 4, state: "COMPLETED", attempt: 2},
			{until: 5, state: "COMPLETED", attempt: 2},
		},
	},
	{
		name: "lease_expiry_explicit", // seed 000 with the expiry written down by `expire`
		commands: [][]string{
			{"submit", "--payload", "P", "--window", "5m", "--backoff", "0s", "--backoff-max", "0s", "--now", "2026-01-01T00:00:00Z"},
			{"lease", "--worker", "W1", "--duration", "30s", "--now", "2026-01-01T00:00:00Z"},
			{"expire", "--now", "2026-01-01T00:00:31Z"},
			{"lease", "--worker", "W2", "--duration", "30s", "--now", "2026-01-01T00:00:40Z"},
			{"complete", "--task", "T1", "--lease", "L2", "--now", "2026-01-01T00:00:50Z"},
			{"complete", "--task", "T1", "--lease", "L1", "--now", "2026-01-01T00:00:55Z"},
		},
		exitCode: []int{0, 0, 0, 0, 0, 3},
		finalNow: "2026-01-01T00:10:00Z",
		steps: []seedStep{
			{until: 1, state: "WAITING", attempt: 0},
			{until: 2, state: "LEASED", attempt: 1, lease: "L1"},
			{until: 3, state: "WAITING", attempt: 1},
			{until: 4, state: "LEASED", attempt: 2, lease: "L2"},
			{until: 5, state: "COMPLETED", attempt: 2},
			{until: 6, state: "COMPLETED", attempt: 2},
		},
	},
}

func TestSeedTraces(t *testing.T) {
	update := os.Getenv("LEASEWAL_UPDATE_GOLDEN") == "1"
	for _, tr := range seedTraces {
		t.Run(tr.name, func(t *testing.T) {
			walPath := filepath.Join(t.TempDir(), tr.name+".wal")
			for i, c := range tr.commands {
				args := append([]string{"--wal", walPath, "--actor", "seed", "-o", "json"}, c...)
				if code, out, _ := cli(args...); code != tr.exitCode[i] {
					t.Fatalf("%v: exit %d, want %d: %s", c, code, tr.exitCode[i], out)
				}
			}
			golden := filepath.Join(seedsDir, tr.name+".wal")
			expect := filepath.Join(seedsDir, tr.name+".expect.json")
			built, _ := os.ReadFile(walPath)
			if update {
				writeGolden(t, golden, built)
				_, final, _ := cli("--wal", walPath, "inspect", "-o", "json", "--now", tr.finalNow)
				writeGolden(t, expect, []byte(final))
			}
			if want, _ := os.ReadFile(golden); !bytes.Equal(built, want) {
				t.Fatalf("the commands no longer reproduce %s record for record:\n got  %s\n want %s", golden, built, want)
			}
			if code, out, _ := cli("--wal", golden, "verify", "--expect", expect, "--now", tr.finalNow, "-o", "json"); code != 0 {
				t.Fatalf("verify --expect: exit %d: %s", code, out)
			}
			for _, step := range tr.steps {
				checkSeedStep(t, golden, step)
			}
		})
	}
}

func writeGolden(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func checkSeedStep(t *testing.T, golden string, step seedStep) {
	t.Helper()
	args := []string{"--wal", golden, "inspect", "T1", "-o", "json"}
	if step.until > 0 {
		args = append(args, "--until", strconv.FormatInt(step.until, 10))
	} else {
		args = []string{"--wal", cutWAL(t, golden, step.cut), "inspect", "T1", "-o", "json", "--now", step.now}
	}
	code, out, _ := cli(args...)
	if code != 0 {
		t.Fatalf("%v: exit %d", args, code)
	}
	var v api.Inspect
	if err := json.Unmarshal([]byte(out), &v); err != nil || len(v.Tasks) != 1 {
		t.Fatalf("%v: %v %s", args, err, out)
	}
	got := v.Tasks[0]
	if got.State != step.state || got.Attempt != step.attempt || deref(got.LeaseID) != step.lease {
		t.Fatalf("%v: state %s attempt %d lease %q; the seed says %s attempt %d lease %q",
			args, got.State, got.Attempt, deref(got.LeaseID), step.state, step.attempt, step.lease)
	}
}

// cutWAL copies the header and the first n records of a WAL.
func cutWAL(t *testing.T, path string, n int) string {
	t.Helper()
	data, _ := os.ReadFile(path)
	lines := strings.SplitAfter(string(data), "\n")
	out := filepath.Join(t.TempDir(), "prefix.wal")
	writeGolden(t, out, []byte(strings.Join(lines[:n+1], "")))
	return out
}
