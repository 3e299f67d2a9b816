package nemesis

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestCheckCatches: the seeds' WALs pass; each broken invariant, made by
// editing one of them, is reported.
func TestCheckCatches(t *testing.T) {
	seeds, err := filepath.Glob("../../testdata/seeds/*.wal")
	if err != nil || len(seeds) == 0 {
		t.Fatalf("no seeds: %v", err)
	}
	for _, path := range seeds {
		wal, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Check(wal, nil); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	const head = "leasewal-wal v2\n"
	created := `0 {"seq":1,"at":1000,"type":"TaskCreated","task_id":"T1","request_id":"R1"}` + "\n"
	grant := func(seq int, at int64, lease string, expiry int64) string {
		return `0 {"seq":` + itoa(int64(seq)) + `,"at":` + itoa(at) + `,"type":"LeaseGranted","task_id":"T1","lease_id":"` + lease + `","expiry":` + itoa(expiry) + "}\n"
	}
	for name, c := range map[string]struct {
		wal   string
		acked []string
		want  string
	}{
		"overlap":     {head + created + grant(2, 2000, "L1", 9000) + grant(3, 3000, "L2", 9000), nil, "holds the task"},
		"lease order": {head + created + grant(2, 2000, "L2", 3000) + grant(3, 4000, "L1", 9000), nil, "granted after L2"},
		"time":        {head + created + grant(2, 900, "L1", 3000), nil, "backwards"},
		"seq gap":     {head + created + grant(3, 2000, "L1", 3000), nil, "follows"},
		"lost ack":    {head + created, []string{"R1", "R2"}, "R2 created 0"},
		"twice":       {head + created + strings.Replace(created, `"seq":1`, `"seq":2`, 1), []string{"R1"}, "R1 created 2"},
		"fencing": {head + `0 {"seq":1,"at":1,"type":"WorkAcquired","domain":"d","token":"K2"}` + "\n" +
			`0 {"seq":2,"at":1,"type":"WorkAcquired","domain":"d","token":"K2"}` + "\n", nil, "token K2 after 2"},
	} {
		if _, err := Check([]byte(c.wal), c.acked); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
	lapsed := head + created + grant(2, 2000, "L1", 3000) + grant(3, 3000, "L2", 9000)
	if _, err := Check([]byte(lapsed), []string{"R1"}); err != nil {
		t.Errorf("a grant after the lease lapsed: %v", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
