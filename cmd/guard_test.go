package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/leasewal/leasewal/internal/server"
	"github.com/leasewal/leasewal/internal/testbrowser"
	"github.com/leasewal/leasewal/internal/testwait"
)

// TestTheServerRefusesWhatABrowserWasMadeToSend: a Host that does not name
// the server is 421 (a page of a name an attacker points at it), an Origin
// that is not its own 403, a POST without a JSON Content-Type 415; nothing
// is decided, and /healthz and /readyz answer whoever asks. A name given
// with --public-host is taken.
func TestTheServerRefusesWhatABrowserWasMadeToSend(t *testing.T) {
	walPath, s := testServerWith(t, server.Options{Hosts: []string{"0.0.0.0:7420", "queue.example.com"}})
	ts := httptest.NewServer(s)
	defer ts.Close()
	if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "first"); code != 0 {
		t.Fatal(stderr)
	}
	before, _ := os.ReadFile(walPath)
	port := strings.TrimPrefix(ts.URL, "http://127.0.0.1")
	send := func(method, path, host, origin, contentType, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		method, path, host, origin, contentType, body string
		status                                        int
		says                                          string
	}{
		{"POST", "/v1/submit", "evil.example:" + port[1:], "", "application/json", `{"payload":"x"}`, 421, `the Host header \"evil.example:`},
		{"POST", "/v1/log", "rebound.test", "", "application/json", `{}`, 421, "--public-host"},
		{"GET", "/v1/status", "rebound.test", "", "", "", 421, "Forbidden"},
		{"GET", "/metrics", "rebound.test", "", "", "", 421, "Forbidden"},
		{"GET", "/ui/page", "rebound.test", "", "", "", 421, "Forbidden"},
		{"POST", "/v1/submit", "", "http://evil.example", "application/json", `{"payload":"x"}`, 403, "another origin"},
		{"POST", "/v1/submit", "", "null", "application/json", `{"payload":"x"}`, 403, "another origin"},
		{"POST", "/ui/login", "", "http://evil.example", "application/x-www-form-urlencoded", "token=x", 403, "another origin"},
		{"POST", "/v1/submit", "", "", "text/plain", `{"payload":"x"}`, 415, "Content-Type: application/json"},
		{"POST", "/v1/submit", "", "", "", `{"payload":"x"}`, 415, "Content-Type: application/json"},
		{"POST", "/v1/abort", "", "", "application/x-www-form-urlencoded", `task=T1&reason=x`, 415, "Content-Type"},
		{"POST", "/v1/submit/batch", "", "", "application/json", `{"payload":"x"}`, 415, "Content-Type: application/x-ndjson"},
		{"GET", "/healthz", "anything.example", "http://evil.example", "", "", 200, "ok"},
		{"GET", "/readyz", "anything.example", "", "", "", 200, "ready"},
	} {
		status, body := send(c.method, c.path, c.host, c.origin, c.contentType, c.body)
		if status != c.status || !strings.Contains(body, c.says) {
			t.Errorf("%s %s (Host %q, Origin %q, Content-Type %q): %d %s; want %d saying %q", c.method, c.path, c.host, c.origin, c.contentType, status, body, c.status, c.says)
		}
	}
	if after, _ := os.ReadFile(walPath); !bytes.Equal(before, after) {
		t.Fatalf("a refused request wrote:\n%s", after)
	}
	for _, host := range []string{"", "localhost:1", "LOCALHOST", "app.localhost", "[::1]:7420", "10.1.2.3:80", "queue.example.com", "Queue.Example.COM:443"} {
		if status, body := send("POST", "/v1/inspect", host, "http://"+cmpOr(host, ts.URL[len("http://"):]), "application/json", `{}`); status != 200 {
			t.Errorf("Host %q, its own Origin: %d %s", host, status, body)
		}
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestABrowserCannotBeUsedAgainstTheServer: in headless Chromium, a page of
// another origin posts to a token-less server on loopback, as a no-cors
// fetch of text/plain and as a form: a submit, and an abort of the victim's
// task. And a page of a name that an attacker's DNS points at the server
// (rebinding: the page is the attacker's, its later requests reach the
// server) reads /v1/log and /ui/page as its own origin. All are refused:
// the WAL is byte for byte as it was, and the page reads nothing.
func TestABrowserCannotBeUsedAgainstTheServer(t *testing.T) {
	t.Parallel()
	ctx := testbrowser.Start(t)
	walPath, s := testServer(t, "")
	var mu sync.Mutex
	arrived := map[string]int{}
	victim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.ServeHTTP(w, r)
		mu.Lock()
		arrived[r.Method+" "+r.URL.Path]++
		mu.Unlock()
	}))
	defer victim.Close()
	if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "the victim's"); code != 0 {
		t.Fatal(stderr)
	}
	before, _ := os.ReadFile(walPath)

	attack := `<!DOCTYPE html><html><body><iframe name="sink"></iframe><script>
const victim = %q;
(async () => {
  const out = [];
  for (const [path, body] of [["/v1/submit", '{"payload":"planted"}'], ["/v1/abort", '{"task":"T1","reason":"csrf"}']]) {
    try { await fetch(victim + path, {method: "POST", mode: "no-cors", body}); out.push(path + " sent"); } catch (e) { out.push(path + " " + e); }
  }
  const form = document.createElement("form");
  form.method = "POST"; form.action = victim + "/v1/abort"; form.enctype = "text/plain"; form.target = "sink";
  const field = document.createElement("input");
  field.name = '{"task":"T1","reason":"form","x":"'; field.value = '"}';
  form.appendChild(field); document.body.appendChild(form); form.submit();
  await new Promise(r => setTimeout(r, 300));
  document.title = "done: " + out.join(", ");
})();
</script></body></html>`
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, attack, victim.URL)
	}))
	defer evil.Close()
	evilURL := strings.Replace(evil.URL, "127.0.0.1", "evil.test", 1)

	// The rebinding: the attacker's name first serves its page, then (the
	// DNS answer changed) reaches the server, with the attacker's Host.
	target, _ := url.Parse(victim.URL)
	rebound := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/attack.html" {
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, `<!DOCTYPE html><html><body><script>
(async () => {
  const log = await fetch("/v1/log", {method: "POST", headers: {"Content-Type": "application/json"}, body: "{}"});
  const page = await fetch("/ui/page");
  document.title = "read: " + log.status + " " + page.status + " " + (await log.text()).slice(0, 80);
})();
</script></body></html>`)
			return
		}
		httputil.NewSingleHostReverseProxy(target).ServeHTTP(w, r)
	}))
	defer rebound.Close()
	reboundURL := strings.Replace(rebound.URL, "127.0.0.1", "rebound.test", 1)

	// The first run starts the browser, which lives as long as the context
	// of that run: the test's, not a step's.
	if _, err := chromedp.Run(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatal(err)
	}
	title := func(page, prefix string) string {
		t.Helper()
		step, cancel := context.WithTimeout(ctx, testwait.HangGuard) // a hang guard, not a deadline of the story
		defer cancel()
		var got string
		if _, err := chromedp.Run(step, chromedp.Navigate(page)); err != nil {
			t.Fatalf("open %s: %v", page, err)
		}
		testwait.Until(t, "the page to say "+prefix, func() bool {
			v, err := chromedp.Run(step, chromedp.Title())
			got = v
			return err == nil && strings.HasPrefix(got, prefix)
		}, func() string { return got })
		return got
	}
	t.Log(title(evilURL+"/", "done"))
	got := title(reboundURL+"/attack.html", "read")
	if !strings.HasPrefix(got, "read: 421 421 ") || strings.Contains(got, "TaskCreated") {
		t.Errorf("the rebound page read: %q; want 421 twice and no record", got)
	}
	testwait.Until(t, "the attacks to reach the server: a submit, an abort fetched and one posted by a form", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return arrived["POST /v1/submit"] == 1 && arrived["POST /v1/abort"] == 2
	}, func() string { mu.Lock(); defer mu.Unlock(); return fmt.Sprint(arrived) })
	if after, _ := os.ReadFile(walPath); !bytes.Equal(before, after) {
		t.Fatalf("a page of another origin wrote to the WAL:\n%s", after)
	}
}

// TestTheLivePagesCookieIsASession: /ui/login answers with a cookie that
// holds a random session id, not the token, lasting 12 hours; the session
// opens the page, a cookie holding the token itself (as older versions set
// it) or a made-up id does not, and a login from another site is refused.
func TestTheLivePagesCookieIsASession(t *testing.T) {
	_, s := testServerWith(t, server.Options{Token: "secret", ReadToken: "viewer"})
	ts := httptest.NewServer(s)
	defer ts.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	login := func(site string) *http.Response {
		req, _ := http.NewRequest("POST", ts.URL+"/ui/login", strings.NewReader("token=viewer"))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if site != "" {
			req.Header.Set("Sec-Fetch-Site", site)
		}
		resp, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if resp := login("cross-site"); resp.StatusCode != http.StatusForbidden || len(resp.Cookies()) != 0 {
		t.Fatalf("a login posted from another site: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp := login("same-origin")
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusSeeOther || len(cookies) != 1 {
		t.Fatalf("a login: %d, cookies %v", resp.StatusCode, cookies)
	}
	c := cookies[0]
	if c.Value == "viewer" || strings.Contains(c.Value, "viewer") || len(c.Value) < 32 || c.MaxAge != 12*60*60 || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("the session cookie: %+v; want a random id, HttpOnly, SameSite=Strict, 12 hours", c)
	}
	page := func(value string) int {
		req, _ := http.NewRequest("GET", ts.URL+"/ui/page", nil)
		req.AddCookie(&http.Cookie{Name: c.Name, Value: value})
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for value, want := range map[string]int{c.Value: 200, "viewer": 401, "secret": 401, strings.Repeat("0", 64): 401, "": 401} {
		if got := page(value); got != want {
			t.Errorf("GET /ui/page with cookie %q: %d, want %d", value, got, want)
		}
	}
}
