package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/lincheck"
	"github.com/leasewal/leasewal/internal/server"
	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/internal/store"
	"github.com/leasewal/leasewal/internal/testwait"
)

// TestLinesLinearizable: four Go clients, each on its own lines
// connection, send lincheck's random calls (submits, some waiting for the
// client's last task, leases with request ids, completions, failures,
// releases) to a server whose clock stands still; the history they saw is
// linearizable against the reference model, which shares no code with
// the server's rules.
func TestLinesLinearizable(t *testing.T) {
	dir := t.TempDir()
	const at = "2026-01-01T00:00:00Z"
	clock := filepath.Join(dir, "clock")
	if err := os.WriteFile(clock, []byte(at+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	walPath := filepath.Join(dir, "q.wal")
	if code, _, stderr := cli(append([]string{"--wal", walPath, "--now", at}, lincheck.Input{Op: "submit", Req: "first"}.Args(false)...)...); code != 0 {
		t.Fatal(stderr)
	}
	e := env{Config: Config{WAL: walPath, Output: "json", LockTimeout: time.Minute, Actor: "test", TestClock: clock}}
	h := store.Open(e.storeOptions())
	s, _, _, _, _ := newServer(e, service.NewWALBackend(h, "http://test"), nil, 64, server.Options{})
	defer func() { s.Stop(); h.Close() }()
	var upgrades atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/lines" {
			upgrades.Add(1)
		}
		s.ServeHTTP(w, r)
	}))
	defer ts.Close()
	const clients = 4
	var cs [clients]*client.Client
	for i := range cs {
		var err error
		if cs[i], err = client.New([]string{ts.URL}, client.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	var answered atomic.Int32
	history, err := lincheck.Clients(clients, 25, 0, time.Now(), func() bool { return false }, &answered, func(i int, in lincheck.Input) (string, error) {
		return overLines(cs[i], in)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := upgrades.Load(); n != clients {
		t.Fatalf("%d connections switched for %d clients, want one each", n, clients)
	}
	initial, err := time.Parse(time.RFC3339, at)
	if err != nil {
		t.Fatal(err)
	}
	if res, where := lincheck.Check(initial.UnixMilli(), history, testwait.HangGuard); res != porcupine.Ok {
		wal, _ := os.ReadFile(walPath)
		t.Fatalf("the history of %d calls over the lines door is %s; see %s\n%s", len(history), res, where, wal)
	}
}

// overLines makes lincheck's call in with the Go client and prints what
// the command line would with -o json: the answer, or the refusal.
func overLines(c *client.Client, in lincheck.Input) (string, error) {
	ctx := context.Background()
	var (
		answer any
		err    error
	)
	switch in.Op {
	case "submit":
		attempts := lincheck.Job.Policy.MaxAttempts
		req := api.SubmitRequest{Payload: lincheck.Job.Payload, Window: "20s", MaxAttempts: &attempts, RequestID: in.Req}
		if in.After != "" {
			req.After = []string{in.After}
		}
		answer, err = c.Submit(ctx, req)
	case "lease":
		answer, err = c.Lease(ctx, api.LeaseRequest{Worker: in.Worker, Duration: "1s", RequestID: in.Req})
	case "extend":
		answer, err = c.Extend(ctx, api.ExtendRequest{Task: in.Task, Lease: in.Lease, Duration: "1s"})
	case "complete":
		answer, err = c.Complete(ctx, api.CompleteRequest{Task: in.Task, Lease: in.Lease})
	case "release":
		answer, err = c.Release(ctx, api.ReleaseRequest{Task: in.Task, Lease: in.Lease})
	case "fail":
		answer, err = c.Fail(ctx, api.FailRequest{Task: in.Task, Lease: in.Lease, Reason: "flaky"})
	default:
		return "", errors.New("no such call over the lines door: " + in.Op)
	}
	var (
		refused   *api.Error
		empty     *api.Empty
		cancelled *api.Cancelled
	)
	switch {
	case errors.As(err, &refused):
		answer = refused
	case errors.As(err, &empty):
		answer = empty
	case errors.As(err, &cancelled):
		answer = cancelled
	case err != nil:
		return "", err
	}
	b, err := json.Marshal(answer)
	return string(b), err
}
