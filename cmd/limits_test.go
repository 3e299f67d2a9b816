package cmd

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/limits"
	"github.com/leasewal/leasewal/state"
)

// door is how a value for one field of the table of limits is sent: as
// the command line's arguments and as an HTTP request (path and body), on
// a WAL that setup prepared. A value is given as the flag's text; the
// body holds it as JSON (a number as a number).
type door struct {
	setup func(t *testing.T, wal string) // makes what the request acts on (nil: nothing)
	cli   func(v string) []string
	path  string
	body  func(v string) string
	// okExits are the exit codes of a request taken, which acts on what
	// setup made (0), or finds nothing there (4, 7 for a reference).
	okExits []int
	// noAtLimit checks only the values past the limit (a time zone of 200
	// bytes names no zone).
	noAtLimit bool
	// optional says that an empty value means "none given", not a value.
	optional bool
}

// quoted is v as a JSON string, its bytes as they are: one that is not
// UTF-8 stays so (encoding/json would write U+FFFD).
func quoted(v string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// leased makes T1, leased to W under L1.
func leased(t *testing.T, wal string) {
	t.Helper()
	for _, args := range [][]string{{"submit", "--payload", "p"}, {"lease", "--worker", "W"}} {
		if code, _, stderr := cli(append([]string{"--wal", wal}, args...)...); code != 0 {
			t.Fatal(stderr)
		}
	}
}

// acquired makes domain d's offset 0 acquired under K1.
func acquired(t *testing.T, wal string) {
	t.Helper()
	if code, _, stderr := cli("--wal", wal, "worklease", "acquire", "--domain", "d", "--offset", "0"); code != 0 {
		t.Fatal(stderr)
	}
}

// doors are the ways every field of the table reaches leasewal, by the
// field's limit.
var doors = map[limits.Limit]door{
	limits.Payload: {cli: func(v string) []string { return []string{"submit", "--payload", v} }, path: "submit",
		body: func(v string) string { return `{"payload":` + quoted(v) + `}` }},
	limits.Result: {setup: leased, cli: func(v string) []string { return []string{"complete", "--task", "T1", "--lease", "L1", "--result", v} }, path: "complete",
		body: func(v string) string { return `{"task":"T1","lease":"L1","result":` + quoted(v) + `}` }},
	limits.Reason: {setup: leased, cli: func(v string) []string { return []string{"fail", "--task", "T1", "--lease", "L1", "--reason", v} }, path: "fail",
		body: func(v string) string { return `{"task":"T1","lease":"L1","reason":` + quoted(v) + `}` }},
	limits.PauseReason: {cli: func(v string) []string { return []string{"pause", "q", "--reason", v} }, path: "pause",
		body: func(v string) string { return `{"queue":"q","reason":` + quoted(v) + `}` }},
	limits.Worker: {setup: func(t *testing.T, wal string) { cli("--wal", wal, "submit", "--payload", "p") }, cli: func(v string) []string { return []string{"lease", "--worker", v} }, path: "lease",
		body: func(v string) string { return `{"worker":` + quoted(v) + `}` }},
	limits.RequestID: {cli: func(v string) []string { return []string{"submit", "--payload", "p", "--request-id", v} }, path: "submit",
		body: func(v string) string { return `{"payload":"p","request_id":` + quoted(v) + `}` }, optional: true},
	limits.Queue: {cli: func(v string) []string { return []string{"submit", "--payload", "p", "--queue", v} }, path: "submit",
		body: func(v string) string { return `{"payload":"p","queue":` + quoted(v) + `}` }, optional: true},
	limits.Domain: {cli: func(v string) []string { return []string{"worklease", "acquire", "--domain", v, "--offset", "0"} }, path: "worklease/acquire",
		body: func(v string) string { return `{"domain":` + quoted(v) + `,"offset":0}` }},
	limits.Schedule: {cli: func(v string) []string {
		return []string{"schedule", "add", v, "--every", "1m", "--", "--payload", "p"}
	}, path: "schedule/add",
		body: func(v string) string { return `{"name":` + quoted(v) + `,"every":"1m","task":{"payload":"p"}}` }},
	limits.TaskID: {cli: func(v string) []string { return []string{"why", v} }, path: "why",
		body: func(v string) string { return `{"task":` + quoted(v) + `}` }, okExits: []int{4}},
	limits.LeaseID: {setup: leased, cli: func(v string) []string { return []string{"extend", "--task", "T1", "--lease", v} }, path: "extend",
		body: func(v string) string { return `{"task":"T1","lease":` + quoted(v) + `}` }, okExits: []int{2, 4}, noAtLimit: true},
	limits.Token: {setup: acquired, cli: func(v string) []string { return []string{"worklease", "succeed", "--domain", "d", "--token", v} }, path: "worklease/succeed",
		body: func(v string) string { return `{"domain":"d","token":` + quoted(v) + `}` }, noAtLimit: true},
	limits.Actor: {cli: func(v string) []string { return []string{"submit", "--payload", "p", "--actor", v} }, path: "submit",
		body: func(v string) string { return `{"payload":"p","actor":` + quoted(v) + `}` }},
	limits.Cron: {cli: func(v string) []string { return []string{"schedule", "add", "c", "--cron", v, "--", "--payload", "p"} }, path: "schedule/add",
		body: func(v string) string { return `{"name":"c","cron":` + quoted(v) + `,"task":{"payload":"p"}}` }},
	limits.TZ: {cli: func(v string) []string {
		return []string{"schedule", "add", "c", "--cron", "0 7 * * *", "--tz", v, "--", "--payload", "p"}
	}, path: "schedule/add",
		body: func(v string) string {
			return `{"name":"c","cron":"0 7 * * *","tz":` + quoted(v) + `,"task":{"payload":"p"}}`
		}, noAtLimit: true, optional: true},
	limits.Priority: {cli: func(v string) []string { return []string{"submit", "--payload", "p", "--priority", v} }, path: "submit",
		body: func(v string) string { return `{"payload":"p","priority":` + v + `}` }},
	limits.MaxAttempts: {cli: func(v string) []string { return []string{"submit", "--payload", "p", "--max-attempts", v} }, path: "submit",
		body: func(v string) string { return `{"payload":"p","max_attempts":` + v + `}` }},
	limits.QueueLimit: {cli: func(v string) []string { return []string{"queue", "limit", "q", v} }, path: "queue/limit",
		body: func(v string) string { return `{"queue":"q","limit":` + v + `}` }},
	limits.Rate: {cli: func(v string) []string { return []string{"queue", "rate", "q", v + "/s"} }, path: "queue/rate",
		body: func(v string) string { return `{"queue":"q","rate":"` + v + `/s"}` }},
	limits.Burst: {cli: func(v string) []string { return []string{"queue", "rate", "q", "1/s", "--burst", v} }, path: "queue/rate",
		body: func(v string) string { return `{"queue":"q","rate":"1/s","burst":` + v + `}` }},
	limits.MaxRetries: {setup: acquired, cli: func(v string) []string {
		return []string{"worklease", "fail", "--domain", "d", "--token", "K1", "--max-retries", v}
	}, path: "worklease/fail",
		body: func(v string) string { return `{"domain":"d","token":"K1","max_retries":` + v + `}` }},
	limits.Offset: {cli: func(v string) []string { return []string{"worklease", "acquire", "--domain", "d", "--offset", v} }, path: "worklease/acquire",
		body: func(v string) string { return `{"domain":"d","offset":` + v + `}` }},
	limits.Window: {cli: func(v string) []string { return []string{"submit", "--payload", "p", "--window", v} }, path: "submit",
		body: func(v string) string { return `{"payload":"p","window":` + quoted(v) + `}` }},
	limits.Backoff: {cli: func(v string) []string { return []string{"submit", "--payload", "p", "--backoff", v} }, path: "submit",
		body: func(v string) string { return `{"payload":"p","backoff":` + quoted(v) + `}` }},
	limits.BackoffMax: {cli: func(v string) []string {
		return []string{"submit", "--payload", "p", "--backoff", "0s", "--backoff-max", v}
	}, path: "submit",
		body: func(v string) string { return `{"payload":"p","backoff":"0s","backoff_max":` + quoted(v) + `}` }},
	limits.LeaseDuration: {setup: func(t *testing.T, wal string) { cli("--wal", wal, "submit", "--payload", "p") }, cli: func(v string) []string { return []string{"lease", "--worker", "W", "--duration", v} }, path: "lease",
		body: func(v string) string { return `{"worker":"W","duration":` + quoted(v) + `}` }},
	limits.Delay: {cli: func(v string) []string { return []string{"submit", "--payload", "p", "--delay", v} }, path: "submit",
		body: func(v string) string { return `{"payload":"p","delay":` + quoted(v) + `}` }},
	limits.PauseFor: {cli: func(v string) []string { return []string{"pause", "q", "--for", v} }, path: "pause",
		body: func(v string) string { return `{"queue":"q","for":` + quoted(v) + `}` }},
	limits.Every: {cli: func(v string) []string { return []string{"schedule", "add", "e", "--every", v, "--", "--payload", "p"} }, path: "schedule/add",
		body: func(v string) string { return `{"name":"e","every":` + quoted(v) + `,"task":{"payload":"p"}}` }},
	limits.NotBefore: {cli: func(v string) []string { return []string{"submit", "--payload", "p", "--not-before", v} }, path: "submit",
		body: func(v string) string { return `{"payload":"p","not_before":` + quoted(v) + `}` }},
}

// notRequestFields are the limits no request field carries, and where
// each is proven instead.
var notRequestFields = map[limits.Limit]string{
	limits.NodeID:      "a node's --raft-id, refused at serve's start (TestServeRefusesABadNodeID)",
	limits.CatchUpAll:  "the most slots a schedule fires at once (schedule.txtar, state.MaxCatchUp)",
	limits.RecordBytes: "the gate's largest record: every limit above fits (TestEveryLimitAtEveryDoor sends a payload of escaped bytes)",
	limits.BatchLines:  "TestTheBatchDoorTakesABoundedBatch",
	limits.After:       "how many tasks one waits for, a list's length: TestDependenciesAtTheirCreation and TestABatchIsAGraph (state), after.txtar",
	limits.BatchBytes:  "TestTheBatchDoorTakesABoundedBatch",
	limits.BatchLine:   "the batch door's longest line (TestTheBatchDoorTakesABoundedBatch)",
}

// valuesOf are the values TestEveryLimitAtEveryDoor sends for a limit: those
// it takes and those it refuses, as a flag's text.
func valuesOf(l limits.Limit) (taken, refused []string) {
	switch l.Kind {
	case limits.Text, limits.Name:
		fill := "a"
		if l == limits.Cron {
			return []string{"0 7 * * *" + strings.Repeat(" ", int(l.Max)-9)}, []string{"0 7 * * *" + strings.Repeat(" ", int(l.Max)-8), "0 7 * * *\x00"}
		}
		taken = []string{strings.Repeat(fill, int(l.Max))}
		if l.Kind == limits.Text && l.Max >= 1000 { // every byte escaped in JSON: the largest record still fits
			taken = append(taken, strings.Repeat("\x01", int(l.Max)))
		}
		refused = []string{strings.Repeat(fill, int(l.Max)+1), "a\xffb"}
		if l.Kind == limits.Name {
			refused = append(refused, "a\x1bb", "a\nb")
		}
		if l.Min > 0 {
			refused = append(refused, "")
		}
	case limits.Integer:
		taken = []string{strconv.FormatInt(l.Min, 10), strconv.FormatInt(l.Max, 10)}
		refused = []string{strconv.FormatInt(l.Min-1, 10)}
		if l.Max < math.MaxInt64 {
			refused = append(refused, strconv.FormatInt(l.Max+1, 10), "2147483648", "9223372036854775807")
		}
		refused = append(refused, "9223372036854775808", "1e99")
	case limits.Duration:
		taken = []string{time.Duration(l.Min).String(), "2562047h47m16.854775807s"}
		refused = []string{"2562047h47m16.854775808s", "9223372036854775807h"}
		if l.Min > 0 {
			refused = append(refused, (time.Duration(l.Min) - time.Nanosecond).String())
		} else {
			refused = append(refused, "-1ns")
		}
	case limits.Time:
		taken = []string{"0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999Z"}
		refused = []string{"10000-01-01T00:00:00Z", "253402300800000", "-62135596800001"}
	}
	return taken, refused
}

// TestEveryLimitAtEveryDoor walks the table of limits: for every field, the
// values at its limits are taken through the command line, HTTP and the
// command line through a server (the Go client), and the
// WAL verifies; one past them, numbers far past them (2^31, 2^63-1, 2^63,
// 1e99), text that is not UTF-8 and names with a control character are
// refused, exit 2 or HTTP 400, with the WAL byte for byte as it was. A limit
// with no way in from a request names where it is proven instead.
func TestEveryLimitAtEveryDoor(t *testing.T) {
	for _, l := range limits.Table {
		d, ok := doors[l]
		if !ok {
			if _, elsewhere := notRequestFields[l]; !elsewhere {
				t.Errorf("limit %q has no door in this test and says nowhere where it is proven: add it to doors", l.Field)
			}
			continue
		}
		t.Run(l.Field+"/"+d.path, func(t *testing.T) {
			taken, refused := valuesOf(l)
			if d.noAtLimit {
				taken = nil
			}
			if d.optional {
				refused = slices.DeleteFunc(refused, func(v string) bool { return v == "" })
			}
			ok := append([]int{0}, d.okExits...)
			for _, v := range taken {
				for _, via := range []string{"cli", "http", "client"} {
					code, out, wal := send(t, d, via, v)
					if !slices.Contains(ok, code) {
						t.Errorf("%s %s %.40q: exit %d, want one of %v\n%.400s", via, l.Field, v, code, ok, out)
					}
					if _, err := os.Stat(wal); err != nil {
						continue // a read, or a reference to nothing: no WAL made
					}
					if code, _, stderr := cli("--wal", wal, "verify"); code != 0 {
						t.Errorf("%s %s %.40q: the WAL does not verify: %s", via, l.Field, v, stderr)
					}
				}
			}
			for _, v := range refused {
				for _, via := range []string{"cli", "http", "client"} {
					code, out, _ := send(t, d, via, v)
					if code != ExitUsage {
						t.Errorf("%s %s %.40q: exit %d, want 2 (refused, nothing written)\n%.400s", via, l.Field, v, code, out)
					}
				}
			}
		})
	}
}

// send sends v through door d, on a WAL of its own prepared by its setup:
// the exit code, what it printed or answered, and the WAL's path. A
// refusal (exit 2) must leave the WAL byte for byte as setup left it.
func send(t *testing.T, d door, via, v string) (int, string, string) {
	t.Helper()
	wal := filepath.Join(t.TempDir(), "q.wal")
	if d.setup != nil {
		d.setup(t, wal)
	}
	before, _ := os.ReadFile(wal)
	var code int
	var out string
	switch via {
	case "cli":
		var stdout, stderr string
		code, stdout, stderr = cli(append([]string{"--wal", wal, "--actor", "tester", "-o", "json"}, d.cli(v)...)...)
		out = stdout + stderr
	case "client": // the command line through a server: what it refuses locally, it refuses before sending
		_, s := testServerAt(t, wal)
		ts := httptest.NewServer(s)
		var stdout, stderr string
		code, stdout, stderr = cli(append([]string{"--server", ts.URL, "--actor", "tester", "-o", "json"}, d.cli(v)...)...)
		ts.Close()
		out = stdout + stderr
	case "http":
		_, s := testServerAt(t, wal)
		ts := httptest.NewServer(s)
		resp, err := http.Post(ts.URL+"/v1/"+d.path, "application/json", strings.NewReader(d.body(v)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		ts.Close()
		code, _ = strconv.Atoi(resp.Header.Get("Leasewal-Exit"))
		out = fmt.Sprintf("HTTP %d %s", resp.StatusCode, b)
		if code == ExitUsage && resp.StatusCode != http.StatusBadRequest {
			t.Errorf("exit 2 answered HTTP %d", resp.StatusCode)
		}
	}
	if after, _ := os.ReadFile(wal); code == ExitUsage && !bytes.Equal(before, after) {
		t.Errorf("%s %.40q: refused, yet the WAL changed", via, v)
	}
	return code, out, wal
}

// TestServeRefusesABadNodeID: a node's id is a name of the table.
func TestServeRefusesABadNodeID(t *testing.T) {
	dir := t.TempDir()
	for _, id := range []string{strings.Repeat("n", int(limits.NodeID.Max)+1), "n\x1b1"} {
		code, _, stderr := cli("--wal", filepath.Join(dir, "q.wal"), "serve", "--listen", "127.0.0.1:0", "--raft-id", id, "--raft-dir", filepath.Join(dir, "raft"), "--raft-bind", "127.0.0.1:1")
		if code != ExitUsage || !strings.Contains(stderr, "--raft-id") {
			t.Errorf("--raft-id %.20q: exit %d %s", id, code, stderr)
		}
	}
	if state.MaxCatchUp != limits.CatchUpAll.Max {
		t.Errorf("the catch-up burst is not the table's")
	}
}
