package cmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/wal"
)

// walOf writes bodies as correctly chained frames and returns the file's bytes.
func walOf(t *testing.T, bodies ...string) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "w.wal")
	l, err := wal.Create(path, []byte(bodies[0]), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range bodies[1:] {
		if _, err := l.Append([]byte(b)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	data, _ := os.ReadFile(path)
	return data
}

// lineStarts returns the byte offsets where each line of data starts.
func lineStarts(data []byte) []int {
	starts := []int{0}
	for i, c := range data {
		if c == '\n' && i+1 < len(data) {
			starts = append(starts, i+1)
		}
	}
	return starts
}

func mutate(data []byte, f func([]byte) []byte) []byte { return f(bytes.Clone(data)) }

// everyCommand is one invocation of each command that opens the WAL.
var everyCommand = [][]string{
	{"submit", "--payload", "P"}, {"lease", "--worker", "W"}, {"extend", "--task", "T1", "--lease", "L1"},
	{"heartbeat", "--worker", "W"}, {"complete", "--task", "T1", "--lease", "L1"},
	{"fail", "--task", "T1", "--lease", "L1", "--reason", "r"}, {"expire"}, {"inspect"}, {"log"}, {"verify"}, {"repair"},
	{"worklease", "acquire", "--domain", "D", "--offset", "1"}, {"worklease", "succeed", "--domain", "D", "--token", "K1"},
	{"worklease", "fail", "--domain", "D", "--token", "K1"}, {"worklease", "inspect"},
}

// TestBadFiles: each bad file gets a one-line message, the documented exit
// code, and stays byte-for-byte as it was, for a reader and a writer alike.
func TestBadFiles(t *testing.T) {
	c1, c2 := f(created1, 1), f(created2, 2)
	g3 := f(grant, 3, t0ms, "T1", "L1", 1, t0ms+30000)
	good := walOf(t, c1, c2, g3)
	lines := lineStarts(good)
	other := walOf(t, strings.Replace(c1, `"payload":"P"`, `"payload":"Q"`, 1), c2) // another history
	huge := `{"seq":2,"at":1767225600000,"type":"TaskCreated","task_id":"T2","payload":"` + strings.Repeat("x", wal.MaxBodySize) + `"}`
	cases := []struct {
		name string
		data []byte
		exit int
		msg  string
	}{
		{"no header", []byte("hello\nworld\n"), ExitDamaged, "not a leasewal WAL"},
		{"wrong magic", []byte("leasewol-wal v1\n"), ExitDamaged, "not a leasewal WAL"},
		{"future version", []byte("leasewal-wal v5\n"), ExitDamaged, "version 5 is not supported"},
		{"partial header", []byte("leasewal-w"), ExitDamaged, "not a leasewal WAL"},
		{"CRLF line ends", bytes.ReplaceAll(good, []byte("\n"), []byte("\r\n")), ExitDamaged, "not a leasewal WAL"},
		{"a CRLF record mid-file", mutate(good, func(b []byte) []byte {
			return append(append(b[:lines[2]-1:lines[2]-1], '\r', '\n'), good[lines[2]:]...)
		}), ExitDamaged, "record 1 at byte offset 16 is damaged"},
		{"a frame over the size limit", append(walOf(t, c1), "00000000 "+huge+"\n"...), ExitDamaged, "over the limit of"},
		{"an unknown record type", walOf(t, c1, `{"seq":2,"at":1767225600000,"type":"TaskTeleported","task_id":"T1"}`), ExitDamaged, `unknown record type "TaskTeleported"`},
		{"a sequence gap", walOf(t, c1, f(created2, 3)), ExitDamaged, "seq 3 follows seq 1"},
		{"time running backwards", walOf(t, c1, f(grant, 2, t0ms-1, "T1", "L1", 1, t0ms+30000)), ExitDamaged, "before the previous record"},
		{"a duplicate lease id", walOf(t, c1, c2, g3, f(grant, 4, t0ms, "T2", "L1", 1, t0ms+30000)), ExitDamaged, "lease id L1 does not increase"},
		{"a record for an unknown task", walOf(t, c1, f(grant, 2, t0ms, "T9", "L1", 1, t0ms+30000)), ExitDamaged, `unknown task "T9"`},
		{"invalid JSON inside a valid checksum", walOf(t, c1, `{"seq":2,"at":`+"1767225600000,}"), ExitDamaged, "not valid JSON"},
		{"an unknown field", walOf(t, c1, `{"seq":2,"at":1767225600000,"type":"TaskCreated","colour":"red"}`), ExitDamaged, `unknown field "colour"`},
		{"trailing data after the JSON", walOf(t, c1, c2+` {"seq":3}`), ExitDamaged, "trailing data"},
		{"a JSON array, not an object", walOf(t, c1, `[1,2,3]`), ExitDamaged, "not valid JSON"},
		{"seq zero", walOf(t, `{"seq":0,"at":1767225600000,"type":"TaskCreated","task_id":"T1"}`), ExitDamaged, "seq 0 follows seq 0"},
		{"a malformed task id", walOf(t, strings.Replace(c1, `"T1"`, `"task-1"`, 1)), ExitDamaged, "is not of the form T<n>"},
		{"TaskCreated without a retry policy", walOf(t, `{"seq":1,"at":1767225600000,"type":"TaskCreated","task_id":"T1","payload":"P","window":"5m0s","request_id":"R1"}`), ExitDamaged, "retry_policy is missing"},
		{"a work record with a negative offset", walOf(t, `{"seq":1,"at":1767225600000,"type":"WorkAcquired","domain":"D","offset":-4,"token":"K1"}`), ExitDamaged, "offset of 0 or more"},
		{"a bit flipped mid-file", mutate(good, func(b []byte) []byte { b[lines[2]+20] ^= 0x04; return b }), ExitDamaged, "record 2 at byte offset"},
		{"a zeroed block mid-file", mutate(good, func(b []byte) []byte { copy(b[lines[1]:lines[2]], make([]byte, lines[2]-lines[1])); return b }), ExitDamaged, "record 1 at byte offset 16 is damaged"},
		{"two records swapped", append(append(append([]byte{}, good[:lines[1]]...), good[lines[2]:lines[3]]...), append(good[lines[1]:lines[2]:lines[2]], good[lines[3]:]...)...), ExitDamaged, "checksum mismatch"},
		{"a record spliced in from another WAL", append(append(append([]byte{}, good[:lines[2]]...), other[lines[2]:]...), good[lines[3]:]...), ExitDamaged, "record 2 at byte offset"},
		{"a record deleted mid-file", append(append([]byte{}, good[:lines[1]]...), good[lines[2]:]...), ExitDamaged, "checksum mismatch"},
		{"a valid record's line end damaged", mutate(good, func(b []byte) []byte { b[lines[2]-1] = ' '; return b }), ExitDamaged, "line end is damaged"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "bad.wal")
			if err := os.WriteFile(path, c.data, 0o644); err != nil {
				t.Fatal(err)
			}
			for _, args := range everyCommand {
				var out, errOut bytes.Buffer
				code := Main(append([]string{"--wal", path, "-o", "json", "--now", "2030-01-01T00:00:00Z"}, args...), strings.NewReader(""), &out, &errOut)
				var e errorView
				_ = json.Unmarshal(out.Bytes(), &e)
				msg := errOut.String()
				if code != c.exit || !strings.Contains(msg, c.msg) || !strings.HasPrefix(msg, "leasewal: ") || strings.Count(msg, "\n") != 1 || e.Result != "ERROR" {
					t.Fatalf("%v: exit %d, stderr %q, stdout %q; want exit %d and %q", args, code, msg, out.String(), c.exit, c.msg)
				}
				if after, _ := os.ReadFile(path); !bytes.Equal(after, c.data) {
					t.Fatalf("%v changed the file", args)
				}
			}
		})
	}
	t.Logf("%d bad files, each refused by all %d commands with a one-line message and left unchanged", len(cases), len(everyCommand))
}

// TestAnEmptyFileIsANewWAL: an empty file (mktemp's) is a WAL with no
// record yet, as sqlite3 takes an empty file for a new database: readers
// say it is empty, and of writers racing to make it a WAL each keeps its
// acknowledged task (one replaces the file, the others append to it).
func TestAnEmptyFileIsANewWAL(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tmp.XXXX")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := cli("--wal", path, "inspect", "-o", "json")
	if code != 0 || !strings.Contains(out, `"tasks":[]`) || !strings.Contains(stderr, "is empty: nothing was ever submitted there") {
		t.Fatalf("inspect of an empty file: exit %d %s %s", code, out, stderr)
	}
	const writers = 8
	codes := make(chan int, writers)
	for i := range writers {
		go func() {
			code, _, _ := cli("--wal", path, "submit", "--payload", "p", "--request-id", fmt.Sprint("r", i))
			codes <- code
		}()
	}
	for range writers {
		if code := <-codes; code != 0 {
			t.Errorf("a submit to the empty file: exit %d", code)
		}
	}
	code, out, stderr = cli("--wal", path, "inspect", "-o", "json")
	if code != 0 || strings.Count(out, `"payload":"p"`) != writers {
		t.Fatalf("after %d submits: exit %d %s %s", writers, code, out, stderr)
	}
	if code, _, stderr := cli("--wal", path, "verify"); code != 0 {
		t.Fatal(stderr)
	}
}

func TestUnusableWALPaths(t *testing.T) {
	dir := t.TempDir()
	cases := map[string][]string{
		"a directory":     {"--wal", dir, "inspect"},
		"a directory (w)": {"--wal", dir, "submit", "--payload", "P"},
	}
	if os.Geteuid() != 0 { // root reads and writes whatever it likes
		locked := filepath.Join(dir, "locked.wal")
		os.WriteFile(locked, walOf(t, f(created1, 1)), 0o200)
		readonly := filepath.Join(dir, "readonly.wal")
		os.WriteFile(readonly, walOf(t, f(created1, 1)), 0o444)
		cases["no read permission"] = []string{"--wal", locked, "inspect"}
		cases["no write permission for a writer"] = []string{"--wal", readonly, "submit", "--payload", "P"}
	}
	for name, args := range cases {
		var out, errOut bytes.Buffer
		if code := Main(args, strings.NewReader(""), &out, &errOut); code != ExitUsage || !strings.HasPrefix(errOut.String(), "leasewal: ") {
			t.Fatalf("%s: exit %d %q", name, code, errOut.String())
		}
	}
}
