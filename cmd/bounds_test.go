package cmd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/server"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/state"
)

// TestTheBatchDoorTakesABoundedBatch: a server takes at most 20,000 lines
// (or 16 MiB) a request and stops reading at the first line that does not
// parse; past either it answers 400 and writes nothing. The command line
// sends a bigger file in parts, each atomic: every line is written, and a
// bad line in a later part leaves the earlier parts written and says so.
func TestTheBatchDoorTakesABoundedBatch(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	post := func(body io.Reader) (int, string) {
		t.Helper()
		resp, err := http.Post(ts.URL+"/v1/submit/batch", "application/x-ndjson", body)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	lines := func(n int, from int) string {
		var b strings.Builder
		for i := range n {
			fmt.Fprintf(&b, `{"payload":"p%d","request_id":"r%d"}`+"\n", from+i, from+i)
		}
		return b.String()
	}
	if code, body := post(strings.NewReader(lines(api.MaxServerBatchTasks+1, 0))); code != 400 || !strings.Contains(body, "more than 20000 tasks") {
		t.Fatalf("a batch of 20,001 lines: %d %s", code, body)
	}
	garbage := io.MultiReader(strings.NewReader("not json\n"), &endless{})
	if code, body := post(garbage); code != 400 || !strings.Contains(body, "batch line 1") {
		t.Fatalf("an endless body that is not JSON: %d %s", code, body)
	}
	big := io.MultiReader(strings.NewReader(lines(10, 0)), strings.NewReader(`{"payload":"`+strings.Repeat("x", 60<<10)+`"}`+"\n"), &repeated{line: []byte(`{"payload":"` + strings.Repeat("y", 60<<10) + `"}` + "\n"), n: 300})
	if code, body := post(big); code != 400 || !strings.Contains(body, "is over 16777216 bytes") {
		t.Fatalf("a batch of 18 MB: %d %.300s", code, body)
	}
	if _, err := os.Stat(walPath); !os.IsNotExist(err) {
		t.Fatalf("a refused batch wrote the WAL: %v", err)
	}

	file := filepath.Join(t.TempDir(), "batch.ndjson")
	if err := os.WriteFile(file, []byte(lines(api.MaxServerBatchTasks+5, 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := cli("--server", ts.URL, "submit", "--batch-file", file, "-o", "json")
	if code != 0 || strings.Count(out, "\n") != api.MaxServerBatchTasks+5 || !strings.Contains(out, `"request_id":"r20004"`) {
		t.Fatalf("a batch of 20,005 lines through the server: exit %d, %d lines, %s", code, strings.Count(out, "\n"), stderr)
	}
	bad := lines(api.MaxServerBatchTasks+1, 100_000) + "{not json}\n"
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli("--server", ts.URL, "submit", "--batch-file", file); code != 2 || !strings.Contains(stderr, "batch line 20002") {
		t.Fatalf("a bad line read before anything is sent: exit %d, %s", code, stderr)
	}
	bad = lines(api.MaxServerBatchTasks+1, 200_000) + `{"payload":"x","request_id":"r200000"}` + "\n"
	if err := os.WriteFile(file, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = cli("--server", ts.URL, "submit", "--batch-file", file)
	if code != 2 || !strings.Contains(stderr, "nothing of lines 20001 to 20002 was written; lines 1 to 20000 were written by the requests before it") {
		t.Fatalf("a refused line in the second part: exit %d, %s", code, stderr)
	}
	if code, out, _ := cli("--wal", walPath, "stats", "-o", "json"); code != 0 || !strings.Contains(out, `"TaskCreated":40005`) {
		t.Fatalf("the WAL after both batches: %s", out)
	}

	// A part written whose answer is lost: the command says it may have
	// been written, and sends nothing after it.
	var posts atomic.Int32
	lossy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/submit/batch" && posts.Add(1) == 2 {
			s.ServeHTTP(httptest.NewRecorder(), r)
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				conn.Close()
			}
			return
		}
		s.ServeHTTP(w, r)
	}))
	defer lossy.Close()
	if err := os.WriteFile(file, []byte(lines(2*api.MaxServerBatchTasks+1, 300_000)), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = cli("--server", lossy.URL, "submit", "--batch-file", file)
	if code != api.ExitUnknownSent || !strings.Contains(stderr, "lines 20001 to 40000 may have been written; lines 1 to 20000 were written by the requests before it; no line after them was sent") {
		t.Fatalf("a part whose answer was lost: exit %d, %s", code, stderr)
	}
	if code, out, _ := cli("--wal", walPath, "stats", "-o", "json"); code != 0 || !strings.Contains(out, `"TaskCreated":80005`) || posts.Load() != 2 {
		t.Fatalf("the WAL after a part whose answer was lost (%d posts): %s", posts.Load(), out)
	}
}

// endless is a body that never ends.
type endless struct{}

func (endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// repeated is line, n times.
type repeated struct {
	line []byte
	n    int
	rest []byte
}

func (r *repeated) Read(p []byte) (int, error) {
	if len(r.rest) == 0 {
		if r.n == 0 {
			return 0, io.EOF
		}
		r.n--
		r.rest = r.line
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

// TestLongReadsAreStreamedAndBounded: a log and inspect's listing come as a
// stream that ends with its end line (which the client requires: a stream
// cut short is an error, never a short answer); at most MaxStreams run at
// once, and a read beyond is 429 Busy (exit 6) with Retry-After. The
// streams are held here by clients that read nothing of answers larger
// than the sockets' buffers.
func TestLongReadsAreStreamedAndBounded(t *testing.T) {
	walPath, s := testServer(t, "")
	ts := httptest.NewServer(s)
	defer ts.Close()
	e := env{Config: Config{WAL: walPath, LockTimeout: time.Minute, Actor: "test"}}
	h := store.Open(e.storeOptions())
	payload := strings.Repeat("p", 60<<10)
	var reqs []func(*store.Tx) error
	for range 600 { // 36 MB of records: more than loopback's socket buffers hold
		reqs = append(reqs, func(tx *store.Tx) error {
			d, err := tx.State.DecideSubmit(state.Submit{Payload: payload, Window: state.Duration(time.Hour), Policy: state.RetryPolicy{MaxAttempts: 1}}, tx.Now)
			if err != nil {
				return err
			}
			return tx.Commit(d.Records)
		})
	}
	if _, _, err := h.WriteBatch(reqs); err != nil {
		t.Fatal(err)
	}
	h.Close()

	var held []*http.Response
	defer func() {
		for _, r := range held {
			r.Body.Close()
		}
	}()
	for range server.MaxStreams {
		resp, err := http.Post(ts.URL+"/v1/log", "application/json", strings.NewReader(`{}`))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("a stream: %v %v", err, resp)
		}
		held = append(held, resp) // its headers came; its body waits
	}
	resp, err := http.Post(ts.URL+"/v1/inspect", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || resp.Header.Get("Leasewal-Exit") != "6" || !strings.Contains(string(b), `"error":"Busy"`) {
		t.Fatalf("a long read beyond the most at once: %d %v %s", resp.StatusCode, resp.Header, b)
	}
	if code, _, stderr := cli("--server", ts.URL, "log"); code != 6 || !strings.Contains(stderr, "long reads") {
		t.Fatalf("leasewal log while the server is busy: exit %d, %s", code, stderr)
	}
	whole, err := io.ReadAll(held[0].Body)
	if err != nil {
		t.Fatal(err)
	}
	last := whole[bytes.LastIndexByte(whole[:len(whole)-1], '\n')+1:]
	if !api.IsStreamEnd(last) || !bytes.Contains(last, []byte(`"last_seq":600`)) || bytes.Count(whole, []byte("\n")) != 601 {
		t.Fatalf("the stream's last line: %.200s (of %d lines)", last, bytes.Count(whole, []byte("\n")))
	}
	for _, r := range held {
		r.Body.Close()
	}
	held = nil
	code, out, stderr := cli("--server", ts.URL, "inspect", "-o", "json")
	var listed api.Inspect
	if err := json.Unmarshal([]byte(out), &listed); code != 0 || err != nil || len(listed.Tasks) != 600 {
		t.Fatalf("inspect through the server: exit %d, %v, %d tasks, %s", code, err, len(listed.Tasks), stderr)
	}

	// A stream cut short, as a proxy that dropped its end would leave it.
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Leasewal-Exit", "0")
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.Write(whole[:len(whole)-len(last)])
	}))
	defer cut.Close()
	if code, _, stderr := cli("--server", cut.URL, "log", "-o", "json"); code == 0 || !strings.Contains(stderr, "cut short") {
		t.Fatalf("a stream without its end line: exit %d, %s", code, stderr)
	}
}
