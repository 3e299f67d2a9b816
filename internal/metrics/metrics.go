// Package metrics reports leasewal's figures in the Prometheus text format:
// the same figures `leasewal stats` prints (api.Stats), for a server's GET
// /metrics and for `stats -o prom`, and what only a server knows (its
// batches, its raft node). Series are bounded: per queue for at most
// api.MaxStatsQueues queues (the rest summed in series of their own, which
// no queue's name can be taken for), per record type, never per task or
// worker.
package metrics

import (
	"context"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/state"
)

var (
	tasksDesc    = prometheus.NewDesc("leasewal_tasks", "Unfinished tasks by queue and state.", []string{"queue", "state"}, nil)
	eligibleDesc = prometheus.NewDesc("leasewal_tasks_eligible", "Waiting tasks that could be leased now, by queue.", []string{"queue"}, nil)
	latencyDesc  = prometheus.NewDesc("leasewal_oldest_eligible_age_seconds", "How long the task eligible longest has waited, by queue (0: none is eligible).", []string{"queue"}, nil)
	recordsDesc  = prometheus.NewDesc("leasewal_records_total", "Records in the WAL's history by type, compacted ones included.", []string{"type"}, nil)
	leasesDesc   = prometheus.NewDesc("leasewal_leases_total", "Lease events: granted, extended, lapsed (LeaseExpired), completed, failed, cancelled, released.", []string{"event"}, nil)
	lastSeqDesc  = prometheus.NewDesc("leasewal_last_seq", "The seq of the WAL's last record.", nil, nil)
	pausedDesc   = prometheus.NewDesc("leasewal_queue_paused", "1 for each paused queue (at most the first 50 by name; leasewal_other_queues_paused counts the rest).", []string{"queue"}, nil)

	otherQueuesDesc   = prometheus.NewDesc("leasewal_other_queues", "Queues with unfinished tasks beyond the 50 busiest, which are summed in the *_other_queues series.", nil, nil)
	otherTasksDesc    = prometheus.NewDesc("leasewal_other_queues_tasks", "Unfinished tasks of the queues beyond the 50 busiest, by state.", []string{"state"}, nil)
	otherEligibleDesc = prometheus.NewDesc("leasewal_other_queues_tasks_eligible", "Waiting tasks that could be leased now, of the queues beyond the 50 busiest.", nil, nil)
	otherLatencyDesc  = prometheus.NewDesc("leasewal_other_queues_oldest_eligible_age_seconds", "The longest wait of an eligible task in the queues beyond the 50 busiest.", nil, nil)
	otherPausedDesc   = prometheus.NewDesc("leasewal_other_queues_paused", "Paused queues beyond the first 50 by name.", nil, nil)
)

// leaseEvents names the lease counters by the records that count them.
var leaseEvents = []struct {
	event string
	typ   state.RecordType
}{{"granted", state.LeaseGranted}, {"extended", state.LeaseExtended}, {"lapsed", state.LeaseExpired},
	{"completed", state.TaskCompleted}, {"failed", state.TaskFailed}, {"cancelled", state.TaskCancelled}, {"released", state.LeaseReleased}}

// statsCollector reports a Stats read at each scrape.
type statsCollector struct {
	read func(context.Context) (api.Stats, error)
}

// NewStatsCollector reports the figures read returns, read afresh at
// every scrape.
func NewStatsCollector(read func(context.Context) (api.Stats, error)) prometheus.Collector {
	return statsCollector{read: read}
}

func (c statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{tasksDesc, eligibleDesc, latencyDesc, recordsDesc, leasesDesc, lastSeqDesc, pausedDesc,
		otherQueuesDesc, otherTasksDesc, otherEligibleDesc, otherLatencyDesc, otherPausedDesc} {
		ch <- d
	}
}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.read(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(lastSeqDesc, err)
		return
	}
	for _, q := range s.Queues {
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(q.Waiting), q.Queue, string(state.Waiting))
		ch <- prometheus.MustNewConstMetric(tasksDesc, prometheus.GaugeValue, float64(q.Leased), q.Queue, string(state.Leased))
		ch <- prometheus.MustNewConstMetric(eligibleDesc, prometheus.GaugeValue, float64(q.Eligible), q.Queue)
		ch <- prometheus.MustNewConstMetric(latencyDesc, prometheus.GaugeValue, float64(q.OldestEligibleAgeMs)/1000, q.Queue)
	}
	if o := s.Others; o != nil {
		ch <- prometheus.MustNewConstMetric(otherQueuesDesc, prometheus.GaugeValue, float64(o.Queues))
		ch <- prometheus.MustNewConstMetric(otherTasksDesc, prometheus.GaugeValue, float64(o.Waiting), string(state.Waiting))
		ch <- prometheus.MustNewConstMetric(otherTasksDesc, prometheus.GaugeValue, float64(o.Leased), string(state.Leased))
		ch <- prometheus.MustNewConstMetric(otherEligibleDesc, prometheus.GaugeValue, float64(o.Eligible))
		ch <- prometheus.MustNewConstMetric(otherLatencyDesc, prometheus.GaugeValue, float64(o.OldestEligibleAgeMs)/1000)
	}
	for t, n := range s.Records {
		ch <- prometheus.MustNewConstMetric(recordsDesc, prometheus.CounterValue, float64(n), t)
	}
	for _, e := range leaseEvents {
		ch <- prometheus.MustNewConstMetric(leasesDesc, prometheus.CounterValue, float64(s.Records[string(e.typ)]), e.event)
	}
	ch <- prometheus.MustNewConstMetric(lastSeqDesc, prometheus.GaugeValue, float64(s.LastSeq))
	for i, q := range s.Paused {
		if i == api.MaxStatsQueues {
			ch <- prometheus.MustNewConstMetric(otherPausedDesc, prometheus.GaugeValue, float64(len(s.Paused)-i))
			break
		}
		ch <- prometheus.MustNewConstMetric(pausedDesc, prometheus.GaugeValue, 1, q.Queue)
	}
}

// WriteText writes s in the Prometheus text format, as a server's
// /metrics reports it (without what only a server knows).
func WriteText(w io.Writer, s api.Stats) error {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewStatsCollector(func(context.Context) (api.Stats, error) { return s, nil })); err != nil {
		return err
	}
	families, err := reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range families {
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return err
		}
	}
	return nil
}

// Server is what only a server knows: its batches, the leases it granted
// and, on a raft node, its role and indexes.
type Server struct {
	BatchSize     prometheus.Histogram
	BatchDurable  prometheus.Histogram
	LeaseDuration prometheus.Histogram
	RunTime       prometheus.Histogram

	mu      sync.Mutex
	granted map[string]int64 // lease -> when this server granted it, until it ends
}

// maxTracked bounds the leases whose grant time a server keeps for the run
// time (a lease that lapses without a LeaseExpired record is never told).
const maxTracked = 100_000

// NewServer makes a server's own metrics.
func NewServer() *Server {
	return &Server{
		BatchSize: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leasewal_batch_size", Help: "Requests decided in one batch (group commit).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10)}),
		BatchDurable: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leasewal_batch_durable_seconds",
			Help: "From a batch's write to its records being durable (the fsync it waits for), in seconds.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		LeaseDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leasewal_lease_duration_seconds",
			Help: "How long leases are granted or extended for, in seconds.", Buckets: prometheus.ExponentialBuckets(1, 2, 14)}),
		RunTime: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "leasewal_task_run_seconds",
			Help: "From a lease's grant to the task's completion under it, for the leases this server granted, in seconds.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 20)}),
		granted: map[string]int64{},
	}
}

// Collectors is every metric of s, to register.
func (s *Server) Collectors() []prometheus.Collector {
	return []prometheus.Collector{s.BatchSize, s.BatchDurable, s.LeaseDuration, s.RunTime}
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

// NewSyncCounter reports the fsyncs that made a server's writes durable,
// read at each scrape: beside leasewal_batch_size, how many requests share
// one fsync.
func NewSyncCounter(read func() int64) prometheus.Collector {
	return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "leasewal_wal_syncs_total",
		Help: "Fsyncs that made this server's writes to its WAL durable."}, func() float64 { return float64(read()) })
}

// Raft is a raft node's figures.
type Raft struct {
	Role                  string
	Term, Commit, Applied uint64
}

// NewRaftCollector reports a raft node's role and indexes, read at each scrape.
func NewRaftCollector(read func() Raft) prometheus.Collector { return raftCollector{read: read} }

var (
	roleDesc    = prometheus.NewDesc("leasewal_raft_role", "1 for this node's raft role.", []string{"role"}, nil)
	termDesc    = prometheus.NewDesc("leasewal_raft_term", "The node's raft term.", nil, nil)
	commitDesc  = prometheus.NewDesc("leasewal_raft_commit_index", "The last raft index known committed.", nil, nil)
	appliedDesc = prometheus.NewDesc("leasewal_raft_applied_index", "The last raft index applied to the node's WAL.", nil, nil)
)

type raftCollector struct{ read func() Raft }

func (c raftCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{roleDesc, termDesc, commitDesc, appliedDesc} {
		ch <- d
	}
}

func (c raftCollector) Collect(ch chan<- prometheus.Metric) {
	r := c.read()
	ch <- prometheus.MustNewConstMetric(roleDesc, prometheus.GaugeValue, 1, strings.ToLower(r.Role))
	ch <- prometheus.MustNewConstMetric(termDesc, prometheus.GaugeValue, float64(r.Term))
	ch <- prometheus.MustNewConstMetric(commitDesc, prometheus.GaugeValue, float64(r.Commit))
	ch <- prometheus.MustNewConstMetric(appliedDesc, prometheus.GaugeValue, float64(r.Applied))
}
