package runner

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/state"
)

// Plan is what a runner does, checked: 'leasewal run's flags.
type Plan struct {
	Worker    string
	Duration  time.Duration // a lease's; extended every Duration/3 while its child runs
	Jobs      int           // children at once
	Wait      time.Duration // stop once nothing runs and nothing has become leasable for this long
	Forever   bool
	MaxTasks  int // stop after this many leases have finished (0: no limit)
	Queues    []string
	Grace     time.Duration // after SIGTERM, how long a child has before SIGKILL
	Permanent map[int]bool  // exit codes that fail a task for good
	Argv      []string      // the command each child runs
	Self      string        // the leasewal binary: each child's supervisor
	// Where tells a child's own commands where the tasks are, as
	// variables of its environment: LEASEWAL_WAL=…, or LEASEWAL_SERVER=…
	// with the token's file and the certificates to trust.
	Where       []string
	ChildStdout io.Writer
	// ResultFromStdout keeps the first state.MaxResultBytes of a child's
	// stdout as its task's result when the task completes.
	ResultFromStdout bool
	Stderr           io.Writer // the children's stderr, and the runner's notes
	// Describe is an error as a person reads it (with what to do).
	Describe func(error) string
	// Finished prints a finished task's line; after an error nothing more
	// is printed.
	Finished func(Line) error
}

// Line is one finished task.
type Line struct {
	TaskID  string  `json:"task_id"`
	LeaseID string  `json:"lease_id"`
	Attempt int     `json:"attempt"`
	Outcome string  `json:"outcome"` // COMMITTED, RETRY, FAILED, CANCELLED or LOST
	Exit    *int    `json:"exit"`    // null when killed or not started
	Seconds float64 `json:"seconds"`
}

// Result is how a runner ended.
type Result struct {
	Leased    int       // leases taken
	Unsettled int       // of them, those that ended LOST or CANCELLED
	Failed    int       // of them, those whose task ended FAILED
	Stopped   os.Signal // the signal that stopped it, if one did
	OutErr    error     // printing a line failed
}

// job is one child under one lease.
type job struct {
	Lease
	started    time.Time
	nextExtend time.Time
	supervisor *exec.Cmd
	childPID   int
	lost       bool // the lease is no longer the authority: report LOST whatever the child does
	stderr     *lastLine
	output     *headBuffer // the child's stdout kept for the result (nil: none)
}

// jobEnd is how a job's child ended: the supervisor's last status line.
type jobEnd struct {
	j      *job
	status string
}

// runner is a runner's state between the turns of its loop.
type runner struct {
	p       Plan
	c       *Coordinator
	spawn   chan spawnRequest
	ends    chan jobEnd
	running map[string]*job
	res     Result
	// next is when time alone next makes a task eligible (0: unknown).
	next int64
	// leaseFailure is the last failure to lease, until a lease succeeds.
	leaseFailure string
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

// Run leases tasks from c and runs p.Argv for each, until nothing runs and
// nothing has become leasable for p.Wait (never with p.Forever), p.MaxTasks
// leases have finished, or a signal comes on sigs (the first stops leasing
// and stops the children; a second kills them at once).
func Run(p Plan, c *Coordinator, sigs <-chan os.Signal) (Result, error) {
	r := &runner{p: p, c: c, spawn: spawner(), ends: make(chan jobEnd), running: map[string]*job{}}
	quit := make(chan struct{})
	defer close(quit)
	woken, err := c.Wakeups(quit)
	if err != nil {
		return r.res, err
	}
	idleUntil := time.Now().Add(p.Wait)
	for {
		for r.wantsLease() {
			l, next, err := c.Lease(r.leaseRequest())
			r.next = next
			if err != nil {
				// Said once per distinct failure: a server that is down is
				// asked again every poll, and would fill the log otherwise.
				if msg := p.Describe(err); msg != r.leaseFailure {
					fmt.Fprintf(p.Stderr, "leasewal: run: could not lease (%s); trying again\n", msg)
					r.leaseFailure = msg
				}
				break
			}
			if r.leaseFailure != "" {
				fmt.Fprintln(p.Stderr, "leasewal: run: leasing again")
				r.leaseFailure = ""
			}
			if l == nil {
				break
			}
			r.res.Leased++
			r.start(&job{Lease: *l})
			idleUntil = time.Now().Add(p.Wait)
		}
		if len(r.running) == 0 && (r.res.Stopped != nil || (p.MaxTasks > 0 && r.res.Leased >= p.MaxTasks) || (!p.Forever && !time.Now().Before(idleUntil))) {
			return r.res, nil
		}
		var wakeAt time.Time
		if r.next != 0 {
			wakeAt = time.UnixMilli(r.next)
		}
		if !p.Forever && len(r.running) == 0 && (wakeAt.IsZero() || idleUntil.Before(wakeAt)) {
			wakeAt = idleUntil
		}
		for _, j := range r.running {
			if wakeAt.IsZero() || j.nextExtend.Before(wakeAt) {
				wakeAt = j.nextExtend
			}
		}
		beatAt := r.nextBeat
		if beatAt.IsZero() { // none sent yet: due now
			beatAt = time.Now()
		}
		if wakeAt.IsZero() || beatAt.Before(wakeAt) {
			wakeAt = beatAt
		}
		var timer <-chan time.Time
		if !wakeAt.IsZero() {
			timer = time.After(max(time.Until(wakeAt), time.Millisecond))
		}
		select {
		case end := <-r.ends:
			r.finish(end)
			idleUntil = time.Now().Add(p.Wait)
		case sig := <-sigs:
			r.stop(sig)
		case <-woken:
		case <-timer:
		}
		r.extendDue()
		r.beat()
	}
}

// wantsLease says whether the runner takes another lease now.
func (r *runner) wantsLease() bool {
	return r.res.Stopped == nil && len(r.running) < r.p.Jobs && (r.p.MaxTasks == 0 || r.res.Leased < r.p.MaxTasks)
}

func (r *runner) leaseRequest() state.LeaseRequest {
	return state.LeaseRequest{Worker: r.p.Worker, Duration: r.p.Duration, Queues: r.p.Queues}
}

// beat sends the worker's heartbeat when one is due (every duration/3, as
// the extensions), so that 'inspect --workers' lists a runner's worker. The
// registry is advisory: a failure is said once and never stops the runner.
func (r *runner) beat() {
	now := time.Now()
	if now.Before(r.nextBeat) {
		return
	}
	r.nextBeat = now.Add(r.p.Duration / 3)
	err := r.c.Heartbeat(r.p.Worker)
	if err != nil && !r.beatFailed {
		fmt.Fprintf(r.p.Stderr, "leasewal: run: warning: the heartbeat of %s was not recorded (%v); it is advisory only\n", r.p.Worker, r.p.Describe(err))
	}
	r.beatFailed = err != nil
}

// start runs the job's child under a supervisor; a child that cannot start
// ends at once.
func (r *runner) start(j *job) {
	j.started = time.Now()
	j.nextExtend = j.started.Add(r.p.Duration / 3)
	j.stderr = &lastLine{w: r.p.Stderr}
	status, statusW, err := os.Pipe()
	if err != nil {
		go func() { r.ends <- jobEnd{j, "cannot-start " + err.Error()} }()
		return
	}
	stdin, err := payloadFile(j.Payload)
	if err != nil {
		status.Close()
		statusW.Close()
		go func() { r.ends <- jobEnd{j, "cannot-start " + err.Error()} }()
		return
	}
	cmd := exec.Command(r.p.Self, append([]string{SuperviseArg, strconv.FormatInt(r.p.Grace.Milliseconds(), 10)}, r.p.Argv...)...)
	cmd.Args[0] = "leasewal" // the name a test binary dispatches on; the path is the real one
	cmd.Stdin = stdin
	cmd.Stdout = r.p.ChildStdout
	if r.p.ResultFromStdout {
		j.output = &headBuffer{max: state.MaxResultBytes}
		cmd.Stdout = io.MultiWriter(r.p.ChildStdout, j.output)
	}
	cmd.Stderr = j.stderr
	cmd.ExtraFiles = []*os.File{statusW}
	deadline := ""
	if j.Deadline != 0 {
		deadline = api.FormatTime(j.Deadline)
	}
	cmd.Env = append(append(os.Environ(), r.p.Where...), "LEASEWAL_TASK="+j.TaskID, "LEASEWAL_LEASE="+j.LeaseID,
		"LEASEWAL_ATTEMPT="+strconv.Itoa(j.Attempt), "LEASEWAL_WORKER="+r.p.Worker, "LEASEWAL_DEADLINE="+deadline)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	cmd.WaitDelay = r.p.Grace + 5*time.Second
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
	r.running[j.LeaseID] = j
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
// that a child that never reads it blocks nobody. The payload is text,
// given as text files end, with a newline (unless it ends with one): the
// shell's 'read p' fails on a last line without it.
func payloadFile(payload string) (*os.File, error) {
	f, err := os.CreateTemp("", "leasewal-payload-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	if !strings.HasSuffix(payload, "\n") {
		payload += "\n"
	}
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
func (r *runner) extendDue() {
	now := time.Now()
	for _, j := range r.running {
		if j.lost || now.Before(j.nextExtend) {
			continue
		}
		outcome, err := r.c.Extend(&j.Lease, r.p.Duration)
		switch {
		case err == nil && outcome == api.ResultExtended:
			j.nextExtend = now.Add(r.p.Duration / 3)
		case err == nil: // CANCELLED
			r.lose(j, "its lease is no longer the authority")
		case now.UnixMilli() >= j.Expiry:
			r.lose(j, fmt.Sprintf("its lease could not be extended before it lapsed (%v)", err))
		default:
			fmt.Fprintf(r.p.Stderr, "leasewal: run: extending %s of %s failed (%v); trying again\n", j.LeaseID, j.TaskID, r.p.Describe(err))
			j.nextExtend = now.Add(min(time.Second, r.p.Duration/3))
		}
	}
}

// lose stops a job whose lease is lost: its child's process group gets
// SIGTERM, then SIGKILL after the grace (the supervisor sees to both).
// A child that has already ended is not lost: its end is on its way, and
// settling it will say CANCELLED.
func (r *runner) lose(j *job, why string) {
	if j.childPID <= 0 || unix.Kill(-j.childPID, 0) != nil {
		return
	}
	j.lost = true
	fmt.Fprintf(r.p.Stderr, "leasewal: run: %s under %s: %s; stopping its child\n", j.TaskID, j.LeaseID, why)
	_ = j.supervisor.Process.Signal(syscall.SIGTERM)
}

// stop is the first SIGINT or SIGTERM: stop leasing and stop the children;
// a second signal kills them at once.
func (r *runner) stop(sig os.Signal) {
	if r.res.Stopped != nil {
		for _, j := range r.running {
			if j.childPID > 0 {
				_ = unix.Kill(-j.childPID, unix.SIGKILL)
			}
			_ = j.supervisor.Process.Signal(syscall.SIGTERM)
		}
		return
	}
	r.res.Stopped = sig
	for _, j := range r.running {
		_ = j.supervisor.Process.Signal(syscall.SIGTERM)
	}
}

// finish records how a job ended and prints its line.
func (r *runner) finish(end jobEnd) {
	j := end.j
	delete(r.running, j.LeaseID)
	line := Line{TaskID: j.TaskID, LeaseID: j.LeaseID, Attempt: j.Attempt, Seconds: time.Since(j.started).Seconds()}
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
		permanent = r.p.Permanent[code]
	case "signal":
		reason = "signal " + detail
	default:
		reason, permanent = "cannot start: "+detail, true
	}
	switch {
	case j.lost:
		line.Outcome = "LOST"
	case line.Exit != nil && *line.Exit == 0 && r.wantsLease():
		// the completion and the next lease in one request and one fsync
		var next *Lease
		line.Outcome = r.verdict(j, func() (api.Outcome, error) {
			outcome, l, when, err := r.c.CompleteAndLease(&j.Lease, j.result(), r.leaseRequest())
			next, r.next = l, when
			return outcome, err
		})
		defer func() {
			if next != nil {
				r.res.Leased++
				r.start(&job{Lease: *next})
			}
		}()
	case line.Exit != nil && *line.Exit == 0:
		line.Outcome = r.verdict(j, func() (api.Outcome, error) { return r.c.Complete(&j.Lease, j.result()) })
	case r.res.Stopped != nil:
		// stopped, not failed: the work was cut short, so it goes back
		// without using an attempt
		line.Outcome = r.verdict(j, func() (api.Outcome, error) { return r.c.Release(&j.Lease) })
	default:
		line.Outcome = r.verdict(j, func() (api.Outcome, error) { return r.c.Fail(&j.Lease, reason, permanent) })
	}
	switch line.Outcome {
	case "LOST", string(api.ResultCancelled):
		r.res.Unsettled++
	case string(api.ResultFailed):
		r.res.Failed++
	}
	r.print(line)
}

// verdict writes a completion or a failure, retrying a failed write while
// the lease lasts. A child that finished after its lease stopped being the
// authority is CANCELLED, as the late completion itself is; a lease that
// lapsed while the write kept failing is LOST.
func (r *runner) verdict(j *job, settle func() (api.Outcome, error)) string {
	for {
		outcome, err := settle()
		if err == nil {
			return string(outcome)
		}
		if IsRefusal(err) || time.Now().UnixMilli() >= j.Expiry {
			fmt.Fprintf(r.p.Stderr, "leasewal: run: %s under %s: %v\n", j.TaskID, j.LeaseID, r.p.Describe(err))
			return "LOST"
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *runner) print(line Line) {
	if r.res.OutErr == nil {
		r.res.OutErr = r.p.Finished(line)
	}
}

// lastLine passes a child's stderr through and keeps its last line (at most
// 200 bytes), for the reason of a failure.
// result is what the job's task completes with: the head of its child's
// stdout, as UTF-8 text ("" when not kept).
func (j *job) result() string {
	if j.output == nil {
		return ""
	}
	return j.output.text()
}

// headBuffer keeps the first max bytes written to it and drops the rest.
// The child's stdout is copied into it until the child ends, which is
// before its job's end is handled (cmd.Wait returns first).
type headBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (h *headBuffer) Write(p []byte) (int, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.b = append(h.b, p[:min(len(p), h.max-len(h.b))]...)
	return len(p), nil
}

// text is the head as UTF-8: a character cut at the end is dropped, and
// bytes that are not UTF-8 become U+FFFD, within the limit.
func (h *headBuffer) text() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	b := h.b
	for cut := 0; cut < utf8.UTFMax && len(b) > 0 && !utf8.Valid(b); cut++ {
		b = b[:len(b)-1] // a character the limit cut in two
	}
	if !utf8.Valid(b) {
		s := strings.ToValidUTF8(string(h.b), "\uFFFD")
		for len(s) > h.max {
			_, size := utf8.DecodeLastRuneInString(s)
			s = s[:len(s)-size]
		}
		return s
	}
	return string(b)
}

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
