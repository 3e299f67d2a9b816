package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/runner"
	"github.com/leasewal/leasewal/internal/server"
	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

// syncCounter counts the fsyncs of the WAL.
type syncCounter struct {
	store.OS
	syncs *atomic.Int64
}

func (c syncCounter) WAL(s wal.Storage) wal.Storage { return countedSync{s, c.syncs} }

type countedSync struct {
	wal.Storage
	syncs *atomic.Int64
}

func (c countedSync) Sync() error { c.syncs.Add(1); return c.Storage.Sync() }

// TestServerGroupCommits: requests that arrive together through the HTTP
// handler are decided in batches, with fewer fsyncs than requests, and each
// is answered with its own task.
func TestServerGroupCommits(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	var syncs atomic.Int64
	e := env{Config: Config{WAL: walPath, Output: "json", LockTimeout: 2 * time.Minute, Actor: "test"}}
	opts := e.storeOptions()
	opts.FS = syncCounter{syncs: &syncs}
	h := store.Open(opts)
	defer h.Close()
	if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "first"); code != 0 {
		t.Fatal(stderr)
	}
	// Hold the WAL's lock until every request has queued, so that they meet
	// in batches however slow this machine is: the first waits for the lock
	// inside its batch, all the others in the queue behind it.
	held, err := wal.OpenAt(walPath, wal.Write, time.Second, wal.Position{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, batch, _, _, _ := newServer(e, service.NewWALBackend(h, "http://test"), nil, 64, server.Options{Token: "secret"})
	stop := s.Stop
	ts := httptest.NewServer(s)
	defer ts.Close()
	const requests = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	tasks := map[string]bool{}
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/submit", strings.NewReader(`{"payload":"job","request_id":"r`+string(rune('A'+i%26))+string(rune('a'+i/26))+`"}`))
			req.Header.Set("Authorization", "Bearer secret")
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var body bytes.Buffer
			body.ReadFrom(resp.Body)
			if resp.Header.Get("Leasewal-Exit") != "0" {
				t.Errorf("exit %s: %s", resp.Header.Get("Leasewal-Exit"), body.String())
				return
			}
			mu.Lock()
			tasks[strings.Split(strings.Split(body.String(), `"task_id":"`)[1], `"`)[0]] = true
			mu.Unlock()
		}()
	}
	// Wait until every request is with the batcher: the first batch holds
	// one or a few of them, the queue the rest.
	testwait.Until(t, "every request to reach the batcher", func() bool { return batch.Received() == requests },
		func() string { return fmt.Sprint(batch.Received(), " received") })
	held.Close()
	wg.Wait()
	stop()
	if len(tasks) != requests || syncs.Load() < 1 || syncs.Load() > 4 { // the first batch, then one (rarely two) of the rest
		t.Fatalf("%d requests: %d distinct tasks, %d fsyncs of the WAL", requests, len(tasks), syncs.Load())
	}
	if code, _, stderr := cli("--wal", walPath, "verify"); code != 0 {
		t.Fatal(stderr)
	}
	resp, _ := http.Post(ts.URL+"/v1/submit", "application/json", strings.NewReader(`{"payload":"x"}`))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: HTTP %d", resp.StatusCode)
	}
	t.Logf("%d concurrent submits: %d fsyncs of the WAL", requests, syncs.Load())
}

// testServer is a server over a new WAL in a temporary directory, stopped
// at the end of the test; the test serves it as it needs.
func testServer(t *testing.T, token string) (walPath string, s *server.Server) {
	t.Helper()
	return testServerWith(t, server.Options{Token: token})
}

// testServerWith is testServer with the server's options o.
func testServerWith(t testing.TB, o server.Options) (walPath string, s *server.Server) {
	t.Helper()
	return testServerOn(t, filepath.Join(t.TempDir(), "q.wal"), o)
}

// testServerAt is a server without a token on the WAL at walPath.
func testServerAt(t testing.TB, walPath string) (string, *server.Server) {
	t.Helper()
	return testServerOn(t, walPath, server.Options{})
}

// testServerOn is a server with options o on the WAL at walPath.
func testServerOn(t testing.TB, walPath string, o server.Options) (string, *server.Server) {
	t.Helper()
	e := env{Config: Config{WAL: walPath, Output: "json", LockTimeout: time.Minute, Actor: "test"}}
	h := store.Open(e.storeOptions())
	s, _, _, _, _ := newServer(e, service.NewWALBackend(h, "http://test"), nil, 64, o)
	t.Cleanup(func() { s.Stop(); h.Close() })
	return walPath, s
}

// TestRunThroughServer: run --server takes, extends and settles leases
// through the server, and its children find the server in their environment.
func TestRunThroughServer(t *testing.T) {
	t.Parallel()
	walPath, s := testServer(t, "secret")
	ts := httptest.NewServer(s)
	defer ts.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, payload := range []string{"good", "bad"} {
		if code, _, stderr := cli("--wal", walPath, "submit", "--payload", payload, "--max-attempts", "1", "--window", "1h"); code != 0 { // a window: LEASEWAL_DEADLINE is set
			t.Fatal(stderr)
		}
	}
	// The good child outlives its first lease: it ends once the WAL shows
	// the lease extended, however long that takes.
	// Its own commands would reach the server with the runner's token.
	child := `[ "$(cat)" = good ] && [ "$LEASEWAL_SERVER" = "$1" ] && [ "$LEASEWAL_TOKEN_FILE" = "$3" ] && [ -n "$LEASEWAL_DEADLINE" ] &&
		until grep -q LeaseExtended "$2"; do sleep 0.05; done`
	code, stdout, stderr := cli("--server", ts.URL, "--token-file", tokenFile, "-o", "tsv", "--no-headers",
		"run", "--worker", "W", "--duration", "3s", "--", "sh", "-c", child, "child", ts.URL, walPath, tokenFile)
	if code != ExitTasksFailed { // T2's one attempt failed
		t.Fatalf("exit %d, want 11\n%s%s", code, stdout, stderr)
	}
	var outcomes []string
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Split(line, "\t")
		outcomes = append(outcomes, f[0]+" "+f[3])
	}
	if got := strings.Join(outcomes, ", "); got != "T1 COMMITTED, T2 FAILED" {
		t.Fatalf("run printed %q, want T1 COMMITTED, T2 FAILED\n%s", got, stderr)
	}
	code, log, _ := cli("--wal", walPath, "log", "--task", "T1", "-o", "tsv")
	if code != 0 || !strings.Contains(log, "LeaseExtended") {
		t.Fatalf("a child that outlived its lease was never extended:\n%s", log)
	}
	// T1's completion leased T2 in the same request (one write, one fsync)
	if code, log, _ := cli("--wal", walPath, "log", "--task", "T2", "--type", "LeaseGranted", "-o", "json"); code != 0 || !strings.Contains(log, `"request_id":"next-after-L1"`) {
		t.Fatalf("T2 was not leased with T1's completion:\n%s", log)
	}
	if code, _, stderr := cli("--wal", walPath, "verify"); code != 0 {
		t.Fatal(stderr)
	}
}

// TestRunLeaseAnswerLost: when the answer to run's lease is lost, the next
// request repeats its request id and gets the same lease back rather than a
// second one.
func TestRunLeaseAnswerLost(t *testing.T) {
	walPath, s := testServer(t, "")
	var dropped atomic.Bool
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/lease" && dropped.CompareAndSwap(false, true) {
			s.ServeHTTP(httptest.NewRecorder(), r) // decided and recorded, never answered
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		s.ServeHTTP(w, r)
	}))
	defer ts.Close()
	for range 2 {
		if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "p"); code != 0 {
			t.Fatal(stderr)
		}
	}
	cl, err := env{Config: Config{Server: ts.URL, Actor: "test"}}.client(false) // each call a request of its own, which the test can drop
	if err != nil {
		t.Fatal(err)
	}
	c, err := runner.NewCoordinator(context.Background(), cl, "test")
	if err != nil {
		t.Fatal(err)
	}
	req := state.LeaseRequest{Worker: "W", Duration: time.Minute}
	_, _, err = c.Lease(req)
	var unknown *client.UnknownOutcomeError
	if !errors.As(err, &unknown) {
		t.Fatalf("a lost answer gave %v, want an unknown outcome", err)
	}
	j, _, err := c.Lease(req)
	if err != nil || j == nil || j.TaskID != "T1" || j.LeaseID != "L1" {
		t.Fatalf("the repeat gave %+v, %v; want T1 under L1 again", j, err)
	}
	j, _, err = c.Lease(req)
	if err != nil || j == nil || j.TaskID != "T2" || j.LeaseID != "L2" {
		t.Fatalf("the next lease gave %+v, %v; want T2 under L2", j, err)
	}
}

// closingReader keeps what is written to it until it has seen want, then
// fails like a pipe whose reader went away.
type closingReader struct {
	mu   sync.Mutex
	got  bytes.Buffer
	want string
}

func (c *closingReader) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got.Write(p)
	if strings.Contains(c.got.String(), c.want) {
		return 0, syscall.EPIPE
	}
	return len(p), nil
}

func (c *closingReader) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.got.String()
}

// TestFollowThroughServer: log --follow with --server prints the records so
// far once, then a record appended afterwards as one line, and stops quietly
// when its reader goes away.
func TestFollowThroughServer(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	for _, payload := range []string{"one", "two"} {
		if code, _, stderr := cli("--wal", walPath, "submit", "--payload", payload); code != 0 {
			t.Fatal(stderr)
		}
	}
	out := &closingReader{want: `payload="three"`}
	done := make(chan string, 1)
	go func() {
		code, stderr := cliTo(nil, out, "--server", ts.URL, "-o", "tsv", "log", "--follow", "--type", "TaskCreated")
		done <- fmt.Sprintf("exit %d %s", code, stderr)
	}()
	testwait.Until(t, "the records so far", func() bool { return strings.Contains(out.String(), `payload="two"`) }, out.String)
	if code, _, stderr := cli("--wal", walPath, "lease", "--worker", "W"); code != 0 {
		t.Fatal(stderr) // a record the filter leaves out
	}
	if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "three"); code != 0 {
		t.Fatal(stderr)
	}
	select {
	case end := <-done:
		if end != "exit 0 " {
			t.Fatalf("follow ended with %s", end)
		}
	case <-time.After(testwait.HangGuard):
		t.Fatalf("hang guard: follow did not stop in %s when its reader went away", testwait.HangGuard)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var got []string
	for _, l := range lines {
		f := strings.Split(l, "\t")
		if len(f) < 4 || !strings.HasPrefix(f[1], "+") && f[1] != "AT" {
			t.Fatalf("line %q is not seq, offset, type, task", l)
		}
		got = append(got, f[0]+" "+f[3])
	}
	if want := "SEQ TASK, 1 T1, 2 T2, 4 T3"; strings.Join(got, ", ") != want {
		t.Fatalf("followed %q, want %q:\n%s", strings.Join(got, ", "), want, out.String())
	}
}

// TestServerRefusesRequestsThatDoNotParse: a body that is not JSON, an
// unknown command, a command with subcommands, an unknown flag, a local-only
// verb, a body over the limit and a wrong token are each refused with their
// HTTP status and a JSON error, nothing written, and the server serves on.
func TestServerRefusesRequestsThatDoNotParse(t *testing.T) {
	walPath, s := testServer(t, "secret")
	ts := httptest.NewServer(s)
	defer ts.Close()
	post := func(path, body, token string) (int, errorView) {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/"+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		if path == "submit/batch" {
			req.Header.Set("Content-Type", "application/x-ndjson")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var v errorView
		_ = json.NewDecoder(resp.Body).Decode(&v)
		return resp.StatusCode, v
	}
	for _, c := range []struct {
		path, body, token string
		status            int
		says              string
	}{
		{"submit", "not json", "secret", http.StatusBadRequest, "not a JSON object"},
		{"frobnicate", "{}", "secret", http.StatusBadRequest, `"frobnicate" is not a command`},
		{"worklease", "{}", "secret", http.StatusBadRequest, `"worklease" is not a command`},
		{"submit", `{"payload":"x","bogus":"1"}`, "secret", http.StatusBadRequest, `unknown field "bogus"`},
		{"verify", "{}", "secret", http.StatusBadRequest, "works on the WAL's own machine only"},
		{"submit", `{"payload":"` + strings.Repeat("x", server.DefaultLimit) + `"}`, "secret", http.StatusRequestEntityTooLarge, "over"},
		{"submit", `{"payload":"x"}`, "guess", http.StatusUnauthorized, "token"},
		{"submit", `{"Payload":"x"}`, "secret", http.StatusBadRequest, `unknown field "Payload"`},
		{"submit", `{"Payload":"x","PAYLOAD":"y"}`, "secret", http.StatusBadRequest, `unknown field "Payload"`},
		{"submit", `{"payload":"x","payload":"y"}`, "secret", http.StatusBadRequest, `the key "payload" is given twice`},
		{"complete", `{"task":"T1","lease":"L1","next":{"worker":"W","Worker":"V"}}`, "secret", http.StatusBadRequest, `unknown field "Worker"`},
		{"schedule/add", `{"name":"n","every":"1m","task":{"payload":"x","payload":"y"}}`, "secret", http.StatusBadRequest, `the key "payload" is given twice`},
		{"submit/batch", "{\"payload\":\"x\",\"payload\":\"y\"}\n", "secret", http.StatusBadRequest, `batch line 1: the key "payload" is given twice`},
	} {
		status, v := post(c.path, c.body, c.token)
		if status != c.status || v.Result != "ERROR" || !strings.Contains(v.Message, c.says) {
			t.Errorf("POST /v1/%s %.40s: HTTP %d %+v, want %d saying %q", c.path, c.body, status, v, c.status, c.says)
		}
	}
	if _, err := os.Stat(walPath); err == nil {
		t.Fatal("a refused request wrote the WAL")
	}
	if status, v := post("submit", `{"payload":"x"}`, "secret"); status != http.StatusOK || v.Result != "ACK" {
		t.Fatalf("after the refusals: HTTP %d %+v", status, v)
	}
}

// TestRequestsAskOnlyForWhatTheOperationTakes: a request sets only its
// command's own flags. A file flag (the server would read the file), a
// global flag, help, an extra positional argument and trailing data are
// HTTP 400 with exit 2, and the WAL is left as it was.
func TestRequestsAskOnlyForWhatTheOperationTakes(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("the server's secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	post := func(path, body string) (int, string, string) {
		resp, err := http.Post(ts.URL+"/v1/"+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Leasewal-Exit"), string(b)
	}
	if status, exit, body := post("submit", `{"payload":"first"}`); status != 200 || exit != "0" {
		t.Fatalf("a plain submit: HTTP %d exit %s %s", status, exit, body)
	}
	before, _ := os.ReadFile(walPath)
	for _, c := range []struct{ path, body, want string }{
		{"submit", `{"payload-file":"` + secret + `"}`, "the client reads"},
		{"submit", `{"payload":"x","token-file":"` + secret + `"}`, "the client reads"},
		{"verify", `{"expect":"` + secret + `"}`, "own machine"},
		{"submit", `{"payload":"x","wal":"/tmp/other.wal"}`, "the server's to set"},
		{"submit", `{"payload":"x","now":"+1h"}`, "the server's to set"},
		{"submit", `{"payload":"x","lock-timeout":"1h"}`, "the server's to set"},
		{"submit", `{"payload":"x","help":true}`, "--help"},
		{"submit", `{"payload":"y","args":["zzz"]}`, `\"args\" is gone`},
		{"extend", `{"task":"T1","lease":"L1","args":["T2"]}`, `\"args\" is gone`},
		{"log", `{"follow":true}`, "the client's loop"},
		{"submit", `{"payload":"a"} {"wal":"x"}`, "more than one JSON object"},
		{"submit", `{"payload":"a"} trailing`, "more than one JSON object"},
		{"submit", `{"payloda":"a"}`, "unknown field"},
	} {
		status, exit, body := post(c.path, c.body)
		if status != http.StatusBadRequest || exit != "2" || !strings.Contains(body, c.want) || strings.Contains(body, "secret\"") {
			t.Errorf("%s %s: HTTP %d exit %s %s (want 400, exit 2, %q)", c.path, c.body, status, exit, body, c.want)
		}
	}
	if after, _ := os.ReadFile(walPath); !bytes.Equal(before, after) || bytes.Contains(after, []byte("the server's secret")) {
		t.Fatalf("a refused request changed the WAL:\n%s", after)
	}
}

// FuzzServerRequest: whatever a request's body, the server opens no file
// for it (a secret file's bytes never reach the WAL or an answer), answers
// a client's error with 4xx, never 5xx, and a request that was not decided
// leaves the WAL as it was.
func FuzzServerRequest(f *testing.F) {
	for _, seed := range []struct{ path, body string }{
		{"submit", `{"payload":"x"}`}, {"submit", `{"payload-file":"SECRET"}`}, {"submit", `{"payload":"y","args":["zzz"]}`},
		{"lease", `{"worker":"W","queue":["a","b"]}`}, {"inspect", `{"args":["T1"]}`}, {"log", `{"from":1,"follow":false}`},
		{"worklease/acquire", `{"domain":"d","offset":1}`}, {"submit", `{"payload":"a"} {"wal":"x"}`}, {"why", `{"args":["T1","T2"]}`},
		{"submit", `{"payload":"x","expect":"SECRET"}`}, {"verify", `{}`}, {"worklease", `{}`}, {"../x", `{}`},
		{"complete", `{"task":"T1","lease":"L1","next":{"worker":"W","queue":["a"]}}`}, {"wait", `{"tasks":["T1"],"timeout":"0s"}`},
	} {
		f.Add(seed.path, seed.body)
	}
	f.Fuzz(func(t *testing.T, path, body string) {
		walPath, s := testServer(t, "")
		secret := filepath.Join(filepath.Dir(walPath), "secret")
		if err := os.WriteFile(secret, []byte("SECRET-BYTES-7f3a"), 0o600); err != nil {
			t.Fatal(err)
		}
		body = strings.ReplaceAll(body, "SECRET", secret)
		if _, _, stderr := cli("--wal", walPath, "submit", "--payload", "first"); stderr != "" {
			t.Fatal(stderr)
		}
		before, _ := os.ReadFile(walPath)
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/v1/x", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.URL.Path = "/v1/" + path
		w := httptest.NewRecorder()
		returnsBeforeHangGuard(t, "a request", func() { s.ServeHTTP(w, req) })
		after, _ := os.ReadFile(walPath)
		switch {
		case w.Code >= 500:
			t.Fatalf("%s %q: HTTP %d %s", path, body, w.Code, w.Body.String())
		case bytes.Contains(after, []byte("SECRET-BYTES")) || strings.Contains(w.Body.String(), "SECRET-BYTES"):
			t.Fatalf("%s %q: the server read a file for a request", path, body)
		case w.Code != http.StatusOK && !bytes.Equal(before, after):
			t.Fatalf("%s %q: HTTP %d, yet the WAL changed", path, body, w.Code)
		}
	})
}

// TestTokenHandling: the scheme in any case, the token compared whole; a
// token file others can read is refused on both sides; a server reachable
// beyond loopback without a token refuses to start unless --insecure.
func TestTokenHandling(t *testing.T) {
	_, s := testServer(t, "secret")
	ts := httptest.NewServer(s)
	defer ts.Close()
	for header, want := range map[string]int{"Bearer secret": 200, "bearer secret": 200, "BEARER secret": 200,
		"Bearer secre": 401, "Bearer secret2": 401, "Basic secret": 401, "secret": 401, "": 401} {
		req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/inspect", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		if header != "" {
			req.Header.Set("Authorization", header)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: HTTP %d, want %d", header, resp.StatusCode, want)
		}
	}
	dir := t.TempDir()
	open := filepath.Join(dir, "open")
	if err := os.WriteFile(open, []byte("secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	walPath := filepath.Join(dir, "q.wal")
	for _, args := range [][]string{
		{"--server", ts.URL, "--token-file", open, "inspect"},
		{"--wal", walPath, "serve", "--listen", "127.0.0.1:0", "--token-file", open},
	} {
		if code, _, stderr := cli(args...); code != ExitUsage || !strings.Contains(stderr, "can be read by others") || !strings.Contains(stderr, "chmod 600") {
			t.Errorf("%v: exit %d %s", args, code, stderr)
		}
	}
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		code, _, stderr := cli("--wal", walPath, "serve", "--listen", listen)
		if code != ExitUsage || !strings.Contains(stderr, "--insecure") {
			t.Errorf("serve --listen %s without a token: exit %d %s", listen, code, stderr)
		}
	}
	if _, err := os.Stat(walPath); err == nil {
		t.Fatal("a refused serve created the WAL")
	}
	for listen, want := range map[string]bool{"127.0.0.1:7420": true, "localhost:7420": true, "[::1]:7420": true, "0.0.0.0:7420": false, ":7420": false, "10.0.0.1:7420": false} {
		if got := server.LoopbackOnly(listen); got != want {
			t.Errorf("server.LoopbackOnly(%q) = %v", listen, got)
		}
	}
}

// TestGoneClientGetsNoLease: a lease --wait whose client went away ends
// with its request and leases nothing: the task submitted afterwards waits
// for a real worker.
func TestGoneClientGetsNoLease(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	before := store.Waiting()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ts.URL+"/v1/lease", strings.NewReader(`{"worker":"ghost","wait":"1h"}`))
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	count := func() string { return fmt.Sprint(store.Waiting(), " waiting, ", before, " before") }
	testwait.Until(t, "the server to wait for a task", func() bool { return store.Waiting() > before }, count)
	cancel()
	<-done
	testwait.Until(t, "the gone client's wait to end", func() bool { return store.Waiting() == before }, count)
	if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "P"); code != 0 {
		t.Fatal(stderr)
	}
	if code, out, _ := cli("--wal", walPath, "inspect", "T1", "-o", "json"); code != 0 || !strings.Contains(out, `"state":"WAITING"`) || strings.Contains(out, "ghost") {
		t.Fatalf("after the client went away: %s", out)
	}
}

// TestReadOnlyToken: a server's read-only token may read (inspect, log,
// why, wait, status) and nothing else (403, the WAL untouched); the full
// token may do all.
func TestReadOnlyToken(t *testing.T) {
	walPath, s := testServerWith(t, server.Options{Token: "writer", ReadToken: "viewer"})
	ts := httptest.NewServer(s)
	defer ts.Close()
	dir := t.TempDir()
	tokens := map[string]string{}
	for _, name := range []string{"writer", "viewer"} {
		tokens[name] = filepath.Join(dir, name)
		if err := os.WriteFile(tokens[name], []byte(name+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	as := func(who string, args ...string) (int, string, string) {
		return cli(append([]string{"--server", ts.URL, "--token-file", tokens[who]}, args...)...)
	}
	if code, _, stderr := as("writer", "submit", "--payload", "P"); code != 0 {
		t.Fatal(stderr)
	}
	before, _ := os.ReadFile(walPath)
	for _, args := range [][]string{{"inspect"}, {"log"}, {"why", "T1"}, {"wait", "T1", "--for", "WAITING"}, {"worklease", "inspect"}} {
		if code, _, stderr := as("viewer", args...); code != 0 {
			t.Errorf("a reader's %v: exit %d %s", args, code, stderr)
		}
	}
	for _, args := range [][]string{{"submit", "--payload", "Q"}, {"lease", "--worker", "W"}, {"abort", "T1", "--reason", "x"}, {"expire"}} {
		if code, out, stderr := as("viewer", args...); code != ExitUsage || !strings.Contains(stderr, "may only read") || out != "" {
			t.Errorf("a reader's %v: exit %d %q %s", args, code, out, stderr)
		}
	}
	if after, _ := os.ReadFile(walPath); !bytes.Equal(before, after) {
		t.Fatal("a read-only token changed the WAL")
	}
	if code, _, stderr := as("writer", "lease", "--worker", "W"); code != 0 {
		t.Fatalf("the full token: %s", stderr)
	}
	if code, out, stderr := as("viewer", "stats", "-o", "json"); code != 0 || !strings.Contains(out, `"leased":1`) {
		t.Errorf("a reader's stats: exit %d %s %s", code, out, stderr)
	}
	if code, _, stderr := as("writer", "submit", "--payload", "R"); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := as("writer", "lease", "--worker", "W", "--duration", "1m"); code != 0 {
		t.Fatal(stderr)
	}
	if code, _, stderr := as("writer", "complete", "--task", "T2", "--lease", "L2"); code != 0 {
		t.Fatal(stderr)
	}
	// GET /metrics: the stats and the batches, for the reader's token too, for no one without one
	metricsAs := func(token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, ts.URL+"/metrics", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	code, body := metricsAs("viewer")
	for _, want := range []string{`leasewal_tasks{queue="default",state="LEASED"} 1`, `leasewal_leases_total{event="granted"} 2`,
		"leasewal_last_seq 5", "leasewal_batch_size_count ", "leasewal_batch_durable_seconds_bucket",
		"leasewal_lease_duration_seconds_count 2", `leasewal_lease_duration_seconds_bucket{le="32"} 1`, "leasewal_task_run_seconds_count 1"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("GET /metrics: HTTP %d, no %q in\n%s", code, want, body)
		}
	}
	if strings.Contains(body, "leasewal_batch_size_count 0") {
		t.Errorf("GET /metrics counted no batch:\n%s", body)
	}
	// every write was made durable by a fsync, and none took more than one
	batches, syncs := metricValue(body, "leasewal_batch_size_count"), metricValue(body, "leasewal_wal_syncs_total")
	if syncs < 1 || syncs > batches {
		t.Errorf("GET /metrics: %v WAL fsyncs for %v batches:\n%s", syncs, batches, body)
	}
	// the exposition as Prometheus reads it: its own parser, and its linter
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("GET /metrics does not parse as the Prometheus text format: %v\n%s", err, body)
	}
	if f := families["leasewal_leases_total"]; f == nil || f.GetType() != dto.MetricType_COUNTER || len(f.GetMetric()) != 7 {
		t.Errorf("leasewal_leases_total: want a counter with a series per lease event, got %v", f)
	}
	problems, err := testutil.GatherAndLint(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		out := make([]*dto.MetricFamily, 0, len(families))
		for _, f := range families {
			out = append(out, f)
		}
		return out, nil
	}))
	if err != nil || len(problems) > 0 {
		t.Errorf("GET /metrics: the Prometheus linter finds %v (%v)", problems, err)
	}
	if code, _ := metricsAs(""); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token: HTTP %d", code)
	}
}

// TestServerBatchDoor: POST /v1/submit/batch takes NDJSON lines decoded into
// api.SubmitRequest (no command line: an unknown key is 400 naming its
// line), decides them all or none in one write, and answers one line per
// task; submit --batch-file --server sends there, and a refused batch
// leaves the WAL as it was.
func TestServerBatchDoor(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	post := func(body string) (int, string, string) {
		resp, err := http.Post(ts.URL+"/v1/submit/batch", "application/x-ndjson", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		return resp.StatusCode, resp.Header.Get("Leasewal-Exit"), b.String()
	}
	status, exit, out := post("{\"payload\":\"a\",\"request-id\":\"a\"}\n{\"payload\":\"b\",\"queue\":\"mail\",\"priority\":3}\n")
	if status != http.StatusOK || exit != "0" || strings.Count(out, "\n") != 2 || !strings.Contains(out, `"task_id":"T2","request_id":"R2","duplicate":false,"queue":"mail","priority":3`) {
		t.Fatalf("a batch of two: HTTP %d, exit %s\n%s", status, exit, out)
	}
	before, _ := os.ReadFile(walPath)
	for body, want := range map[string]string{
		"{\"payload\":\"x\"}\n{\"payload\":\"y\",\"payload-file\":\"/etc/passwd\"}\n": `batch line 2: json: unknown field \"payload-file\"`,
		"{\"payload\":\"x\"} {\"payload\":\"y\"}\n":                                   "batch line 1: data after the JSON object",
		"": "the batch holds no task",
	} {
		if status, exit, out := post(body); status != http.StatusBadRequest || exit != "2" || !strings.Contains(out, want) {
			t.Errorf("%q: HTTP %d, exit %s, %s; want 400 with %s", body, status, exit, out, want)
		}
	}
	if status, exit, out := post("{\"payload\":\"new\"}\n{\"payload\":\"not a\",\"request-id\":\"a\"}\n"); status != http.StatusConflict || exit != "2" || !strings.Contains(out, `"error":"RequestConflict"`) {
		t.Errorf("a conflicting batch: HTTP %d, exit %s, %s", status, exit, out)
	}
	if after, _ := os.ReadFile(walPath); !bytes.Equal(before, after) {
		t.Fatal("a refused batch changed the WAL")
	}
	batch := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(batch, []byte("{\"payload\":\"c\",\"request-id\":\"c\"}\n{\"payload\":\"a\",\"request-id\":\"a\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := cli("--server", ts.URL, "submit", "--batch-file", batch, "-o", "tsv", "--no-headers")
	rows := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(rows) != 2 || !strings.HasPrefix(rows[0], "T3\tc\tfalse\tdefault\t0\t") || !strings.HasPrefix(rows[1], "T1\ta\ttrue\tdefault\t0\t") {
		t.Fatalf("submit --batch-file --server: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := cli("--server", ts.URL, "submit", "--batch-file", batch, "--window", "soon"); code != ExitUsage || !strings.Contains(stderr, "batch line 1") {
		t.Fatalf("a bad default is refused by the client: exit %d %s", code, stderr)
	}
}

// TestTypedOperationsThroughServer: the operations the command line sends
// typed answer through a server as they answer locally (the table, JSON and
// exit codes), and a typed body is refused for a wrong type or a missing
// required field with the command line's words. Every request and answer
// is checked against the OpenAPI document the server serves, and every
// route of the document is among them.
func TestTypedOperationsThroughServer(t *testing.T) {
	t.Parallel()
	_, s := testServer(t, "")
	var checked sync.Map
	ts := httptest.NewServer(openAPIChecked(t, s, &checked))
	defer ts.Close()
	batch := filepath.Join(t.TempDir(), "jobs.jsonl")
	if err := os.WriteFile(batch, []byte("{\"payload\":\"b1\",\"request_id\":\"b1\"}\n{\"payload\":\"b2\",\"request_id\":\"b2\"}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"submit", "--payload", "a", "--priority", "2", "--max-attempts", "1", "-o", "json"}, 0, `"task_id":"T1"`},
		{[]string{"lease", "--worker", "W", "--queue", "default", "-o", "json"}, 0, `"lease_id":"L1"`},
		{[]string{"extend", "--task", "T1", "--lease", "L1", "--duration", "1m"}, 0, "EXTENDED"},
		{[]string{"release", "--task", "T1", "--lease", "L1", "--delay", "0s", "-o", "json"}, 0, `"state":"WAITING","attempt":0`},
		{[]string{"release", "--task", "T1", "--lease", "L1", "-o", "json"}, 0, `"duplicate":true`},
		{[]string{"lease", "--worker", "W", "-o", "json"}, 0, `"lease_id":"L2","worker_id":"W","attempt":1`},
		{[]string{"heartbeat", "--worker", "W", "-o", "json"}, 0, `"leases":[{"task_id":"T1","lease_id":"L2"`},
		{[]string{"fail", "--task", "T1", "--lease", "L2", "--reason", "broken", "--permanent", "-o", "json"}, 0, `"state":"FAILED"`},
		{[]string{"requeue", "T1", "--request-id", "again", "-o", "json"}, 0, `"task_id":"T2","request_id":"again"`},
		{[]string{"why", "T2", "-o", "json"}, 0, `"eligible":true`},
		{[]string{"abort", "T2", "--reason", "not needed", "-o", "json"}, 0, `"state":"DEAD"`},
		{[]string{"redact", "T2", "--reason", "secret", "-o", "json"}, 0, `"reason":"secret","duplicate":false`},
		{[]string{"queue", "limit", "mail", "2", "-o", "json"}, 0, `"limit":2,"duplicate":false`},
		{[]string{"queue", "ls", "-o", "json"}, 0, `{"result":"OK","queues":[`},
		{[]string{"queue", "rate", "mail", "10/s", "--burst", "5", "-o", "json"}, 0, `"queue":"mail","rate":"10/s","burst":5,"duplicate":false`},
		{[]string{"queue", "rate", "mail", "10/s", "--burst", "5", "-o", "json"}, 0, `"duplicate":true`},
		{[]string{"queue", "rate", "mail", "10/d"}, ExitUsage, ""},
		{[]string{"pause", "mail", "--for", "1h", "--reason", "relay down", "-o", "json"}, 0, `"queue":"mail","since":`},
		{[]string{"resume", "mail", "-o", "json"}, 0, `"reason":"relay down","resumed_at":`},
		{[]string{"resume", "mail"}, ExitUsage, ""},
		{[]string{"schedule", "add", "nightly", "--cron", "0 3 * * *", "--tz", "Europe/Paris", "-o", "json", "--", "--payload", "backup"}, 0, `"name":"nightly","cron":"0 3 * * *","tz":"Europe/Paris"`},
		{[]string{"schedule", "ls", "-o", "json"}, 0, `"schedules":[{"name":"nightly"`},
		{[]string{"schedule", "rm", "nightly", "-o", "json"}, 0, `"result":"OK","name":"nightly"`},
		{[]string{"schedule", "rm", "nightly"}, ExitNotFound, ""},
		{[]string{"stats", "-o", "json"}, 0, `"records":{"LeaseExtended":1,"LeaseGranted":2,"LeaseReleased":1,"QueueLimited":1,"QueuePaused":1,"QueueRated":1,"QueueResumed":1,"ScheduleAdded":1,"ScheduleRemoved":1,"TaskAborted":1,"TaskCreated":2,"TaskFailed":1,"TaskRedacted":1}`},
		{[]string{"inspect", "T2", "-o", "json"}, 0, `"payload":"","redacted":"secret"`},
		{[]string{"complete", "--task", "T2", "--lease", "L9"}, ExitNotFound, ""},
		{[]string{"expire", "-o", "json"}, 0, `"transitions":[]`},
		{[]string{"why", "T9"}, ExitNotFound, ""},
		{[]string{"lease", "--worker", "W", "-o", "json"}, ExitNotFound, `"result":"EMPTY"`},
		{[]string{"submit", "--batch-file", batch, "-o", "json"}, 0, `"request_id":"b2"`},
		{[]string{"submit", "--batch-file", batch, "-o", "tsv"}, 0, "TASK\tREQUEST"},
		{[]string{"wait", "T1", "T2", "--timeout", "0s", "-o", "json"}, 0, `"result":"OK"`},
		{[]string{"wait", "T3", "--timeout", "0s", "-o", "json"}, ExitWaitedOut, `"result":"TIMEOUT"`},
		{[]string{"inspect", "-o", "json"}, 0, `"summary":`},
		{[]string{"inspect", "T1", "-o", "json"}, 0, `"records":[{"seq":1`},
		{[]string{"inspect", "--workers", "-o", "json"}, 0, `"worker_id":"W"`},
		{[]string{"inspect", "--until", "2", "--state", "LEASED"}, 0, "T1"},
		{[]string{"inspect", "--state", "FAILED,DEAD", "--limit", "1", "-o", "json"}, 0, `"more":1,"tasks":[{"task_id":"T1"`},
		{[]string{"requeue", "--state", "FAILED,DEAD", "-o", "json"}, 0, `"tasks":[],"more":0`}, // T1 was requeued, T2 redacted
		{[]string{"log", "--task", "T1", "--type", "LeaseGranted,TaskFailed", "-o", "json"}, 0, `"type":"TaskFailed"`},
		{[]string{"log", "--from", "99"}, 0, "no records match"},
		{[]string{"compact", "-o", "json"}, 0, `"result":"OK"`},
		{[]string{"report", "-o", "html", "--task", "T1"}, 0, `<section class="task" id="task-T1" data-state="FAILED">`},
		{[]string{"worklease", "acquire", "--domain", "d", "--offset", "4", "-o", "json"}, 0, `"token":"K1"`},
		{[]string{"worklease", "fail", "--domain", "d", "--token", "K1", "--max-retries", "0", "-o", "json"}, 0, `"result":"GIVE_UP_NO_BACKLOG"`},
		{[]string{"worklease", "acquire", "--domain", "d", "--offset", "5"}, 0, "ACQUIRED"},
		{[]string{"worklease", "succeed", "--domain", "d", "--token", "K9"}, ExitContract, ""},
		{[]string{"worklease", "succeed", "--domain", "d", "--token", "K2", "-o", "json"}, 0, `"processed":5`},
		{[]string{"worklease", "inspect", "--domain", "d", "-o", "json"}, 0, `"failed":[4]`},
		{[]string{"worklease", "inspect", "--domain", "nope"}, ExitNotFound, ""},
		{[]string{"lease", "--worker", "X", "--task", "T3", "-o", "json"}, 0, `"lease_id":"L3"`},
		{[]string{"complete", "--task", "T3", "--lease", "L3", "--next-worker", "X", "-o", "json"}, 0, `"next":{"lease":{"result":"LEASED","task_id":"T4","lease_id":"L4"`},
		{[]string{"complete", "--task", "T4", "--lease", "L4", "--next-worker", "X", "-o", "json"}, 0, `"next":{"lease":null,"next_eligible_at":null}`},
	}
	for _, st := range steps {
		code, out, stderr := cli(append([]string{"--server", ts.URL}, st.args...)...)
		if code != st.code || !strings.Contains(out, st.want) {
			t.Fatalf("%v through the server: exit %d, want %d with %q\n%s%s", st.args, code, st.code, st.want, out, stderr)
		}
	}
	for path, c := range map[string]struct{ body, want string }{
		"submit":            {`{"payload":"x","priority":"5"}`, `field \"priority\" must be a number, not a JSON string`},
		"fail":              {`{"task":"T1","lease":"L1","reason":"x","permanent":"yes"}`, `field \"permanent\" must be true or false`},
		"release":           {`{"task":"T1","lease":"L1","delay":"soon"}`, `--delay`},
		"pause":             {`{"queue":"mail","for":5}`, `field \"for\" must be`},
		"schedule/add":      {`{"name":"n","every":"1m","task":{"payload":"p","priority":"high"}}`, `field \"task.priority\" must be a number`},
		"abort":             {`{"task":"T1"}`, `--reason is empty or missing`},
		"why":               {`{"args":["T1"]}`, `named fields now (\"task\" for why`},
		"wait":              {`{"tasks":[]}`, "needs at least one task id"},
		"inspect":           {`{"until":"3"}`, `field \"until\" must be a number`},
		"log":               {`{"from":1,"follow":true}`, "the client's loop"},
		"worklease/acquire": {`{"domain":"d"}`, `--offset is missing`},
	} {
		resp, err := http.Post(ts.URL+"/v1/"+path, "application/json", strings.NewReader(c.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.Header.Get("Leasewal-Exit") != "2" || !strings.Contains(string(b), c.want) {
			t.Errorf("%s %s: HTTP %d exit %s %s; want exit 2 with %s", path, c.body, resp.StatusCode, resp.Header.Get("Leasewal-Exit"), b, c.want)
		}
	}
	for _, path := range routesIn(t) {
		if _, ok := checked.Load(path); !ok {
			t.Errorf("no request to %s was checked against the OpenAPI document", path)
		}
	}
	resp, err := http.Get(ts.URL + "/v1/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	served, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Equal(served, api.OpenAPI) {
		t.Fatal("GET /v1/openapi.json is not the document")
	}
}

// TestLongPayloadsThroughServer: a server's resident state holds payloads
// longer than 256 bytes as where its WAL has them; every lease, requeue and
// inspect through it answers with the text submitted.
func TestLongPayloadsThroughServer(t *testing.T) {
	t.Parallel()
	_, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	payloads := map[string]string{} // task id → payload
	ask := func(v any, args ...string) {
		t.Helper()
		code, out, stderr := cli(append([]string{"--server", ts.URL, "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d %s", args, code, stderr)
		}
		if err := json.Unmarshal([]byte(out), v); err != nil {
			t.Fatalf("%v: %v in %s", args, err, out)
		}
	}
	for i := range 12 {
		payload := fmt.Sprint(i, strings.Repeat(` "é\☃`, 60+i*30))
		var ack api.Ack
		ask(&ack, "submit", "--payload", payload, "--max-attempts", "1")
		payloads[ack.TaskID] = payload
	}
	leases := map[string]string{}
	for range payloads {
		var lease api.Lease
		ask(&lease, "lease", "--worker", "W")
		if lease.Payload != payloads[lease.TaskID] {
			t.Fatalf("the lease on %s answered a payload of %d bytes, not the %d submitted", lease.TaskID, len(lease.Payload), len(payloads[lease.TaskID]))
		}
		leases[lease.TaskID] = lease.LeaseID
	}
	var failed api.Failed
	ask(&failed, "fail", "--task", "T3", "--lease", leases["T3"], "--reason", "x", "--permanent")
	var requeued api.Ack
	ask(&requeued, "requeue", "T3")
	var inspected api.Inspect
	ask(&inspected, "inspect", requeued.TaskID)
	if len(inspected.Tasks) != 1 || inspected.Tasks[0].Payload != payloads["T3"] {
		t.Fatalf("the requeue of T3, inspected: %+v", inspected.Tasks)
	}
	var lease api.Lease
	ask(&lease, "lease", "--worker", "W")
	if lease.TaskID != requeued.TaskID || lease.Payload != payloads["T3"] {
		t.Fatalf("the lease on the requeue of T3 answered %s with a payload of %d bytes", lease.TaskID, len(lease.Payload))
	}
}

// TestOldSpellingsAreReadAndFlagged: a key spelled as versions before 0.2
// spelled it (request-id for request_id) is read as the field's and answered
// with a Deprecation header that names it; both spellings of one field in
// one object are refused; a batch file that spells one so is read, with a
// note.
func TestOldSpellingsAreReadAndFlagged(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	post := func(path, contentType, body string) (*http.Response, string) {
		resp, err := http.Post(ts.URL+"/v1/"+path, contentType, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, body := post("submit", "application/json", `{"payload":"x","request-id":"r1","max-attempts":2}`)
	if resp.StatusCode != 200 || !strings.Contains(body, `"request_id":"r1"`) || !strings.Contains(body, `"max_attempts":2`) ||
		!strings.HasPrefix(resp.Header.Get("Deprecation"), "@") || !strings.Contains(resp.Header.Get("Leasewal-Deprecated"), "request-id is request_id") {
		t.Fatalf("old spellings: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = post("submit", "application/json", `{"payload":"x","request_id":"r2","request-id":"r2"}`)
	if resp.StatusCode != 400 || !strings.Contains(body, `the key \"request_id\" is given twice (or also as \"request-id\")`) {
		t.Fatalf("both spellings: %d %s", resp.StatusCode, body)
	}
	resp, body = post("submit", "application/json", `{"payload":"x","request_id":"r3"}`)
	if resp.StatusCode != 200 || resp.Header.Get("Deprecation") != "" {
		t.Fatalf("today's spelling: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	resp, body = post("submit/batch", "application/x-ndjson", "{\"payload\":\"y\",\"not-before\":\"2026-01-01T00:00:00Z\"}\n")
	if resp.StatusCode != 200 || resp.Header.Get("Leasewal-Deprecated") != "not-before is not_before" {
		t.Fatalf("a batch's old spelling: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	file := filepath.Join(t.TempDir(), "old.ndjson")
	if err := os.WriteFile(file, []byte(`{"payload":"z","request-id":"r4"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := cli("--wal", walPath, "submit", "--batch-file", file, "-o", "json"); code != 0 || !strings.Contains(out, `"request_id":"r4"`) ||
		!strings.Contains(stderr, "batch line 1 spells request-id as versions before 0.2 did: write request_id") {
		t.Fatalf("a batch file's old spelling: exit %d %s %s", code, out, stderr)
	}
}

// TestCompactThroughAServer: 'leasewal --server URL compact' has the server
// compact its own WAL (beside its batches), and leaves the local WAL that
// --wal names as it was.
func TestCompactThroughAServer(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	local := filepath.Join(t.TempDir(), "local.wal")
	for _, wal := range []string{walPath, local} {
		for _, args := range [][]string{{"submit", "--payload", "p"}, {"lease", "--worker", "W"}, {"complete", "--task", "T1", "--lease", "L1"}} {
			if code, _, stderr := cli(append([]string{"--wal", wal, "--now", "2026-01-01T00:00:00Z"}, args...)...); code != 0 {
				t.Fatal(stderr)
			}
		}
	}
	before, _ := os.ReadFile(local)
	code, out, stderr := cli("--server", ts.URL, "--wal", local, "compact", "--keep-finished", "0s", "-o", "json")
	if code != 0 || !strings.Contains(out, `"records":3`) || !strings.Contains(out, `"tasks_dropped":1`) {
		t.Fatalf("compact through the server: exit %d %s %s", code, out, stderr)
	}
	if after, _ := os.ReadFile(local); !bytes.Equal(before, after) {
		t.Fatal("compact through a server changed the local WAL")
	}
	if b, _ := os.ReadFile(walPath); !bytes.Contains(b, []byte(`"type":"BaseBegin"`)) {
		t.Fatalf("the server's WAL was not compacted:\n%s", b)
	}
	if code, out, _ := cli("--server", ts.URL, "compact", "-o", "json"); code != 0 || !strings.Contains(out, `"records":0`) {
		t.Fatalf("a second compaction, with nothing to compact: exit %d %s", code, out)
	}
}

// metricValue is the value of an unlabelled series in a text exposition
// (-1 if there is none).
func metricValue(body, name string) float64 {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return -1
	}
	return v
}

// TestAServerCountsWhatARateHeldBack: a server counts the leases a queue's
// rate answered EMPTY (stats' held_back, /metrics), lease --task's and
// complete --next-worker's included; a one-shot command has no such count.
func TestAServerCountsWhatARateHeldBack(t *testing.T) {
	t.Parallel()
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	for _, args := range [][]string{
		{"submit", "--payload", "a", "--queue", "mail"}, {"submit", "--payload", "b", "--queue", "mail"},
		{"queue", "rate", "mail", "1/h"}, {"lease", "--worker", "W", "--duration", "1h"},
	} {
		if code, out, stderr := cli(append([]string{"--server", ts.URL}, args...)...); code != 0 {
			t.Fatalf("%v: exit %d %s %s", args, code, out, stderr)
		}
	}
	for _, args := range [][]string{{"lease", "--worker", "W"}, {"lease", "--worker", "W", "--task", "T2"}, {"complete", "--task", "T1", "--lease", "L1", "--next-worker", "W"}} {
		code, out, _ := cli(append([]string{"--server", ts.URL, "-o", "json"}, args...)...)
		if code == 0 && strings.Contains(out, `"task_id":"T2"`) && !strings.Contains(out, `"lease":null`) {
			t.Fatalf("%v took T2 while its queue is at its rate: %s", args, out)
		}
	}
	if code, out, _ := cli("--server", ts.URL, "stats", "-o", "json"); code != 0 || !strings.Contains(out, `"rated":[{"queue":"mail","rate":"1/h","burst":1,`) || !strings.Contains(out, `"held_back":3}]`) {
		t.Fatalf("stats through the server: exit %d %s", code, out)
	}
	if code, out, _ := cli("--server", ts.URL, "stats", "-o", "prom"); code != 0 || !strings.Contains(out, `leasewal_queue_rate_held_back_total{queue="mail"} 3`) {
		t.Fatalf("stats -o prom through the server: exit %d %s", code, out)
	}
	if code, out, _ := cli("--wal", walPath, "stats", "-o", "json"); code != 0 || !strings.Contains(out, `"held_back":null}]`) {
		t.Fatalf("stats of the WAL: exit %d %s", code, out)
	}
}

// TestAStatusWaitsForTheNextRecord: GET /v1/status?after=N answers once the
// last seq is past N, whoever wrote the record (the server, or a local
// command beside it), answers at once without after or with wait=0s, is
// ended by the server's stop, and refuses an after or a wait it cannot
// read; the Go client's Changes signals the record.
func TestAStatusWaitsForTheNextRecord(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	status := func(query string) (int, int64, string) {
		resp, err := http.Get(ts.URL + "/v1/status" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		var v struct {
			LastSeq int64 `json:"last_seq"`
		}
		_ = json.Unmarshal(body, &v)
		return resp.StatusCode, v.LastSeq, string(body)
	}
	waiting := func(after int64) <-chan int64 {
		got := make(chan int64, 1)
		go func() {
			_, seq, _ := status(fmt.Sprintf("?after=%d&wait=%s", after, testwait.HangGuard))
			got <- seq
		}()
		return got
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := client.New([]string{ts.URL}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	changes, err := c.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if code, seq, body := status(""); code != 200 || seq != 0 {
		t.Fatalf("status of an empty WAL: %d %s", code, body)
	}
	ownWrite := waiting(0)
	if code, _, stderr := cli("--server", ts.URL, "submit", "--payload", "P"); code != 0 {
		t.Fatal(stderr)
	}
	if seq := <-ownWrite; seq != 1 {
		t.Fatalf("a status waiting after 0 answered %d, want the server's record 1", seq)
	}
	testwait.Until(t, "Changes to signal the server's record", func() bool {
		select {
		case <-changes:
			return true
		default:
			return false
		}
	}, func() string { return "no signal" })
	localWrite := waiting(1)
	testwait.Until(t, "the server to let go of the WAL", func() bool {
		code, _, _ := cli("--wal", walPath, "submit", "--payload", "Q", "--lock-timeout", "0s")
		return code == 0
	}, func() string { return "the WAL stayed locked" })
	if seq := <-localWrite; seq != 2 {
		t.Fatalf("a status waiting after 1 answered %d, want the local command's record 2", seq)
	}
	if code, seq, body := status("?after=2&wait=0s"); code != 200 || seq != 2 {
		t.Fatalf("wait=0s: %d %s, want the status at once", code, body)
	}
	for _, query := range []string{"?after=-1", "?after=x", "?after=2&wait=1y", "?after=2&wait=-1s", "?after=2&wait=6m"} {
		if code, _, body := status(query); code != 400 || !strings.Contains(body, `"Usage"`) {
			t.Errorf("%s: %d %s, want 400 Usage", query, code, body)
		}
	}
	stopped := waiting(2)
	s.StopWaits()
	if seq := <-stopped; seq != 2 {
		t.Fatalf("a status waiting at the server's stop answered %d, want 2", seq)
	}
}

// TestARunnerExtendsWithoutBeingWoken: a runner whose server never says
// that a record came (its status waits are held until the runner goes)
// still sends its heartbeat and extends its lease on its own time.
func TestARunnerExtendsWithoutBeingWoken(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/status" && r.URL.Query().Has("after") {
			<-r.Context().Done()
			return
		}
		s.ServeHTTP(w, r)
	}))
	defer ts.Close()
	if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "P", "--max-attempts", "1"); code != 0 {
		t.Fatal(stderr)
	}
	child := `until grep -q LeaseExtended "$1"; do sleep 0.05; done`
	code, stdout, stderr := cli("--server", ts.URL, "-o", "tsv", "--no-headers", "run", "--worker", "W", "--duration", "3s", "--", "sh", "-c", child, "child", walPath)
	if code != 0 || !strings.HasPrefix(stdout, "T1\t") || !strings.Contains(stdout, "COMMITTED") {
		t.Fatalf("exit %d, want T1 COMMITTED:\n%s%s", code, stdout, stderr)
	}
	if code, workers, _ := cli("--wal", walPath, "inspect", "--workers", "-o", "tsv", "--no-headers"); code != 0 || !strings.HasPrefix(workers, "W\t") {
		t.Fatalf("no heartbeat of W:\n%s", workers)
	}
}
