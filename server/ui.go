package server

import (
	"bytes"
	"crypto/subtle"
	_ "embed"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"leasewal/report"
)

// The live page: GET /ui draws the report of the latest records, which the
// server keeps as it commits them (report.Live); /ui/events tells the page,
// as server-sent events, each time they change, and the page (its one
// script, /ui/live.js) fetches /ui/page again. A browser cannot send a
// bearer header: behind a token, /ui asks for it once in a form and keeps
// it in an HttpOnly, SameSite=Strict cookie scoped to /ui; a read-only
// token is enough.

// uiCookie holds the token a browser gave the form.
const uiCookie = "leasewal_ui"

// uiPolicy lets the page run its own script and reach its own server,
// and nothing else.
const uiPolicy = "default-src 'none'; script-src 'self'; connect-src 'self'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

//go:embed live.js
var liveScript []byte

var loginPage = template.Must(template.New("login").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"/><title>leasewal</title>
<style>body { font: 15px system-ui, sans-serif; margin: 3em auto; max-width: 30em; color-scheme: light dark; } input { font: inherit; padding: 0.3em; width: 100%; box-sizing: border-box; margin: 0.5em 0; }</style></head>
<body><h1>leasewal</h1>
<form method="post" action="/ui/login"><label for="token">This server asks for its token (a read-only one is enough).</label>
<input id="token" name="token" type="password" autocomplete="current-password" autofocus="autofocus"/>
{{if .}}<p role="alert">{{.}}</p>{{end}}
<button type="submit">Open the live page</button></form></body></html>
`))

// uiAllowed says whether the request carries a token of this server: in
// its header, or in the cookie the form set.
func (s *Server) uiAllowed(r *http.Request) bool {
	if s.o.Token == "" {
		return true
	}
	given := ""
	if c, err := r.Cookie(uiCookie); err == nil {
		given = c.Value
	} else if auth := r.Header.Get("Authorization"); auth != "" {
		return bearerIs(auth, s.o.Token) || (s.o.ReadToken != "" && bearerIs(auth, s.o.ReadToken))
	}
	return s.isToken(given)
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
	_ = loginPage.Execute(w, msg)
}

func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 4096)
	token := strings.TrimSpace(r.PostFormValue("token"))
	if !s.isToken(token) {
		s.uiLoginForm(w, http.StatusUnauthorized, "That is not this server's token.")
		return
	}
	http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: token, Path: "/ui", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
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
