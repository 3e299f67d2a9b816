// Package server is leasewal's HTTP API: each operation's typed request
// decoded from its body and handed to the service (api.Service), its typed
// answer encoded as JSON with its exit code; the tokens, the body limits, a
// raft follower's forwarding to its leader, and a server's lifetime. It
// renders nothing for a client and opens no file for a request.
package server

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/cluster"
	"github.com/leasewal/leasewal/internal/report"
	"github.com/leasewal/leasewal/internal/service"
)

// DefaultLimit is the most a request body may hold unless its operation
// says otherwise: a 64 KiB payload escaped, and the rest.
const DefaultLimit = 1 << 20

// Options configure a server; they are read once, by New.
type Options struct {
	URL       string       // where clients and the other nodes reach it
	Token     string       // "": no token asked for (loopback, or --insecure)
	ReadToken string       // a second token, which may only read
	HTTP      *http.Client // for a follower's forwarding, and for joining
	// Describe says what an error of the service is: its kind, its
	// message, its exit code.
	Describe func(error) api.Error
	// Unknown says why a POST path is no operation (400); the operations
	// are listed after it.
	Unknown func(path string) string
	// StopWaits ends the service's open waits (each answers what it has);
	// Stop, called once no request is under way, ends its group committer.
	StopWaits, Stop func()
	// Metrics answers GET /metrics (Prometheus); nil: none.
	Metrics http.Handler
	// Live is the page GET /ui shows, fed as records are committed; nil:
	// none.
	Live *report.Live
	// Hosts are the names, beside URL's, that a request's Host header may
	// give (--listen's host, --public-host); an IP address and a loopback
	// name always may (guard.go).
	Hosts []string
	// Ready says whether the server can answer requests now (GET
	// /readyz); nil: always.
	Ready func() error
	// Log hears what a person running the server should know (that its
	// node was removed); nil: nothing.
	Log io.Writer
	// AccessLog gets a line per request answered (access.go); nil: none.
	AccessLog io.Writer
	// Changes, when set, signals each change of the WAL whoever writes it,
	// for GET /v1/status?after= (service.Local.Changes); watched from the
	// first such request until the server stops.
	Changes func(ctx context.Context) (<-chan struct{}, error)
	// SpoolDir is where a streamed answer is written before it is sent
	// (beside the WAL: on its disk, not in memory); "": the system's
	// temporary directory.
	SpoolDir string
}

// MaxStreams is how many streamed answers (log, inspect's listing) a
// server writes and sends at once; a read beyond is refused with 429 and
// Retry-After, exit 6 (Busy).
const MaxStreams = 4

// Server answers the HTTP API.
type Server struct {
	o        Options
	hosts    []string // lowercase, for hostAllowed
	sessions uiSessions
	streams  chan struct{} // a place for each streamed answer under way
	// removedOnce logs, once, that the node was removed from its cluster.
	removedOnce sync.Once
	stopping    chan struct{} // closed by StopWaits: the live page's streams and the status waits end
	feed        feed
	stopOnce    sync.Once
	routes      map[string]route
	// handler is what a request goes through, the access log's included:
	// each line of the lines door too.
	handler   http.Handler
	lineConns lineConns
	status    func() (service.Status, error)
	node      *cluster.Node // nil: a single server
}

// New is a server of svc, its status told by status; node is the raft node
// behind svc, nil for a single server.
func New(svc api.Service, status func() (service.Status, error), node *cluster.Node, o Options) *Server {
	s := &Server{o: o, hosts: hostsOf(o.URL, o.Hosts), status: status, node: node, stopping: make(chan struct{}), streams: make(chan struct{}, MaxStreams)}
	s.routes = routes(svc, o.Describe, s.spool)
	s.handler = s
	if o.AccessLog != nil {
		s.handler = &accessLog{next: s, w: o.AccessLog}
	}
	return s
}

// spool is a file for a streamed answer, unlinked at once: it is gone
// with its last handle, whatever becomes of the server.
func (s *Server) spool() (*os.File, error) {
	f, err := os.CreateTemp(s.o.SpoolDir, ".leasewal-answer-*")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return f, nil
}

// StopWaits ends the open waits at once: each answers what it has, as if
// its time had run out, so that a shutdown has only short requests to
// finish.
func (s *Server) StopWaits() {
	s.stopOnce.Do(func() { close(s.stopping) })
	s.o.StopWaits()
}

// Stop ends the service's group committer once no request is under way:
// call it after the HTTP server has drained.
func (s *Server) Stop() {
	s.StopWaits()
	s.o.Stop()
}

// bearerIs says whether an Authorization header carries token: the scheme
// in any case (RFC 9110), the token compared in constant time.
func bearerIs(header, token string) bool {
	scheme, given, ok := strings.Cut(header, " ")
	return ok && strings.EqualFold(scheme, "Bearer") &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(given)), []byte(token)) == 1
}

// readOnly says whether a read-only token may ask for path.
func (s *Server) readOnly(path string) bool {
	switch path {
	case "status", "cluster/members", "openapi.json", "metrics":
		return true
	}
	return s.routes[path].readOnly
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
		return
	case "/readyz":
		s.readyz(w)
		return
	}
	if !s.guard(w, r) {
		return
	}
	if r.URL.Path == "/ui" || strings.HasPrefix(r.URL.Path, "/ui/") { // a browser's: its token comes in a cookie
		s.ui(w, r)
		return
	}
	path, ok := strings.CutPrefix(r.URL.Path, "/v1/")
	if r.URL.Path == "/metrics" { // where Prometheus looks
		path, ok = "metrics", true
	}
	if auth := r.Header.Get("Authorization"); s.o.Token != "" && !bearerIs(auth, s.o.Token) {
		switch {
		case s.o.ReadToken == "" || !bearerIs(auth, s.o.ReadToken):
			Error(w, http.StatusUnauthorized, api.ExitUsage, "Unauthorized", "a missing or wrong token: send 'Authorization: Bearer <token>'")
			return
		case !s.readOnly(path):
			var reads []string
			for p, op := range s.routes {
				if op.readOnly {
					reads = append(reads, strings.ReplaceAll(p, "/", " "))
				}
			}
			slices.Sort(reads)
			Error(w, http.StatusForbidden, api.ExitUsage, "Forbidden", fmt.Sprintf("this token may only read (status, %s), not %s: use a full token", strings.Join(reads, ", "), path))
			return
		}
	}
	switch {
	case !ok:
		Error(w, http.StatusNotFound, api.ExitUsage, "NotFound", "the API is under /v1/")
		return
	case path == "status" && r.Method == http.MethodGet:
		s.statusOf(w, r)
		return
	case path == "openapi.json" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(api.OpenAPI)
		return
	case path == "lines" && r.Method == http.MethodGet:
		s.lines(w, r)
		return
	case path == "cluster/members" && r.Method == http.MethodGet:
		s.members(w)
		return
	case path == "metrics" && r.Method == http.MethodGet && s.o.Metrics != nil:
		s.o.Metrics.ServeHTTP(w, r)
		return
	case r.Method != http.MethodPost:
		Error(w, http.StatusMethodNotAllowed, api.ExitUsage, "Usage", "POST /v1/<command>")
		return
	}
	op, known := s.routes[path]
	if want := cmp.Or(op.contentType, "application/json"); !sendsJSON(r, want) {
		Error(w, http.StatusUnsupportedMediaType, api.ExitUsage, "Usage", fmt.Sprintf("POST /v1/%s takes a body of Content-Type: %s", path, want))
		return
	}
	limit := cmp.Or(op.limit, DefaultLimit)
	body := http.MaxBytesReader(w, r.Body, limit)
	whole := func() ([]byte, bool) {
		b, err := io.ReadAll(body)
		if err != nil {
			Error(w, http.StatusRequestEntityTooLarge, api.ExitUsage, "Usage", fmt.Sprintf("the request body is over %d bytes", limit))
		}
		return b, err == nil
	}
	switch {
	case s.node != nil && !s.node.Leading() && s.node.Removed():
		s.removedOnce.Do(func() {
			if s.o.Log != nil {
				fmt.Fprintf(s.o.Log, "leasewal: this node was removed from the cluster and serves nothing: stop it (a request to it is answered NodeRemoved)\n")
			}
		})
		Error(w, http.StatusGone, api.ExitUnknownSent, "NodeRemoved", "this node was removed from the cluster: send the request to another member ('leasewal cluster members' lists them)")
		return
	case path == "cluster/join" || path == "cluster/remove" || (s.node != nil && !s.node.Leading()):
		b, ok := whole()
		switch {
		case !ok:
		case path == "cluster/join":
			s.join(w, r, b)
		case path == "cluster/remove":
			s.remove(w, r, b)
		default:
			if known && op.check != nil {
				if err := op.check(b); err != nil { // the leader would refuse it too: no hop for it
					Error(w, http.StatusBadRequest, api.ExitUsage, "Usage", err.Error())
					return
				}
			}
			s.forward(w, r, b)
		}
		return
	case !known:
		Error(w, http.StatusBadRequest, api.ExitUsage, "Usage", fmt.Sprintf("%s; the operations are %s and GET /v1/openapi.json describes them", s.o.Unknown(path), operationList(s.routes)))
		return
	}
	if op.whole {
		b, ok := whole()
		if !ok {
			return
		}
		body = io.NopCloser(bytes.NewReader(b))
	}
	if op.stream {
		select {
		case s.streams <- struct{}{}:
			defer func() { <-s.streams }()
		default:
			w.Header().Set("Retry-After", "1")
			Error(w, http.StatusTooManyRequests, api.ExitLocked, "Busy", fmt.Sprintf("%d long reads (log, inspect) are under way, the most this server runs at once: ask again shortly", MaxStreams))
			return
		}
	}
	a := op.serve(r.Context(), body)
	if a.spooled != nil {
		defer a.spooled.Close()
	}
	switch {
	case a.refused != nil:
		Error(w, http.StatusBadRequest, api.ExitUsage, "Usage", a.refused.Error())
		return
	case a.gone:
		return // nothing was decided, and no one is there to be told
	}
	for k, v := range a.header {
		w.Header()[k] = v
	}
	w.Header().Set("Leasewal-Exit", strconv.Itoa(a.exit))
	w.Header().Set("Content-Type", a.contentType)
	if a.status != 0 {
		w.WriteHeader(a.status)
	}
	if a.spooled != nil {
		_, _ = io.Copy(w, a.spooled) // a client gone away has what it read
		return
	}
	_, _ = w.Write(a.body) // a client gone away: the decision stands, a retry with its request id gets it
}

// readyz answers 200 while the server can answer requests (a cluster's
// node knows a leader), else 503.
func (s *Server) readyz(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if s.o.Ready != nil {
		if err := s.o.Ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, err.Error()+"\n")
			return
		}
	}
	_, _ = io.WriteString(w, "ready\n")
}

// JoinRequest is POST /v1/cluster/join: a node asking to be added.
type JoinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	URL      string `json:"url"`
}

// join adds a node to the cluster, on the leader.
func (s *Server) join(w http.ResponseWriter, r *http.Request, body []byte) {
	var req JoinRequest
	switch {
	case !s.onLeader(w, r, body):
		return
	case json.Unmarshal(body, &req) != nil:
		Error(w, http.StatusBadRequest, api.ExitUsage, "Usage", `the body is not {"id":…,"raft_addr":…,"url":…}`)
		return
	}
	if err := s.node.Join(req.ID, req.RaftAddr, req.URL); errors.Is(err, cluster.ErrNotLeader) {
		Error(w, http.StatusServiceUnavailable, api.ExitUsage, "NotLeader", err.Error())
		return
	} else if err != nil {
		Error(w, http.StatusBadRequest, api.ExitUsage, "Usage", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	writeJSON(w, map[string]string{"result": "JOINED", "id": req.ID})
}

// onLeader reports whether a cluster request that only the leader decides
// is this node's to decide: a single server refuses it and a follower
// forwards it (then it is answered: false).
func (s *Server) onLeader(w http.ResponseWriter, r *http.Request, body []byte) bool {
	if s.notANode(w) {
		return false
	}
	if !s.node.Leading() {
		s.forward(w, r, body)
		return false
	}
	return true
}

// notANode answers a cluster request that reached a single server.
func (s *Server) notANode(w http.ResponseWriter) bool {
	if s.node == nil {
		Error(w, http.StatusBadRequest, api.ExitUsage, "Usage", "this server is not a raft node: start it with --raft-id, --raft-dir and --raft-bind")
	}
	return s.node == nil
}

// Members is GET /v1/cluster/members: the configuration as the node that
// answers knows it.
type Members struct {
	Members []cluster.Member `json:"members"`
}

func (s *Server) members(w http.ResponseWriter) {
	if s.notANode(w) {
		return
	}
	list, err := s.node.Members()
	if err != nil {
		Error(w, http.StatusInternalServerError, api.ExitInternal, "Internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Leasewal-Exit", "0")
	writeJSON(w, Members{Members: list})
}

// RemoveRequest is POST /v1/cluster/remove.
type RemoveRequest struct {
	ID string `json:"id"`
}

// remove takes a node out of the cluster, on the leader.
func (s *Server) remove(w http.ResponseWriter, r *http.Request, body []byte) {
	var req RemoveRequest
	switch {
	case !s.onLeader(w, r, body):
		return
	case decodes(body, &req) != nil || req.ID == "":
		Error(w, http.StatusBadRequest, api.ExitUsage, "Usage", `the body is not {"id":"<node id>"}`)
		return
	}
	already, err := s.node.Remove(req.ID)
	switch {
	case errors.Is(err, cluster.ErrNotLeader):
		Error(w, http.StatusServiceUnavailable, api.ExitUsage, "NotLeader", err.Error())
		return
	case errors.Is(err, cluster.ErrUnknownMember):
		Error(w, http.StatusNotFound, api.ExitNotFound, "NotFound", err.Error())
		return
	case err != nil:
		Error(w, http.StatusInternalServerError, api.ExitUnknownSent, "OutcomeUnknown", err.Error()+": the outcome is unknown; repeat the removal")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Leasewal-Exit", "0")
	writeJSON(w, map[string]any{"result": "REMOVED", "id": req.ID, "already": already})
}

// forwarded are the headers a follower passes on to its leader, and back.
var (
	forwardedAsked    = []string{"Authorization", "Content-Type"}
	forwardedAnswered = []string{"Content-Type", "Leasewal-Exit", "Retry-After"}
)

// forward sends a request that reached a follower to the leader, and its
// answer back. Nothing is decided here: with no leader known it is 503, which
// a client answers by trying again; an answer lost on the way is exit 10. A
// forward ends when its client goes, and when the cluster's leader changes
// (the leader it went to may be paused or cut off, and would answer only
// once it is back, if ever): that is exit 10 too.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, body []byte) {
	changed := s.node.LeaderChanged()
	leader := s.node.Leader()
	if leader == "" || r.Header.Get("Leasewal-Forwarded") != "" {
		Error(w, http.StatusServiceUnavailable, api.ExitUsage, "NoLeader", "no leader is known yet (an election is under way): send the request again shortly")
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-changed:
			cancel()
		case <-ctx.Done():
		}
	}()
	req, err := http.NewRequestWithContext(ctx, r.Method, leader+r.URL.Path, bytes.NewReader(body))
	if err != nil {
		Error(w, http.StatusInternalServerError, api.ExitInternal, "Internal", err.Error())
		return
	}
	for _, name := range forwardedAsked {
		if v := r.Header.Get(name); v != "" {
			req.Header.Set(name, v)
		}
	}
	req.Header.Set("Leasewal-Forwarded", "1")
	resp, err := s.o.HTTP.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			Error(w, http.StatusServiceUnavailable, api.ExitUsage, "NoLeader", fmt.Sprintf("the leader %s cannot be reached: send the request again shortly", leader))
			return
		}
		cause := err.Error()
		if ctx.Err() != nil && r.Context().Err() == nil {
			cause = "the cluster's leader changed meanwhile"
		}
		Error(w, http.StatusBadGateway, api.ExitUnknownSent, "OutcomeUnknown",
			fmt.Sprintf("the request was forwarded to the leader %s but its answer was lost (%s): the outcome is unknown; repeat it with the same --request-id", leader, cause))
		return
	}
	defer resp.Body.Close()
	for _, name := range forwardedAnswered {
		if v := resp.Header.Get(name); v != "" {
			w.Header().Set(name, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// Error answers a request that was not decided, as an api.Error with its
// exit code.
func Error(w http.ResponseWriter, status, exit int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Leasewal-Exit", strconv.Itoa(exit))
	w.WriteHeader(status)
	writeJSON(w, api.Error{Result: "ERROR", Kind: kind, Message: msg})
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the types here always encode; a client gone away is not the server's error
}

// decodes is api.DecodeStrict's error alone.
func decodes(body []byte, v any) error {
	_, err := api.DecodeStrict(body, v)
	return err
}
