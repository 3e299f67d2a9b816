package metrics_test

import (
	"bytes"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/internal/metrics"
)

// parse reads what Write wrote with Prometheus's own parser, and lints it
// with Prometheus's own linter.
func parse(t *testing.T, families []metrics.Family) map[string]*dto.MetricFamily {
	t.Helper()
	var b bytes.Buffer
	if err := metrics.Write(&b, families); err != nil {
		t.Fatal(err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	parsed, err := parser.TextToMetricFamilies(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("does not parse as the Prometheus text format: %v\n%s", err, b.String())
	}
	problems, err := testutil.GatherAndLint(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		var out []*dto.MetricFamily
		for _, f := range parsed {
			out = append(out, f)
		}
		return out, nil
	}))
	if err != nil || len(problems) > 0 {
		t.Fatalf("the Prometheus linter finds %v (%v) in\n%s", problems, err, b.String())
	}
	return parsed
}

// TestHistogramAgreesWithClientGolang: the same observations, some on the
// bounds, some beyond the last, some negative, counted by client_golang's
// histogram and by ours, give the same buckets, sum and count.
func TestHistogramAgreesWithClientGolang(t *testing.T) {
	bounds := metrics.ExponentialBuckets(0.0005, 2, 14)
	if want := prometheus.ExponentialBuckets(0.0005, 2, 14); !equalFloats(bounds, want) {
		t.Fatalf("bounds %v, want %v", bounds, want)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 50 {
		ours := metrics.NewHistogram("h_seconds", "A histogram.", bounds)
		theirs := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "h_seconds", Help: "A histogram.", Buckets: bounds})
		for range rng.IntN(200) {
			var v float64
			switch rng.IntN(4) {
			case 0:
				v = bounds[rng.IntN(len(bounds))] // on a bound: counted in it
			case 1:
				v = bounds[len(bounds)-1] * (1 + rng.Float64()*10) // beyond the last
			case 2:
				v = -rng.Float64()
			default:
				v = rng.Float64() * 5
			}
			ours.Observe(v)
			theirs.Observe(v)
		}
		var want dto.Metric
		if err := theirs.Write(&want); err != nil {
			t.Fatal(err)
		}
		got := parse(t, []metrics.Family{ours.Family()})["h_seconds"].GetMetric()[0].GetHistogram()
		wh := want.GetHistogram()
		if got.GetSampleCount() != wh.GetSampleCount() || math.Abs(got.GetSampleSum()-wh.GetSampleSum()) > 1e-9 {
			t.Fatalf("round %d: count %d sum %v, want %d %v", round, got.GetSampleCount(), got.GetSampleSum(), wh.GetSampleCount(), wh.GetSampleSum())
		}
		for i, b := range wh.GetBucket() {
			g := got.GetBucket()[i]
			if g.GetUpperBound() != b.GetUpperBound() || g.GetCumulativeCount() != b.GetCumulativeCount() {
				t.Fatalf("round %d: bucket %d is le=%v %d, want le=%v %d", round, i, g.GetUpperBound(), g.GetCumulativeCount(), b.GetUpperBound(), b.GetCumulativeCount())
			}
		}
	}
}

func equalFloats(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestQueueNamesComeBackAsWritten: a queue's name is a label value, and
// whatever it holds (quotes, backslashes, a newline, other scripts) reads
// back as it was, its figures beside it.
func TestQueueNamesComeBackAsWritten(t *testing.T) {
	names := []string{`say "hi"`, `back\slash`, "two\nlines", "ünïcödé", "{}=,"}
	var s api.Stats
	for i, q := range names {
		s.Queues = append(s.Queues, api.QueueStats{Queue: q, Waiting: i + 1, Leased: 2 * i, Eligible: i, OldestEligibleAgeMs: int64(1500 * i)})
	}
	s.Records = map[string]int64{"LeaseGranted": 3}
	parsed := parse(t, metrics.StatsFamilies(s))
	waiting := map[string]float64{}
	for _, m := range parsed["leasewal_tasks"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["state"] == "WAITING" {
			waiting[labels["queue"]] = m.GetGauge().GetValue()
		}
	}
	for i, q := range names {
		if waiting[q] != float64(i+1) {
			t.Errorf("queue %q: %v waiting, want %d (read back: %v)", q, waiting[q], i+1, waiting)
		}
	}
	var b strings.Builder
	if err := metrics.WriteText(&b, s); err != nil || !strings.Contains(b.String(), `leasewal_leases_total{event="granted"} 3`+"\n") {
		t.Errorf("WriteText: %v\n%s", err, b.String())
	}
}
