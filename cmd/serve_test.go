package cmd

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"leasewal/store"
	"leasewal/wal"
)

// syncCounter counts the fsyncs of the WAL.
type syncCounter struct {
	store.OS
	syncs *atomic.Int64
}

func (c syncCounter) WAL(s wal.Storage) wal.Storage { return countedSync{s, c.syncs} }

type countedSync struct {
	wal.Storage
	syncs *atomic.Int64
}

func (c countedSync) Sync() error { c.syncs.Add(1); return c.Storage.Sync() }

// TestServerGroupCommits: requests that arrive together through the HTTP
// handler are decided in batches, with fewer fsyncs than requests, and each
// is answered with its own task.
func TestServerGroupCommits(t *testing.T) {
	walPath := filepath.Join(t.TempDir(), "q.wal")
	var syncs atomic.Int64
	e := env{Config: Config{WAL: walPath, Output: "json", LockTimeout: 2 * time.Minute, Actor: "test"}}
	opts := e.storeOptions()
	opts.FS = syncCounter{syncs: &syncs}
	h := store.Open(opts)
	defer h.Close()
	if code, _, stderr := cli("--wal", walPath, "submit", "--payload", "first"); code != 0 {
		t.Fatal(stderr)
	}
	// Hold the WAL's lock until every request has queued, so that they meet
	// in batches however slow this machine is: the first waits for the lock
	// inside its batch, all the others in the queue behind it.
	held, err := wal.OpenAt(walPath, wal.Write, time.Second, wal.Position{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s, stop := newServer(e, h, "secret", 64, "http://test")
	ts := httptest.NewServer(s)
	defer ts.Close()
	const requests = 16
	var wg sync.WaitGroup
	var mu sync.Mutex
	tasks := map[string]bool{}
	for i := range requests {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, ts.URL+"/v1/submit", strings.NewReader(`{"payload":"job","request-id":"r`+string(rune('A'+i%26))+string(rune('a'+i/26))+`"}`))
			req.Header.Set("Authorization", "Bearer secret")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			var body bytes.Buffer
			body.ReadFrom(resp.Body)
			if resp.Header.Get("Leasewal-Exit") != "0" {
				t.Errorf("exit %s: %s", resp.Header.Get("Leasewal-Exit"), body.String())
				return
			}
			mu.Lock()
			tasks[strings.Split(strings.Split(body.String(), `"task_id":"`)[1], `"`)[0]] = true
			mu.Unlock()
		}()
	}
	// Wait until the requests have stopped arriving: the first batch holds
	// one or a few of them, the queue the rest.
	for last, stable, deadline := -1, 0, time.Now().Add(time.Minute); stable < 30 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if n := len(s.batch.queue); n == last && n > 0 {
			stable++
		} else {
			last, stable = n, 0
		}
	}
	held.Close()
	wg.Wait()
	stop()
	if len(tasks) != requests || syncs.Load() < 1 || syncs.Load() > 4 { // the first batch, then one (rarely two) of the rest
		t.Fatalf("%d requests: %d distinct tasks, %d fsyncs of the WAL", requests, len(tasks), syncs.Load())
	}
	if code, _, stderr := cli("--wal", walPath, "verify"); code != 0 {
		t.Fatal(stderr)
	}
	resp, _ := http.Post(ts.URL+"/v1/submit", "application/json", strings.NewReader(`{"payload":"x"}`))
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("no token: HTTP %d", resp.StatusCode)
	}
	t.Logf("%d concurrent submits: %d fsyncs of the WAL", requests, syncs.Load())
}
