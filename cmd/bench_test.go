package cmd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/histgen"
	"github.com/leasewal/leasewal/internal/server"
)

// benchWAL writes a history of n records once per benchmark.
func benchWAL(b *testing.B, n int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "bench.wal")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := histgen.Write(f, histgen.Options{Records: n, Waiting: b.N + 1}); err != nil {
		b.Fatal(err)
	}
	f.Close()
	return path
}

func benchMain(b *testing.B, args ...string) {
	var out, errOut bytes.Buffer
	if code := Main(args, strings.NewReader(""), &out, &errOut); code != 0 {
		b.Fatalf("exit %d: %s", code, errOut.String())
	}
}

// BenchmarkVerify100k is the full replay with every check: records/s is
// 100k / (ns/op).
func BenchmarkVerify100k(b *testing.B) {
	path := benchWAL(b, 100_000)
	b.ResetTimer()
	for range b.N {
		benchMain(b, "--wal", path, "verify", "-o", "json")
	}
}

// BenchmarkSubmit100k is one submit against a 100k-record history.
func BenchmarkSubmit100k(b *testing.B) {
	path := benchWAL(b, 100_000)
	b.ResetTimer()
	for range b.N {
		benchMain(b, "--wal", path, "submit", "--payload", "x", "-o", "json")
	}
}

// BenchmarkLease100kWaiting is one lease and its completion with 100,000
// tasks waiting, each command starting from the index the ones before it
// wrote: the backlog's cost, the index's writes included in the mean. Compare with BenchmarkLease100Waiting, and profile it
// with go test ./cmd -run '^$' -bench Lease100kWaiting -cpuprofile /tmp/cpu.out.
func BenchmarkLease100kWaiting(b *testing.B) { benchLeaseBacklog(b, 100_000) }

// BenchmarkLease100Waiting is BenchmarkLease100kWaiting with 100 waiting.
func BenchmarkLease100Waiting(b *testing.B) { benchLeaseBacklog(b, 100) }

func benchLeaseBacklog(b *testing.B, waiting int) {
	path := filepath.Join(b.TempDir(), "backlog.wal")
	if err := histgen.WriteFile(path, histgen.Options{Records: 1000, Waiting: waiting + b.N}); err != nil {
		b.Fatal(err)
	}
	benchMain(b, "--wal", path, "submit", "--payload", "warm") // builds the index
	b.ResetTimer()
	for range b.N {
		var out, errOut bytes.Buffer
		if code := Main([]string{"--wal", path, "lease", "--worker", "B", "-o", "json"}, strings.NewReader(""), &out, &errOut); code != 0 {
			b.Fatalf("lease: exit %d: %s", code, errOut.String())
		}
		var lease struct {
			TaskID  string `json:"task_id"`
			LeaseID string `json:"lease_id"`
		}
		if err := json.Unmarshal(out.Bytes(), &lease); err != nil {
			b.Fatal(err)
		}
		benchMain(b, "--wal", path, "complete", "--task", lease.TaskID, "--lease", lease.LeaseID, "-o", "json")
	}
}

// BenchmarkSubmit100kWaiting is one submit with 100,000 tasks waiting, each
// new task joining the backlog: the index's writes included in the mean. Compare with BenchmarkSubmit100Waiting.
func BenchmarkSubmit100kWaiting(b *testing.B) { benchSubmitBacklog(b, 100_000) }

// BenchmarkSubmit100Waiting is BenchmarkSubmit100kWaiting with 100 waiting.
func BenchmarkSubmit100Waiting(b *testing.B) { benchSubmitBacklog(b, 100) }

func benchSubmitBacklog(b *testing.B, waiting int) {
	path := filepath.Join(b.TempDir(), "backlog.wal")
	if err := histgen.WriteFile(path, histgen.Options{Records: 1000, Waiting: waiting}); err != nil {
		b.Fatal(err)
	}
	benchMain(b, "--wal", path, "submit", "--payload", "warm") // builds the index
	b.ResetTimer()
	for range b.N {
		benchMain(b, "--wal", path, "submit", "--payload", "job", "-o", "json")
	}
}

// BenchmarkServeSubmit32 is 32 clients submitting through a server in this
// process, over loopback HTTP (a profile of the server's path:
// go test ./cmd -run - -bench ServeSubmit32 -cpuprofile cpu.out).
func BenchmarkServeSubmit32(b *testing.B) {
	c := benchClient(b)
	b.SetParallelism(16) // 2 cores: 32 clients
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Submit(context.Background(), api.SubmitRequest{Payload: "job"}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkServeLeasePayload is 32 clients leasing and completing tasks
// through a server in this process, with payloads a state holds (100 bytes)
// and payloads it reads back from the WAL for each lease (4 KiB): what
// holding long payloads out of memory costs a lease.
func BenchmarkServeLeasePayload(b *testing.B) {
	for _, size := range []int{100, 4096} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			c := benchClient(b)
			payload := strings.Repeat("p", size)
			for left := b.N + 64; left > 0; left -= 1000 {
				reqs := make([]api.SubmitRequest, min(left, 1000))
				for i := range reqs {
					reqs[i] = api.SubmitRequest{Payload: payload, Window: "1h"}
				}
				if _, err := c.SubmitBatch(context.Background(), reqs); err != nil {
					b.Fatal(err)
				}
			}
			b.SetParallelism(16) // 2 cores: 32 clients
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					l, err := c.Lease(context.Background(), api.LeaseRequest{Worker: "W", Duration: "1m"})
					if err == nil && l.Payload != payload {
						err = fmt.Errorf("the lease on %s answered a payload of %d bytes", l.TaskID, len(l.Payload))
					}
					if err == nil {
						_, err = c.Complete(context.Background(), api.CompleteRequest{Task: l.TaskID, Lease: l.LeaseID})
					}
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// benchClient is a client of a new server in this process, over loopback
// HTTP, with connections enough for 32 clients; both end with the benchmark.
func benchClient(b *testing.B) *client.Client {
	_, s := testServerWith(b, server.Options{})
	ts := httptest.NewServer(s)
	b.Cleanup(ts.Close)
	c, err := client.New([]string{ts.URL}, client.Options{HTTP: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}})
	if err != nil {
		b.Fatal(err)
	}
	return c
}
