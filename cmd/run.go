package cmd

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasewal/leasewal/api"

	"github.com/spf13/cobra"

	"github.com/leasewal/leasewal/internal/runner"
	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/state"
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
	resultFrom    string
}

func (a *app) newRunCmd() *cobra.Command {
	o := &runOptions{}
	c := &cobra.Command{
		Use:   "run --worker W [flags] -- CMD [ARG...]",
		Short: "Be a worker: take tasks and run a command for each",
		Long: `A worker in one line. Runs up to --jobs children at once, each under its own
lease: the task's payload on its stdin (with a newline after it, so that the
shell's 'read p' takes it), and in its environment LEASEWAL_WAL,
LEASEWAL_TASK, LEASEWAL_LEASE (the fencing token), LEASEWAL_ATTEMPT,
LEASEWAL_WORKER and LEASEWAL_DEADLINE (empty for a task without a window).
While a child runs its lease is extended
every duration/3. Exit 0 completes the task; another exit fails it with the
last line of the child's stderr (permanently for a code in --permanent-exit);
death by a signal fails it; a command that cannot start fails it permanently.
When the lease is lost (CANCELLED: it lapsed, the window closed, an operator
aborted the task), the child's whole process group gets SIGTERM, SIGKILL after
--kill-grace, and the task is reported LOST. A child and everything it started
die with their runner, even a SIGKILLed one. With --server the leases are
taken through the server and the children get LEASEWAL_SERVER (with
LEASEWAL_TOKEN_FILE and LEASEWAL_CA, as absolute paths, when the runner has
them) instead of LEASEWAL_WAL.

It stops when nothing runs and nothing has become leasable for --wait (default
0: at once), or after --max-tasks leases have finished; --forever never stops.
One line per finished task: task, lease, attempt, COMMITTED | RETRY | FAILED |
RELEASED | LOST | CANCELLED, the child's exit code (null when killed or not
started) and seconds.

Exit 0 when every task it leased was settled and none ended FAILED; 3 when a
lease ended LOST or CANCELLED; 11 when a task ended FAILED (its attempts used
up, or a permanent failure); 4 when it leased none. On SIGINT or SIGTERM it
stops leasing, stops its children (releasing their leases: the task waits for
another worker and the attempt does not count) and exits 130 or 143; a second
signal kills at once.`,
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
	f.StringVar(&o.resultFrom, "result-from", "stdout", "keep the child's stdout (its first 64 KiB) as the task's result, or none")
	f.StringVar(&o.permanentExit, "permanent-exit", "", "exit codes that fail the task for good, e.g. 2,64-78")
	_ = c.MarkFlagRequired("worker")
	return c
}

// plan is run's flags, checked: what the runner does, printing to e.
func (o runOptions) plan(e env, argv []string) (runner.Plan, error) {
	p := runner.Plan{Worker: o.worker, Jobs: o.jobs, Forever: o.forever, MaxTasks: o.maxTasks, Argv: argv,
		ChildStdout: e.stdout, Stderr: e.stderr, Describe: func(err error) string { return withAdvice(err, nil) }}
	if e.Output == "json" || e.Output == "tsv" {
		p.ChildStdout = e.stderr // run's stdout holds only its own lines
	}
	switch o.resultFrom {
	case "stdout":
		p.ResultFromStdout = true
	case "none":
	default:
		return p, usageErr("--result-from %q: give stdout (the child's stdout is the task's result) or none", o.resultFrom)
	}
	var err error
	if err := state.ValidateID("--worker", o.worker); err != nil {
		return p, usageErr("%v", err)
	}
	if p.Duration, err = api.ParseDuration("duration", o.duration); err != nil {
		return p, err
	}
	if p.Duration < 3*time.Millisecond {
		return p, usageErr("--duration %s is too short to extend: give at least 3ms (30s is usual)", o.duration)
	}
	if o.jobs < 1 {
		return p, usageErr("--jobs %d: give 1 or more children at once", o.jobs)
	}
	if o.maxTasks < 0 {
		return p, usageErr("--max-tasks %d must not be negative", o.maxTasks)
	}
	if p.Wait, err = api.ParseDuration("wait", o.wait); err != nil {
		return p, err
	}
	if p.Wait < 0 {
		return p, usageErr("--wait %s is negative: give a duration of 0 or more (how long to wait for a task when none is ready)", o.wait)
	}
	if o.forever && p.Wait > 0 {
		return p, usageErr("give --wait or --forever, not both")
	}
	if p.Grace, err = api.ParseDuration("kill-grace", o.killGrace); err != nil {
		return p, err
	}
	if p.Queues, err = parseQueues(o.queues, o.queueSet); err != nil {
		return p, err
	}
	if p.Permanent, err = parseExitCodes(o.permanentExit); err != nil {
		return p, err
	}
	if err := e.needsWallClock("run"); err != nil {
		return p, err
	}
	if p.Self, err = os.Executable(); err != nil {
		return p, fmt.Errorf("finding this leasewal binary to supervise children: %w", err)
	}
	// a child's own commands reach the same WAL, or the same server with
	// the same token and certificates
	if e.Server == "" {
		walPath, err := filepath.Abs(e.WAL)
		if err != nil {
			return p, err
		}
		p.Where = []string{"LEASEWAL_WAL=" + walPath}
		return p, nil
	}
	p.Where = []string{"LEASEWAL_SERVER=" + e.Server}
	for name, file := range map[string]string{"LEASEWAL_TOKEN_FILE": e.TokenFile, "LEASEWAL_CA": e.CA} {
		if file == "" {
			continue
		}
		path, err := filepath.Abs(file)
		if err != nil {
			return p, err
		}
		p.Where = append(p.Where, name+"="+path)
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

func runRun(e env, o runOptions, argv []string) error {
	p, err := o.plan(e, argv)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	var svc api.Service
	if e.Server != "" {
		remote, err := e.client(true)
		if err != nil {
			return err
		}
		defer remote.CloseIdleConnections()
		svc = remote
	} else { // one handle for the runner's life: each turn reads only what was appended since the last
		local := service.New(service.Options{WAL: e.wal(), Resident: true, MaxRetries: e.MaxRetries})
		defer local.Close()
		svc = local
	}
	e.noteQueueTypos(svc, p.Queues) // run --forever would wait for ever on a typo
	c, err := runner.NewCoordinator(e.context(), svc, e.Actor)
	if err != nil {
		return err
	}
	out := bufio.NewWriter(e.stdout)
	if e.Output == "tsv" && !e.NoHeaders { // the header row even when nothing runs, as every TSV
		fmt.Fprintln(out, "TASK\tLEASE\tATTEMPT\tOUTCOME\tEXIT\tSECONDS")
	}
	p.Finished = func(line runner.Line) error {
		e.printRunLine(out, line)
		return out.Flush()
	}
	res, err := runner.Run(p, c, sigs)
	if err != nil {
		return err
	}
	if err := out.Flush(); err != nil && res.OutErr == nil {
		res.OutErr = err
	}
	switch {
	case res.Stopped == syscall.SIGINT:
		return &exitStatus{code: 130}
	case res.Stopped != nil:
		return &exitStatus{code: 143}
	case res.OutErr != nil && res.Leased > 0:
		return &answerLostError{first: 0, last: 0, hint: "'leasewal log --worker " + p.Worker + "' shows what this worker did", err: res.OutErr}
	case res.Leased == 0:
		if !e.noteMissingWAL() {
			fmt.Fprintf(e.stderr, "leasewal: run: no task was eligible%s; 'leasewal why T' says why a task waits\n", waitedFor(p))
		}
		return &exitStatus{code: ExitNotFound}
	case res.Unsettled > 0:
		fmt.Fprintf(e.stderr, "leasewal: run: %d of %d leases ended LOST or CANCELLED: their tasks were not settled by this worker\n", res.Unsettled, res.Leased)
		return &exitStatus{code: ExitCancelled}
	case res.Failed > 0:
		fmt.Fprintf(e.stderr, "leasewal: run: %d of %d leases left their task FAILED; 'leasewal inspect --state FAILED' lists them, 'leasewal requeue' runs one again\n", res.Failed, res.Leased)
		return &exitStatus{code: ExitTasksFailed}
	}
	return nil
}

// waitedFor says how long run waited for a task, for its closing note.
func waitedFor(p runner.Plan) string {
	if p.Wait == 0 {
		return ""
	}
	return " in " + p.Wait.String()
}

// printRunLine prints a finished task's line as -o asks.
func (e env) printRunLine(w io.Writer, line runner.Line) {
	switch e.Output {
	case "json":
		b, _ := json.Marshal(line)
		w.Write(append(b, '\n'))
	case "tsv":
		exit := ""
		if line.Exit != nil {
			exit = strconv.Itoa(*line.Exit)
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%s\t%.3f\n", tsvCell(line.TaskID), tsvCell(line.LeaseID), line.Attempt, line.Outcome, exit, line.Seconds)
	default:
		exit := "-"
		if line.Exit != nil {
			exit = strconv.Itoa(*line.Exit)
		}
		// The outcome is padded before it is colored: a color's escape
		// bytes take no columns.
		outcome := palette{on: e.Color}.word(line.Outcome) + strings.Repeat(" ", max(0, 9-len(line.Outcome)))
		fmt.Fprintf(w, "%-8s %-8s attempt %-3d %s exit %-4s %7.2fs\n", escape(line.TaskID), escape(line.LeaseID), line.Attempt,
			outcome, exit, line.Seconds)
	}
}

// parseQueues reads a --queue list ("" and not given: every queue).
func parseQueues(list string, given bool) ([]string, error) {
	if list == "" && given { // an unset variable in --queue "$Q" must not mean every queue
		return nil, usageErr("--queue is empty: name one or more queues, or leave --queue out to take from every queue")
	}
	return service.Queues(api.List(list))
}
