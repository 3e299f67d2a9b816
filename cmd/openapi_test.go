package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/leasewal/leasewal/api"
)

func init() {
	// NDJSON (the batch door): an array of its lines' values.
	openapi3filter.RegisterBodyDecoder("application/x-ndjson", func(body io.Reader, _ http.Header, _ *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
		var lines []any
		scan := bufio.NewScanner(body)
		scan.Buffer(nil, api.MaxBatchLine)
		for scan.Scan() {
			if len(bytes.TrimSpace(scan.Bytes())) == 0 {
				continue
			}
			var v any
			if err := json.Unmarshal(scan.Bytes(), &v); err != nil {
				return nil, err
			}
			lines = append(lines, v)
		}
		return lines, scan.Err()
	})
}

// openAPIChecked serves h, checking every request to a route of the OpenAPI
// document (api.OpenAPI) and every answer to it against the document: a
// request or an answer it does not describe fails the test. checked holds
// the paths checked.
func openAPIChecked(t *testing.T, h http.Handler, checked *sync.Map) http.Handler {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	router, err := legacy.NewRouter(doc)
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		route, params, err := router.FindRoute(r)
		if err != nil { // not a typed route (yet): served unchecked
			h.ServeHTTP(w, r)
			return
		}
		in := &openapi3filter.RequestValidationInput{Request: r.Clone(context.Background()), PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}}
		in.Request.Body = io.NopCloser(bytes.NewReader(body))
		requestErr := openapi3filter.ValidateRequest(context.Background(), in)
		rec := httptest.NewRecorder()
		r.Body = io.NopCloser(bytes.NewReader(body))
		h.ServeHTTP(rec, r)
		if requestErr != nil && rec.Code == http.StatusOK && rec.Header().Get("Leasewal-Exit") != "2" {
			t.Errorf("%s %s: the document refuses the request (%v), yet the server decided it", r.Method, r.URL.Path, requestErr)
		}
		out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: rec.Code, Header: rec.Header(),
			Body: io.NopCloser(bytes.NewReader(rec.Body.Bytes())), Options: &openapi3filter.Options{IncludeResponseStatus: true}}
		if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
			t.Errorf("%s %s: the answer is not what the document says: %v\n%s", r.Method, r.URL.Path, err, rec.Body.Bytes())
		}
		checked.Store(r.URL.Path, true)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// routesIn is every path of the OpenAPI document.
func routesIn(t *testing.T) []string {
	var doc struct {
		Paths map[string]any `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var paths []string
	for p := range doc.Paths {
		paths = append(paths, p)
	}
	return paths
}

// TestEveryDocumentedExampleIsTaken: every request body the OpenAPI document
// shows as an example is taken by a server, each on a WAL where what it
// names exists (T1 leased under L1, T2 FAILED, domain img's offset 0
// acquired under K1, queue mail paused, schedule digest added), its answer
// is exit 0 and what the document says, and it spells no key the old way.
func TestEveryDocumentedExampleIsTaken(t *testing.T) {
	var doc struct {
		Paths map[string]struct {
			Post struct {
				RequestBody struct {
					Content map[string]struct {
						Example json.RawMessage `json:"example"`
					} `json:"content"`
				} `json:"requestBody"`
			} `json:"post"`
		} `json:"paths"`
	}
	if err := json.Unmarshal(api.OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	var checked sync.Map
	for path, op := range doc.Paths {
		for contentType, c := range op.Post.RequestBody.Content {
			t.Run(path, func(t *testing.T) {
				walPath, s := testServer(t, "")
				for _, args := range [][]string{{"submit", "--payload", "p"}, {"lease", "--worker", "W1"}, {"submit", "--payload", "q", "--max-attempts", "1"},
					{"lease", "--task", "T2", "--worker", "W2"}, {"fail", "--task", "T2", "--lease", "L2", "--reason", "r"},
					{"worklease", "acquire", "--domain", "img", "--offset", "0"}, {"pause", "mail"},
					{"schedule", "add", "digest", "--every", "1h", "--", "--payload", "d"}} {
					if code, _, stderr := cli(append([]string{"--wal", walPath}, args...)...); code != 0 {
						t.Fatal(stderr)
					}
				}
				ts := httptest.NewServer(openAPIChecked(t, s, &checked))
				defer ts.Close()
				body := []byte(c.Example)
				if contentType == "application/x-ndjson" { // an array of its lines
					var lines []json.RawMessage
					if err := json.Unmarshal(body, &lines); err != nil {
						t.Fatal(err)
					}
					body = nil
					for _, l := range lines {
						var line bytes.Buffer
						if err := json.Compact(&line, l); err != nil {
							t.Fatal(err)
						}
						body = append(append(body, line.Bytes()...), '\n')
					}
				}
				resp, err := http.Post(ts.URL+path, contentType, bytes.NewReader(body))
				if err != nil {
					t.Fatal(err)
				}
				answer, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 || resp.Header.Get("Leasewal-Exit") != "0" || resp.Header.Get("Deprecation") != "" {
					t.Errorf("POST %s %s: HTTP %d, exit %s, Deprecation %q: %s", path, body, resp.StatusCode, resp.Header.Get("Leasewal-Exit"), resp.Header.Get("Deprecation"), answer)
				}
			})
		}
	}
}
