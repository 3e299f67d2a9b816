package client_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/testwait"
)

// TestCallsKeepALinesConnection: against a real server, the calls that
// never wait go one after the other over one connection the client keeps,
// and are decided as over HTTP (a repeated request id is the same task);
// NoLines keeps none.
func TestCallsKeepALinesConnection(t *testing.T) {
	ctx := context.Background()
	for _, noLines := range []bool{false, true} {
		c, err := client.New([]string{serverURL}, client.Options{NoLines: noLines})
		if err != nil {
			t.Fatal(err)
		}
		queue := fmt.Sprintf("lines-%v", noLines)
		first, err := c.Submit(ctx, api.SubmitRequest{Payload: "p", Queue: queue, RequestID: queue})
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.Submit(ctx, api.SubmitRequest{Payload: "p", Queue: queue, RequestID: queue})
		if err != nil || again.TaskID != first.TaskID || !again.Duplicate {
			t.Fatalf("the submit again: %+v %v, want task %s a duplicate", again, err, first.TaskID)
		}
		lease, err := c.Lease(ctx, api.LeaseRequest{Worker: "w", Queue: api.List(queue)})
		if err != nil || lease.TaskID != first.TaskID {
			t.Fatalf("lease: %+v %v", lease, err)
		}
		if _, err := c.Complete(ctx, api.CompleteRequest{Task: lease.TaskID, Lease: lease.LeaseID}); err != nil {
			t.Fatal(err)
		}
		_, err = c.Lease(ctx, api.LeaseRequest{Worker: "w", Queue: api.List(queue)})
		var empty *api.Empty
		if !errors.As(err, &empty) {
			t.Fatalf("a lease of an empty queue: %v, want *api.Empty", err)
		}
		want := 1
		if noLines {
			want = 0
		}
		if n := client.IdleLines(c); n != want {
			t.Errorf("NoLines %v: %d lines connections kept, want %d", noLines, n, want)
		}
	}
}

// TestAServerWithoutTheLinesDoor: a server that answers the upgrade with a
// refusal (an older one) is sent every call as a request of its own, and
// asked for the door once.
func TestAServerWithoutTheLinesDoor(t *testing.T) {
	var upgrades, submits atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Leasewal-Exit", "0")
		switch r.URL.Path {
		case "/v1/lines":
			upgrades.Add(1)
			w.Header().Set("Leasewal-Exit", "2")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"result":"ERROR","error":"Usage","message":"lines is no operation"}`)
		case "/v1/submit":
			submits.Add(1)
			_, _ = io.WriteString(w, `{"result":"ACK","task_id":"T1"}`)
		}
	}))
	defer ts.Close()
	c, err := client.New([]string{ts.URL}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if ack, err := c.Submit(context.Background(), api.SubmitRequest{Payload: "p"}); err != nil || ack.TaskID != "T1" {
			t.Fatalf("submit: %+v %v", ack, err)
		}
	}
	if upgrades.Load() != 1 || submits.Load() != 3 {
		t.Errorf("%d upgrades asked and %d submits posted, want 1 and 3", upgrades.Load(), submits.Load())
	}
}

// fakeLines is a lines door that answers each connection's lines with
// answer, then ends the connection if it says so (or answered ""); it
// counts the connections it switched, and signals each it ended.
func fakeLines(t *testing.T, answer func(conn int, line string) (string, bool)) (url string, switched *atomic.Int32, ended chan int) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	switched, ended = &atomic.Int32{}, make(chan int, 16)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			n := int(switched.Add(1))
			go func() {
				defer func() { conn.Close(); ended <- n }()
				r := bufio.NewReader(conn)
				if _, err := http.ReadRequest(r); err != nil {
					return
				}
				_, _ = io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+api.LinesUpgrade+"\r\n\r\n")
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					a, end := answer(n, line)
					_, _ = io.WriteString(conn, a)
					if a == "" || end {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), switched, ended
}

// TestALinesConnectionTheServerClosed: a connection the server ended while
// it lay idle is not used again (the next call opens another, and its
// outcome is known); one ended after its line was read and before its
// answer is an *UnknownOutcomeError, never a call sent again.
func TestALinesConnectionTheServerClosed(t *testing.T) {
	url, switched, ended := fakeLines(t, func(conn int, line string) (string, bool) {
		if strings.Contains(line, "lost") {
			return "", true
		}
		return "200 0 {\"result\":\"ACK\",\"task_id\":\"T" + fmt.Sprint(conn) + "\"}\n", strings.Contains(line, "last on it")
	})
	c, err := client.New([]string{url}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if ack, err := c.Submit(ctx, api.SubmitRequest{Payload: "last on it"}); err != nil || ack.TaskID != "T1" {
		t.Fatalf("the first submit: %+v %v", ack, err)
	}
	<-ended // the server ended the connection the client keeps
	if ack, err := c.Submit(ctx, api.SubmitRequest{Payload: "next"}); err != nil || ack.TaskID != "T2" {
		t.Fatalf("the submit after: %+v %v, want the answer of a second connection", ack, err)
	}
	_, err = c.Submit(ctx, api.SubmitRequest{Payload: "lost"})
	var unknown *client.UnknownOutcomeError
	if !errors.As(err, &unknown) {
		t.Fatalf("a line whose answer never came: %v, want *client.UnknownOutcomeError", err)
	}
	if ack, err := c.Submit(ctx, api.SubmitRequest{Payload: "after"}); err != nil || ack.TaskID != "T3" {
		t.Fatalf("the submit after the lost one: %+v %v, want the answer of a third connection", ack, err)
	}
	if switched.Load() != 3 {
		t.Errorf("%d connections switched, want 3", switched.Load())
	}
}

// TestALinesAnswerThatNeverComes: a call whose line is read and never
// answered ends when its context does, as an *UnknownOutcomeError.
func TestALinesAnswerThatNeverComes(t *testing.T) {
	never := make(chan struct{})
	defer close(never)
	url, _, _ := fakeLines(t, func(int, string) (string, bool) { <-never; return "", true })
	c, err := client.New([]string{url}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := c.Submit(ctx, api.SubmitRequest{Payload: "p"}); done <- err }()
	select {
	case err := <-done:
		var unknown *client.UnknownOutcomeError
		if !errors.As(err, &unknown) || !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%v, want an *client.UnknownOutcomeError of the deadline", err)
		}
	case <-time.After(testwait.HangGuard):
		t.Fatalf("the call still waits %v after its context ended", testwait.HangGuard)
	}
}

// TestTheLinesDoorIsNotDialedPastAProxy: a client whose requests go
// through a proxy sends every call through it, and never dials the door.
func TestTheLinesDoorIsNotDialedPastAProxy(t *testing.T) {
	var upgrades, viaProxy atomic.Int32
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/lines" {
			upgrades.Add(1)
		}
		if r.URL.IsAbs() { // a proxy's request names the whole URL
			viaProxy.Add(1)
		}
		w.Header().Set("Leasewal-Exit", "0")
		_, _ = io.WriteString(w, `{"result":"ACK","task_id":"T1"}`)
	}))
	defer ts.Close()
	proxy, _ := url.Parse(ts.URL)
	c, err := client.New([]string{ts.URL}, client.Options{HTTP: &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxy)}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Submit(context.Background(), api.SubmitRequest{Payload: "p"}); err != nil {
		t.Fatal(err)
	}
	if upgrades.Load() != 0 || viaProxy.Load() != 1 {
		t.Errorf("%d upgrades asked, %d requests through the proxy; want 0 and 1", upgrades.Load(), viaProxy.Load())
	}
}
