package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/leasewal/leasewal/api"
)

// WaitCap is the longest a server waits in one request (wait, lease
// --wait): below a client's own patience, so that a wait never outlives a
// client that gave up; the client asks again until its own wait runs out.
const WaitCap = 5 * time.Minute

// Lifetime is what ends a serving server besides its context: a raft
// node's failure, and a join to wait for.
type Lifetime struct {
	Failed <-chan error // a raft node's fatal error; nil for a single server
	// Join, if set, is a member's URL: the node asks it to add JoinAs until
	// it is added or a minute has passed.
	Join   string
	JoinAs JoinRequest
	Log    io.Writer
}

// Serve answers on ln until ctx is done (SIGTERM), the node fails or its
// join fails; then the open waits end, the requests under way finish and
// are answered (for up to 30 s), and the batcher stops.
func (s *Server) Serve(ctx context.Context, ln net.Listener, l Lifetime) error {
	srv := &http.Server{Handler: s.handler, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: WaitCap + time.Minute, IdleTimeout: time.Minute}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	joined := make(chan error, 1)
	if l.Join != "" {
		go func() { joined <- s.joinCluster(ctx, l.Join, l.JoinAs) }()
	}
	var stopErr error
	select {
	case err := <-served:
		s.endLines()
		s.Stop()
		return err
	case stopErr = <-l.Failed:
	case err := <-joined:
		if err != nil {
			stopErr = err
			break
		}
		fmt.Fprintf(l.Log, "leasewal: node %s joined the cluster of %s\n", l.JoinAs.ID, l.Join)
		select {
		case err := <-served:
			s.endLines()
			s.Stop()
			return err
		case stopErr = <-l.Failed:
		case <-ctx.Done():
		}
	case <-ctx.Done():
	}
	s.StopWaits()
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := srv.Shutdown(shutdown) // in-flight requests finish and are answered
	s.lineConns.end(shutdown)     // and each line under way
	s.Stop()
	if stopErr != nil {
		return stopErr
	}
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// endLines ends the lines door's connections when the listener failed:
// each answers its line under way (for up to 30 s).
func (s *Server) endLines() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.lineConns.end(ctx)
}

// joinCluster asks the member at base to add this node, until it is added,
// a minute has passed (the cluster may be electing a leader) or ctx ends.
func (s *Server) joinCluster(ctx context.Context, base string, req JoinRequest) error {
	body, _ := json.Marshal(req) // three strings always marshal
	deadline := time.Now().Add(time.Minute)
	for {
		r, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+"/v1/cluster/join", bytes.NewReader(body))
		if err != nil {
			return fmt.Errorf("--join %q: %w", base, err)
		}
		r.Header.Set("Content-Type", "application/json")
		if s.o.Token != "" {
			r.Header.Set("Authorization", "Bearer "+s.o.Token)
		}
		resp, err := s.o.HTTP.Do(r)
		if err == nil {
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			switch resp.StatusCode {
			case http.StatusOK:
				return nil
			case http.StatusServiceUnavailable:
				err = errors.New("no leader yet")
			default:
				var v api.Error
				_ = json.Unmarshal(answer, &v)
				return fmt.Errorf("joining the cluster of %s: %s: %s", base, resp.Status, v.Message)
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("joining the cluster of %s: %v; check --join and that the member runs", base, err)
		}
		select {
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}

// LoopbackOnly says whether a --listen address is reached from this
// machine only: localhost or a loopback IP (an empty host is every
// interface).
func LoopbackOnly(listen string) bool {
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

// Advertised is the URL a server tells others to reach it at: its listening
// address, or this host's name where it listens on every interface
// (http://[::]:7420 reaches nothing).
func Advertised(addr net.Addr) string {
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
