package cmd

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasewal/leasewal/internal/server"
	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testbrowser"
	"github.com/leasewal/leasewal/internal/testwait"
)

// liveServer is serve on the WAL at walPath, as an httptest server, with
// the token secret and the read-only token viewer; it stops with the test,
// as serve stops: the page's event stream ends first.
func liveServer(t *testing.T, walPath string) *httptest.Server {
	t.Helper()
	e := env{Config: Config{WAL: walPath, Output: "json", LockTimeout: 2 * time.Minute, Actor: "test"}}
	opts := e.storeOptions()
	opts.Resident = true
	h := store.Open(opts)
	s, _, _, _, _ := newServer(e, service.NewWALBackend(h, "http://test"), nil, 64, server.Options{Token: "secret", ReadToken: "viewer"})
	ts := httptest.NewServer(s)
	t.Cleanup(func() { s.Stop(); ts.Close(); h.Close() })
	return ts
}

// TestLivePageInABrowser: serve's /ui behind a token, in headless
// Chromium: a wrong token is refused, the read-only token opens the page
// (kept in a cookie the page's script cannot read), which shows the WAL's
// task and then, without a reload, a task submitted afterwards. The page
// loads nothing but its own script, under its Content-Security-Policy.
func TestLivePageInABrowser(t *testing.T) {
	t.Parallel()
	ctx := testbrowser.Start(t)
	dir := testbrowser.OutputDir(t)
	b, err := os.ReadFile(filepath.Join("..", "testdata", "seeds", "lease_expiry.wal"))
	if err != nil {
		t.Fatal(err)
	}
	walPath := filepath.Join(t.TempDir(), "q.wal")
	if err := os.WriteFile(walPath, b, 0o600); err != nil {
		t.Fatal(err)
	}
	ts := liveServer(t, walPath)

	resp, err := http.Get(ts.URL + "/ui")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
		t.Fatalf("GET /ui without a token: HTTP %d, CSP %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}
	// The first run starts the browser, which lives as long as the context
	// of that run: the test's, not a step's.
	if _, err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	run := func(what string, a chromedp.Action[chromedp.Void]) {
		t.Helper()
		step, cancel := context.WithTimeout(ctx, testwait.HangGuard) // a hang guard, not a deadline of the story
		defer cancel()
		if _, err := chromedp.Run(step, a); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	eval := func(expr string) any {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[any](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return v
	}
	run("open /ui", chromedp.Navigate(ts.URL+"/ui"))
	run("give a wrong token", chromedp.SendKeys("#token", "guess\n"))
	run("be told it is wrong", chromedp.WaitVisible("[role=alert]"))
	run("give the read-only token", chromedp.SendKeys("#token", "viewer\n"))
	run("see the live page", chromedp.WaitVisible("#task-T1"))
	if got := eval(`document.cookie`); got != "" {
		t.Errorf("the page's script can read the token's cookie: %q", got)
	}
	if got := eval(`[...document.scripts].map(s => s.getAttribute("src")).join()`); got != "/ui/live.js" {
		t.Errorf("the page's scripts: %q, want only /ui/live.js", got)
	}
	secret := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(secret, []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := cli("--server", ts.URL, "--token-file", secret, "submit", "--payload", "arrived later"); code != 0 {
		t.Fatal(stderr)
	}
	run("see the task submitted since, without a reload", chromedp.WaitVisible("#task-T2"))
	if got := eval(`document.querySelector("#task-T2 code").textContent`); got != "arrived later" {
		t.Errorf("T2's payload on the live page: %q", got)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "live.png"), shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("a screenshot in %s", filepath.Join(dir, "live.png"))
}

// TestLivePageFollowsOtherWriters: a local command beside serve writes
// the WAL; the live page, once looked at, shows its record too (and its
// redaction), told through /ui/events like the server's own.
func TestLivePageFollowsOtherWriters(t *testing.T) {
	t.Parallel()
	walPath := filepath.Join(t.TempDir(), "q.wal")
	if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "first"); code != 0 {
		t.Fatal(stderr)
	}
	ts := liveServer(t, walPath)
	guard, cancel := context.WithTimeout(context.Background(), testwait.HangGuard) // a hang guard, not a deadline of the story
	defer cancel()
	get := func(path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(guard, "GET", ts.URL+path, nil)
		req.Header.Set("Authorization", "Bearer viewer")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %v %v", path, resp, err)
		}
		return resp
	}
	page := func() string {
		t.Helper()
		resp := get("/ui/page")
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if p := page(); !strings.Contains(p, `id="task-T1"`) || strings.Contains(p, `id="task-T2"`) {
		t.Fatal("the first look does not show T1 alone")
	}
	events := get("/ui/events")
	defer events.Body.Close()
	lines := bufio.NewScanner(events.Body)
	waitFor := func(seq string) {
		t.Helper()
		for lines.Scan() {
			if lines.Text() == "data: "+seq {
				return
			}
		}
		t.Fatalf("waited for the live page to show seq %s: %v", seq, lines.Err())
	}
	waitFor("1")
	if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "written beside"); code != 0 {
		t.Fatal(stderr)
	}
	waitFor("2")
	if p := page(); !strings.Contains(p, `id="task-T2"`) || !strings.Contains(p, "written beside") {
		t.Fatal("a task written beside the server is not on its live page")
	}
	if code, _, stderr := cli("--wal", walPath, "redact", "T2", "--reason", "pii"); code != 0 {
		t.Fatal(stderr)
	}
	waitFor("3")
	if p := page(); strings.Contains(p, "written beside") {
		t.Fatal("a payload redacted beside the server is still on its live page")
	}
}
