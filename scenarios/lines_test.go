package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/testwait"
)

// TestLinesThroughAStop: eight Go clients submit over the lines door of a
// serve process while SIGTERM stops it. serve exits 0 once the lines under
// way are answered, and every submit acknowledged is in the WAL exactly
// once: nothing acknowledged is lost, nothing done twice.
func TestLinesThroughAStop(t *testing.T) {
	wal := filepath.Join(t.TempDir(), "q.wal")
	server, url, stderr := startServe(t, "--wal", wal, "serve", "--listen", "127.0.0.1:0")
	var (
		mu    sync.Mutex
		acked []string
		count atomic.Int32
		wg    sync.WaitGroup
	)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.New([]string{url}, client.Options{})
			if err != nil {
				t.Error(err)
				return
			}
			defer c.CloseIdleConnections()
			for n := 0; ; n++ {
				id := fmt.Sprintf("c%d-%d", i, n)
				if _, err := c.Submit(context.Background(), api.SubmitRequest{Payload: "p", RequestID: id}); err != nil {
					return // the server stopped: its answer, if any, was a refusal or lost
				}
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
				count.Add(1)
			}
		}()
	}
	testwait.Until(t, "200 acknowledged submits", func() bool { return count.Load() >= 200 }, stderr.String)
	if err := server.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- server.Wait() }()
	testwait.Until(t, "serve to exit on SIGTERM", func() bool {
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("serve exited %v on SIGTERM\n%s", err, stderr.String())
			}
			return true
		default:
			return false
		}
	}, stderr.String)
	wg.Wait()
	b, err := os.ReadFile(wal)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range acked {
		if n := bytes.Count(b, []byte(`"request_id":"`+id+`"`)); n != 1 {
			t.Errorf("submit %s was acknowledged and is in the WAL %d times", id, n)
		}
	}
	if created := bytes.Count(b, []byte(`"type":"TaskCreated"`)); created < len(acked) {
		t.Errorf("%d tasks in the WAL for %d acknowledged submits", created, len(acked))
	}
	t.Logf("%d submits acknowledged before the stop, %d tasks in the WAL", len(acked), bytes.Count(b, []byte(`"type":"TaskCreated"`)))
}
