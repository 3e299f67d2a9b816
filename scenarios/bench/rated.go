package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// rated measures a rated queue under 'leasewal run --jobs 8': tasks enough
// for about d at the rate, eight slots leasing as fast as they may, and
// then, from the grant times the WAL records, for spans of several lengths
// t: the most grants any span of that length held against the rate's bound
// (burst + rate × t, which no span may pass), and the fewest any span of
// that length in the run held (how closely the workers kept up with the
// rate).
func rated(dir, leasewal, rate string, burst int, d time.Duration) {
	count, per := parseRate(rate)
	tasks := int(d.Seconds()*float64(count)*1000/float64(per)) + burst
	wal := filepath.Join(dir, "rated.wal")
	var batch bytes.Buffer
	for i := range tasks {
		fmt.Fprintf(&batch, "{\"payload\":\"job %d\"}\n", i)
	}
	for _, args := range [][]string{
		{"submit", "--batch-file", "-", "--queue", "rated"},
		{"queue", "rate", "rated", rate, "--burst", strconv.Itoa(burst)},
	} {
		c := exec.Command(leasewal, append([]string{"--wal", wal}, args...)...)
		c.Stdin = bytes.NewReader(batch.Bytes())
		out, err := c.CombinedOutput()
		if err != nil {
			check(fmt.Errorf("%v: %v\n%s", args, err, out))
		}
	}
	fmt.Printf("rated: %d tasks in a queue of %s (burst %d), leasewal run --jobs 8 -- true until every one ran\n", tasks, rate, burst)
	began := time.Now()
	run := exec.Command(leasewal, "--wal", wal, "run", "--worker", "W", "--jobs", "8", "--queue", "rated", "--wait", "5s", "--max-tasks", strconv.Itoa(tasks), "-o", "json", "--", "true")
	out, err := run.CombinedOutput()
	if err != nil {
		check(fmt.Errorf("run: %v\n%.2000s", err, out))
	}
	elapsed := time.Since(began)
	grants := grantTimes(leasewal, wal)
	if len(grants) != tasks {
		check(fmt.Errorf("%d grants recorded for %d tasks", len(grants), tasks))
	}
	span := grants[len(grants)-1] - grants[0]
	fmt.Printf("%d grants in %.2f s (run took %.2f s): %.1f grants/s against a rate of %.1f/s\n", len(grants), float64(span)/1000, elapsed.Seconds(),
		float64(len(grants)-burst)*1000/float64(max(span, 1)), float64(count)*1000/float64(per))
	fmt.Printf("%10s %10s %12s %12s   (from the WAL's grant times; a span holds the grants at its ends)\n", "span", "bound", "most in one", "fewest in one")
	interval := float64(per) / float64(count)
	for _, k := range []float64{1, 2, 10, 100} {
		t := int64(k * interval)
		if t > span {
			break
		}
		bound := float64(burst) + float64(t)*float64(count)/float64(per)
		most, fewest := 0, len(grants)
		for i, g := range grants {
			j := i
			for j < len(grants) && grants[j]-g <= t {
				j++
			}
			most = max(most, j-i)
			if g+t <= grants[len(grants)-1] { // a whole span inside the run
				fewest = min(fewest, j-i)
			}
		}
		verdict := "kept"
		if float64(most) > bound {
			verdict = "BROKEN"
		}
		fmt.Printf("%8dms %10.1f %12d %12d   %s\n", t, bound, most, fewest, verdict)
	}
}

// parseRate reads N/s, N/m or N/h as a count per ms.
func parseRate(rate string) (count int, per int64) {
	n, unit, _ := strings.Cut(rate, "/")
	count, err := strconv.Atoi(n)
	check(err)
	per = map[string]int64{"s": 1000, "m": 60_000, "h": 3_600_000}[unit]
	if per == 0 || count < 1 {
		check(fmt.Errorf("-rate %q: give N/s, N/m or N/h", rate))
	}
	return count, per
}

// grantTimes is the time of every LeaseGranted in wal, in order, in unix ms.
func grantTimes(leasewal, wal string) []int64 {
	out, err := exec.Command(leasewal, "--wal", wal, "log", "--type", "LeaseGranted", "-o", "json").Output()
	check(err)
	var times []int64
	scan := bufio.NewScanner(bytes.NewReader(out))
	for scan.Scan() {
		var r struct {
			At string `json:"at"`
		}
		check(json.Unmarshal(scan.Bytes(), &r))
		at, err := time.Parse(time.RFC3339Nano, r.At)
		check(err)
		times = append(times, at.UnixMilli())
	}
	return times
}
