package server

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

// TestAccessLog: a line per request with its status, exit code and size;
// a path that holds a line end is quoted, so that it cannot forge a line.
func TestAccessLog(t *testing.T) {
	var out bytes.Buffer
	h := &accessLog{w: &out, next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/lease" {
			w.Header().Set("Leasewal-Exit", "4")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"result":"EMPTY"}`))
			return
		}
		http.NotFound(w, r)
	})}
	for _, target := range []string{"/v1/lease", "/v1/%0a2026-01-01T00:00:00.000Z%20forged"} {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", target, nil))
	}
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines for 2 requests:\n%s", len(lines), out.String())
	}
	if !regexp.MustCompile(`^\S+Z 192\.0\.2\.1:1234 POST "/v1/lease" 200 exit=4 \S+ 18B$`).MatchString(lines[0]) {
		t.Errorf("the lease's line: %q", lines[0])
	}
	if !strings.Contains(lines[1], `"/v1/%0a2026-01-01T00:00:00.000Z%20forged" 404 exit=-`) {
		t.Errorf("the forging request's line: %q", lines[1])
	}
}

// TestAccessLogOfASwitchedConnection: a connection handed over to the
// lines door is logged as switched, 101, once its handler returns.
func TestAccessLogOfASwitchedConnection(t *testing.T) {
	logged := make(chan string, 1)
	ts := httptest.NewServer(&accessLog{w: lineSink(logged), next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	})})
	defer ts.Close()
	if resp, err := http.Get(ts.URL + "/v1/lines"); err == nil {
		resp.Body.Close()
	}
	if line := <-logged; !strings.Contains(line, `GET "/v1/lines" 101 exit=-`) {
		t.Errorf("the log of a switched connection: %q", line)
	}
}

// lineSink hands each write to a channel.
type lineSink chan string

func (c lineSink) Write(b []byte) (int, error) {
	c <- string(b)
	return len(b), nil
}
