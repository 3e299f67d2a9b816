package cmd

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/internal/cluster"
)

// hostileValues are what a hostile client puts in a field: numbers at and
// past every limit, text at and past every length, control characters,
// bytes that are not UTF-8, and values of the wrong kind.
var hostileValues = []string{
	`0`, `-1`, `1`, `1000`, `1001`, `-1001`, `2147483647`, `2147483648`, `9223372036854775807`, `9223372036854775808`,
	`-9223372036854775808`, `1e99`, `1.5`, `null`, `true`, `[]`, `{}`, `[1,2]`,
	`""`, `"T1"`, `"L1"`, `"K1"`, `"W"`, `"q"`, `"default"`, `"30s"`, `"1ms"`, `"999us"`, `"0s"`, `"-1s"`, `"2562047h"`,
	`"2562047h47m16.854775807s"`, `"2562048h"`, `"1e9h"`, `"2026-01-01T00:00:00Z"`, `"10000-01-01T00:00:00Z"`, `"+1s"`,
	`"a\u001b[31mred"`, `"nul\u0000"`, `"new\nline"`, `"\ud800"`, "\"\xff\xfe\"", `"0 7 * * *"`, `"@hourly"`, `"Europe/Paris"`,
	`"` + strings.Repeat("a", 200) + `"`, `"` + strings.Repeat("a", 201) + `"`, `"` + strings.Repeat("x", 65536) + `"`,
	`"` + strings.Repeat("x", 65537) + `"`, `"` + strings.Repeat(`\u0001`, 65536) + `"`, `"` + strings.Repeat("a", 600_000) + `"`,
}

// hostileRoutes are the operations a hostile client sends, with the keys
// each takes (and some it does not).
var hostileRoutes = map[string][]string{
	"submit":            {"payload", "window", "max-attempts", "backoff", "backoff-max", "request-id", "delay", "not-before", "queue", "priority", "actor"},
	"lease":             {"worker", "duration", "queue", "task", "request-id", "actor"},
	"extend":            {"task", "lease", "duration", "actor"},
	"complete":          {"task", "lease", "result", "actor", "next"},
	"fail":              {"task", "lease", "reason", "permanent", "actor"},
	"release":           {"task", "lease", "delay", "actor"},
	"abort":             {"task", "reason", "actor"},
	"redact":            {"task", "reason", "actor"},
	"requeue":           {"task", "request-id", "actor"},
	"queue/limit":       {"queue", "limit", "actor"},
	"queue/rate":        {"queue", "rate", "burst", "actor"},
	"pause":             {"queue", "for", "reason", "actor"},
	"resume":            {"queue", "actor"},
	"schedule/add":      {"name", "every", "cron", "tz", "catch-up", "task", "actor"},
	"schedule/rm":       {"name", "actor"},
	"expire":            {"actor"},
	"heartbeat":         {"worker", "actor"},
	"worklease/acquire": {"domain", "offset", "actor"},
	"worklease/succeed": {"domain", "token", "actor"},
	"worklease/fail":    {"domain", "token", "max-retries", "actor"},
	"why":               {"task"},
	"inspect":           {"tasks", "state", "queue", "until"},
	"log":               {"task", "from", "to", "type", "since"},
	"stats":             {"queue"},
}

// hostileBody is a request body: a few of the route's keys (now and then in
// another case, twice, or one it does not take) with hostile values; now
// and then a valid-looking submit, so that there are tasks and leases to
// aim at.
func hostileBody(rng *rand.Rand, route string) string {
	keys := hostileRoutes[route]
	if route == "submit" && rng.IntN(3) == 0 {
		return `{"payload":"job"}`
	}
	var fields []string
	for range 1 + rng.IntN(4) {
		key := keys[rng.IntN(len(keys))]
		switch rng.IntN(12) {
		case 0:
			key = strings.ToUpper(key[:1]) + key[1:]
		case 1:
			key = "bogus"
		}
		v := hostileValues[rng.IntN(len(hostileValues))]
		if key == "next" || key == "task" && route == "schedule/add" {
			v = `{"worker":` + v + `,"payload":` + hostileValues[rng.IntN(len(hostileValues))] + `}`
		}
		fields = append(fields, strconv.Quote(key)+":"+v)
		if rng.IntN(15) == 0 {
			fields = append(fields, fields[len(fields)-1]) // the same key twice
		}
	}
	return "{" + strings.Join(fields, ",") + "}"
}

// hostileRun sends n hostile requests to the servers at urls and fails t
// on an answer that is a 5xx but for an outcome unknown (exit 10), or that
// has no exit code.
func hostileRun(t *testing.T, seed uint64, n int, urls []string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 41))
	routes := make([]string, 0, len(hostileRoutes))
	for r := range hostileRoutes {
		routes = append(routes, r)
	}
	slices.Sort(routes)
	for i := range n {
		route := routes[rng.IntN(len(routes))]
		body := hostileBody(rng, route)
		resp, err := http.Post(urls[rng.IntN(len(urls))]+"/v1/"+route, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatalf("request %d, %s %.200s: %v", i, route, body, err)
		}
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		exit := resp.Header.Get("Leasewal-Exit")
		if exit == "" || resp.StatusCode >= 500 && exit != "10" {
			t.Errorf("request %d, %s %.300s: HTTP %d, exit %q: %.300s", i, route, body, resp.StatusCode, exit, answer)
		}
	}
}

// hostileRequests is how many requests each run sends: LEASEWAL_SOAK (as
// .ci/run sets it) sends more.
func hostileRequests() int {
	if os.Getenv("LEASEWAL_SOAK") != "" {
		return 3000
	}
	return 400
}

// TestAHostileClientHurtsNoOne: typed requests with boundary values (every
// number at and past its limit, 2^31, 2^63-1, 2^63, 1e99, strings at and
// past their lengths, control characters, bytes that are not UTF-8, keys in
// another case, keys given twice) sent to a live single server: no answer
// is a 5xx, the server still answers, and the WAL verifies.
func TestAHostileClientHurtsNoOne(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	hostileRun(t, 1, hostileRequests(), []string{ts.URL})
	if code, _, stderr := cli("--wal", walPath, "verify"); code != 0 {
		t.Fatalf("the WAL after the hostile client: %s", stderr)
	}
	if code, _, stderr := cli("--server", ts.URL, "submit", "--payload", "after"); code != 0 {
		t.Fatalf("the server after the hostile client: exit %d %s", code, stderr)
	}
}

// TestAHostileClientHurtsNoClusterNode: the same requests sent to every node
// of a three-node cluster: every node is alive after them, no answer is a
// 5xx but for an outcome unknown, every WAL verifies, and they are
// identical.
func TestAHostileClientHurtsNoClusterNode(t *testing.T) {
	c := newTestCluster(t, 3, cluster.Timing{})
	var urls []string
	for _, tn := range c.nodes {
		urls = append(urls, tn.http.URL)
	}
	c.now.Store(time.Now().UnixMilli())
	hostileRun(t, 2, hostileRequests(), urls)
	for _, tn := range c.nodes {
		select {
		case err := <-tn.node.Failed():
			t.Fatalf("%s stopped: %v", tn.id, err)
		default:
		}
	}
	wals := c.converge()
	for i, w := range wals {
		if !bytes.Equal(w, wals[0]) {
			t.Fatalf("%s's WAL differs from %s's", c.nodes[i].id, c.nodes[0].id)
		}
		if code, _, stderr := cli("--wal", c.nodes[i].wal, "verify"); code != 0 {
			t.Fatalf("%s's WAL: %s", c.nodes[i].id, stderr)
		}
	}
	if code, _, stderr := cli("--server", strings.Join(urls, ","), "submit", "--payload", "after"); code != 0 {
		t.Fatalf("the cluster after the hostile client: exit %d %s", code, stderr)
	}
	t.Logf("%d records in every WAL", bytes.Count(wals[0], []byte("\n"))-1)
}
