package cmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/cluster"
	"github.com/leasewal/leasewal/internal/metrics"
	"github.com/leasewal/leasewal/internal/report"
	"github.com/leasewal/leasewal/internal/server"
	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/state"
)

// The verbs a server does not run for a client: they read or repair the file
// itself, or are local by nature. run is not among them for a client, which
// runs its children itself and leases through the server (runcoord.go); a
// server never starts a client's children.
var localOnly = map[string]bool{"verify": true, "repair": true, "reindex": true, "backup": true, "serve": true, "completion": true, "help": true}

type serveOptions struct {
	listen        string
	advertise     string
	publicHosts   []string
	tokenFile     string
	readTokenFile string
	insecure      bool
	tlsCert       string
	tlsKey        string
	maxBatch      int
	pipeline      bool
	raft          cluster.Config
	join          string
	compactAbove  string
	compactEvery  string
	keepFinished  string
	keepHistory   string
	accessLog     string
}

// compaction reads the automatic compaction's flags.
func (o serveOptions) compaction() (service.AutoCompact, error) {
	above, err := parseSize("compact-above", o.compactAbove)
	if err != nil {
		return service.AutoCompact{}, err
	}
	every, err := api.ParseDuration("compact-every", o.compactEvery)
	if err != nil {
		return service.AutoCompact{}, err
	}
	keep, err := compactOptions(o.keepFinished, o.keepHistory, false)
	return service.AutoCompact{Above: above, Every: every, Options: keep}, err
}

func (a *app) newServeCmd() *cobra.Command {
	o := &serveOptions{}
	c := &cobra.Command{
		Use:   "serve --listen ADDR [--token-file FILE]",
		Short: "Serve the same commands over HTTP, to workers on other machines",
		Long: `A long-lived process that answers every operation over HTTP: POST /v1/<command>
(/v1/worklease/acquire for a subcommand) with the request as a JSON object
whose keys are the flags' names in snake_case (request_id for --request-id),
positional arguments as named fields, e.g.
{"payload":"x","window":"5m"} or {"task":"T1"}; GET /v1/openapi.json describes
every request and answer. The answer is the JSON document the command prints
with -o json, its exit code in the header Leasewal-Exit: HTTP 200 for every
answer (EMPTY and CANCELLED included); a refusal 400 (bad input), 409 (a request
id reused with other options, a fencing conflict), 404 (an unknown task) or 500
(the server's failure); 401 for a missing or wrong token. GET /v1/status answers
{"role":"single","leader":URL,"last_seq":N}.

Group commit: requests that arrive together are decided one after the other
in arrival order, each against the state that includes the earlier ones, their
records appended in one write with one fsync, and only then answered; if the
write fails, every request of the batch is answered WriteFailed. Requests that
arrive during an fsync make the next batch; a full batch (--max-batch) is
pipelined: the next is decided (on the state that includes it) and written
while its fsync runs. The WAL stays locked while batches
keep coming and is let go as soon as none is in flight, so local commands on
the same WAL keep working beside it. A request refused in a batch is refused
alone; if an fsync fails, the WAL is cut back to what was durable and the
batches it covered, and those written after them, are answered WriteFailed;
nothing is decided twice. A raft node's batches go one at a time. It binds to
loopback unless told otherwise; SIGTERM finishes the batch under way, answers
it, and exits.

A POST must send Content-Type: application/json (application/x-ndjson to
/v1/submit/batch); a request from another Origin, or whose Host names neither
an IP address, a loopback name, nor --listen's, --advertise's or a
--public-host, is refused, so that no web page can use the server. GET
/healthz and /readyz answer anyone.

A single server compacts its WAL as 'leasewal compact' does, keeping
--keep-finished and --keep-history: once it is larger than --compact-above
(and twice what the last compaction left), and every --compact-every. The
history is read and copied beside the batches; they pause only for the last
step.`,
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
	c.Flags().BoolVar(&o.pipeline, "pipeline", true, "decide the next batch while a full batch's fsync runs (false: each batch takes the WAL's lock on its own, one at a time)")
	c.Flags().StringVar(&o.advertise, "advertise", "", "the URL other nodes and clients reach this server at (default: http://<the --listen address>)")
	c.Flags().StringSliceVar(&o.publicHosts, "public-host", nil, "a host name clients reach this server by, beside its address, --listen's and --advertise's (repeat, or give a comma-separated list): a request naming another is refused")
	c.Flags().StringVar(&o.raft.ID, "raft-id", "", "run as this node of a raft cluster (with --raft-dir and --raft-bind)")
	c.Flags().StringVar(&o.raft.Dir, "raft-dir", "", "the node's raft log and snapshots")
	c.Flags().StringVar(&o.raft.Bind, "raft-bind", "", "the address raft listens on for the other nodes")
	c.Flags().StringVar(&o.raft.Advertise, "raft-advertise", "", "the address the other nodes dial for raft (default: --raft-bind), when a proxy, NAT or name stands in front of it")
	c.Flags().StringVar(&o.compactAbove, "compact-above", defaultCompactAbove, "compact the WAL once it is larger than this (and twice what the last compaction left); 0: never by size")
	c.Flags().StringVar(&o.compactEvery, "compact-every", "0s", "compact the WAL this often (e.g. 1d); 0s: never by age")
	c.Flags().StringVar(&o.accessLog, "access-log", "", "append a line per request to this file (- for stderr): time, client, method, path, status, exit code, duration, bytes")
	c.Flags().StringVar(&o.keepFinished, "keep-finished", defaultKeepFinished, "a compaction keeps the finished tasks that ended within this")
	c.Flags().StringVar(&o.keepHistory, "keep-history", defaultKeepHistory, "a compaction deletes the history segments older than this")
	c.Flags().StringVar(&o.join, "join", "", "join the cluster a member at this URL belongs to, instead of founding one")
	return c
}

func runServe(e env, o serveOptions) error {
	if e.Now != "" {
		return usageErr("serve stamps records with the wall clock: drop --now (or LEASEWAL_NOW)")
	}
	if os.Getenv("GOGC") == "" {
		// A resident process collects as often as Go's default once its
		// heap is past the floor: what a long read leaves behind is given
		// back soon, not five times the live heap later (TuneGC's trade,
		// which suits a command that exits).
		debug.SetGCPercent(100)
		heapFloor.Store(serveHeapFloor)
	}
	token, err := client.ReadToken(o.tokenFile)
	if err != nil {
		return err
	}
	if o.tokenFile != "" && token == "" {
		return usageErr("--token-file %s is empty", o.tokenFile)
	}
	readOnly, err := client.ReadToken(o.readTokenFile)
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
	compaction, err := o.compaction()
	if err != nil {
		return err
	}
	clustered := o.raft.ID != "" || o.raft.Dir != "" || o.raft.Bind != "" || o.join != ""
	if clustered && (o.raft.ID == "" || o.raft.Dir == "" || o.raft.Bind == "") {
		return usageErr("a raft node needs all of --raft-id, --raft-dir and --raft-bind")
	}
	if _, port, err := net.SplitHostPort(o.raft.Bind); clustered && (err != nil || port == "0") {
		return usageErr("--raft-bind %q: give host:port with a fixed port, which the other nodes are told", o.raft.Bind)
	}
	if token == "" && !o.insecure && !server.LoopbackOnly(o.listen) {
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
		url = server.Advertised(listener.Addr())
	}
	if tlsConfig != nil {
		listener = tls.NewListener(listener, tlsConfig)
		if o.advertise == "" {
			url = "https://" + strings.TrimPrefix(url, "http://")
		}
	}
	httpClient, err := client.HTTPTrusting(e.CA)
	if err != nil {
		return err
	}
	var (
		back service.Backend
		node *cluster.Node
		life = server.Lifetime{Join: o.join, Log: e.stderr}
		live = report.NewLive("leasewal serve: " + e.WAL)
	)
	if clustered {
		cfg := o.raft
		cfg.URL, cfg.Join, cfg.Log, cfg.Applied = url, o.join != "", e.stderr, live.Add // a follower's page follows what it applies
		if tlsConfig != nil {                                                           // raft speaks mutual TLS too: only the CA's nodes may send it entries
			if e.CA == "" {
				return usageErr("a raft node serving TLS needs --ca: the certificate that signs every node's")
			}
			pool, err := client.LoadCA(e.CA)
			if err != nil {
				return err
			}
			cfg.TLS = &cluster.TLS{Cert: tlsConfig.Certificates[0], CA: pool}
		}
		if node, err = service.StartNode(cfg, e.wal()); err != nil {
			return usageErr("%v", err)
		}
		defer node.Shutdown()
		back, life.Failed = service.NodeBackend{Node: node}, node.Failed()
		life.JoinAs = server.JoinRequest{ID: o.raft.ID, RaftAddr: node.RaftAddr(), URL: url}
	} else {
		wal := service.OpenWALBackend(e.wal(), url)
		defer wal.Close()
		back = wal
		if !o.pipeline {
			back = service.Serial{Backend: back}
		}
	}
	hosts := append([]string{o.listen}, o.publicHosts...)
	ready := func() error { return nil }
	if node != nil {
		ready = func() error {
			if node.Leader() == "" {
				return errors.New("no leader is known yet")
			}
			return nil
		}
	}
	var accessLog io.Writer
	switch o.accessLog {
	case "":
	case "-":
		accessLog = e.stderr
	default:
		f, err := os.OpenFile(o.accessLog, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return usageErr("--access-log %s: %v", o.accessLog, err)
		}
		defer f.Close()
		accessLog = f
	}
	s, batch, svc, kick, compact := newServer(e, back, node, o.maxBatch, server.Options{URL: url, Token: token, ReadToken: readOnly, HTTP: httpClient, Live: live, Hosts: hosts, Ready: ready, Log: e.stderr, AccessLog: accessLog})
	compacting, stopCompacting := context.WithCancel(context.Background())
	compactor := service.StartCompactor(compacting, compaction, e.wal(), batch, compact, func(line string) { fmt.Fprintf(e.stderr, "leasewal: %s\n", line) })
	defer func() { stopCompacting(); compactor.Wait() }()
	firing, stopFiring := context.WithCancel(context.Background())
	firer := service.StartFirer(firing, svc, kick, func(line string) { fmt.Fprintf(e.stderr, "leasewal: %s\n", line) })
	defer func() { stopFiring(); firer.Wait() }()
	fmt.Fprintf(e.stderr, "leasewal: serving %s on %s\n", e.WAL, url)
	// SIGTERM ends the open waits at once (each answers what it has, as if
	// its time had run out), so that the shutdown has only short requests
	// to finish.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return s.Serve(ctx, listener, life)
}

// newServer is the HTTP API of the service deciding on back, in batches of
// at most maxBatch (group commit); node is the raft node behind back, nil
// for a single server. compact is how it compacts its WAL: beside its
// batches, or (a cluster's leader) as a proposal between two, which every
// node compacts at the same record.
func newServer(e env, back service.Backend, node *cluster.Node, maxBatch int, o server.Options) (srv *server.Server, batch *service.Batcher, svc *service.Local, kick <-chan struct{},
	compact func(service.CompactOptions) (service.Compaction, error)) {
	own := metrics.NewServer()
	batch = service.NewBatcher(back, maxBatch, own.Observe)
	compact = service.LocalCompaction(e.wal(), batch)
	if node != nil {
		compact = func(keep service.CompactOptions) (service.Compaction, error) {
			var wait func() (service.Compaction, error)
			err := batch.Exclusive(func() (err error) { wait, err = node.ProposeCompaction(keep); return err })
			if err != nil {
				return service.Compaction{}, err
			}
			return wait()
		}
	}
	stopping, stopWaits := context.WithCancel(context.Background())
	kick, scheduled := service.Kicker()
	live := o.Live
	if live == nil {
		live = report.NewLive("leasewal serve: " + e.WAL)
	}
	svc = service.New(service.Options{WAL: e.wal(), Batch: batch, Stopping: stopping, WaitCap: server.WaitCap, MaxRetries: e.MaxRetries, Compact: compact,
		Committed: func(recs []state.Record) {
			own.Records(recs)
			scheduled(recs)
			live.Add(recs)
			if srv != nil { // set below, before a request is served
				srv.Changed()
			}
		}})
	live.LoadFrom(func() ([]api.Record, int64, error) { return latest(svc, back) }) // when the page is first looked at
	o.Live = live
	synced, _ := back.(interface{ Syncs() int64 }) // a single server's WAL; a raft node's is the node's
	o.Metrics = metrics.Handler(func(ctx context.Context) ([]metrics.Family, error) {
		stats, err := svc.Stats(ctx, api.StatsRequest{})
		if err != nil {
			return nil, err
		}
		families := append(metrics.StatsFamilies(stats), own.Families()...)
		if synced != nil {
			families = append(families, metrics.SyncFamily(synced.Syncs()))
		}
		if node != nil {
			term, commit, applied := node.Indexes()
			families = append(families, metrics.RaftFamilies(metrics.Raft{Role: node.Role(), Term: term, Commit: commit, Applied: applied})...)
		}
		return families, nil
	})
	o.Describe, o.Unknown, o.StopWaits, o.Stop = describe, unknownRoute, stopWaits, batch.Stop
	if node == nil { // a raft node's page is fed what it applies: every write goes through raft
		following, stopFollowing := context.WithCancel(context.Background())
		followed := make(chan struct{})
		go func() { defer close(followed); follow(following, svc, live, e.stderr) }()
		o.Stop = func() { stopFollowing(); <-followed; batch.Stop() }
	}
	if e.stderr != nil {
		o.Describe = func(err error) api.Error {
			if service.RefusedAtTheGate(err) { // a record the request path let through and the gate did not: a bug, answered for its request alone
				fmt.Fprintf(e.stderr, "leasewal: a request was refused at the gate (a bug of leasewal's; nothing of it was written): %v\n", err)
			}
			return describe(err)
		}
	}
	if o.SpoolDir == "" {
		o.SpoolDir = filepath.Dir(e.WAL) // a streamed answer is written on the WAL's disk, not in memory
	}
	if o.HTTP == nil {
		o.HTTP = http.DefaultClient
	}
	o.Changes = svc.Changes
	srv = server.New(svc, back.Status, node, o)
	return srv, batch, svc, kick, compact
}

// latest is the WAL's latest records, as many as a live page keeps, and
// its last seq (the backend's status: stats would read every task).
func latest(svc *service.Local, back service.Backend) ([]api.Record, int64, error) {
	status, err := back.Status()
	if err != nil || status.LastSeq == 0 {
		return nil, 0, err
	}
	var recs []api.Record
	end, err := svc.Log(context.Background(), api.LogRequest{From: max(1, status.LastSeq-report.LiveRecords+1)},
		func(r api.Record) error { recs = append(recs, r); return nil })
	return recs, end.LastSeq, err
}

// followEvery is how often at most a live page reads what others wrote.
const followEvery = 500 * time.Millisecond

// follow keeps live up with the WAL whoever writes it (local commands
// beside a server are supported): from the page's first look until ctx
// ends, at each change of the WAL (at most every followEvery) it reads
// the records after the page's last, as many as the page keeps.
func follow(ctx context.Context, svc *service.Local, live *report.Live, log io.Writer) {
	select {
	case <-ctx.Done():
		return
	case <-live.Looked():
	}
	changes, err := svc.Changes(ctx)
	if err != nil {
		if log != nil {
			fmt.Fprintf(log, "leasewal: the live page shows this server's own writes only: %v\n", err)
		}
		return
	}
	pause := time.NewTimer(followEvery)
	defer pause.Stop()
	for { // what was written before the watch began is read first
		last, _ := live.Last()
		var recs []api.Record
		_, err := svc.Log(ctx, api.LogRequest{From: last + 1}, func(r api.Record) error {
			if recs = append(recs, r); len(recs) >= 2*report.LiveRecords {
				recs = append(recs[:0], recs[len(recs)-report.LiveRecords:]...)
			}
			return nil
		})
		if err == nil {
			live.Follow(recs)
		}
		pause.Reset(followEvery)
		select { // at most every followEvery: a change meanwhile is kept in changes
		case <-ctx.Done():
			return
		case <-pause.C:
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		}
	}
}

// unknownRoute says why a POST path is no operation.
func unknownRoute(path string) string {
	first, _, _ := strings.Cut(path, "/")
	switch {
	case first == "run":
		return "a server does not start children: 'leasewal --server URL run' runs them on the client and leases through /v1/lease"
	case localOnly[first]:
		return first + " works on the WAL's own machine only: run it there, without --server"
	}
	return fmt.Sprintf("%q is not a command", path)
}

// describe is an error as the HTTP API answers it: the kind and exit code
// the command line would exit with, the message it would print.
func describe(err error) api.Error {
	c := classify(err)
	return api.Error{Result: "ERROR", Kind: c.kind, Message: withAdvice(err, nil), Seq: c.seq, Exit: c.code}
}
