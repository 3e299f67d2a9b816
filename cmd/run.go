package cmd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"leasewal/runner"
	"leasewal/state"
	"leasewal/store"
)

type runOptions struct {
	worker        string
	duration      string
	jobs          int
	wait          string
	forever       bool
	maxTasks      int
	queues        string
	queueSet      bool // --queue was given, perhaps empty
	killGrace     string
	permanentExit string
}

func (a *app) newRunCmd() *cobra.Command {
	o := &runOptions{}
	c := &cobra.Command{
		Use:   "run --worker W [flags] -- CMD [ARG...]",
		Short: "Run a worker: lease tasks and run CMD for each, extending, completing or failing it",
		Long: `A worker in one line. Runs up to --jobs children at once, each under its own
lease: the task's payload on its stdin, and in its environment LEASEWAL_WAL,
LEASEWAL_TASK, LEASEWAL_LEASE (the fencing token), LEASEWAL_ATTEMPT,
LEASEWAL_WORKER and LEASEWAL_DEADLINE. While a child runs its lease is extended
every duration/3. Exit 0 completes the task; another exit fails it with the
last line of the child's stderr (permanently for a code in --permanent-exit);
death by a signal fails it; a command that cannot start fails it permanently.
When the lease is lost (CANCELLED: it lapsed, the window closed, an operator
aborted the task), the child's whole process group gets SIGTERM, SIGKILL after
--kill-grace, and the task is reported LOST. A child and everything it started
die with their runner, even a SIGKILLed one. With --server the leases are
taken through the server and the children get LEASEWAL_SERVER instead of
LEASEWAL_WAL.

It stops when nothing runs and nothing has become leasable for --wait (default
0: at once), or after --max-tasks leases have finished; --forever never stops.
Exit 0 when it leased a task, 4 when it leased none; on SIGINT or SIGTERM it
stops leasing, stops its children (failing them, "worker stopped") and exits
130 or 143; a second signal kills at once. One line per finished task:
task, lease, attempt, COMMITTED | RETRY | FAILED | LOST, the child's exit code
(null when killed or not started) and seconds.`,
		Example: `  leasewal run --worker W1 --jobs 4 -- gzip-one
  leasewal run --worker W2 --queue mail --forever --permanent-exit 2,64-78 -- ./send-mail.sh`,
		RunE: func(c *cobra.Command, args []string) error {
			dash := c.ArgsLenAtDash()
			if dash < 0 || dash >= len(args) {
				return usageErr("run needs the command after --, e.g. 'leasewal run --worker W1 -- ./job.sh'")
			}
			if dash > 0 {
				return usageErr("unexpected %q before --; the command goes after --", args[0])
			}
			o.queueSet = c.Flags().Changed("queue")
			return runRun(a.env, *o, args[dash:])
		},
	}
	f := c.Flags()
	f.StringVar(&o.worker, "worker", "", "the worker's name (required)")
	f.StringVar(&o.duration, "duration", "30s", "lease length; the lease is extended every duration/3 while the child runs")
	f.IntVar(&o.jobs, "jobs", 1, "children at once, each under its own lease")
	f.StringVar(&o.wait, "wait", "0s", "stop once nothing runs and nothing has become leasable for this long")
	f.BoolVar(&o.forever, "forever", false, "never stop for want of tasks")
	f.IntVar(&o.maxTasks, "max-tasks", 0, "stop after this many leases have finished (0: no limit)")
	f.StringVar(&o.queues, "queue", "", "lease only from these queues (comma-separated; default all)")
	f.StringVar(&o.killGrace, "kill-grace", "10s", "after SIGTERM, how long a child has before SIGKILL")
	f.StringVar(&o.permanentExit, "permanent-exit", "", "exit codes that fail the task for good, e.g. 2,64-78")
	_ = c.MarkFlagRequired("worker")
	return c
}

// runPlan is run's options, checked and parsed.
type runPlan struct {
	worker    string
	duration  time.Duration
	jobs      int
	wait      time.Duration
	forever   bool
	maxTasks  int
	queues    []string
	grace     time.Duration
	permanent map[int]bool
	argv      []string
	self      string // this binary, run as each child's supervisor
	walPath   string // absolute, for the children
}

func (o runOptions) plan(e env, argv []string) (runPlan, error) {
	p := runPlan{worker: o.worker, jobs: o.jobs, forever: o.forever, maxTasks: o.maxTasks, argv: argv}
	var err error
	if err := state.ValidateID("--worker", o.worker); err != nil {
		return p, usageErr("%v", err)
	}
	if p.duration, err = parseDuration("duration", o.duration); err != nil {
		return p, err
	}
	if p.duration < 3*time.Millisecond {
		return p, usageErr("--duration %s is too short to extend: give at least 3ms (30s is usual)", o.duration)
	}
	if o.jobs < 1 {
		return p, usageErr("--jobs %d: give 1 or more children at once", o.jobs)
	}
	if o.maxTasks < 0 {
		return p, usageErr("--max-tasks %d must not be negative", o.maxTasks)
	}
	if p.wait, err = parseDuration("wait", o.wait); err != nil {
		return p, err
	}
	if p.wait < 0 {
		return p, usageErr("--wait %s is negative", o.wait)
	}
	if o.forever && p.wait > 0 {
		return p, usageErr("give --wait or --forever, not both")
	}
	if p.grace, err = parseDuration("kill-grace", o.killGrace); err != nil {
		return p, err
	}
	if p.queues, err = parseQueues(o.queues, o.queueSet); err != nil {
		return p, err
	}
	if p.permanent, err = parseExitCodes(o.permanentExit); err != nil {
		return p, err
	}
	if err := e.needsWallClock("run"); err != nil {
		return p, err
	}
	if p.self, err = os.Executable(); err != nil {
		return p, fmt.Errorf("finding this leasewal binary to supervise children: %w", err)
	}
	if p.walPath, err = filepath.Abs(e.WAL); err != nil {
		return p, err
	}
	return p, nil
}

// parseExitCodes reads a list such as 2,64-78.
func parseExitCodes(list string) (map[int]bool, error) {
	codes := map[int]bool{}
	if list == "" {
		return codes, nil
	}
	bad := usageErr("--permanent-exit %q: give exit codes and ranges from 1 to 255, such as 2,64-78", list)
	for _, part := range strings.Split(list, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		from, err1 := strconv.Atoi(lo)
		to := from
		var err2 error
		if isRange {
			to, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || from < 1 || to > 255 || to < from {
			return nil, bad
		}
		for c := from; c <= to; c++ {
			codes[c] = true
		}
	}
	return codes, nil
}

// job is one child under one lease.
type job struct {
	taskID, leaseID string
	attempt         int
	payload         string
	deadline        int64
	expiry          int64
	started         time.Time
	nextExtend      time.Time
	supervisor      *exec.Cmd
	childPID        int
	lost            bool // the lease is no longer the authority: report LOST whatever the child does
	stderr          *lastLine
}

// jobEnd is how a job's child ended: the supervisor's last status line.
type jobEnd struct {
	j      *job
	status string
}

// runLine is one finished task, as run prints it.
type runLine struct {
	TaskID  string  `json:"task_id"`
	LeaseID string  `json:"lease_id"`
	Attempt int     `json:"attempt"`
	Outcome string  `json:"outcome"`
	Exit    *int    `json:"exit"`
	Seconds float64 `json:"seconds"`
}

// jobRunner is run's state between the turns of its loop.
type jobRunner struct {
	e       env
	p       runPlan
	c       coordinator
	spawn   chan spawnRequest
	ends    chan jobEnd
	running map[string]*job
	leased  int
	out     *bufio.Writer
	outErr  error
	stopped os.Signal
	// leaseFailure is the last failure to lease, until a lease succeeds.
	leaseFailure string
	// unsettled counts the leases that ended LOST or CANCELLED.
	unsettled int
	// nextBeat is when the worker's next heartbeat is due; beatFailed, that
	// the last one failed (said once, until one succeeds).
	nextBeat   time.Time
	beatFailed bool
}

// spawnRequest asks the spawning thread to start a supervisor.
type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

// spawner starts every supervisor from one goroutine locked to its OS thread
// for the life of the process: a supervisor's Pdeathsig fires when the
// thread that forked it exits, so that thread must live as long as the runner.
func spawner() chan spawnRequest {
	requests := make(chan spawnRequest)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the process
		for r := range requests {
			r.done <- r.cmd.Start()
		}
	}()
	return requests
}

func runRun(e env, o runOptions, argv []string) error {
	p, err := o.plan(e, argv)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var c coordinator
	if e.Server != "" {
		if c, err = newRemoteCoordinator(e); err != nil {
			return err
		}
	} else {
		opts := e.storeOptions()
		opts.Resident = true
		c = localCoordinator{h: store.Open(opts), wal: e.WAL}
	}
	defer c.close()
	r := &jobRunner{e: e, p: p, c: c, spawn: spawner(), ends: make(chan jobEnd),
		running: map[string]*job{}, out: bufio.NewWriter(e.stdout)}
	if e.Output == "tsv" && !e.NoHeaders { // the header row even when nothing runs, as every TSV
		fmt.Fprintln(r.out, "TASK\tLEASE\tATTEMPT\tOUTCOME\tEXIT\tSECONDS")
	}
	quit := make(chan struct{})
	defer close(quit)
	woken, err := c.wakeups(quit)
	if err != nil {
		return err
	}
	idleUntil := time.Now().Add(p.wait)
	var next int64 // when time alone next makes a task eligible
	for {
		for r.stopped == nil && len(r.running) < p.jobs && (p.maxTasks == 0 || r.leased < p.maxTasks) {
			j, nextEvent, err := r.c.lease(state.LeaseRequest{Worker: p.worker, Duration: p.duration, Queues: p.queues})
			next = nextEvent
			if err != nil {
				// Said once per distinct failure: a server that is down is
				// asked again every poll, and would fill the log otherwise.
				if msg := withAdvice(err); msg != r.leaseFailure {
					fmt.Fprintf(e.stderr, "leasewal: run: could not lease (%s); trying again\n", msg)
					r.leaseFailure = msg
				}
				break
			}
			if r.leaseFailure != "" {
				fmt.Fprintln(e.stderr, "leasewal: run: leasing again")
				r.leaseFailure = ""
			}
			if j == nil {
				break
			}
			r.leased++
			r.start(j)
			idleUntil = time.Now().Add(p.wait)
		}
		if len(r.running) == 0 && (r.stopped != nil || (p.maxTasks > 0 && r.leased >= p.maxTasks) || (!p.forever && !time.Now().Before(idleUntil))) {
			break
		}
		wakeAt := waitUntil(next, time.Time{})
		if !p.forever && len(r.running) == 0 && (wakeAt.IsZero() || idleUntil.Before(wakeAt)) {
			wakeAt = idleUntil
		}
		for _, j := range r.running {
			if wakeAt.IsZero() || j.nextExtend.Before(wakeAt) {
				wakeAt = j.nextExtend
			}
		}
		if wakeAt.IsZero() || r.nextBeat.Before(wakeAt) {
			wakeAt = r.nextBeat
		}
		var timer <-chan time.Time
		if !wakeAt.IsZero() {
			timer = time.After(max(time.Until(wakeAt), time.Millisecond))
		}
		select {
		case end := <-r.ends:
			r.finish(end)
			idleUntil = time.Now().Add(p.wait)
		case sig := <-sigs:
			r.stop(sig)
		case <-woken:
		case <-timer:
		}
		r.extendDue()
		r.beat()
	}
	if err := r.out.Flush(); err != nil && r.outErr == nil {
		r.outErr = err
	}
	switch {
	case r.stopped == syscall.SIGINT:
		return &exitStatus{code: 130}
	case r.stopped != nil:
		return &exitStatus{code: 143}
	case r.outErr != nil && r.leased > 0:
		return &answerLostError{first: 0, last: 0, hint: "'leasewal log --worker " + p.worker + "' shows what this worker did", err: r.outErr}
	case r.leased == 0:
		if !e.noteMissingWAL() {
			fmt.Fprintf(e.stderr, "leasewal: run: no task was eligible%s; 'leasewal why T' says why a task waits\n", waitedFor(p))
		}
		return &exitStatus{code: ExitNotFound}
	case r.unsettled > 0:
		fmt.Fprintf(e.stderr, "leasewal: run: %d of %d leases ended LOST or CANCELLED: their tasks were not settled by this worker\n", r.unsettled, r.leased)
		return &exitStatus{code: ExitCancelled}
	}
	return nil
}

// waitedFor says how long run waited for a task, for its closing note.
func waitedFor(p runPlan) string {
	if p.wait == 0 {
		return ""
	}
	return " in " + p.wait.String()
}

// beat sends the worker's heartbeat when one is due (every duration/3, as
// the extensions), so that 'inspect --workers' lists a runner's worker. The
// registry is advisory: a failure is said once and never stops the runner.
func (r *jobRunner) beat() {
	now := time.Now()
	if now.Before(r.nextBeat) {
		return
	}
	r.nextBeat = now.Add(r.p.duration / 3)
	err := r.c.heartbeat(r.p.worker)
	if err != nil && !r.beatFailed {
		fmt.Fprintf(r.e.stderr, "leasewal: run: warning: the heartbeat of %s was not recorded (%v); it is advisory only\n", r.p.worker, withAdvice(err))
	}
	r.beatFailed = err != nil
}

// start runs the job's child under a supervisor; a child that cannot start
// ends at once.
func (r *jobRunner) start(j *job) {
	j.started = time.Now()
	j.nextExtend = j.started.Add(r.p.duration / 3)
	j.stderr = &lastLine{w: r.e.stderr}
	status, statusW, err := os.Pipe()
	if err != nil {
		go func() { r.ends <- jobEnd{j, "cannot-start " + err.Error()} }()
		return
	}
	stdin, err := payloadFile(j.payload)
	if err != nil {
		status.Close()
		statusW.Close()
		go func() { r.ends <- jobEnd{j, "cannot-start " + err.Error()} }()
		return
	}
	cmd := exec.Command(r.p.self, append([]string{runner.SuperviseArg, strconv.FormatInt(r.p.grace.Milliseconds(), 10)}, r.p.argv...)...)
	cmd.Args[0] = "leasewal" // the name a test binary dispatches on; the path is the real one
	cmd.Stdin = stdin
	cmd.Stdout = r.e.stdout
	if r.e.Output == "json" || r.e.Output == "tsv" {
		cmd.Stdout = r.e.stderr // run's stdout holds only its own lines
	}
	cmd.Stderr = j.stderr
	cmd.ExtraFiles = []*os.File{statusW}
	where := "LEASEWAL_WAL=" + r.p.walPath
	if r.e.Server != "" {
		where = "LEASEWAL_SERVER=" + r.e.Server // the child's own commands reach the same server
	}
	deadline := ""
	if j.deadline != 0 {
		deadline = formatTime(j.deadline)
	}
	cmd.Env = append(os.Environ(), where, "LEASEWAL_TASK="+j.taskID, "LEASEWAL_LEASE="+j.leaseID,
		"LEASEWAL_ATTEMPT="+strconv.Itoa(j.attempt), "LEASEWAL_WORKER="+r.p.worker, "LEASEWAL_DEADLINE="+deadline)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.WaitDelay = r.p.grace + 5*time.Second
	done := make(chan error, 1)
	r.spawn <- spawnRequest{cmd: cmd, done: done}
	err = <-done
	statusW.Close()
	stdin.Close()
	if err != nil {
		status.Close()
		go func() { r.ends <- jobEnd{j, "cannot-start " + err.Error()} }()
		return
	}
	j.supervisor = cmd
	r.running[j.leaseID] = j
	pid := make(chan int, 1) // the child's pid, or closed without one when it did not start
	go func() {
		last := "signal KILL" // a supervisor killed before it could say
		lines := bufio.NewScanner(status)
		for lines.Scan() {
			if n, ok := strings.CutPrefix(lines.Text(), "pid "); ok {
				p, _ := strconv.Atoi(n)
				pid <- p
				continue
			}
			last = lines.Text()
			break
		}
		close(pid)
		status.Close()
		_ = cmd.Wait()
		r.ends <- jobEnd{j, last}
	}()
	j.childPID = <-pid
}

// payloadFile holds the payload for a child's stdin: an unlinked file, so
// that a child that never reads it blocks nobody.
func payloadFile(payload string) (*os.File, error) {
	f, err := os.CreateTemp("", "leasewal-payload-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	if _, err := f.WriteString(payload); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// extendDue extends the lease of every job whose turn has come. A lease
// that is no longer the authority, or that could not be extended before it
// lapsed, is lost: its child is stopped.
func (r *jobRunner) extendDue() {
	now := time.Now()
	for _, j := range r.running {
		if j.lost || now.Before(j.nextExtend) {
			continue
		}
		outcome, err := r.c.extend(j, r.p.duration)
		switch {
		case err == nil && outcome == state.ResultExtended:
			j.nextExtend = now.Add(r.p.duration / 3)
		case err == nil: // CANCELLED
			r.lose(j, "its lease is no longer the authority")
		case now.UnixMilli() >= j.expiry:
			r.lose(j, fmt.Sprintf("its lease could not be extended before it lapsed (%v)", err))
		default:
			fmt.Fprintf(r.e.stderr, "leasewal: run: extending %s of %s failed (%v); trying again\n", j.leaseID, j.taskID, withAdvice(err))
			j.nextExtend = now.Add(min(time.Second, r.p.duration/3))
		}
	}
}

// lose stops a job whose lease is lost: its child's process group gets
// SIGTERM, then SIGKILL after the grace (the supervisor sees to both).
// A child that has already ended is not lost: its end is on its way, and
// settling it will say CANCELLED.
func (r *jobRunner) lose(j *job, why string) {
	if j.childPID <= 0 || unix.Kill(-j.childPID, 0) != nil {
		return
	}
	j.lost = true
	fmt.Fprintf(r.e.stderr, "leasewal: run: %s under %s: %s; stopping its child\n", j.taskID, j.leaseID, why)
	_ = j.supervisor.Process.Signal(syscall.SIGTERM)
}

// stop is the first SIGINT or SIGTERM: stop leasing and stop the children;
// a second signal kills them at once.
func (r *jobRunner) stop(sig os.Signal) {
	if r.stopped != nil {
		for _, j := range r.running {
			if j.childPID > 0 {
				_ = unix.Kill(-j.childPID, unix.SIGKILL)
			}
			_ = j.supervisor.Process.Signal(syscall.SIGTERM)
		}
		return
	}
	r.stopped = sig
	for _, j := range r.running {
		_ = j.supervisor.Process.Signal(syscall.SIGTERM)
	}
}

// finish records how a job ended and prints its line.
func (r *jobRunner) finish(end jobEnd) {
	j := end.j
	delete(r.running, j.leaseID)
	line := runLine{TaskID: j.taskID, LeaseID: j.leaseID, Attempt: j.attempt, Seconds: time.Since(j.started).Seconds()}
	var reason string
	permanent := false
	switch kind, detail, _ := strings.Cut(end.status, " "); kind {
	case "exit":
		code, _ := strconv.Atoi(detail)
		line.Exit = &code
		reason = "exit " + detail
		if last := j.stderr.last(); last != "" {
			reason += ": " + last
		}
		permanent = r.p.permanent[code]
	case "signal":
		reason = "signal " + detail
	default:
		reason, permanent = "cannot start: "+detail, true
	}
	switch {
	case j.lost:
		line.Outcome = "LOST"
	case line.Exit != nil && *line.Exit == 0:
		line.Outcome = r.verdict(j, func() (state.Outcome, error) { return r.c.complete(j) })
	default:
		if r.stopped != nil {
			reason, permanent = "worker stopped", false
		}
		line.Outcome = r.verdict(j, func() (state.Outcome, error) { return r.c.fail(j, reason, permanent) })
	}
	if line.Outcome == "LOST" || line.Outcome == string(state.ResultCancelled) {
		r.unsettled++
	}
	r.print(line)
}

// verdict writes a completion or a failure, retrying a failed write while
// the lease lasts. A child that finished after its lease stopped being the
// authority is CANCELLED, as the late completion itself is; a lease that
// lapsed while the write kept failing is LOST.
func (r *jobRunner) verdict(j *job, settle func() (state.Outcome, error)) string {
	for {
		outcome, err := settle()
		if err == nil {
			return string(outcome)
		}
		if isRefusal(err) || time.Now().UnixMilli() >= j.expiry {
			fmt.Fprintf(r.e.stderr, "leasewal: run: %s under %s: %v\n", j.taskID, j.leaseID, withAdvice(err))
			return "LOST"
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *jobRunner) print(line runLine) {
	if r.outErr != nil {
		return
	}
	switch r.e.Output {
	case "json":
		b, _ := json.Marshal(line)
		r.out.Write(append(b, '\n'))
	case "tsv":
		exit := ""
		if line.Exit != nil {
			exit = strconv.Itoa(*line.Exit)
		}
		fmt.Fprintf(r.out, "%s\t%s\t%d\t%s\t%s\t%.3f\n", tsvCell(line.TaskID), tsvCell(line.LeaseID), line.Attempt, line.Outcome, exit, line.Seconds)
	default:
		exit := "-"
		if line.Exit != nil {
			exit = strconv.Itoa(*line.Exit)
		}
		// The outcome is padded before it is colored: a color's escape
		// bytes take no columns.
		outcome := palette{on: r.e.Color}.word(line.Outcome) + strings.Repeat(" ", max(0, 9-len(line.Outcome)))
		fmt.Fprintf(r.out, "%-8s %-8s attempt %-3d %s exit %-4s %7.2fs\n", escape(line.TaskID), escape(line.LeaseID), line.Attempt,
			outcome, exit, line.Seconds)
	}
	r.outErr = r.out.Flush()
}

// lastLine passes a child's stderr through and keeps its last line (at most
// 200 bytes), for the reason of a failure.
type lastLine struct {
	w       io.Writer
	mu      sync.Mutex
	current []byte
	done    []byte
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, b := range p {
		if b == '\n' {
			if len(l.current) > 0 {
				l.done, l.current = l.current, nil
			}
			continue
		}
		if len(l.current) < 4096 {
			l.current = append(l.current, b)
		}
	}
	_, _ = l.w.Write(p) // the runner's stderr failing does not fail the child
	return len(p), nil
}

func (l *lastLine) last() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	line := l.done
	if len(l.current) > 0 {
		line = l.current
	}
	s := strings.TrimSpace(string(line))
	for len(s) > 200 {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}
