package cmd

import (
	"bytes"
	"cmp"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"leasewal/api"
	"leasewal/cluster"
	"leasewal/state"
	"leasewal/store"
)

// The verbs a server does not run for a client: they read or repair the file
// itself, or are local by nature. run is not among them for a client, which
// runs its children itself and leases through the server (runcoord.go); a
// server never starts a client's children.
var localOnly = map[string]bool{"verify": true, "repair": true, "serve": true, "completion": true, "help": true}

type serveOptions struct {
	listen        string
	advertise     string
	tokenFile     string
	readTokenFile string
	insecure      bool
	tlsCert       string
	tlsKey        string
	maxBatch      int
	raft          cluster.Config
	join          string
}

func (a *app) newServeCmd() *cobra.Command {
	o := &serveOptions{}
	c := &cobra.Command{
		Use:   "serve --listen ADDR [--token-file FILE]",
		Short: "Answer the same operations over HTTP, with group commit",
		Long: `A long-lived process that answers every operation over HTTP: POST /v1/<command>
(/v1/worklease/acquire for a subcommand) with the request as a JSON object
whose keys are the flags' names, positional arguments as named fields, e.g.
{"payload":"x","window":"5m"} or {"task":"T1"}; GET /v1/openapi.json describes
every request and answer. The answer is the JSON document the command prints
with -o json, its exit code in the header Leasewal-Exit, HTTP 200 for every
decided outcome (refusals included), 400 for a body that does not parse, 401
for a missing or wrong token. GET /v1/status answers
{"role":"single","leader":URL,"last_seq":N}.

Group commit: requests that arrive together are decided one after the other
in arrival order, each against the state that includes the earlier ones, their
records appended in one write with one fsync, and only then answered; if the
write fails, every request of the batch is answered WriteFailed. Local
commands on the same WAL keep working beside it. It binds to loopback unless
told otherwise; SIGTERM finishes the batch under way, answers it, and exits.`,
		Example: `  leasewal serve --wal /var/lib/leasewal/q.wal --listen 127.0.0.1:7420
  LEASEWAL_SERVER=http://127.0.0.1:7420 leasewal submit --payload job-1

  # a node of a raft cluster; the others add --join with a member's URL
  leasewal serve --wal n1.wal --listen 127.0.0.1:7421 --raft-id n1 --raft-dir n1.raft --raft-bind 127.0.0.1:7521`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error { return runServe(a.env, *o) },
	}
	c.Flags().StringVar(&o.listen, "listen", "127.0.0.1:7420", "the address to listen on")
	c.Flags().StringVar(&o.tokenFile, "token-file", "", "refuse requests without 'Authorization: Bearer <this file's content>' (the file must be private: chmod 600)")
	c.Flags().StringVar(&o.readTokenFile, "read-token-file", "", "a second token, which may only read: status, inspect, log, why, wait, worklease inspect")
	c.Flags().BoolVar(&o.insecure, "insecure", false, "serve an address beyond loopback without a token")
	c.Flags().StringVar(&o.tlsCert, "tls-cert", "", "serve https with this PEM certificate (chain); needs --tls-key")
	c.Flags().StringVar(&o.tlsKey, "tls-key", "", "the PEM private key of --tls-cert")
	c.Flags().IntVar(&o.maxBatch, "max-batch", 256, "most requests decided in one batch")
	c.Flags().StringVar(&o.advertise, "advertise", "", "the URL other nodes and clients reach this server at (default: http://<the --listen address>)")
	c.Flags().StringVar(&o.raft.ID, "raft-id", "", "run as this node of a raft cluster (with --raft-dir and --raft-bind)")
	c.Flags().StringVar(&o.raft.Dir, "raft-dir", "", "the node's raft log and snapshots")
	c.Flags().StringVar(&o.raft.Bind, "raft-bind", "", "the address raft listens on for the other nodes")
	c.Flags().StringVar(&o.raft.Advertise, "raft-advertise", "", "the address the other nodes dial for raft (default: --raft-bind), when a proxy, NAT or name stands in front of it")
	c.Flags().StringVar(&o.join, "join", "", "join the cluster a member at this URL belongs to, instead of founding one")
	return c
}

// batcher decides operations in batches: one lock, one write, one fsync.
type batcher struct {
	back  backend
	queue chan *pending
	max   int
	// mu guards stopped: a request queues under the read lock, and stop
	// closes the queue under the write lock, so that no request is ever
	// sent on the closed queue (a request still under way when a server
	// stops, past Shutdown's patience, is refused instead).
	mu      sync.RWMutex
	stopped bool
	// received counts the requests ever handed to the batcher.
	received atomic.Int64
}

// backend is where a server's batches are decided and made durable: the WAL
// itself (a single server), or a raft cluster through this node.
type backend interface {
	commit(fns []func(*store.Tx) error) (errs []error, committed [][]state.Record, err error)
	status() (statusView, error)
}

// statusView is GET /v1/status.
type statusView struct {
	Role    string `json:"role"`
	Leader  string `json:"leader"`
	LastSeq int64  `json:"last_seq"`
}

// walBackend is a single server's: one handle, shared by the batches and
// the status under mu.
type walBackend struct {
	mu  sync.Mutex
	h   *store.Handle
	url string
}

func (b *walBackend) commit(fns []func(*store.Tx) error) ([]error, [][]state.Record, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.h.WriteBatch(fns)
}

func (b *walBackend) status() (statusView, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var last int64
	err := b.h.Read(func(tx *store.Tx) error { last = tx.State.LastSeq(); return nil })
	return statusView{Role: "single", Leader: b.url, LastSeq: last}, err
}

// nodeBackend is a raft node's: the leader decides and proposes.
type nodeBackend struct{ n *cluster.Node }

func (b nodeBackend) commit(fns []func(*store.Tx) error) ([]error, [][]state.Record, error) {
	return b.n.Commit(fns)
}

func (b nodeBackend) status() (statusView, error) {
	last, err := b.n.LastSeq()
	return statusView{Role: b.n.Role(), Leader: b.n.Leader(), LastSeq: last}, err
}

type pending struct {
	decide    func(tx *store.Tx) (answer, error)
	a         answer
	committed []state.Record
	err       error
	done      chan struct{}
}

// run queues decide for the next batch and waits for its answer.
// Nothing is decided for a request whose client has gone (ctx done): the
// check stands immediately before the decision, in the batch.
func (b *batcher) run(ctx context.Context, decide func(tx *store.Tx) (answer, error)) (answer, []state.Record, error) {
	p := &pending{decide: func(tx *store.Tx) (answer, error) {
		if ctx.Err() != nil {
			return answer{}, errClientGone
		}
		return decide(tx)
	}, done: make(chan struct{})}
	b.mu.RLock()
	if b.stopped {
		b.mu.RUnlock()
		return answer{}, nil, errServerStopping
	}
	b.queue <- p
	b.mu.RUnlock()
	b.received.Add(1)
	<-p.done
	return p.a, p.committed, p.err
}

// loop takes what has queued, decides it as one batch, and answers it,
// until the queue is closed.
func (b *batcher) loop() {
	for first := range b.queue {
		batch := []*pending{first}
	gather:
		for len(batch) < b.max {
			select {
			case p, ok := <-b.queue:
				if !ok {
					break gather
				}
				batch = append(batch, p)
			default:
				break gather
			}
		}
		fns := make([]func(*store.Tx) error, len(batch))
		for i, p := range batch {
			fns[i] = func(tx *store.Tx) error {
				var err error
				p.a, err = p.decide(tx)
				return err
			}
		}
		errs, committed, err := b.back.commit(fns)
		for i, p := range batch {
			p.err, p.committed = errs[i], committed[i]
			if err != nil {
				p.err, p.committed = err, nil // nothing of the batch was written
			}
			close(p.done)
		}
	}
}

func runServe(e env, o serveOptions) error {
	if e.Now != "" {
		return usageErr("serve stamps records with the wall clock: drop --now (or LEASEWAL_NOW)")
	}
	token, err := readToken(o.tokenFile)
	if err != nil {
		return err
	}
	if o.tokenFile != "" && token == "" {
		return usageErr("--token-file %s is empty", o.tokenFile)
	}
	readOnly, err := readToken(o.readTokenFile)
	switch {
	case err != nil:
		return err
	case o.readTokenFile != "" && (readOnly == "" || token == ""):
		return usageErr("--read-token-file needs a token in it and a --token-file beside it (for the writers)")
	case readOnly != "" && readOnly == token:
		return usageErr("--read-token-file and --token-file hold the same token: give the readers a token of their own")
	}
	if o.maxBatch < 1 {
		return usageErr("--max-batch %d: give 1 or more", o.maxBatch)
	}
	clustered := o.raft.ID != "" || o.raft.Dir != "" || o.raft.Bind != "" || o.join != ""
	if clustered && (o.raft.ID == "" || o.raft.Dir == "" || o.raft.Bind == "") {
		return usageErr("a raft node needs all of --raft-id, --raft-dir and --raft-bind")
	}
	if _, port, err := net.SplitHostPort(o.raft.Bind); clustered && (err != nil || port == "0") {
		return usageErr("--raft-bind %q: give host:port with a fixed port, which the other nodes are told", o.raft.Bind)
	}
	if token == "" && !o.insecure && !loopbackOnly(o.listen) {
		return usageErr("--listen %s reaches beyond this machine, and without a token anyone who can reach it may lease, complete and abort tasks: give --token-file F (and TLS in front), or --insecure to serve it open", o.listen)
	}
	var tlsConfig *tls.Config
	if o.tlsCert != "" || o.tlsKey != "" {
		if o.tlsCert == "" || o.tlsKey == "" {
			return usageErr("give both --tls-cert and --tls-key, or neither")
		}
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			return usageErr("--tls-cert %s, --tls-key %s: %v", o.tlsCert, o.tlsKey, err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	listener, err := net.Listen("tcp", o.listen)
	if err != nil {
		return usageErr("cannot listen on %s: %v", o.listen, err)
	}
	defer listener.Close()
	url := strings.TrimRight(o.advertise, "/")
	if url == "" {
		url = advertised(listener.Addr())
	}
	if tlsConfig != nil {
		listener = tls.NewListener(listener, tlsConfig)
		if o.advertise == "" {
			url = "https://" + strings.TrimPrefix(url, "http://")
		}
	}
	var (
		back   backend
		node   *cluster.Node
		failed <-chan error
	)
	if clustered {
		cfg := o.raft
		cfg.URL, cfg.Join, cfg.Log = url, o.join != "", e.stderr
		if tlsConfig != nil { // raft speaks mutual TLS too: only the CA's nodes may send it entries
			if e.CA == "" {
				return usageErr("a raft node serving TLS needs --ca: the certificate that signs every node's")
			}
			pool, err := loadCA(e.CA)
			if err != nil {
				return err
			}
			cfg.TLS = &cluster.TLS{Cert: tlsConfig.Certificates[0], CA: pool}
		}
		if node, err = cluster.Start(cfg, e.storeOptions()); err != nil {
			return usageErr("%v", err)
		}
		defer node.Shutdown()
		back, failed = nodeBackend{node}, node.Failed()
	} else {
		opts := e.storeOptions()
		opts.Resident = true
		h := store.Open(opts)
		defer h.Close()
		back = &walBackend{h: h, url: url}
	}
	s, stopBatches := newServer(e, back, node, token, o.maxBatch)
	s.readToken = readOnly
	// SIGTERM ends the open waits at once (each answers what it has, as if
	// its time had run out), so that Shutdown has only short requests to
	// finish.
	stopping, stopWaits := context.WithCancel(context.Background())
	defer stopWaits()
	s.e.stopping = stopping
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: serverWaitCap + time.Minute, IdleTimeout: time.Minute}
	fmt.Fprintf(e.stderr, "leasewal: serving %s on %s\n", e.WAL, url)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(listener) }()
	joined := make(chan error, 1)
	if o.join != "" {
		client, err := e.httpClient()
		if err != nil {
			return err
		}
		go func() { joined <- joinCluster(client, o.join, token, cfgJoin(node, o.raft.ID, url)) }()
	}
	var stopErr error
	select {
	case err := <-served:
		return err
	case err := <-failed:
		stopErr = err
	case err := <-joined:
		if err == nil {
			fmt.Fprintf(e.stderr, "leasewal: node %s joined the cluster of %s\n", o.raft.ID, o.join)
			select {
			case err := <-served:
				return err
			case stopErr = <-failed:
			case <-sigs:
			}
		} else {
			stopErr = err
		}
	case <-sigs:
	}
	stopWaits()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = srv.Shutdown(ctx) // in-flight requests finish and are answered
	stopBatches()
	if stopErr != nil {
		return stopErr
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// joinRequest is POST /v1/cluster/join: a node asking to be added.
type joinRequest struct {
	ID       string `json:"id"`
	RaftAddr string `json:"raft_addr"`
	URL      string `json:"url"`
}

func cfgJoin(node *cluster.Node, id, url string) joinRequest {
	return joinRequest{ID: id, RaftAddr: node.RaftAddr(), URL: url}
}

// joinCluster asks the member at base to add this node, until it is added
// or a minute has passed (the cluster may be electing a leader).
func joinCluster(client *http.Client, base, token string, req joinRequest) error {
	body, _ := json.Marshal(req) // three strings always marshal
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := http.NewRequest(http.MethodPost, strings.TrimRight(base, "/")+"/v1/cluster/join", bytes.NewReader(body))
		if err != nil {
			return usageErr("--join %q: %v", base, err)
		}
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(r)
		if err == nil {
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				return nil
			case http.StatusServiceUnavailable:
				err = errors.New("no leader yet")
			default:
				var v errorView
				_ = json.Unmarshal(answer, &v)
				return fmt.Errorf("joining the cluster of %s: %s: %s", base, resp.Status, v.Message)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("joining the cluster of %s: %v; check --join and that the member runs", base, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// newServer is the HTTP API over back: every request's operation joins the
// batches of one batcher (group commit). node is the raft node behind back,
// nil for a single server. stop drains the batcher once no request is under
// way.
func newServer(e env, back backend, node *cluster.Node, token string, maxBatch int) (s *server, stop func()) {
	e.Server = "" // a server's operations are its own: it sends none on
	b := &batcher{back: back, queue: make(chan *pending, 4096), max: maxBatch}
	done := make(chan struct{})
	go func() { b.loop(); close(done) }()
	e.batch = b
	stop = func() {
		b.mu.Lock()
		b.stopped = true
		close(b.queue)
		b.mu.Unlock()
		<-done
	}
	return &server{e: e, back: back, node: node, batch: b, token: token}, stop
}

// server answers the HTTP API.
type server struct {
	e     env
	back  backend
	node  *cluster.Node // nil: a single server
	batch *batcher
	token string
	// readToken, if set, may ask for readOnlyPaths only.
	readToken string
}

// loopbackOnly says whether a --listen address is reached from this
// machine only: localhost or a loopback IP (an empty host is every
// interface).
func loopbackOnly(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil || host == "" {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// advertised is the URL a server tells others to reach it at: its listening
// address, or this host's name where it listens on every interface
// (http://[::]:7420 reaches nothing).
func advertised(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return "http://" + addr.String()
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(tcp.Port))
}

// bearerIs says whether an Authorization header carries token: the scheme
// in any case (RFC 9110), the token compared in constant time.
func bearerIs(header, token string) bool {
	scheme, given, ok := strings.Cut(header, " ")
	return ok && strings.EqualFold(scheme, "Bearer") &&
		subtle.ConstantTimeCompare([]byte(strings.TrimSpace(given)), []byte(token)) == 1
}

// The most a request body may hold: a 64 KiB payload escaped, and the rest.
const maxRequestBody = 1 << 20

// readOnlyPaths are what a read-only token may ask for: what writes nothing.
var readOnlyPaths = map[string]bool{"status": true, "cluster/members": true, "openapi.json": true, "inspect": true, "log": true, "why": true, "wait": true, "worklease/inspect": true}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path, ok := strings.CutPrefix(r.URL.Path, "/v1/")
	if auth := r.Header.Get("Authorization"); s.token != "" && !bearerIs(auth, s.token) {
		switch {
		case s.readToken == "" || !bearerIs(auth, s.readToken):
			httpError(w, http.StatusUnauthorized, "Unauthorized", "a missing or wrong token: send 'Authorization: Bearer <token>'")
			return
		case !readOnlyPaths[path]:
			httpError(w, http.StatusForbidden, "Forbidden", fmt.Sprintf("this token may only read (status, inspect, log, why, wait, worklease inspect), not %s: use a full token", path))
			return
		}
	}
	switch {
	case !ok:
		httpError(w, http.StatusNotFound, "NotFound", "the API is under /v1/")
		return
	case path == "status" && r.Method == http.MethodGet:
		s.status(w)
		return
	case path == "openapi.json" && r.Method == http.MethodGet:
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(api.OpenAPI)
		return
	case path == "cluster/members" && r.Method == http.MethodGet:
		s.members(w)
		return
	case r.Method != http.MethodPost:
		httpError(w, http.StatusMethodNotAllowed, "Usage", "POST /v1/<command>")
		return
	}
	limit := int64(maxRequestBody)
	if path == "submit/batch" {
		limit = maxBatchBody
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		httpError(w, http.StatusRequestEntityTooLarge, "Usage", fmt.Sprintf("the request body is over %d bytes", limit))
		return
	}
	switch path {
	case "cluster/join":
		s.join(w, r, body)
		return
	case "cluster/remove":
		s.remove(w, r, body)
		return
	}
	if s.node != nil && !s.node.Leading() {
		s.forward(w, r, body)
		return
	}
	if path == "submit/batch" {
		s.submitBatch(w, r, body)
		return
	}
	if decode, typed := typedOps[path]; typed {
		run, err := decode(body)
		if err != nil {
			httpError(w, http.StatusBadRequest, "Usage", err.Error())
			return
		}
		jsonType := "application/json"
		if path == "log" {
			jsonType = "application/x-ndjson" // one record a line
		}
		s.respond(w, r, jsonType, run)
		return
	}
	httpError(w, http.StatusBadRequest, "Usage", unknownRoute(path))
}

func (s *server) status(w http.ResponseWriter) {
	v, err := s.back.status()
	if err != nil {
		httpError(w, http.StatusInternalServerError, "Internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	writeJSON(w, v)
}

// join adds a node to the cluster, on the leader.
func (s *server) join(w http.ResponseWriter, r *http.Request, body []byte) {
	var req joinRequest
	switch {
	case s.node == nil:
		httpError(w, http.StatusBadRequest, "Usage", "this server is not a raft node: start it with --raft-id, --raft-dir and --raft-bind")
		return
	case !s.node.Leading():
		s.forward(w, r, body)
		return
	case json.Unmarshal(body, &req) != nil:
		httpError(w, http.StatusBadRequest, "Usage", `the body is not {"id":…,"raft_addr":…,"url":…}`)
		return
	}
	if err := s.node.Join(req.ID, req.RaftAddr, req.URL); errors.Is(err, cluster.ErrNotLeader) {
		httpError(w, http.StatusServiceUnavailable, "NotLeader", err.Error())
		return
	} else if err != nil {
		httpError(w, http.StatusBadRequest, "Usage", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	writeJSON(w, map[string]string{"result": "JOINED", "id": req.ID})
}

// submitBatch is POST /v1/submit/batch: one submit per line (NDJSON,
// decoded straight into api.SubmitRequest, no command line), decided all or
// nothing in the next batch; the answer is one line per task. A line's
// error is 400 with the line's number.
func (s *server) submitBatch(w http.ResponseWriter, r *http.Request, body []byte) {
	subs, lines, err := readSubmits(bytes.NewReader(body), api.SubmitRequest{})
	if err != nil {
		httpError(w, http.StatusBadRequest, "Usage", err.Error())
		return
	}
	s.respond(w, r, "application/x-ndjson", func(e env) error { return e.submitBatch(subs, lines) })
}

// respond runs a typed request's operation for the request r, and answers
// what it printed: with -o json (Leasewal-Output) a document of type
// jsonType, its exit code in Leasewal-Exit, its stderr in Leasewal-Stderr.
func (s *server) respond(w http.ResponseWriter, r *http.Request, jsonType string, run func(env) error) {
	output := cmp.Or(r.Header.Get("Leasewal-Output"), "json")
	var stdout, stderr bytes.Buffer
	e := s.e
	e.ctx, e.stdout, e.stderr, e.Output, e.Color = r.Context(), &stdout, &stderr, output, false
	e.NoHeaders = r.Header.Get("Leasewal-No-Headers") == "1"
	e.getenv = func(k string) string {
		if k == "COLUMNS" {
			return r.Header.Get("Leasewal-Columns")
		}
		return ""
	}
	code := (&app{env: e, resolved: true}).finish(run(e))
	w.Header().Set("Leasewal-Exit", strconv.Itoa(code))
	if stderr.Len() > 0 {
		w.Header().Set("Leasewal-Stderr", strconv.Quote(stderr.String()))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if output == "json" {
		w.Header().Set("Content-Type", jsonType)
	}
	_, _ = w.Write(stdout.Bytes()) // a client gone away: the decision stands, a retry with its request id gets it
}

// notANode answers a cluster request that reached a single server.
func (s *server) notANode(w http.ResponseWriter) bool {
	if s.node == nil {
		httpError(w, http.StatusBadRequest, "Usage", "this server is not a raft node: start it with --raft-id, --raft-dir and --raft-bind")
	}
	return s.node == nil
}

// membersView is GET /v1/cluster/members: the configuration as the node
// that answers knows it.
type membersView struct {
	Members []cluster.Member `json:"members"`
}

func (s *server) members(w http.ResponseWriter) {
	if s.notANode(w) {
		return
	}
	list, err := s.node.Members()
	if err != nil {
		httpErrorExit(w, http.StatusInternalServerError, ExitInternal, "Internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Leasewal-Exit", "0")
	writeJSON(w, membersView{Members: list})
}

// removeRequest is POST /v1/cluster/remove.
type removeRequest struct {
	ID string `json:"id"`
}

// remove takes a node out of the cluster, on the leader.
func (s *server) remove(w http.ResponseWriter, r *http.Request, body []byte) {
	var req removeRequest
	switch {
	case s.notANode(w):
		return
	case !s.node.Leading():
		s.forward(w, r, body)
		return
	case strictJSON(body, &req) != nil || req.ID == "":
		httpError(w, http.StatusBadRequest, "Usage", `the body is not {"id":"<node id>"}`)
		return
	}
	already, err := s.node.Remove(req.ID)
	switch {
	case errors.Is(err, cluster.ErrNotLeader):
		httpError(w, http.StatusServiceUnavailable, "NotLeader", err.Error())
		return
	case errors.Is(err, cluster.ErrUnknownMember):
		httpErrorExit(w, http.StatusNotFound, ExitNotFound, "NotFound", err.Error())
		return
	case err != nil:
		httpErrorExit(w, http.StatusInternalServerError, ExitUnknownSent, "OutcomeUnknown", err.Error()+": the outcome is unknown; repeat the removal")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Leasewal-Exit", "0")
	writeJSON(w, map[string]any{"result": "REMOVED", "id": req.ID, "already": already})
}

// forward sends a request that reached a follower to the leader, and its
// answer back. Nothing is decided here: with no leader known it is 503, which
// a client answers by trying again; an answer lost on the way is exit 10. A
// forward ends when its client goes, and when the cluster's leader changes
// (the leader it went to may be paused or cut off, and would answer only
// once it is back, if ever): that is exit 10 too.
func (s *server) forward(w http.ResponseWriter, r *http.Request, body []byte) {
	changed := s.node.LeaderChanged()
	leader := s.node.Leader()
	if leader == "" || r.Header.Get("Leasewal-Forwarded") != "" {
		httpError(w, http.StatusServiceUnavailable, "NoLeader", "no leader is known yet (an election is under way): send the request again shortly")
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
		httpError(w, http.StatusInternalServerError, "Internal", err.Error())
		return
	}
	for _, name := range []string{"Authorization", "Content-Type", "Leasewal-Output", "Leasewal-Columns"} {
		if v := r.Header.Get(name); v != "" {
			req.Header.Set(name, v)
		}
	}
	req.Header.Set("Leasewal-Forwarded", "1")
	client, err := s.e.httpClient()
	if err != nil {
		httpError(w, http.StatusInternalServerError, "Internal", err.Error())
		return
	}
	resp, err := client.Do(req)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			httpError(w, http.StatusServiceUnavailable, "NoLeader", fmt.Sprintf("the leader %s cannot be reached: send the request again shortly", leader))
			return
		}
		cause := err.Error()
		if ctx.Err() != nil && r.Context().Err() == nil {
			cause = "the cluster's leader changed meanwhile"
		}
		httpErrorExit(w, http.StatusBadGateway, ExitUnknownSent, "OutcomeUnknown",
			fmt.Sprintf("the request was forwarded to the leader %s but its answer was lost (%s): the outcome is unknown; repeat it with the same --request-id", leader, cause))
		return
	}
	defer resp.Body.Close()
	for _, name := range []string{"Content-Type", "Leasewal-Exit", "Leasewal-Stderr"} {
		if v := resp.Header.Get(name); v != "" {
			w.Header().Set(name, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func httpError(w http.ResponseWriter, status int, kind, msg string) {
	httpErrorExit(w, status, ExitUsage, kind, msg)
}

func httpErrorExit(w http.ResponseWriter, status, exit int, kind, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Leasewal-Exit", strconv.Itoa(exit))
	w.WriteHeader(status)
	writeJSON(w, errorView{Error: api.Error{Result: "ERROR", Kind: kind, Message: msg}})
}

// strictJSON decodes one JSON object into v: unknown fields and anything
// after it are refused.
func strictJSON(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errTrailing
	}
	return nil
}

// errTrailing is a body with something after its JSON object.
var errTrailing = errors.New("data after the JSON object")
