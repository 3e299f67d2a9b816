package server

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	_ "embed"
	"encoding/hex"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/leasewal/leasewal/internal/report"
)

// The live page: GET /ui draws the report of the latest records, which the
// server keeps as it commits them (report.Live); /ui/events tells the page,
// as server-sent events, each time they change, and the page (its one
// script, /ui/live.js) fetches /ui/page again. A browser cannot send a
// bearer header: behind a token, /ui asks for it once in a form (posted from
// the page itself only) and answers with a session: a random id, in an
// HttpOnly, SameSite=Strict cookie scoped to /ui, that the server maps to
// the token's rights for uiSessionLife. The cookie never holds the token; a
// read-only token is enough.

// uiCookie holds a browser's session id.
const uiCookie = "leasewal_ui"

// uiSessionLife is how long a session lasts; maxUISessions how many a
// server keeps (the oldest go first).
const (
	uiSessionLife = 12 * time.Hour
	maxUISessions = 1024
)

// uiSessions are the sessions the login form opened: id → when it ends.
type uiSessions struct {
	mu      sync.Mutex
	expires map[string]time.Time
}

// open starts a session, and returns its id.
func (u *uiSessions) open(now time.Time) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.expires == nil {
		u.expires = map[string]time.Time{}
	}
	for old, until := range u.expires {
		if !now.Before(until) {
			delete(u.expires, old)
		}
	}
	for len(u.expires) >= maxUISessions {
		oldest := ""
		for old, until := range u.expires {
			if oldest == "" || until.Before(u.expires[oldest]) {
				oldest = old
			}
		}
		delete(u.expires, oldest)
	}
	u.expires[id] = now.Add(uiSessionLife)
	return id, nil
}

// valid says whether id is an open session.
func (u *uiSessions) valid(id string, now time.Time) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	until, ok := u.expires[id]
	return ok && now.Before(until)
}

// uiPolicy lets the page run its own script and reach its own server,
// and nothing else.
const uiPolicy = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed live.js
var liveScript []byte

// loginPage is parsed when first served, not at the start of every
// command the binary runs.
var loginPage = sync.OnceValue(func() *template.Template {
	return template.Must(template.New("login").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"/><title>leasewal</title>
<style>body { font: 15px system-ui, sans-serif; margin: 3em auto; max-width: 30em; color-scheme: light dark; } input { font: inherit; padding: 0.3em; width: 100%; box-sizing: border-box; margin: 0.5em 0; }</style></head>
<body><h1>leasewal</h1>
<form method="post" action="/ui/login"><label for="token">This server asks for its token (a read-only one is enough).</label>
<input id="token" name="token" type="password" autocomplete="current-password" autofocus="autofocus"/>
{{if .}}<p role="alert">{{.}}</p>{{end}}
<button type="submit">Open the live page</button></form></body></html>
`))
})

// uiAllowed says whether the request carries a token of this server: in
// its header, or in the cookie the form set.
func (s *Server) uiAllowed(r *http.Request) bool {
	if s.o.Token == "" {
		return true
	}
	if c, err := r.Cookie(uiCookie); err == nil && s.sessions.valid(c.Value, time.Now()) {
		return true
	}
	auth := r.Header.Get("Authorization")
	return auth != "" && (bearerIs(auth, s.o.Token) || (s.o.ReadToken != "" && bearerIs(auth, s.o.ReadToken)))
}

func (s *Server) isToken(given string) bool {
	for _, t := range []string{s.o.Token, s.o.ReadToken} {
		if t != "" && subtle.ConstantTimeCompare([]byte(given), []byte(t)) == 1 {
			return true
		}
	}
	return false
}

func (s *Server) ui(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Security-Policy", uiPolicy)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if s.o.Live == nil {
		http.Error(w, "this server has no live page", http.StatusNotFound)
		return
	}
	if r.URL.Path == "/ui/login" && r.Method == http.MethodPost {
		s.uiLogin(w, r)
		return
	}
	if !s.uiAllowed(r) {
		s.uiLoginForm(w, http.StatusUnauthorized, "")
		return
	}
	switch r.URL.Path {
	case "/ui", "/ui/", "/ui/page":
		page, _ := s.o.Live.Page()
		var b bytes.Buffer
		if err := report.Render(&b, page); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = b.WriteTo(w)
	case "/ui/live.js":
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		_, _ = w.Write(liveScript)
	case "/ui/events":
		s.uiEvents(w, r)
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) uiLoginForm(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_ = loginPage().Execute(w, msg)
}

// uiLogin opens a session for the form's token. The form is posted from
// the page itself only: the guard refuses another Origin, and a browser that
// says the post comes from another site (Sec-Fetch-Site) is refused too.
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request) {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		s.uiLoginForm(w, http.StatusForbidden, "Log in from this server's own page.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	token := strings.TrimSpace(r.PostFormValue("token"))
	if !s.isToken(token) {
		s.uiLoginForm(w, http.StatusUnauthorized, "That is not this server's token.")
		return
	}
	id, err := s.sessions.open(time.Now())
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: id, Path: "/ui", MaxAge: int(uiSessionLife / time.Second), HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	http.Redirect(w, r, "/ui", http.StatusSeeOther)
}

// uiEvents tells the page, until it goes away or the server stops, the
// last seq each time the records change (and a comment every 25 s, so that
// proxies keep the stream open).
func (s *Server) uiEvents(w http.ResponseWriter, r *http.Request) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming is not supported here", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	keepAlive := time.NewTicker(25 * time.Second)
	defer keepAlive.Stop()
	for {
		last, changed := s.o.Live.Last()
		if _, err := fmt.Fprintf(w, "data: %d\n\n", last); err != nil {
			return
		}
		flusher.Flush()
		for waiting := true; waiting; {
			select {
			case <-r.Context().Done():
				return
			case <-s.stopping:
				return
			case <-changed:
				waiting = false
			case <-keepAlive.C:
				if _, err := fmt.Fprint(w, ": still here\n\n"); err != nil {
					return
				}
				flusher.Flush()
			}
		}
	}
}
