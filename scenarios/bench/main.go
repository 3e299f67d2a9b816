// Command bench measures leasewal against the sqlite3 CLI on this machine and
// prints one table: per-command latency (submit, lease, complete) with the
// ratio to sqlite3 doing the equivalent transaction on an equivalent table,
// replay throughput of verify, and peak RSS. It prints figures and never fails
// on a timing. scenarios/bench.sh builds leasewal and runs it.
package main

import (
	"bytes"
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasewal/leasewal/internal/histgen"
)

func main() {
	leasewal := flag.String("leasewal", "leasewal", "the leasewal binary")
	floor := flag.String("floor", "", "a binary that links leasewal's packages and does nothing (scenarios/bench/floor)")
	sizes := flag.String("sizes", "10000,100000,1000000", "history sizes in records")
	reps := flag.Int("reps", 15, "runs of each command per size (5 for a million records or more)")
	generate := flag.String("generate", "", "write a history of -records records to this file and print its record and task counts (used by bench itself)")
	records := flag.Int("records", 0, "with -generate: history size")
	waiting := flag.Int("waiting", 0, "with -generate: tasks left WAITING at the end")
	lockPhase := flag.Duration("contention", 0, "measure the lock instead, in phases of this length (readers beside a writer; writers against writers)")
	workerPhase := flag.Duration("workers", 0, "measure leasewal run instead, in phases of this length (against shell loops; pickup after a lapse; pickup through serve)")
	servePhase := flag.Duration("serve", 0, "measure leasewal serve instead, in phases of this length (16 HTTP clients against 16 process loops)")
	backlogOnly := flag.String("backlog", "", "measure per-command latency against these numbers of waiting tasks instead (e.g. 100,1000000)")
	batch := flag.Int("batch", 0, "measure the batch door instead: this many tasks in one submit --batch-file")
	compaction := flag.String("compaction", "", "measure compaction instead, on WALs of these sizes in records (e.g. 100000,1000000)")
	reports := flag.String("report", "", "measure report instead, on WALs of these sizes in records (e.g. 10000,100000,1000000)")
	firstStarts := flag.String("firststart", "", "measure the first command on a backlog with no index instead, at these numbers of waiting tasks (e.g. 10000,100000,1000000)")
	resident := flag.Int("resident", 0, "measure a resident server over this many waiting tasks instead (-leasewal may name several binaries, comma-separated: A B A B)")
	residentOps := flag.Int("ops", 200000, "with -resident: submits, then as many complete-and-lease-next")
	residentWork := flag.Int("work", 0, "with -resident: complete-and-lease-next, if not -ops")
	peerPhase := flag.Duration("peers", 0, "measure leasewal serve beside beanstalkd and redis instead, in phases of this length (both on PATH)")
	peerRounds := flag.Int("rounds", 5, "with -peers: interleaved rounds of every figure")
	peerClients := flag.String("clients", "1,8,32", "with -peers: numbers of clients")
	peerWaiters := flag.Int("waiters", 0, "with -peers: consumers that wait on an empty queue beside the load, through every phase")
	peerConsumers := flag.Int("consumers", 0, "with -peers: consumers that wait on the queue the submits go to and take each task as it comes, through every submit phase")
	peerWatchers := flag.Int("watchers", 0, "with -peers: waits for a task that does not change (leasewal's wait) beside the load, through every phase")
	peerOnly := flag.String("only", "", "with -peers: only these servers (leasewal, lines, serial, cluster, beanstalkd, redis), comma-separated")
	abuse := flag.Int("abuse", 0, "measure a server's bounds instead, on a WAL of this many records: garbage and a log of every record (peak RSS), a batch at the limit beside submits, heartbeats at 10 and 5,000 workers, submits/s (-leasewal may name several binaries: A B A B)")
	deps := flag.Int("deps", 0, "measure tasks that wait instead: this many waiting on one task, and a DAG of 10,001 tasks in one batch")
	rate := flag.String("rate", "", "measure a rated queue under leasewal run --jobs 8 instead: its rate (N/s, N/m, N/h)")
	burst := flag.Int("burst", 5, "with -rate: the queue's burst")
	rateFor := flag.Duration("rate-for", 10*time.Second, "with -rate: tasks enough for this long at the rate")
	abusePhase := flag.Duration("abuse-phase", 3*time.Second, "with -abuse: how long each submits/s figure runs")
	flag.Parse()
	if *generate != "" {
		generateHistory(*generate, *records, *waiting)
		return
	}
	sqlite, _ := exec.LookPath("sqlite3")
	dir, err := os.MkdirTemp("", "leasewal-bench-")
	check(err)
	defer os.RemoveAll(dir)

	fmt.Printf("leasewal benchmark, %s, %s, Go %s; sqlite3: %s\n", time.Now().UTC().Format("2006-01-02"), machine(), goVersion(), sqliteVersion(sqlite))
	if *lockPhase > 0 {
		contention(dir, *leasewal, *lockPhase)
		return
	}
	if *workerPhase > 0 {
		workers(dir, *leasewal, *workerPhase)
		return
	}
	if *servePhase > 0 {
		serveBench(dir, *leasewal, *servePhase)
		return
	}
	if *peerPhase > 0 {
		o := peerOptions{phase: *peerPhase, rounds: max(1, *peerRounds), waiters: *peerWaiters, consumers: *peerConsumers, watchers: *peerWatchers}
		for _, c := range strings.Split(*peerClients, ",") {
			n, err := strconv.Atoi(c)
			check(err)
			o.clients = append(o.clients, n)
		}
		if *peerOnly != "" {
			o.only = strings.Split(*peerOnly, ",")
		}
		peersBench(dir, *leasewal, o)
		return
	}
	if *batch > 0 {
		batchBench(dir, *leasewal, *batch)
		return
	}
	if *deps > 0 {
		depsBench(dir, *leasewal, *deps, *reps)
		return
	}
	if *rate != "" {
		rated(dir, *leasewal, *rate, *burst, *rateFor)
		return
	}
	if *abuse > 0 {
		self, err := os.Executable()
		check(err)
		abuseBench(dir, *leasewal, self, *abuse, *abusePhase)
		return
	}
	if *resident > 0 {
		self, err := os.Executable()
		check(err)
		residentBench(dir, *leasewal, self, *resident, *residentOps, cmp.Or(*residentWork, *residentOps))
		return
	}
	if *compaction != "" || *reports != "" || *firstStarts != "" {
		var sizes []int
		for _, field := range strings.Split(*compaction+*reports+*firstStarts, ",") {
			n, err := strconv.Atoi(field)
			check(err)
			sizes = append(sizes, n)
		}
		self, err := os.Executable()
		check(err)
		switch {
		case *reports != "":
			reportBench(dir, *leasewal, self, sizes)
		case *firstStarts != "":
			firstStartBench(dir, *leasewal, self, sizes)
		default:
			compactionBench(dir, *leasewal, self, sizes)
		}
		return
	}
	if *backlogOnly != "" {
		var backlogSizes []int
		for _, field := range strings.Split(*backlogOnly, ",") {
			n, err := strconv.Atoi(field)
			check(err)
			backlogSizes = append(backlogSizes, n)
		}
		backlog(dir, *leasewal, *floor, backlogSizes, *reps)
		return
	}
	fmt.Println("latencies are medians in ms; ratio = leasewal / sqlite3 (one process per command, fsync per transaction)")
	startupFloor(dir, *floor, sqlite)
	fmt.Println("first = the first submit, with no index yet: a full replay that builds the index")
	fmt.Println("max RSS = the largest of verify, submit, lease, complete, inspect (table and -o json), inspect T1, log -o json")
	fmt.Printf("%9s %8s | %8s %10s %7s %7s | %8s | %-21s %-21s %-21s | %8s\n", "records", "WAL MB", "verify s", "records/s", "MB/s", "RSS MB",
		"first ms", "submit lw/sq (ratio)", "lease lw/sq (ratio)", "complete lw/sq (ratio)", "max RSS")
	for _, field := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(field)
		check(err)
		r := *reps
		if n >= 1_000_000 {
			r = min(r, 5)
		}
		benchSize(dir, *leasewal, *floor, sqlite, n, r)
	}
}

// startupFloor prints how long a process that only links leasewal's
// packages takes, beside sqlite3 doing one INSERT on an empty table.
func startupFloor(dir, floor, sqlite string) {
	if floor == "" {
		return
	}
	const reps = 30
	var fl, sq []time.Duration
	db := filepath.Join(dir, "floor.sqlite")
	if sqlite != "" {
		execute(sqlite, db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);")
	}
	for range reps {
		fl = append(fl, execute(floor).elapsed)
		if sqlite != "" {
			sq = append(sq, execute(sqlite, db, "PRAGMA synchronous=FULL; BEGIN IMMEDIATE; INSERT INTO t VALUES(1); COMMIT;").elapsed)
		}
	}
	if sqlite == "" {
		fmt.Printf("start-up floor (a binary linking cobra, viper, tablewriter and color, doing nothing): %.2f ms\n", ms(median(fl)))
		return
	}
	fmt.Printf("start-up floor (a binary linking cobra, viper, tablewriter and color, doing nothing): %.2f ms = %.2fx sqlite3's whole one-row transaction (%.2f ms)\n",
		ms(median(fl)), float64(median(fl))/float64(median(sq)), ms(median(sq)))
}

func generateHistory(path string, records, waiting int) {
	f, err := os.Create(path)
	check(err)
	st, err := histgen.Write(f, histgen.Options{Records: records, Waiting: waiting})
	check(err)
	check(f.Close())
	tasks, err := st.Tasks()
	check(err)
	fmt.Println(st.LastSeq(), len(tasks))
}

type run struct {
	elapsed time.Duration
	rssKB   int64
	out     []byte
}

func execute(name string, args ...string) run {
	return executeTo(true, name, args...)
}

// executeTo runs a command; keep says whether to keep its output (a large
// output held here would count in the next children's RSS, see benchSize).
func executeTo(keep bool, name string, args ...string) run {
	cmd := exec.Command(name, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if !keep {
		cmd.Stdout = io.Discard
	}
	start := time.Now()
	err := cmd.Run()
	elapsed := time.Since(start)
	if err != nil && cmd.ProcessState.ExitCode() != 4 {
		fmt.Fprintf(os.Stderr, "%s %v: %v\n%s%s", name, args, err, out.Bytes(), errOut.Bytes())
		os.Exit(1)
	}
	return run{elapsed: elapsed, rssKB: cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss, out: out.Bytes()}
}

// median sorts xs and returns its middle (the upper of the two middles of
// an even count).
func median[T time.Duration | float64](xs []T) T {
	slices.Sort(xs)
	return xs[len(xs)/2]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

var leaseRE = regexp.MustCompile(`"task_id":"(T\d+)","lease_id":"(L\d+)"`)

func benchSize(dir, leasewal, floor, sqlite string, n, reps int) {
	walPath := filepath.Join(dir, fmt.Sprintf("h%d.wal", n))
	// A child process writes the history: the kernel counts the peak memory
	// of this process in every child's maximum RSS (Go starts children with
	// vfork, and exec keeps the larger of the two), so this one must stay small.
	self, err := os.Executable()
	check(err)
	var records, tasks int
	_, err = fmt.Sscan(string(execute(self, "-generate", walPath, "-records", strconv.Itoa(n), "-waiting", strconv.Itoa(2*reps)).out), &records, &tasks)
	check(err)
	info, _ := os.Stat(walPath)

	var verify []time.Duration
	var maxRSS int64
	for range 3 {
		r := executeTo(false, leasewal, "--wal", walPath, "verify", "-o", "json")
		verify = append(verify, r.elapsed)
		maxRSS = max(maxRSS, r.rssKB)
	}
	verifyRSS := maxRSS
	v := slices.Min(verify)
	reads := map[string]time.Duration{}
	for _, args := range [][]string{{"inspect"}, {"inspect", "-o", "json"}, {"inspect", "T1", "-o", "json"}, {"log", "-o", "json"}} {
		r := executeTo(false, leasewal, append([]string{"--wal", walPath}, args...)...)
		maxRSS = max(maxRSS, r.rssKB)
		reads[strings.Join(args, " ")] = r.elapsed
	}
	first := execute(leasewal, "--wal", walPath, "submit", "--payload", "first", "-o", "json")
	maxRSS = max(maxRSS, first.rssKB)
	tableWithIndex := executeTo(false, leasewal, "--wal", walPath, "inspect")
	maxRSS = max(maxRSS, tableWithIndex.rssKB)
	var tableFloor time.Duration
	if floor != "" {
		tableFloor = executeTo(false, floor, "-table", strconv.Itoa(tasks)).elapsed
	}
	lw := map[string][]time.Duration{}
	cmdRSS := int64(0)
	floorFile := filepath.Join(dir, fmt.Sprintf("floor%d.log", n))
	for i := range reps {
		if floor != "" {
			lw["floor"] = append(lw["floor"], execute(floor, floorFile).elapsed)
		}
		r := execute(leasewal, "--wal", walPath, "submit", "--payload", "bench "+strconv.Itoa(i), "-o", "json")
		lw["submit"] = append(lw["submit"], r.elapsed)
		r = execute(leasewal, "--wal", walPath, "lease", "--worker", "B", "-o", "json")
		lw["lease"] = append(lw["lease"], r.elapsed)
		m := leaseRE.FindSubmatch(r.out)
		if m == nil {
			fmt.Fprintf(os.Stderr, "lease answered %s\n", r.out)
			os.Exit(1)
		}
		r2 := execute(leasewal, "--wal", walPath, "complete", "--task", string(m[1]), "--lease", string(m[2]), "-o", "json")
		lw["complete"] = append(lw["complete"], r2.elapsed)
		cmdRSS = max(cmdRSS, r.rssKB, r2.rssKB)
	}
	sq := sqliteLatencies(dir, sqlite, tasks, reps)
	cell := func(op string) string {
		l := median(lw[op])
		if sq[op] == 0 {
			return fmt.Sprintf("%6.2f/  n/a         ", ms(l))
		}
		return fmt.Sprintf("%6.2f/%5.2f (%5.2fx)", ms(l), ms(sq[op]), float64(l)/float64(sq[op]))
	}
	fmt.Printf("%9d %8.1f | %8.3f %10.0f %7.1f %7.1f | %8.1f | %-21s %-21s %-21s | %8.1f\n", records, float64(info.Size())/1e6,
		v.Seconds(), float64(records)/v.Seconds(), float64(info.Size())/1e6/v.Seconds(), float64(verifyRSS)/1024, ms(first.elapsed),
		cell("submit"), cell("lease"), cell("complete"), float64(max(cmdRSS, maxRSS))/1024)
	fmt.Printf("%9s   targets: verify %.2f M records/s (>= 2) at %.0f MB (<= 250); inspect -o json %.2f s (<= 1 at 1M), log -o json %.2f s (<= 2.5 at 1M), inspect table %.2f s without an index, %.2f s with one",
		"", float64(records)/v.Seconds()/1e6, float64(verifyRSS)/1024, reads["inspect -o json"].Seconds(), reads["log -o json"].Seconds(), reads["inspect"].Seconds(), tableWithIndex.elapsed.Seconds())
	if tableFloor > 0 {
		fmt.Printf(" = %.2fx tablewriter alone streaming its %d rows (%.2f s; <= 1.2)", float64(tableWithIndex.elapsed)/float64(tableFloor), tasks, tableFloor.Seconds())
	}
	if len(lw["floor"]) > 0 {
		fl := median(lw["floor"])
		fmt.Printf("; against the I/O floor (%.2f ms: open, lock, read, append, fsync) submit %.2fx, lease %.2fx, complete %.2fx (<= 1.15)",
			ms(fl), float64(median(lw["submit"]))/float64(fl), float64(median(lw["lease"]))/float64(fl), float64(median(lw["complete"]))/float64(fl))
	}
	fmt.Println()
}

// sqliteLatencies times the sqlite3 CLI doing the equivalent of submit, lease
// and complete, one transaction per process, on a table with one row per task
// and an index on state (journal_mode=WAL, synchronous=FULL).
func sqliteLatencies(dir, sqlite string, tasks, reps int) map[string]time.Duration {
	out := map[string]time.Duration{}
	if sqlite == "" {
		return out
	}
	db := filepath.Join(dir, fmt.Sprintf("t%d.sqlite", tasks))
	setup := fmt.Sprintf(`PRAGMA journal_mode=WAL;
CREATE TABLE tasks(id INTEGER PRIMARY KEY, state TEXT NOT NULL, attempt INT NOT NULL, lease TEXT, worker TEXT, expiry INT, created INT NOT NULL, payload TEXT NOT NULL);
CREATE INDEX tasks_state ON tasks(state, id);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < %d)
INSERT INTO tasks SELECT x, CASE WHEN x > %d THEN 'WAITING' ELSE 'COMPLETED' END, 1, NULL, NULL, NULL, x, printf('%%.*c', 1 + x %% 300, 'p') FROM c;`, tasks, tasks-2*reps)
	execute(sqlite, db, setup)
	const tx = "PRAGMA synchronous=FULL; BEGIN IMMEDIATE; %s; COMMIT;"
	times := map[string][]time.Duration{}
	for i := range reps {
		times["submit"] = append(times["submit"], execute(sqlite, db, fmt.Sprintf(tx,
			fmt.Sprintf("INSERT INTO tasks(state, attempt, created, payload) VALUES('WAITING', 0, %d, 'bench %d')", i, i))).elapsed)
		times["lease"] = append(times["lease"], execute(sqlite, db, fmt.Sprintf(tx,
			fmt.Sprintf("UPDATE tasks SET state='LEASED', attempt=attempt+1, lease='L%d', worker='B', expiry=%d WHERE id=(SELECT id FROM tasks WHERE state='WAITING' ORDER BY id LIMIT 1)", i, i))).elapsed)
		times["complete"] = append(times["complete"], execute(sqlite, db, fmt.Sprintf(tx,
			fmt.Sprintf("UPDATE tasks SET state='COMPLETED', lease=NULL WHERE lease='L%d' AND state='LEASED'", i))).elapsed)
	}
	for op, d := range times {
		out[op] = median(d)
	}
	return out
}

func machine() string {
	cpus := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		cpus = strconv.Itoa(bytes.Count(b, []byte("processor\t:")))
	}
	return cpus + " cores"
}

func goVersion() string {
	out, _ := exec.Command("go", "env", "GOVERSION").Output()
	return strings.TrimSpace(string(out))
}

func sqliteVersion(sqlite string) string {
	if sqlite == "" {
		return "not installed"
	}
	out, _ := exec.Command(sqlite, "--version").Output()
	return strings.Fields(string(out) + " ?")[0]
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
