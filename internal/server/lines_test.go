package server

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/testwait"
)

// submitter is a service that answers submits only, each with a task named
// by its payload, after hold (if set) lets it go: what the door hands on
// is seen whole, apart from the rules.
type submitter struct {
	api.Service // any other operation is not the door's to call here
	got         chan api.SubmitRequest
	hold        chan struct{}
}

func (s submitter) Submit(_ context.Context, r api.SubmitRequest) (api.Ack, error) {
	select {
	case s.got <- r:
	default: // a fuzzer's many
	}
	if s.hold != nil {
		<-s.hold
	}
	return api.Ack{Result: api.ResultAck, TaskID: "T-" + r.Payload}, nil
}

// The other operations of the door answer as if nothing were there.
func (submitter) Lease(context.Context, api.LeaseRequest) (api.Lease, error) {
	return api.Lease{}, &api.Empty{Result: api.ResultEmpty}
}
func (submitter) Extend(context.Context, api.ExtendRequest) (api.Extended, error) {
	return api.Extended{}, errors.New("no such lease")
}
func (submitter) Complete(context.Context, api.CompleteRequest) (api.Committed, error) {
	return api.Committed{}, errors.New("no such lease")
}
func (submitter) Fail(context.Context, api.FailRequest) (api.Failed, error) {
	return api.Failed{}, errors.New("no such lease")
}
func (submitter) Release(context.Context, api.ReleaseRequest) (api.Released, error) {
	return api.Released{}, errors.New("no such lease")
}
func (submitter) Heartbeat(context.Context, api.HeartbeatRequest) (api.Heartbeat, error) {
	return api.Heartbeat{}, nil
}

func linesServer(t testing.TB, svc api.Service) (*Server, string) {
	t.Helper()
	s := New(svc, nil, nil, Options{Token: "full", ReadToken: "reads",
		Describe: func(err error) api.Error { return api.Error{Kind: "Usage", Message: err.Error(), Exit: api.ExitUsage} },
		Unknown:  func(path string) string { return path + " is no operation" }})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, strings.TrimPrefix(ts.URL, "http://")
}

// upgrade asks addr's lines door with token; the connection and its
// reader once switched, else the HTTP status of the refusal.
func upgrade(t testing.TB, addr, token string, headers ...string) (net.Conn, *bufio.Reader, int) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	req := "GET /v1/lines HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + token + "\r\n" + strings.Join(headers, "\r\n") + "\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(testwait.HangGuard))
	r := bufio.NewReader(conn)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return conn, r, resp.StatusCode
}

var switching = []string{"Connection: Upgrade", "Upgrade: " + api.LinesUpgrade}

// ask sends one line and reads its answer.
func ask(t *testing.T, conn net.Conn, r *bufio.Reader, line string) string {
	t.Helper()
	if _, err := io.WriteString(conn, line); err != nil {
		t.Fatal(err)
	}
	answer, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("after %.60q: %v", line, err)
	}
	return answer
}

// TestTheLinesDoor: the upgrade passes the token's checks as any request
// does (none, a read-only one: refused, nothing switched); once switched,
// each line is answered by its status, exit code and JSON in one line, in
// order, the body handed on whole; what is not a line operation, a lease
// that waits, a body that does not decode are refused one line at a time
// and the connection goes on; a line past the limit is refused and ends it.
func TestTheLinesDoor(t *testing.T) {
	svc := submitter{got: make(chan api.SubmitRequest, 8)}
	_, addr := linesServer(t, svc)
	if _, _, status := upgrade(t, addr, "wrong", switching...); status != http.StatusUnauthorized {
		t.Errorf("a wrong token: %d, want 401", status)
	}
	if _, _, status := upgrade(t, addr, "reads", switching...); status != http.StatusForbidden {
		t.Errorf("a read-only token: %d, want 403", status)
	}
	if _, _, status := upgrade(t, addr, "full"); status != http.StatusUpgradeRequired {
		t.Errorf("no Upgrade header: %d, want 426", status)
	}
	conn, r, status := upgrade(t, addr, "full", switching...)
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("the upgrade: %d, want 101", status)
	}
	for i, c := range []struct{ line, want string }{
		{"submit {\"payload\":\"a b\",\"queue\":\"q\"}\n", `200 0 {"result":"ACK","task_id":"T-a b",`},
		{"submit {\"payload\":\"crlf\"}\r\n", `200 0 {"result":"ACK","task_id":"T-crlf",`},
		{"stats {}\n", `400 2 {"result":"ERROR","error":"Usage","message":"\"stats\" is not an operation of the lines door`},
		{"lease {\"worker\":\"w\",\"wait\":\"1m\"}\n", `400 2 {"result":"ERROR","error":"Usage","message":"a lease that waits is sent as POST /v1/lease`},
		{"submit {\"payload\":\n", `400 2 {"result":"ERROR","error":"Usage","message":"the body is not a JSON object`},
		{"submit {\"payload\":\"x\",\"bogus\":1}\n", `400 2 {"result":"ERROR","error":"Usage","message":"unknown field \"bogus\"`},
		{"\n", `400 2 {"result":"ERROR","error":"Usage","message":"\"\" is not an operation`},
		{"submit {\"payload\":\"last\"}\n", `200 0 {"result":"ACK","task_id":"T-last",`},
	} {
		if got := ask(t, conn, r, c.line); !strings.HasPrefix(got, c.want) || strings.Count(got, "\n") != 1 {
			t.Errorf("line %d %q: answered %q, want it to begin %q", i, c.line, got, c.want)
		}
	}
	for _, want := range []api.SubmitRequest{{Payload: "a b", Queue: "q"}, {Payload: "crlf"}, {Payload: "last"}} {
		if got := <-svc.got; got.Payload != want.Payload || got.Queue != want.Queue {
			t.Errorf("the service was handed %+v, want %+v", got, want)
		}
	}
	select {
	case got := <-svc.got:
		t.Errorf("a refused line reached the service: %+v", got)
	default:
	}

	long := "submit {\"payload\":\"" + strings.Repeat("x", DefaultLimit+100) + "\"}\n"
	if got := ask(t, conn, r, long); !strings.HasPrefix(got, `413 2 {"result":"ERROR","error":"Usage","message":"a line is over`) {
		t.Errorf("a line past the limit: %q", got)
	}
	if _, err := r.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after a line past the limit the connection goes on (%v): its rest would be taken for lines", err)
	}
}

// TestLinesEndWithTheServer: a stopping server answers the line under way
// and then ends its connection; an idle connection ends at once; end
// returns once both have.
func TestLinesEndWithTheServer(t *testing.T) {
	svc := submitter{got: make(chan api.SubmitRequest, 1), hold: make(chan struct{})}
	s, addr := linesServer(t, svc)
	busy, busyR, _ := upgrade(t, addr, "full", switching...)
	_, idleR, _ := upgrade(t, addr, "full", switching...)
	if _, err := io.WriteString(busy, "submit {\"payload\":\"under way\"}\n"); err != nil {
		t.Fatal(err)
	}
	<-svc.got // it is being decided
	ended := make(chan struct{})
	go func() { s.lineConns.end(context.Background()); close(ended) }()
	if _, err := idleR.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("an idle connection of a stopping server: %v, want it ended", err)
	}
	select {
	case <-ended:
		t.Fatal("end returned before the line under way was answered")
	case <-time.After(50 * time.Millisecond): // a check that it waits, not a deadline: it may only wait longer
	}
	close(svc.hold)
	if got, err := busyR.ReadString('\n'); err != nil || !strings.HasPrefix(got, `200 0 {"result":"ACK","task_id":"T-under way"`) {
		t.Errorf("the line under way: %q %v, want its answer", got, err)
	}
	if _, err := busyR.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("after its answer: %v, want the connection ended", err)
	}
	<-ended
	late, err := net.Dial("tcp", addr) // the test's HTTP server still listens: the door must not switch
	if err != nil {
		t.Fatal(err)
	}
	defer late.Close()
	_ = late.SetReadDeadline(time.Now().Add(testwait.HangGuard))
	if _, err := io.WriteString(late, "GET /v1/lines HTTP/1.1\r\nHost: "+addr+"\r\nAuthorization: Bearer full\r\n"+strings.Join(switching, "\r\n")+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.ReadResponse(bufio.NewReader(late), nil); err == nil {
		t.Errorf("an upgrade after the end: %s, want the connection closed", resp.Status)
	}
}

// FuzzLines: whatever bytes a client sends once switched, each answer is
// one line of a status, an exit code and a JSON object, no more answers
// come than lines were sent, and the connection ends when the client's
// does (or at a line past the limit): nothing hangs, nothing panics.
func FuzzLines(f *testing.F) {
	for _, seed := range []string{"submit {\"payload\":\"x\"}\n", "lease {\"worker\":\"w\"}\r\nlease {\"wait\":\"1s\"}\n",
		"complete {\"task\":\"T1\",\"lease\":\"L1\",\"next\":{\"worker\":\"w\"}}\n", "\n\n\n", "submit", "stats {}\nsubmit {\"payload\":1}\n",
		"heartbeat {\"worker\":\"w\"} trailing\n", "release \x00\xff\n", "GET / HTTP/1.1\r\n\r\n"} {
		f.Add([]byte(seed))
	}
	_, addr := linesServer(f, submitter{got: make(chan api.SubmitRequest)})
	answer := regexp.MustCompile(`^[1-5][0-9][0-9] [0-9]+ \{.*\}\n$`)
	f.Fuzz(func(t *testing.T, sent []byte) {
		conn, r, status := upgrade(t, addr, "full", switching...)
		if status != http.StatusSwitchingProtocols {
			t.Fatalf("the upgrade: %d", status)
		}
		if _, err := conn.Write(sent); err != nil {
			t.Fatal(err)
		}
		_ = conn.(*net.TCPConn).CloseWrite()
		answers := 0
		for {
			line, err := r.ReadString('\n')
			if errors.Is(err, io.EOF) && line == "" {
				break
			}
			if err != nil || !answer.MatchString(line) {
				t.Fatalf("after %q: an answer %q (%v), want '<status> <exit> <JSON>'", sent, line, err)
			}
			answers++
		}
		if lines := bytes.Count(sent, []byte("\n")); answers > lines {
			t.Fatalf("%d answers to %d lines: %q", answers, lines, sent)
		}
	})
}
