// Package metrics reports leasewal's figures in the Prometheus text format
// (version 0.0.4): the same figures `leasewal stats` prints (api.Stats), for
// a server's GET /metrics and for `stats -o prom`, and what only a server
// knows (its batches, its fsyncs, its raft node). Series are bounded: per
// queue for at most api.MaxStatsQueues queues (the rest summed in series of
// their own, which no queue's name can be taken for), per record type,
// never per task or worker.
//
// It writes the format itself rather than through client_golang, whose
// package initialisation (its default registry's Go and process
// collectors) every command paid at start-up, serving or not: see
// docs/design.md. The tests read what it writes with Prometheus's own
// parser and linter.
package metrics

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/state"
)

// Family is one metric as the text format writes it: its name, help, type
// ("gauge", "counter" or "histogram") and samples.
type Family struct {
	Name, Help, Type string
	Samples          []Sample
}

// Sample is one line of a family: the suffix of its name (a histogram's
// _bucket, _sum and _count), its labels in order, and its value.
type Sample struct {
	Suffix string
	Labels []Label
	Value  float64
}

// Label is a label's name and value.
type Label struct{ Name, Value string }

func gauge(name, help string, samples ...Sample) Family {
	return Family{Name: name, Help: help, Type: "gauge", Samples: samples}
}

func counter(name, help string, samples ...Sample) Family {
	return Family{Name: name, Help: help, Type: "counter", Samples: samples}
}

func value(v float64, labels ...string) Sample {
	s := Sample{Value: v}
	for i := 0; i+1 < len(labels); i += 2 {
		s.Labels = append(s.Labels, Label{labels[i], labels[i+1]})
	}
	return s
}

// Write writes families in the text format, by name, each family's series
// by their labels (a histogram's lines as they are); a family without
// samples is left out.
func Write(w io.Writer, families []Family) error {
	families = slices.Clone(families)
	slices.SortStableFunc(families, func(a, b Family) int { return cmp.Compare(a.Name, b.Name) })
	out := bufio.NewWriter(w)
	for _, f := range families {
		if len(f.Samples) == 0 {
			continue
		}
		samples := f.Samples
		if f.Type != "histogram" {
			samples = slices.Clone(samples)
			slices.SortStableFunc(samples, func(a, b Sample) int {
				return slices.CompareFunc(a.Labels, b.Labels, func(x, y Label) int { return cmp.Compare(x.Value, y.Value) })
			})
		}
		fmt.Fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", f.Name, helpEscaper.Replace(f.Help), f.Name, f.Type)
		for _, s := range samples {
			out.WriteString(f.Name + s.Suffix)
			for i, l := range s.Labels {
				sep := ","
				if i == 0 {
					sep = "{"
				}
				out.WriteString(sep + l.Name + `="` + labelEscaper.Replace(l.Value) + `"`)
			}
			if len(s.Labels) > 0 {
				out.WriteString("}")
			}
			out.WriteString(" " + formatFloat(s.Value) + "\n")
		}
	}
	return out.Flush()
}

var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

// formatFloat writes a value as the text format does.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, +1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// Handler answers GET /metrics with the families read returns, read afresh
// at every scrape (within 30 s); a read that fails is HTTP 500 with its
// error, nothing else sent.
func Handler(read func(context.Context) ([]Family, error)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		families, err := read(ctx)
		if err != nil {
			http.Error(w, "reading the metrics: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_ = Write(w, families)
	})
}

// leaseEvents names the lease counters by the records that count them.
var leaseEvents = []struct {
	event string
	typ   state.RecordType
}{{"granted", state.LeaseGranted}, {"extended", state.LeaseExtended}, {"lapsed", state.LeaseExpired},
	{"completed", state.TaskCompleted}, {"failed", state.TaskFailed}, {"cancelled", state.TaskCancelled}, {"released", state.LeaseReleased}}

// StatsFamilies are the figures of s.
func StatsFamilies(s api.Stats) []Family {
	tasks := gauge("leasewal_tasks", "Unfinished tasks by queue and state.")
	eligible := gauge("leasewal_tasks_eligible", "Waiting tasks that could be leased now, by queue.")
	blocked := gauge("leasewal_tasks_blocked", "Waiting tasks that wait for another task, by queue.")
	latency := gauge("leasewal_oldest_eligible_age_seconds", "How long the task eligible longest has waited, by queue (0: none is eligible).")
	for _, q := range s.Queues {
		tasks.Samples = append(tasks.Samples, value(float64(q.Waiting), "queue", q.Queue, "state", string(state.Waiting)),
			value(float64(q.Leased), "queue", q.Queue, "state", string(state.Leased)))
		eligible.Samples = append(eligible.Samples, value(float64(q.Eligible), "queue", q.Queue))
		blocked.Samples = append(blocked.Samples, value(float64(q.Blocked), "queue", q.Queue))
		latency.Samples = append(latency.Samples, value(float64(q.OldestEligibleAgeMs)/1000, "queue", q.Queue))
	}
	families := []Family{tasks, eligible, blocked, latency}
	if o := s.Others; o != nil {
		families = append(families,
			gauge("leasewal_other_queues", "Queues with unfinished tasks beyond the 50 busiest, which are summed in the *_other_queues series.", value(float64(o.Queues))),
			gauge("leasewal_other_queues_tasks", "Unfinished tasks of the queues beyond the 50 busiest, by state.",
				value(float64(o.Waiting), "state", string(state.Waiting)), value(float64(o.Leased), "state", string(state.Leased))),
			gauge("leasewal_other_queues_tasks_eligible", "Waiting tasks that could be leased now, of the queues beyond the 50 busiest.", value(float64(o.Eligible))),
			gauge("leasewal_other_queues_oldest_eligible_age_seconds", "The longest wait of an eligible task in the queues beyond the 50 busiest.", value(float64(o.OldestEligibleAgeMs)/1000)))
	}
	records := counter("leasewal_records_total", "Records in the WAL's history by type, compacted ones included.")
	for t, n := range s.Records {
		records.Samples = append(records.Samples, value(float64(n), "type", t))
	}
	leases := counter("leasewal_leases_total", "Lease events: granted, extended, lapsed (LeaseExpired), completed, failed, cancelled, released.")
	for _, e := range leaseEvents {
		leases.Samples = append(leases.Samples, value(float64(s.Records[string(e.typ)]), "event", e.event))
	}
	families = append(families, records, leases, gauge("leasewal_last_seq", "The seq of the WAL's last record.", value(float64(s.LastSeq))))
	paused := gauge("leasewal_queue_paused", "1 for each paused queue (at most the first 50 by name; leasewal_other_queues_paused counts the rest).")
	for i, q := range s.Paused {
		if i == api.MaxStatsQueues {
			families = append(families, gauge("leasewal_other_queues_paused", "Paused queues beyond the first 50 by name.", value(float64(len(s.Paused)-i))))
			break
		}
		paused.Samples = append(paused.Samples, value(1, "queue", q.Queue))
	}
	return append(append(families, paused), rateFamilies(s.Rated)...)
}

// rateFamilies are the rated queues' figures, of the first 50 by name: the
// rate in grants a second, the burst, and how many leases the rate held
// back (when the service counts them: a server).
func rateFamilies(rated []api.RatedQueue) []Family {
	rates := gauge("leasewal_queue_rate_per_second", "Each rated queue's rate, in grants a second (the first 50 by name).")
	bursts := gauge("leasewal_queue_rate_burst", "Each rated queue's burst: how many grants may come at once.")
	held := counter("leasewal_queue_rate_held_back_total", "Leases answered EMPTY because the queue was at its rate, since the server started.")
	for _, q := range rated[:min(len(rated), api.MaxStatsQueues)] {
		r, err := state.ParseRate(q.Rate)
		if err != nil {
			continue
		}
		rates.Samples = append(rates.Samples, value(float64(r.Count)*1000/float64(r.Per), "queue", q.Queue))
		bursts.Samples = append(bursts.Samples, value(float64(q.Burst), "queue", q.Queue))
		if q.HeldBack != nil {
			held.Samples = append(held.Samples, value(float64(*q.HeldBack), "queue", q.Queue))
		}
	}
	families := []Family{rates, bursts}
	if len(held.Samples) > 0 {
		families = append(families, held)
	}
	return families
}

// WriteText writes s in the Prometheus text format, as a server's
// /metrics reports it (without what only a server knows).
func WriteText(w io.Writer, s api.Stats) error { return Write(w, StatsFamilies(s)) }

// Histogram counts observations in buckets by their upper bounds, as a
// Prometheus histogram does; safe for concurrent use.
type Histogram struct {
	name, help string
	bounds     []float64

	mu     sync.Mutex
	counts []uint64 // per bound, then those above the last
	sum    float64
}

// NewHistogram is a histogram of the bounds given, in increasing order.
func NewHistogram(name, help string, bounds []float64) *Histogram {
	return &Histogram{name: name, help: help, bounds: bounds, counts: make([]uint64, len(bounds)+1)}
}

// ExponentialBuckets are n bounds, the first start, each factor times the
// one before.
func ExponentialBuckets(start, factor float64, n int) []float64 {
	bounds := make([]float64, n)
	for i := range bounds {
		bounds[i] = start
		start *= factor
	}
	return bounds
}

// Observe counts v.
func (h *Histogram) Observe(v float64) {
	i, _ := slices.BinarySearch(h.bounds, v) // the first bound at or above v
	h.mu.Lock()
	h.counts[i]++
	h.sum += v
	h.mu.Unlock()
}

// Family is h's buckets (cumulative), sum and count.
func (h *Histogram) Family() Family {
	h.mu.Lock()
	defer h.mu.Unlock()
	f := Family{Name: h.name, Help: h.help, Type: "histogram"}
	var total uint64
	for i, n := range h.counts {
		total += n
		le := math.Inf(+1)
		if i < len(h.bounds) {
			le = h.bounds[i]
		}
		f.Samples = append(f.Samples, Sample{Suffix: "_bucket", Labels: []Label{{"le", formatFloat(le)}}, Value: float64(total)})
	}
	f.Samples = append(f.Samples, Sample{Suffix: "_sum", Value: h.sum}, Sample{Suffix: "_count", Value: float64(total)})
	return f
}

// Server is what only a server knows: its batches, the leases it granted
// and, on a raft node, its role and indexes.
type Server struct {
	BatchSize     *Histogram
	BatchDurable  *Histogram
	LeaseDuration *Histogram
	RunTime       *Histogram

	mu      sync.Mutex
	granted map[string]int64 // lease -> when this server granted it, until it ends
}

// maxTracked bounds the leases whose grant time a server keeps for the run
// time (a lease that lapses without a LeaseExpired record is never told).
const maxTracked = 100_000

// NewServer makes a server's own metrics.
func NewServer() *Server {
	return &Server{
		BatchSize: NewHistogram("leasewal_batch_size", "Requests decided in one batch (group commit).", ExponentialBuckets(1, 2, 10)),
		BatchDurable: NewHistogram("leasewal_batch_durable_seconds",
			"From a batch's write to its records being durable (the fsync it waits for), in seconds.", ExponentialBuckets(0.0005, 2, 14)),
		LeaseDuration: NewHistogram("leasewal_lease_duration_seconds", "How long leases are granted or extended for, in seconds.", ExponentialBuckets(1, 2, 14)),
		RunTime: NewHistogram("leasewal_task_run_seconds",
			"From a lease's grant to the task's completion under it, for the leases this server granted, in seconds.", ExponentialBuckets(0.01, 2, 20)),
		granted: map[string]int64{},
	}
}

// Families is every metric of s.
func (s *Server) Families() []Family {
	return []Family{s.BatchSize.Family(), s.BatchDurable.Family(), s.LeaseDuration.Family(), s.RunTime.Family()}
}

// Records notes the records a request committed: the leases' durations,
// and the run time of a task completed under a lease this server granted.
// Requests call it at once.
func (s *Server) Records(recs []state.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range recs {
		switch r.Type {
		case state.LeaseGranted:
			s.LeaseDuration.Observe(float64(r.Expiry-r.At) / 1000)
			if len(s.granted) >= maxTracked {
				clear(s.granted)
			}
			s.granted[r.LeaseID] = r.At
		case state.LeaseExtended:
			s.LeaseDuration.Observe(float64(r.Expiry-r.At) / 1000)
		case state.TaskCompleted:
			if at, ok := s.granted[r.LeaseID]; ok {
				s.RunTime.Observe(float64(r.At-at) / 1000)
			}
			delete(s.granted, r.LeaseID)
		case state.TaskFailed, state.LeaseExpired, state.TaskCancelled, state.TaskDead, state.TaskAborted, state.LeaseReleased:
			delete(s.granted, r.LeaseID)
		}
	}
}

// Observe notes one batch.
func (s *Server) Observe(size int, durable time.Duration) {
	s.BatchSize.Observe(float64(size))
	s.BatchDurable.Observe(durable.Seconds())
}

// SyncFamily reports the fsyncs that made a server's writes durable:
// beside leasewal_batch_size, how many requests share one.
func SyncFamily(syncs int64) Family {
	return counter("leasewal_wal_syncs_total", "Fsyncs that made this server's writes to its WAL durable.", value(float64(syncs)))
}

// Raft is a raft node's figures.
type Raft struct {
	Role                  string
	Term, Commit, Applied uint64
}

// RaftFamilies reports a raft node's role and indexes.
func RaftFamilies(r Raft) []Family {
	return []Family{
		gauge("leasewal_raft_role", "1 for this node's raft role.", value(1, "role", strings.ToLower(r.Role))),
		gauge("leasewal_raft_term", "The node's raft term.", value(float64(r.Term))),
		gauge("leasewal_raft_commit_index", "The last raft index known committed.", value(float64(r.Commit))),
		gauge("leasewal_raft_applied_index", "The last raft index applied to the node's WAL.", value(float64(r.Applied))),
	}
}
