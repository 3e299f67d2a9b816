package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/internal/testwait"
)

// TestChangedWakesAStatusWait: a status that waits after N and has read N
// answers the seq past it once the server is told of its own durable
// record (Changed), with no watch of the WAL to wake it.
func TestChangedWakesAStatusWait(t *testing.T) {
	var seq atomic.Int64
	asked := make(chan struct{}, 8)
	s := New(nil, func() (service.Status, error) {
		asked <- struct{}{}
		return service.Status{Role: "single", LastSeq: seq.Load()}, nil
	}, nil, Options{})
	ts := httptest.NewServer(s)
	defer ts.Close()
	got := make(chan int64, 1)
	go func() {
		resp, err := http.Get(ts.URL + "/v1/status?after=0&wait=" + testwait.HangGuard.String())
		if err != nil {
			got <- -1
			return
		}
		defer resp.Body.Close()
		var v service.Status
		_ = json.NewDecoder(resp.Body).Decode(&v)
		got <- v.LastSeq
	}()
	<-asked // it read 0 and waits
	seq.Store(1)
	s.Changed()
	if last := <-got; last != 1 {
		t.Fatalf("the wait answered %d, want 1", last)
	}
}
