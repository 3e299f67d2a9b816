// Package cmd is leasewal's command line: flags and configuration, the clock,
// output, and the exit-code contract. Each verb is a file with an options
// struct and a run function; the rules themselves live in package state.
package cmd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/viper"

	"leasewal/state"
	"leasewal/wal"
)

// Exit codes: the scripting contract of SPEC §4.
const (
	ExitOK        = 0
	ExitInternal  = 1
	ExitUsage     = 2
	ExitCancelled = 3
	ExitNotFound  = 4
	ExitDamaged   = 5
	ExitLocked    = 6
	ExitContract  = 7
)

// globals holds what every command shares: the resolved global flags and the
// process's streams.
type globals struct {
	v      *viper.Viper
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string

	walPath     string
	output      string
	color       bool
	lockTimeout time.Duration
	actor       string
	nowFlag     string
	configFile  string
	noColor     bool
	fault       *wal.Fault // LEASEWAL_FAILPOINT: set by crash tests only
	// onRecord, for the commands that read the records themselves (log,
	// inspect of one task, inspect --until), sees each record right after it
	// is applied in a full replay, with the state as of that record; it keeps
	// what it needs, so that no command holds every record in memory.
	// errStopReplay ends the replay there.
	onRecord   func(state.Record, *state.State) error
	fullReplay bool // the checkpoint was found damaged: replay the WAL from the start
	// resolved is set once flags and configuration are read: an error before
	// then (unknown command, missing required flag) is a usage error.
	resolved bool
}

// Main runs leasewal with args and returns the process exit code. It never
// calls os.Exit, so deferred syncs and closes run.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	tuneGC()
	g := &globals{v: viper.New(), stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	return g.finish(err)
}

// tuneGC lets the collector run less often than Go's default: a command is a
// short-lived process whose heap is mostly the replayed state, all of it live.
// A soft memory limit keeps the peak bounded on a very large WAL. GOGC and
// GOMEMLIMIT, when set, win.
func tuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(240 << 20)
	}
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "leasewal",
		Short: "A task-lease coordinator whose only truth is one append-only WAL file",
		Long: `leasewal hands tasks to workers under leases, one command per invocation.
Every invocation locks the WAL, replays it, decides one operation at --now,
appends one checksummed record with fsync, prints the outcome and exits.`,
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(c *cobra.Command, _ []string) error {
			// cobra checks required flags only after this hook; check them
			// first so that a missing one is reported as bad usage (exit 2).
			if err := c.ValidateRequiredFlags(); err != nil {
				return usageErr("%v; see 'leasewal %s --help'", err, c.Name())
			}
			return g.resolve()
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr("%v", err) })
	pf := root.PersistentFlags()
	pf.String("wal", "leasewal.wal", "the WAL file (env LEASEWAL_WAL); created on the first write")
	pf.StringVar(&g.nowFlag, "now", "", "logical time: RFC 3339, unix ms, or +DURATION after the last record (env LEASEWAL_NOW; default: the wall clock)")
	pf.StringP("output", "o", "table", "table or json (env LEASEWAL_OUTPUT)")
	pf.BoolVar(&g.noColor, "no-color", false, "plain text (also when NO_COLOR is set or stdout is not a terminal)")
	pf.StringVar(&g.configFile, "config", "", "YAML config file (env LEASEWAL_CONFIG; default ./leasewal.yaml if present)")
	pf.Duration("lock-timeout", 10*time.Second, "how long to wait for the WAL lock (env LEASEWAL_LOCK_TIMEOUT)")
	pf.String("actor", "", "who is acting, recorded for audit only (env LEASEWAL_ACTOR; default user@host:pid)")
	for key, flag := range map[string]string{"wal": "wal", "output": "output", "lock_timeout": "lock-timeout", "actor": "actor"} {
		_ = g.v.BindPFlag(key, pf.Lookup(flag)) // the flags exist: a failure here is impossible
	}
	g.v.SetEnvPrefix("LEASEWAL")
	g.v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	g.v.AutomaticEnv()

	// Help lists commands in the order of a task's life, not alphabetically.
	cobra.EnableCommandSorting = false
	root.AddCommand(
		newSubmitCmd(g), newLeaseCmd(g), newExtendCmd(g), newHeartbeatCmd(g),
		newCompleteCmd(g), newFailCmd(g), newExpireCmd(g),
		newInspectCmd(g), newLogCmd(g), newVerifyCmd(g), newRepairCmd(g),
		newWorkleaseCmd(g),
	)
	g.registerCompletions(root)
	return root
}

// resolve reads the configuration (flag > env > file > default) once flags are parsed.
func (g *globals) resolve() error {
	if err := g.readConfig(); err != nil {
		return err
	}
	g.walPath = g.v.GetString("wal")
	if g.walPath == "" {
		return usageErr("--wal must name a file")
	}
	g.output = strings.ToLower(g.v.GetString("output"))
	if g.output != "table" && g.output != "json" {
		return usageErr("--output must be table or json, got %q", g.output)
	}
	timeout, err := parseDurationSetting(g.v.GetString("lock_timeout"))
	if err != nil || timeout < 0 {
		return usageErr("--lock-timeout must be a duration such as 10s, got %q", g.v.GetString("lock_timeout"))
	}
	g.lockTimeout = timeout
	g.actor = g.v.GetString("actor")
	if g.actor == "" {
		g.actor = defaultActor()
	}
	if g.nowFlag == "" {
		g.nowFlag = g.getenv("LEASEWAL_NOW")
	}
	if spec := g.getenv("LEASEWAL_FAILPOINT"); spec != "" {
		if g.fault, err = wal.ParseFault(spec); err != nil {
			return usageErr("LEASEWAL_FAILPOINT: %v", err)
		}
	}
	g.color = !g.noColor && g.getenv("NO_COLOR") == "" && isTerminal(g.stdout)
	g.resolved = true
	return nil
}

func (g *globals) readConfig() error {
	path := g.configFile
	if path == "" {
		path = g.getenv("LEASEWAL_CONFIG")
	}
	explicit := path != ""
	if !explicit {
		path = "leasewal.yaml"
		if _, err := os.Stat(path); err != nil {
			return nil
		}
	}
	g.v.SetConfigFile(path)
	g.v.SetConfigType("yaml")
	if err := g.v.ReadInConfig(); err != nil {
		return usageErr("cannot read config file %s: %v; fix it or point --config elsewhere", path, err)
	}
	return nil
}

// parseDurationSetting accepts Go duration text; viper hands flags, env and
// file values over as strings alike.
func parseDurationSetting(s string) (time.Duration, error) {
	return time.ParseDuration(strings.TrimSpace(s))
}

func defaultActor() string {
	user := os.Getenv("USER")
	if user == "" {
		user = "unknown"
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return fmt.Sprintf("%s@%s:%d", user, host, os.Getpid())
}

// sidePath names a file kept beside the WAL.
func (g *globals) sidePath(suffix string) string {
	return filepath.Clean(g.walPath) + suffix
}

// outcomeExit is returned by a command whose normal answer carries a non-zero
// exit code (CANCELLED, EMPTY): the answer is already printed.
type outcomeExit struct{ code int }

func (e *outcomeExit) Error() string { return fmt.Sprintf("exit %d", e.code) }

// finish prints err (if any) in the chosen format and returns the exit code.
func (g *globals) finish(err error) int {
	if err == nil {
		return ExitOK
	}
	var oe *outcomeExit
	if errors.As(err, &oe) {
		return oe.code
	}
	if g.output == "" {
		g.output = strings.ToLower(g.v.GetString("output"))
	}
	var usage *usageError
	if !g.resolved && !errors.As(err, &usage) {
		err = &usageError{msg: err.Error() + "; see 'leasewal --help'"}
	}
	c := classify(err)
	msg := strings.ReplaceAll(err.Error(), "\n", " ")
	fmt.Fprintf(g.stderr, "leasewal: %s\n", msg)
	if g.output == "json" {
		writeJSON(g.stdout, errorView{Result: "ERROR", Error: c.kind, Message: msg, Seq: c.seq})
	}
	return c.code
}
