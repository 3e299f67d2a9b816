package client

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/leasewal/leasewal/api"
)

// The lines door (api.LinesUpgrade): a client sends the operations that
// never wait over connections switched to one request a line, to its
// first server when that is an http:// URL, and keeps them for the next
// calls; each goes as a request of its own otherwise, and whenever the
// server answers that it cannot (no leader, a removed node: Send tries the
// others). A server without the door (an older one) is asked once.

// lineIdleMax is how long a connection may have lain idle and still be
// used: the server ends one idle for a minute.
const lineIdleMax = 30 * time.Second

// lineRetry is how long after a failed connection the client sends as
// requests of their own before it tries the door again.
const lineRetry = 5 * time.Second

// lineDialWait is the longest a connection may take to be switched.
const lineDialWait = 10 * time.Second

// maxIdleLines is how many idle connections a client keeps.
const maxIdleLines = 64

// lines is a client's connections to its first server's lines door.
type lines struct {
	mu    sync.Mutex
	idle  []*lineConn
	never bool      // the server has no lines door
	after time.Time // no connection before then (the last one failed)
}

type lineConn struct {
	conn  net.Conn
	r     *bufio.Reader
	w     *bufio.Writer
	used  time.Time
	spent bool // not to be used again
}

// sendLine sends body to the operation at path over a lines connection, if
// one may be had, and reads its answer: sent is false when nothing was
// sent (then the caller sends it as a request of its own).
func (c *Client) sendLine(ctx context.Context, path string, body []byte) (raw []byte, code int, server string, sent bool, err error) {
	server = c.urls[0]
	if bytes.IndexByte(body, '\n') >= 0 { // JSON as encoded never holds one
		return nil, 0, "", false, nil
	}
	lc := c.lines.take()
	if lc == nil {
		if lc = c.dialLines(ctx, server); lc == nil {
			return nil, 0, "", false, nil
		}
	}
	raw, status, code, err := lc.exchange(ctx, path, body)
	if err != nil {
		_ = lc.conn.Close()
		return nil, 0, "", true, &UnknownOutcomeError{Server: server, Err: err}
	}
	c.lines.put(lc)
	if status == http.StatusServiceUnavailable || status == http.StatusGone { // not decided there: Send tries every server
		return nil, 0, "", false, nil
	}
	return raw, code, server, true, nil
}

// take is an idle connection still open, or nil.
func (l *lines) take() *lineConn {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(l.idle) > 0 {
		lc := l.idle[len(l.idle)-1]
		l.idle = l.idle[:len(l.idle)-1]
		if time.Since(lc.used) < lineIdleMax && lc.open() {
			return lc
		}
		_ = lc.conn.Close()
	}
	return nil
}

func (l *lines) put(lc *lineConn) {
	lc.used = time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !lc.spent && len(l.idle) < maxIdleLines {
		l.idle = append(l.idle, lc)
		return
	}
	_ = lc.conn.Close()
}

// CloseIdleConnections closes the lines connections c keeps for its next
// calls (a later call opens another).
func (c *Client) CloseIdleConnections() {
	c.lines.mu.Lock()
	defer c.lines.mu.Unlock()
	for _, lc := range c.lines.idle {
		_ = lc.conn.Close()
	}
	c.lines.idle = nil
}

// may says whether a new connection may be tried now.
func (l *lines) may() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return !l.never && time.Now().After(l.after)
}

// failed notes a connection that could not be had: never again when the
// server answered without switching, for lineRetry otherwise.
func (l *lines) failed(answered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.never = l.never || answered
	l.after = time.Now().Add(lineRetry)
}

// dialLines switches a new connection to server to the lines door, or
// is nil (nothing of a call was sent).
func (c *Client) dialLines(ctx context.Context, server string) *lineConn {
	if !c.lines.may() {
		return nil
	}
	u, err := url.Parse(server)
	if err != nil || u.Scheme != "http" || c.proxied(server) { // over TLS, net/http may speak HTTP/2, which has no upgrade
		c.lines.failed(true)
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, lineDialWait)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), cmp.Or(u.Port(), "80")))
	if err != nil {
		c.lines.failed(false)
		return nil
	}
	if deadline, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(deadline)
	}
	lc := &lineConn{conn: conn, r: bufio.NewReader(conn), w: bufio.NewWriter(conn)}
	req, _ := http.NewRequest(http.MethodGet, server+"/v1/lines", nil) // server is a URL that parsed
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", api.LinesUpgrade)
	if c.opts.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.opts.Token)
	}
	err = req.Write(lc.w)
	if err == nil {
		err = lc.w.Flush()
	}
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(lc.r, req)
	}
	if err != nil {
		_ = conn.Close()
		c.lines.failed(false)
		return nil
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		_ = conn.Close()
		c.lines.failed(true)
		return nil
	}
	_ = conn.SetDeadline(time.Time{})
	return lc
}

// proxied says whether the client's HTTP requests to server go through a
// proxy (HTTP_PROXY): the door is not dialed past it.
func (c *Client) proxied(server string) bool {
	proxy := http.ProxyFromEnvironment
	if t, ok := c.opts.HTTP.Transport.(*http.Transport); ok {
		proxy = t.Proxy
	}
	req, err := http.NewRequest(http.MethodGet, server, nil)
	if err != nil || proxy == nil {
		return err != nil
	}
	via, err := proxy(req)
	return err != nil || via != nil
}

// exchange sends one line and reads its answer, until ctx is done.
func (lc *lineConn) exchange(ctx context.Context, path string, body []byte) (raw []byte, status, code int, err error) {
	stop := context.AfterFunc(ctx, func() { _ = lc.conn.SetDeadline(time.Unix(1, 0)) }) // then ctx.Err() says why
	defer func() {
		if !stop() { // ctx ended meanwhile: the connection may hold its deadline
			lc.spent = true
		}
	}()
	lc.w.WriteString(path)
	lc.w.WriteByte(' ')
	lc.w.Write(body)
	lc.w.WriteByte('\n')
	if err := lc.w.Flush(); err != nil {
		return nil, 0, 0, err
	}
	line, err := lc.r.ReadSlice('\n')
	for errors.Is(err, bufio.ErrBufferFull) && len(line) <= maxAnswer {
		var more []byte
		more, err = lc.r.ReadSlice('\n')
		line = append(line, more...)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, 0, 0, err
	}
	statusField, rest, _ := bytes.Cut(bytes.TrimSuffix(line, []byte("\n")), []byte(" "))
	exitField, raw, _ := bytes.Cut(rest, []byte(" "))
	status, err1 := strconv.Atoi(string(statusField))
	code, err2 := strconv.Atoi(string(exitField))
	if err1 != nil || err2 != nil {
		return nil, 0, 0, fmt.Errorf("an answer line that is not '<status> <exit> <JSON>': %.200s", line)
	}
	return bytes.Clone(raw), status, code, nil
}
