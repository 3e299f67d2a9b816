package server

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/leasewal/leasewal/api"
)

// accessLog writes a line per request to w once it is answered: when, who,
// what, the HTTP status, the exit code the answer carries (Leasewal-Exit,
// "-" for none), how long it took and how many bytes it answered. A path
// is written as sent, quoted, so that no request can forge a line.
type accessLog struct {
	next http.Handler
	mu   sync.Mutex
	w    io.Writer
}

func (a *accessLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	began := time.Now()
	rec := &recorder{ResponseWriter: w, status: http.StatusOK}
	a.next.ServeHTTP(rec, r)
	exit := rec.Header().Get("Leasewal-Exit")
	if exit == "" {
		exit = "-"
	}
	line := fmt.Sprintf("%s %s %s %q %d exit=%s %s %dB\n", api.FormatTime(began.UnixMilli()), r.RemoteAddr, r.Method, r.URL.RequestURI(),
		rec.status, exit, time.Since(began).Round(time.Microsecond), rec.bytes)
	a.mu.Lock()
	defer a.mu.Unlock()
	_, _ = io.WriteString(a.w, line) // an access log that cannot be written does not stop the service
}

// recorder notes the status and size of an answer, and passes flushes on
// (streams and the live page's events need them).
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int64
}

func (r *recorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	n, err := r.ResponseWriter.Write(b)
	r.bytes += int64(n)
	return n, err
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

// Hijack hands the connection over (the lines door), which the log
// shows as switched: 101.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, rw, err := http.NewResponseController(r.ResponseWriter).Hijack()
	if err == nil {
		r.status = http.StatusSwitchingProtocols
	}
	return conn, rw, err
}
