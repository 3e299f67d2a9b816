package scenarios

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func countRecords(t *testing.T, walPath string) int {
	t.Helper()
	data, err := os.ReadFile(walPath)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(data, []byte("\n")) - 1 // complete lines, less the header; a torn tail has no newline
}

// crashCase is one writing command: how to set it up, and what a blind retry
// answers when the crashed attempt's record did or did not reach the WAL.
type crashCase struct {
	name         string
	setup        [][]string
	cmd          []string
	durableAt    []string // the points at which the record is in the WAL
	retryDurable string   // a substring of the retry's answer if the record is in the WAL
	exitDurable  int
	retryLost    string // ... and if it is not
}

var afterWrite = []string{"after-write", "after-sync"}

const t0 = "2026-01-01T00:00:00Z"

var (
	oneTask   = [][]string{{"submit", "--payload", "P", "--now", t0}}
	leasedOne = [][]string{{"submit", "--payload", "P", "--now", t0}, {"lease", "--worker", "W1", "--now", t0}}
	acquired  = [][]string{{"worklease", "acquire", "--domain", "D", "--offset", "1", "--now", t0}}
)

var crashCases = []crashCase{
	{"submit creating the WAL", nil, []string{"submit", "--payload", "P", "--request-id", "job", "--now", t0},
		[]string{"after-sync"}, `"duplicate":true`, 0, `"duplicate":false`},
	{"submit --request-id", oneTask, []string{"submit", "--payload", "Q", "--request-id", "job", "--now", t0},
		afterWrite, `"task_id":"T2","request_id":"job","duplicate":true`, 0, `"task_id":"T2","request_id":"job","duplicate":false`},
	{"submit without a request id", oneTask, []string{"submit", "--payload", "Q", "--now", t0},
		afterWrite, `"task_id":"T3"`, 0, `"task_id":"T2"`},
	{"lease --request-id", oneTask, []string{"lease", "--worker", "W1", "--request-id", "poll", "--now", t0},
		afterWrite, `"lease_id":"L1","worker_id":"W1","attempt":1,"expiry":"2026-01-01T00:00:30.000Z","deadline":null,"payload":"P","duplicate":true`, 0, `"lease_id":"L1","worker_id":"W1","attempt":1,"expiry":"2026-01-01T00:00:30.000Z","deadline":null,"payload":"P","duplicate":false`},
	{"lease without a request id", oneTask, []string{"lease", "--worker", "W1", "--now", t0},
		afterWrite, `"result":"EMPTY"`, 4, `"result":"LEASED"`},
	{"extend", leasedOne, []string{"extend", "--task", "T1", "--lease", "L1", "--duration", "1m", "--now", t0},
		afterWrite, `"result":"EXTENDED","task_id":"T1","lease_id":"L1","expiry":"2026-01-01T00:01:00.000Z"`, 0, `"result":"EXTENDED","task_id":"T1","lease_id":"L1","expiry":"2026-01-01T00:01:00.000Z"`},
	{"complete", leasedOne, []string{"complete", "--task", "T1", "--lease", "L1", "--now", t0},
		afterWrite, `"result":"COMMITTED","task_id":"T1","lease_id":"L1","duplicate":true`, 0, `"result":"COMMITTED","task_id":"T1","lease_id":"L1","duplicate":false`},
	{"complete (late: cancelled)", leasedOne, []string{"complete", "--task", "T1", "--lease", "L1", "--now", "2026-01-01T00:00:40Z"},
		afterWrite, `"result":"CANCELLED"`, 3, `"result":"CANCELLED"`},
	{"fail", leasedOne, []string{"fail", "--task", "T1", "--lease", "L1", "--reason", "x", "--now", t0},
		afterWrite, `"result":"RETRY","task_id":"T1","lease_id":"L1","state":"WAITING","attempt":1,"not_before":"2026-01-01T00:00:01.000Z","duplicate":true`, 0, `"duplicate":false`},
	{"release", leasedOne, []string{"release", "--task", "T1", "--lease", "L1", "--now", t0},
		afterWrite, `"result":"RELEASED","task_id":"T1","lease_id":"L1","state":"WAITING","attempt":0,"not_before":"2026-01-01T00:00:00.000Z","duplicate":true`, 0, `"duplicate":false`},
	{"expire", leasedOne, []string{"expire", "--now", "2026-01-01T00:00:30Z"},
		afterWrite, `{"result":"OK","transitions":[]}`, 0, `"type":"LeaseExpired"`},
	{"worklease acquire", nil, []string{"worklease", "acquire", "--domain", "D", "--offset", "1", "--now", t0},
		[]string{"after-sync"}, `"result":"ALREADY_ACQUIRED","domain":"D","offset":1,"token":"K1"`, 0, `"result":"ACQUIRED","domain":"D","offset":1,"token":"K1"`},
	{"worklease succeed", acquired, []string{"worklease", "succeed", "--domain", "D", "--token", "K1", "--now", t0},
		afterWrite, `"error":"LeaseNotFound"`, 7, `"result":"NO_BACKLOG"`},
	{"worklease fail", acquired, []string{"worklease", "fail", "--domain", "D", "--token", "K1", "--now", t0},
		afterWrite, `"retry_count":2`, 0, `"retry_count":1`},
}

var crashPoints = []string{"before-write", "mid-write", "after-write", "after-sync"}

// TestCrashWindows kills every writing command at every point of its append
// (SIGKILL, as a crash leaves the process) and checks that the next
// invocation sees a consistent WAL and what a blind retry of the same command
// gets: the durable record's idempotent answer, or a fresh one.
func TestCrashWindows(t *testing.T) {
	t.Parallel()
	kills := 0
	for _, c := range crashCases {
		for _, point := range crashPoints {
			t.Run(c.name+"/"+point, func(t *testing.T) {
				dir := t.TempDir()
				walPath := filepath.Join(dir, "q.wal")
				for _, s := range c.setup {
					if code, out, errOut := run(t, walPath, nil, s...); code != 0 {
						t.Fatalf("setup %v: exit %d %s %s", s, code, out, errOut)
					}
				}
				before := countRecords(t, walPath)
				code, out, _ := run(t, walPath, []string{"LEASEWAL_FAILPOINT=" + point}, append(c.cmd, "-o", "json")...)
				if code != -int(syscall.SIGKILL) || out != "" {
					t.Fatalf("the command was not killed before answering: exit %d, stdout %q", code, out)
				}
				kills++
				durable := slices.Contains(c.durableAt, point)
				if got, want := countRecords(t, walPath), before+boolInt(durable); got != want {
					t.Fatalf("%d records after the crash, want %d", got, want)
				}
				code, out, errOut := run(t, walPath, nil, "verify", "-o", "json")
				if before+boolInt(durable) > 0 && code != 0 {
					t.Fatalf("verify after the crash: exit %d %s %s", code, out, errOut)
				}
				if point == "mid-write" && before > 0 && !strings.Contains(errOut, "warning: ignoring") {
					t.Fatalf("a reader must warn of the torn tail: %q", errOut)
				}
				want, wantExit := c.retryLost, 0
				if durable {
					want, wantExit = c.retryDurable, c.exitDurable
				}
				if c.name == "complete (late: cancelled)" {
					wantExit = 3
				}
				code, out, errOut = run(t, walPath, nil, append(c.cmd, "-o", "json")...)
				if code != wantExit || !strings.Contains(out, want) {
					t.Fatalf("the retry answered exit %d %s %s; want exit %d and %s", code, out, errOut, wantExit, want)
				}
				if code, out, _ := run(t, walPath, nil, "verify", "-o", "json"); code != 0 || !strings.Contains(out, `"torn_tail_bytes":0`) {
					t.Fatalf("verify after the retry: exit %d %s", code, out)
				}
			})
		}
	}
	t.Logf("%d commands killed at %d points each: %d crashes, every WAL consistent and every retry as documented", len(crashCases), len(crashPoints), kills)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestCompactionCrashWindows kills a compaction at every step of its
// replacement of the WAL (half the new file written, the new file fsynced,
// renamed, the directory fsynced) and checks that the WAL is then the old
// one or the new one, whole: it verifies, answers exactly as before the
// compaction, takes a write, and a second compaction succeeds with a history
// that verifies.
func TestCompactionCrashWindows(t *testing.T) {
	t.Parallel()
	setup := [][]string{
		{"submit", "--payload", "A", "--request-id", "a", "--now", t0},
		{"submit", "--payload", "B", "--now", t0},
		{"submit", "--payload", "C", "--now", t0},
		{"lease", "--worker", "W1", "--now", t0},
		{"complete", "--task", "T1", "--lease", "L1", "--now", t0},
		{"lease", "--worker", "W1", "--now", t0},
		{"worklease", "acquire", "--domain", "D", "--offset", "1", "--now", t0},
	}
	state := func(walPath string) string {
		_, tasks, _ := run(t, walPath, nil, "inspect", "-o", "json", "--now", t0)
		_, domains, _ := run(t, walPath, nil, "worklease", "inspect", "-o", "json", "--now", t0)
		_, retry, _ := run(t, walPath, nil, "submit", "--payload", "A", "--request-id", "a", "--now", t0, "-o", "json")
		return tasks + domains + retry
	}
	for _, point := range []string{"compact-partial", "compact-synced", "compact-renamed", "compact-done"} {
		t.Run(point, func(t *testing.T) {
			walPath := filepath.Join(t.TempDir(), "q.wal")
			for _, s := range setup {
				if code, out, errOut := run(t, walPath, nil, s...); code != 0 {
					t.Fatalf("setup %v: exit %d %s %s", s, code, out, errOut)
				}
			}
			want := state(walPath)
			code, out, _ := run(t, walPath, []string{"LEASEWAL_FAILPOINT=" + point}, "compact", "--now", t0, "-o", "json")
			if code != -int(syscall.SIGKILL) || out != "" {
				t.Fatalf("the compaction was not killed: exit %d %s", code, out)
			}
			data, _ := os.ReadFile(walPath)
			renamed := point == "compact-renamed" || point == "compact-done"
			if got := bytes.HasPrefix(data, []byte("leasewal-wal v3\n")); got != renamed {
				t.Fatalf("after a crash at %s the WAL is the compacted one: %v", point, got)
			}
			if code, out, errOut := run(t, walPath, nil, "verify", "-o", "json"); code != 0 {
				t.Fatalf("verify after the crash: exit %d %s %s", code, out, errOut)
			}
			if got := state(walPath); got != want {
				t.Fatalf("after the crash the WAL answers\n%s\nwant\n%s", got, want)
			}
			if code, out, errOut := run(t, walPath, nil, "submit", "--payload", "D", "--now", t0, "-o", "json"); code != 0 {
				t.Fatalf("a write after the crash: exit %d %s %s", code, out, errOut)
			}
			if code, out, errOut := run(t, walPath, nil, "compact", "--now", t0, "-o", "json"); code != 0 {
				t.Fatalf("the compaction after the crash: exit %d %s %s", code, out, errOut)
			}
			if code, out, errOut := run(t, walPath, nil, "verify", "--history", "-o", "json"); code != 0 {
				t.Fatalf("verify --history: exit %d %s %s", code, out, errOut)
			}
			if leftovers, _ := filepath.Glob(walPath + ".compacting-*"); len(leftovers) > 0 {
				t.Fatalf("leftovers %v", leftovers)
			}
		})
	}
}
