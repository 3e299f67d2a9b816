package server

import (
	"mime"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// A browser can be made to send requests to a server on loopback or a
// private network by any page it shows: a form post or a no-cors fetch from
// another origin (cross-site requests), or a page of a name an attacker
// points at the server's address (DNS rebinding). The guard refuses both:
//
//   - the Host header must be an IP address (no name, so no rebinding), a
//     loopback name, or a host the server is told it is reached by (its
//     --listen and --advertise hosts, and each --public-host); a request
//     without one (HTTP/1.0) is no browser's;
//   - a request that names an Origin must name the server's own (scheme and
//     Host);
//   - a POST to the API must say it sends JSON (application/json, or
//     application/x-ndjson to the batch door), which a form cannot and a
//     cross-site fetch cannot without the browser asking the server first.
//
// /healthz and /readyz answer whoever asks: a load balancer names no host.

// hostAllowed says whether a Host header names this server.
func (s *Server) hostAllowed(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.ToLower(strings.TrimSuffix(strings.Trim(name, "[]"), "."))
	switch {
	case name == "": // HTTP/1.0 without one: no browser sends that
		return true
	case net.ParseIP(name) != nil, name == "localhost", strings.HasSuffix(name, ".localhost"):
		return true
	}
	for _, h := range s.hosts {
		if h == name {
			return true
		}
	}
	return false
}

// hostsOf is the names a server accepts in a Host header beyond IP
// addresses and loopback: those of its URL and of publicHosts, lowercase.
func hostsOf(own string, publicHosts []string) []string {
	var out []string
	for _, h := range append([]string{own}, publicHosts...) {
		if u, err := url.Parse(h); err == nil && u.Host != "" {
			h = u.Hostname()
		} else if name, _, err := net.SplitHostPort(h); err == nil {
			h = name
		}
		if h = strings.ToLower(strings.Trim(h, "[]")); h != "" {
			out = append(out, h)
		}
	}
	return out
}

// sameOrigin says whether a request's Origin, if it names one, is the
// server's own as the request reached it.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return strings.EqualFold(origin, scheme+"://"+r.Host)
}

// sendsJSON says whether a POST's Content-Type is want (parameters such as
// charset allowed).
func sendsJSON(r *http.Request, want string) bool {
	mediaType, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mediaType == want
}

// guard refuses a request a browser was made to send (see above); it
// answers and returns false, or returns true.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case !s.hostAllowed(r.Host):
		Error(w, http.StatusMisdirectedRequest, 2, "Forbidden",
			"the Host header "+quoteHost(r.Host)+" does not name this server: reach it by its address, or start it with --public-host NAME")
		return false
	case !sameOrigin(r):
		Error(w, http.StatusForbidden, 2, "Forbidden", "a request from the page of another origin ("+quoteHost(r.Header.Get("Origin"))+") is refused")
		return false
	}
	return true
}

// quoteHost is a header's value for a message, cut short.
func quoteHost(v string) string {
	if len(v) > 100 {
		v = v[:100] + "…"
	}
	return `"` + strings.ToValidUTF8(v, "?") + `"`
}
