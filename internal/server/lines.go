package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasewal/leasewal/api"
)

// The lines door (api.LinesUpgrade): once an upgrade's Host, Origin and
// token have passed as for any request, its connection carries requests of
// the hot operations, one a line, each answered by a line before the next
// is read:
//
//	submit {"payload":"job"}
//	200 0 {"result":"ACK","task_id":"T1",…}
//
// Each line is handed to the same handler as a POST /v1/<operation> with
// the upgrade's headers: the same checks, decisions, answers and access
// log, without HTTP's work around each request (parsing a request, writing
// a response's headers, watching the connection while it is decided), which
// costs a server more than deciding a submit. A lease that waits is not
// taken: HTTP ends a wait when its client goes, a line would not.

// lineIdle is how long a lines connection may wait for its next line, as
// HTTP's keep-alive connections do (the server's IdleTimeout), and
// lineRead how long a line may take once begun (its ReadTimeout).
const (
	lineIdle = time.Minute
	lineRead = 10 * time.Second
)

// lineConns are the connections the lines door serves, so that a stopping
// server can end them: http.Server forgets a connection once hijacked.
type lineConns struct {
	mu      sync.Mutex
	open    map[net.Conn]struct{}
	closing bool
	wg      sync.WaitGroup
}

// add counts c in; false once the server is stopping.
func (l *lineConns) add(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closing {
		return false
	}
	if l.open == nil {
		l.open = map[net.Conn]struct{}{}
	}
	l.open[c] = struct{}{}
	l.wg.Add(1)
	return true
}

func (l *lineConns) done(c net.Conn) {
	l.mu.Lock()
	delete(l.open, c)
	l.mu.Unlock()
	_ = c.Close()
	l.wg.Done()
}

// await gives c lineIdle for its next line; false once the server is
// stopping (end sets the deadline under the same lock: no line is awaited
// past it).
func (l *lineConns) await(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.closing && c.SetReadDeadline(time.Now().Add(lineIdle)) == nil
}

// end has every connection end once its line under way is answered (one
// waiting for its next line ends at once) and waits for them, until ctx
// is done.
func (l *lineConns) end(ctx context.Context) {
	l.mu.Lock()
	l.closing = true
	for c := range l.open {
		_ = c.SetReadDeadline(time.Now())
	}
	l.mu.Unlock()
	ended := make(chan struct{})
	go func() { l.wg.Wait(); close(ended) }()
	select {
	case <-ended:
	case <-ctx.Done():
	}
}

// lines answers GET /v1/lines: the request's checks have passed.
func (s *Server) lines(w http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), api.LinesUpgrade) || !headerHas(r.Header, "Connection", "upgrade") {
		Error(w, http.StatusUpgradeRequired, api.ExitUsage, "Usage", "GET /v1/lines switches the connection to one request a line: send 'Connection: Upgrade' and 'Upgrade: "+api.LinesUpgrade+"'")
		return
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil { // HTTP/2: the operations are sent as requests of their own
		Error(w, http.StatusHTTPVersionNotSupported, api.ExitUsage, "Usage", "GET /v1/lines needs an HTTP/1.1 connection: send each operation as POST /v1/<operation>")
		return
	}
	if !s.lineConns.add(conn) {
		_ = conn.Close()
		return
	}
	defer s.lineConns.done(conn)
	_ = conn.SetDeadline(time.Time{}) // the server's deadlines were for one request
	if _, err := rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: " + api.LinesUpgrade + "\r\n\r\n"); err != nil || rw.Flush() != nil {
		return
	}
	header := http.Header{"Content-Type": {"application/json"}}
	for _, name := range []string{"Authorization", "Origin"} {
		if v := r.Header.Get(name); v != "" {
			header.Set(name, v)
		}
	}
	line := lineReader{r: rw.Reader, limit: DefaultLimit + 64}
	answer := &lineAnswer{}
	for s.lineConns.await(conn) {
		if _, err := rw.Reader.Peek(1); err != nil {
			return
		}
		_ = conn.SetReadDeadline(time.Now().Add(lineRead)) // a line begun comes whole soon, as a request's body does
		raw, err := line.next()
		if errors.Is(err, errLineTooLong) {
			answer.refuse(http.StatusRequestEntityTooLarge, fmt.Sprintf("a line is over %d bytes: send a long request as POST /v1/<operation>", line.limit))
			_ = answer.send(rw.Writer)
			return // the rest of the line cannot be told from the next
		}
		if err != nil {
			return
		}
		answer.reset()
		if op, body, refusal := lineRequest(raw); refusal != "" {
			answer.refuse(http.StatusBadRequest, refusal)
		} else {
			req := (&http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/v1/" + op}, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
				Header: header, Host: r.Host, RemoteAddr: r.RemoteAddr, RequestURI: "/v1/" + op,
				Body: io.NopCloser(bytes.NewReader(body)), ContentLength: int64(len(body))}).WithContext(r.Context())
			s.handler.ServeHTTP(answer, req)
		}
		_ = conn.SetWriteDeadline(time.Now().Add(lineIdle))
		if answer.send(rw.Writer) != nil {
			return
		}
	}
}

// headerHas says whether a comma-separated header lists token.
func headerHas(h http.Header, name, token string) bool {
	for _, v := range h.Values(name) {
		for part := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(part), token) {
				return true
			}
		}
	}
	return false
}

// lineRequest is a line's operation and body, or why the line is refused.
func lineRequest(raw []byte) (op string, body []byte, refusal string) {
	name, body, _ := bytes.Cut(raw, []byte(" "))
	op = string(name)
	switch {
	case !slices.Contains(api.LineOperations, op):
		return "", nil, fmt.Sprintf("%.40q is not an operation of the lines door (%s): send it as POST /v1/<operation>", op, strings.Join(api.LineOperations, ", "))
	case op == "lease":
		var asks struct {
			Wait string `json:"wait"`
		}
		if json.Unmarshal(body, &asks) == nil && asks.Wait != "" {
			return "", nil, "a lease that waits is sent as POST /v1/lease, which ends the wait when its client goes"
		}
	}
	return op, body, ""
}

var errLineTooLong = errors.New("line too long")

// lineReader reads a line at a time, at most limit bytes of it.
type lineReader struct {
	r     *bufio.Reader
	limit int
	buf   []byte
}

// next is the next line without its end (CR LF or LF); valid until the
// next call.
func (l *lineReader) next() ([]byte, error) {
	l.buf = l.buf[:0]
	for {
		part, err := l.r.ReadSlice('\n')
		if len(l.buf)+len(part) > l.limit {
			return nil, errLineTooLong
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
		line := part // the whole line in the reader's buffer: no copy
		if err != nil || len(l.buf) > 0 {
			l.buf = append(l.buf, part...)
			line = l.buf
		}
		if err == nil {
			return bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r")), nil
		}
	}
}

// lineAnswer is a line's answer as the handler writes it (an
// http.ResponseWriter), then sent as one line.
type lineAnswer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (a *lineAnswer) Header() http.Header { return a.header }

func (a *lineAnswer) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
}

func (a *lineAnswer) Write(b []byte) (int, error) {
	if a.status == 0 {
		a.status = http.StatusOK
	}
	return a.body.Write(b)
}

func (a *lineAnswer) reset() {
	if a.header == nil {
		a.header = http.Header{}
	}
	clear(a.header)
	a.status = 0
	a.body.Reset()
}

// refuse is an answer of a line that no operation saw: exit 2.
func (a *lineAnswer) refuse(status int, msg string) {
	a.reset()
	Error(a, status, api.ExitUsage, "Usage", msg)
}

// send writes the answer as one line: an answer that cannot be one (none
// at all, or a body of several lines) ends the connection instead, and
// its client learns the outcome as of a lost answer.
func (a *lineAnswer) send(w *bufio.Writer) error {
	body := bytes.TrimSuffix(a.body.Bytes(), []byte("\n"))
	exit := a.header.Get("Leasewal-Exit")
	if len(body) == 0 || exit == "" || bytes.IndexByte(body, '\n') >= 0 {
		return errors.New("no answer of one line")
	}
	w.WriteString(strconv.Itoa(a.status))
	w.WriteByte(' ')
	w.WriteString(exit)
	w.WriteByte(' ')
	w.Write(body)
	w.WriteByte('\n')
	return w.Flush()
}
