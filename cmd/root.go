// Package cmd is leasewal's command line: flags and configuration, verbs and
// the exit-code contract. Each verb is a file with an options struct and a
// run function that returns an answer; the unit of work is package store, the
// rules package state, the drawing of tables render.go and its neighbours.
package cmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/signal"
	"os/user"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/spf13/viper"
	"go.yaml.in/yaml/v3"

	"github.com/leasewal/leasewal/api"
	"github.com/leasewal/leasewal/client"
	"github.com/leasewal/leasewal/internal/runner"
	"github.com/leasewal/leasewal/internal/service"
	"github.com/leasewal/leasewal/internal/trace"
)

// Config is the resolved global configuration (flag > env > file > default).
// It is read once, before a verb runs, and passed by value from then on.
type Config struct {
	WAL         string
	Output      string // table, wide, json or tsv
	NoHeaders   bool
	Color       bool
	LockTimeout time.Duration
	Actor       string
	Now         string // --now or LEASEWAL_NOW, unparsed: it is read against the WAL's last record
	Fault       *service.Fault
	MaxRetries  int    // worklease fail's --max-retries, which the config file may set too
	Server      string // --server: the commands go to these servers
	TokenFile   string
	CA          string // --ca: the certificates that sign an https server's, instead of the system's
	// TestClock is LEASEWAL_TEST_CLOCK: a file whose content moves this
	// process's wall clock (a test's hook, honoured beside LEASEWAL_TESTING=1).
	TestClock string
}

// env is what a verb runs with: the configuration and the process's streams.
type env struct {
	Config
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
}

// context is the context of this invocation's operations: a command line
// has no caller that could go away.
func (e env) context() context.Context { return context.Background() }

// sayWALMissing is the note for a read of a WAL that does not exist, most
// often a mistyped --wal.
func (e env) sayWALMissing() {
	fmt.Fprintf(e.stderr, "leasewal: note: the WAL %s does not exist yet: nothing was ever submitted there (check --wal)\n", e.WAL)
}

// noteMissingWAL says so when the local WAL does not exist, and reports
// whether it said so.
func (e env) noteMissingWAL() bool {
	if e.Server != "" {
		return false
	}
	switch info, err := os.Stat(e.WAL); {
	case errors.Is(err, fs.ErrNotExist):
		e.sayWALMissing()
	case err == nil && info.Mode().IsRegular() && info.Size() == 0:
		fmt.Fprintf(e.stderr, "leasewal: note: the WAL %s is empty: nothing was ever submitted there (check --wal)\n", e.WAL)
	default:
		return false
	}
	return true
}

// app is the command tree's shared shell: cobra's closures reach the
// configuration through it once it is resolved.
type app struct {
	v    *viper.Viper
	root *cobra.Command
	env  env
	noColor,
	resolved bool
	configFile string
	args       []string
}

// Main runs leasewal with args and returns the process exit code. It never
// calls os.Exit, so deferred syncs and closes run.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == runner.SuperviseArg {
		return runner.Supervise(args[1:])
	}
	// A closed stdout must be an error from write (exit 8 after a recorded
	// operation), not a silent death by SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	a := &app{v: viper.New(), args: args, env: env{stdin: stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv}}
	a.root = a.newRoot()
	a.root.SetArgs(args)
	a.root.SetIn(stdin)
	a.root.SetOut(stdout)
	a.root.SetErr(stderr)
	return a.finish(a.root.ExecuteC())
}

// Help lists commands in the order of a task's life, not alphabetically.
// It is cobra's global, set once: tests build many command trees at once.
func init() { cobra.EnableCommandSorting = false }

// TuneGC lets the collector run less often than Go's default: a command is a
// short-lived process whose heap is mostly the replayed state, all of it live.
// A soft memory limit keeps the peak bounded on a very large WAL: 192 MiB,
// which with the mapped pages of the index a command reads
// (about 100 MB on the first command over two million waiting tasks) keeps
// a command under 300 MB (220 MiB let that one reach 320 MB; the time was
// the same). GOGC and GOMEMLIMIT, when set, win. It is the process's to call
// (main), not Main's: tests that run many commands at once in one process
// would share the limit, and the collector would run without end near it.
func TuneGC() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(softLimit)
		followLiveHeap()
	}
}

const softLimit = 192 << 20

// followLiveHeap sets the soft limit again after each collection
// (limitFor). Under a limit below what is live, the collector runs again as
// soon as it ends, for as long as that lasts: a batch of 100,000 tasks holds
// about 300 MB while it is decided, and took 1.9 times as long under the
// bare limit.
func followLiveHeap() {
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	var arm func()
	arm = func() {
		runtime.AddCleanup(new([32]byte), func(struct{}) { // runs once a collection has found it unreachable
			metrics.Read(live)
			if live[0].Value.Kind() == metrics.KindUint64 {
				debug.SetMemoryLimit(limitFor(live[0].Value.Uint64()))
				if floor := heapFloor.Load(); floor > 0 {
					debug.SetGCPercent(percentFor(live[0].Value.Uint64(), floor))
				}
			}
			arm()
		}, struct{}{})
	}
	arm()
}

// heapFloor, when set (by serve, to serveHeapFloor), is the heap the
// collector lets grow before it runs again, whatever is live: a server's
// live heap is a few MB, and at GOGC 100 it collected 76 times a second
// answering 32 clients (a tenth of its CPU).
var heapFloor atomic.Uint64

const serveHeapFloor = 32 << 20

// percentFor is the GOGC after a collection that found live bytes live:
// 100, or more so that the heap may grow to floor first.
func percentFor(live, floor uint64) int {
	if live == 0 || floor <= 2*live {
		return 100
	}
	return int(min(floor/live, 1<<20))*100 - 100
}

// limitFor is the soft limit after a collection that found live bytes
// live: the heap may grow by as much as is live before the next (as at
// GOGC 100), and to softLimit in any case. Growing by half of it, a batch
// of 100,000 tasks took 1.3 times as long, for a tenth less memory.
func limitFor(live uint64) int64 {
	return max(softLimit, int64(min(live, math.MaxInt64/2)*2))
}

func (a *app) newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:   "leasewal",
		Short: "Hand tasks to workers under leases, from a shell",
		Long: `leasewal hands tasks to workers under leases. The tasks live in one file, the
task log (--wal, or LEASEWAL_WAL; created by the first submit), which survives
any crash: each command does one thing, prints what happened and exits, so a
shell script drives it, and any number may run at once. A worker is one line:
'leasewal run --worker W1 -- ./job.sh'. Workers on other machines use
'leasewal serve'. How it works: docs/ in the source.`,
		Version:                    build().Version,
		SilenceErrors:              true,
		SilenceUsage:               true,
		SuggestionsMinimumDistance: 2,
		Args:                       cobra.ArbitraryArgs, // an unknown command reaches RunE, which says so
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return c.Help()
			}
			return unknownCommand(c, args)
		},
		PersistentPreRunE: func(c *cobra.Command, args []string) error {
			// cobra checks required flags only after this hook; check them
			// first so that a missing one is reported as bad usage (exit 2).
			if err := missingFlags(c); err != nil {
				return err
			}
			if err := emptyArg(c, args); err != nil {
				return err
			}
			if err := a.resolve(); err != nil {
				return err
			}
			if a.env.Output == "prom" && c.CommandPath() != "leasewal stats" {
				return usageErr("-o prom is the Prometheus text format of 'leasewal stats'; give table, wide, json or tsv")
			}
			switch report := c.CommandPath() == "leasewal report"; {
			case a.env.Output == "html" && !report:
				return usageErr("-o html goes with 'leasewal report', which writes only that: 'leasewal report > report.html'")
			case report && a.env.Output != "html" && a.env.Output != "table":
				return usageErr("'leasewal report' writes one HTML page, not -o %s: 'leasewal report > report.html'", a.env.Output)
			}
			// serve is the server; run is a client of its own (runcoord.go)
			if a.env.Server != "" && c.Name() != "serve" && c.CommandPath() != "leasewal run" && !strings.HasPrefix(c.CommandPath(), "leasewal cluster") {
				return a.remote(c)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if word, ok := a.unknownSubcommand(c); ok {
			return unknownCommand(c, []string{word})
		}
		var invalid *pflag.InvalidValueError
		if errors.As(err, &invalid) { // pflag's own message ends in strconv's
			return usageErr("--%s %q is not %s; see '%s --help'", invalid.GetFlag().Name, invalid.GetValue(), valueKind(invalid.GetFlag().Value.Type()), c.CommandPath())
		}
		return usageErr("%v; see '%s --help'", err, c.CommandPath())
	})
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Args:  cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			target, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return unknownCommand(target, rest)
			}
			return target.Help()
		},
	})
	pf := root.PersistentFlags()
	pf.String("wal", "leasewal.wal", "the WAL file (env LEASEWAL_WAL); created on the first write")
	pf.String("now", "", "logical time: RFC 3339, unix ms, or +DURATION after the last record (env LEASEWAL_NOW; default: the wall clock)")
	pf.StringP("output", "o", "table", "table (fitted to the terminal), wide (every cell whole), json, or tsv (env LEASEWAL_OUTPUT)")
	pf.BoolVar(&a.env.NoHeaders, "no-headers", false, "no header row in table and tsv output")
	pf.BoolVar(&a.noColor, "no-color", false, "plain text (also when NO_COLOR is set or stdout is not a terminal)")
	pf.StringVar(&a.configFile, "config", "", "YAML config file (env LEASEWAL_CONFIG; default ./leasewal.yaml if present)")
	pf.String("lock-timeout", "10s", "how long to wait for the WAL lock (env LEASEWAL_LOCK_TIMEOUT)")
	pf.String("actor", "", "who is acting, recorded for audit only (env LEASEWAL_ACTOR; default user@host:pid)")
	pf.String("server", "", "send the command to 'leasewal serve' at this URL (a comma-separated list is tried in order; env LEASEWAL_SERVER)")
	pf.String("token-file", "", "the bearer token for --server (env LEASEWAL_TOKEN_FILE)")
	pf.String("ca", "", "PEM certificates to trust for an https --server, instead of the system's (env LEASEWAL_CA)")
	for key, flag := range map[string]string{"wal": "wal", "output": "output", "lock_timeout": "lock-timeout", "actor": "actor", "now": "now", "server": "server", "token_file": "token-file", "ca": "ca"} {
		_ = a.v.BindPFlag(key, pf.Lookup(flag)) // the flags exist: a failure here is impossible
	}
	a.v.SetEnvPrefix("LEASEWAL")
	a.v.SetEnvKeyReplacer(strings.NewReplacer("-", "_", ".", "_"))
	a.v.AutomaticEnv()

	run := a.commandRun(pf)
	for _, c := range commands {
		if run == "" || c.name == run {
			root.AddCommand(c.build(a))
		}
	}
	a.registerCompletions(root)
	// cobra adds 'completion' at run time; made now, it takes an unknown
	// shell as every command group takes an unknown command: exit 2.
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if c.Name() == "completion" {
			c.Args, c.RunE = cobra.ArbitraryArgs, unknownCommand
		}
	}
	root.SetVersionTemplate(build().text()) // --version says what 'leasewal version' says
	return root
}

// commands are leasewal's commands, in the order help lists them (a
// task's life), by name.
var commands = []struct {
	name  string
	build func(*app) *cobra.Command
}{
	{"submit", (*app).newSubmitCmd}, {"lease", (*app).newLeaseCmd}, {"extend", (*app).newExtendCmd}, {"heartbeat", (*app).newHeartbeatCmd},
	{"complete", (*app).newCompleteCmd}, {"fail", (*app).newFailCmd}, {"release", (*app).newReleaseCmd}, {"expire", (*app).newExpireCmd},
	{"abort", (*app).newAbortCmd}, {"redact", (*app).newRedactCmd}, {"requeue", (*app).newRequeueCmd}, {"queue", (*app).newQueueCmd},
	{"pause", (*app).newPauseCmd}, {"resume", (*app).newResumeCmd}, {"schedule", (*app).newScheduleCmd}, {"why", (*app).newWhyCmd},
	{"wait", (*app).newWaitCmd}, {"run", (*app).newRunCmd}, {"serve", (*app).newServeCmd}, {"cluster", (*app).newClusterCmd},
	{"inspect", (*app).newInspectCmd}, {"log", (*app).newLogCmd}, {"report", (*app).newReportCmd}, {"verify", (*app).newVerifyCmd},
	{"stats", (*app).newStatsCmd}, {"repair", (*app).newRepairCmd}, {"reindex", (*app).newReindexCmd}, {"backup", (*app).newBackupCmd},
	{"compact", (*app).newCompactCmd}, {"worklease", (*app).newWorkleaseCmd}, {"version", (*app).newVersionCmd},
}

// commandRun is the command a.args run, past the root's flags, when they
// name one: only it is built, since building all of them and their flags
// took 0.16-0.28 ms, a twentieth of a one-shot command. "" (no command,
// help, completion, a name that is none: its suggestions) builds them all.
func (a *app) commandRun(persistent *pflag.FlagSet) string {
	fs := pflag.NewFlagSet("leasewal", pflag.ContinueOnError)
	fs.SetInterspersed(false)                   // stop at the command's name
	fs.ParseErrorsAllowlist.UnknownFlags = true // --help, -v, and a command's flags given before it
	fs.SetOutput(io.Discard)
	persistent.VisitAll(func(f *pflag.Flag) { // their kinds only: the root's own values are cobra's to set
		if f.Value.Type() == "bool" {
			fs.BoolP(f.Name, f.Shorthand, false, "")
		} else {
			fs.StringP(f.Name, f.Shorthand, "", "")
		}
	})
	if fs.Parse(a.args) != nil || fs.NArg() == 0 {
		return ""
	}
	for _, c := range commands {
		if c.name == fs.Arg(0) {
			return c.name
		}
	}
	return ""
}

// unknownCommand is the RunE of the root and of every command group: a
// group run without a subcommand, or with one that does not exist, is bad
// usage (exit 2) with a suggestion, never help with exit 0.
func unknownCommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		var subs []string
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() {
				subs = append(subs, sub.Name())
			}
		}
		return usageErr("'%s' needs a command: one of %s; see '%s --help'", c.CommandPath(), strings.Join(subs, ", "), c.CommandPath())
	}
	for _, sub := range c.Commands() {
		if sub.Name() == args[0] { // cobra dispatches a command's name unless '--' came before it
			return usageErr("%q comes after '--', which makes it an argument, not a command: give the command first, as '%s %s'", args[0], c.CommandPath(), args[0])
		}
	}
	msg := fmt.Sprintf("unknown command %q for '%s'", args[0], c.CommandPath())
	c.SuggestionsMinimumDistance = 2
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usageErr("%s; see '%s --help'", msg, c.CommandPath())
}

// missingFlags refuses a command run without one of its required flags,
// naming the first and what it is for (cobra checks them only after the
// pre-run hook, and names them all in its own words).
func missingFlags(c *cobra.Command) error {
	var missing *pflag.Flag
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if req := f.Annotations[cobra.BashCompOneRequiredFlag]; missing == nil && len(req) > 0 && req[0] == "true" && !f.Changed {
			missing = f
		}
	})
	if missing == nil {
		return nil
	}
	return usageErr("--%s is missing: %s; see '%s --help'", missing.Name, missing.Usage, c.CommandPath())
}

// emptyArg refuses an empty argument (no task, queue, name or file is
// ever ""), naming it as the usage line does; what follows "--" (the
// command run runs) is passed on as given, and so is the word a shell's
// completion asks about.
func emptyArg(c *cobra.Command, args []string) error {
	if c.Name() == cobra.ShellCompRequestCmd || c.Name() == cobra.ShellCompNoDescRequestCmd {
		return nil
	}
	if dash := c.ArgsLenAtDash(); dash >= 0 {
		args = args[:dash]
	}
	i := slices.Index(args, "")
	if i < 0 {
		return nil
	}
	name := fmt.Sprintf("argument %d", i+1)
	if names := positionals(c); len(names) > 0 {
		name = names[min(i, len(names)-1)] // past the last: more of it (TASK...)
	}
	return usageErr("%s is empty: give one; see '%s --help'", name, c.CommandPath())
}

// positionals are the names of a command's arguments, from its usage line
// ("pause QUEUE [--for D]": QUEUE).
func positionals(c *cobra.Command) []string {
	var names []string
	flagValue := false
	for _, word := range strings.Fields(c.Use)[1:] {
		word = strings.TrimLeft(word, "[(")
		isFlag := strings.HasPrefix(word, "-")
		word, _, _ = strings.Cut(strings.TrimRight(word, "]).,"), "|") // RATE|none
		if !isFlag && !flagValue && word != "" && word == strings.ToUpper(word) {
			names = append(names, word)
		}
		flagValue = isFlag
	}
	return names
}

// valueKind names what a flag of a pflag value type takes, for a person.
func valueKind(typ string) string {
	switch {
	case strings.HasPrefix(typ, "int"), strings.HasPrefix(typ, "uint"):
		return "a whole number (such as 5)"
	case typ == "bool":
		return "true or false"
	case strings.HasPrefix(typ, "float"):
		return "a number (such as 0.5)"
	}
	return "a valid " + typ
}

// unknownSubcommand is the word standing where c, a command with
// subcommands, expects one, when a flag failed to parse: a mistyped command
// followed by its flags fails on the first flag, yet the typo is what to
// report.
func (a *app) unknownSubcommand(c *cobra.Command) (string, bool) {
	if !c.HasAvailableSubCommands() {
		return "", false
	}
	fs := pflag.NewFlagSet("", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard)
	fs.AddFlagSet(c.Flags())
	fs.AddFlagSet(c.InheritedFlags())
	if fs.Parse(a.args) != nil {
		return "", false
	}
	words := fs.Args()
	depth := len(strings.Fields(c.CommandPath())) - 1 // the words naming c, below the root
	if len(words) <= depth {
		return "", false
	}
	return words[depth], true
}

// The configuration keys a file may set, and the sections holding keys.
var configKeys = map[string]bool{"wal": true, "output": true, "lock_timeout": true, "actor": true, "worklease.max_retries": true,
	"server": true, "token_file": true, "ca": true}

// resolve reads the configuration once flags are parsed.
func (a *app) resolve() error {
	if a.resolved {
		return nil
	}
	configDir, err := a.readConfig()
	if err != nil {
		return err
	}
	c := &a.env.Config
	c.WAL = a.v.GetString("wal")
	if c.WAL == "" {
		return usageErr("--wal must name a file")
	}
	if configDir != "" && a.v.InConfig("wal") && !a.root.PersistentFlags().Changed("wal") && a.env.getenv("LEASEWAL_WAL") == "" && !filepath.IsAbs(c.WAL) {
		c.WAL = filepath.Join(configDir, c.WAL) // a path in a config file is relative to the file
	}
	c.Output = strings.ToLower(a.v.GetString("output"))
	switch c.Output {
	case "table", "wide", "json", "tsv", "prom", "html":
	default:
		return usageErr("--output must be table, wide, json or tsv (or prom, for stats; html, for report), got %q", c.Output)
	}
	timeout, err := api.ParseSpan(strings.TrimSpace(a.v.GetString("lock_timeout")))
	if err != nil || timeout < 0 {
		return usageErr("--lock-timeout (or LEASEWAL_LOCK_TIMEOUT, or lock_timeout in the config file) must be a duration such as 10s, got %q", a.v.GetString("lock_timeout"))
	}
	c.LockTimeout = timeout
	c.Actor = a.v.GetString("actor")
	if c.Actor == "" {
		c.Actor = defaultActor()
	}
	c.Now = a.v.GetString("now")
	c.Server, c.TokenFile, c.CA = a.v.GetString("server"), a.v.GetString("token_file"), a.v.GetString("ca")
	if err := checkServerURLs(c.Server); err != nil {
		return err
	}
	if c.MaxRetries, err = a.intSetting("worklease.max_retries", 3); err != nil {
		return err
	}
	if c.TestClock = a.env.getenv("LEASEWAL_TEST_CLOCK"); c.TestClock != "" && a.env.getenv("LEASEWAL_TESTING") != "1" {
		return usageErr("LEASEWAL_TEST_CLOCK is a hook for tests and is honoured only beside LEASEWAL_TESTING=1: unset it")
	}
	if spec := a.env.getenv("LEASEWAL_FAILPOINT"); spec != "" {
		if c.Fault, err = service.ParseFault(spec); err != nil {
			return usageErr("LEASEWAL_FAILPOINT: %v", err)
		}
	}
	c.Color = !a.noColor && a.env.getenv("NO_COLOR") == "" && isTerminal(a.env.stdout)
	a.resolved = true
	return nil
}

// checkServerURLs refuses a --server entry that is not an http(s) URL
// with a host; the most common slip, host:port without a scheme, is named.
func checkServerURLs(list string) error {
	if list == "" {
		return nil
	}
	for _, entry := range strings.Split(list, ",") {
		var bad *client.BadURLError
		if !errors.As(client.CheckURL(entry), &bad) {
			continue
		}
		hint := "give URLs such as http://127.0.0.1:7431, comma-separated"
		if bad.NoScheme {
			hint = "add the scheme: --server http://" + bad.URL
		}
		return usageErr("--server (or LEASEWAL_SERVER) %q is not an http or https URL; %s", bad.URL, hint)
	}
	return nil
}

// intSetting reads a whole number from flag, env or file, refusing anything
// that is not one: "3x" is an error, never 0.
func (a *app) intSetting(key string, def int) (int, error) {
	if !a.v.IsSet(key) {
		return def, nil
	}
	text := strings.TrimSpace(a.v.GetString(key))
	n, err := strconv.Atoi(text)
	if err != nil {
		env := "LEASEWAL_" + strings.ToUpper(strings.NewReplacer(".", "_").Replace(key))
		return 0, usageErr("%s must be a whole number, got %q (from --%s, %s or the config file)", key, text, strings.ReplaceAll(key[strings.LastIndex(key, ".")+1:], "_", "-"), env)
	}
	return n, nil
}

// readConfig reads the config file, if any, and returns its directory.
func (a *app) readConfig() (string, error) {
	path := a.configFile
	if path == "" {
		path = a.env.getenv("LEASEWAL_CONFIG")
	}
	if path == "" {
		path = "leasewal.yaml"
		if _, err := os.Stat(path); err != nil {
			return "", nil
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", usageErr("cannot read config file %s: %v; fix it or point --config elsewhere", path, unwrapPathErr(err))
	}
	var doc map[string]any
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return "", usageErr("cannot read config file %s: it is not YAML (%v); fix it or point --config elsewhere", path, err)
	}
	if bad := unknownKeys(doc, ""); len(bad) > 0 {
		return "", usageErr("config file %s: unknown key %q; the keys are wal, output, lock_timeout, actor, server, token_file and worklease.max_retries", path, bad[0])
	}
	a.v.SetConfigFile(path)
	a.v.SetConfigType("yaml")
	if err := a.v.ReadInConfig(); err != nil {
		return "", usageErr("cannot read config file %s: %v; fix it or point --config elsewhere", path, err)
	}
	return filepath.Dir(path), nil
}

// unknownKeys lists the keys of doc (dotted below prefix) that are not configuration keys.
func unknownKeys(doc map[string]any, prefix string) []string {
	var bad []string
	for k, v := range doc {
		key := prefix + strings.ToLower(k)
		if sub, ok := v.(map[string]any); ok && !configKeys[key] {
			bad = append(bad, unknownKeys(sub, key+".")...)
			continue
		}
		if !configKeys[key] {
			bad = append(bad, key)
		}
	}
	return bad
}

// defaultActor is user@host:pid; the user is $USER, else $LOGNAME (cron
// sets only that), else looked up by uid (reading /etc/passwd: 0.07 ms).
func defaultActor() string {
	name := cmp.Or(os.Getenv("USER"), os.Getenv("LOGNAME"))
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		} else {
			name = "uid" + strconv.Itoa(os.Getuid())
		}
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return fmt.Sprintf("%s@%s:%d", name, host, os.Getpid())
}

// exitStatus is a command's normal answer with a non-zero exit code
// (CANCELLED, EMPTY), already printed.
type exitStatus struct{ code int }

func (e *exitStatus) Error() string { return fmt.Sprintf("exit %d", e.code) }

// finish prints err (if any) in the chosen format and returns the exit code.
func (a *app) finish(cmd *cobra.Command, err error) int {
	if err == nil {
		return ExitOK
	}
	var st *exitStatus
	if errors.As(err, &st) {
		return st.code
	}
	var usage *api.UsageError
	if !a.resolved && !errors.As(err, &usage) {
		err = &api.UsageError{Msg: err.Error() + "; see 'leasewal --help'"}
	}
	c := classify(err)
	msg := withAdvice(err, cmd)
	view := errorView{Error: api.Error{Result: "ERROR", Kind: c.kind, Message: msg, Seq: c.seq}}
	var mm *trace.MismatchError
	if errors.As(err, &mm) { // every difference, one line each
		view.Mismatches = mm.Mismatches
		msg = fmt.Sprintf("%d %s against %s:", len(mm.Mismatches), api.Plural(len(mm.Mismatches), "difference", "differences"), mm.File)
		for _, m := range mm.Mismatches {
			msg += "\nleasewal: " + escape(m.String())
		}
	}
	fmt.Fprintf(a.env.stderr, "leasewal: %s\n", msg)
	if a.outputBeforeResolve() == "json" {
		writeJSON(a.env.stdout, view)
	}
	return c.code
}

// outputBeforeResolve is the output format even when flag parsing failed
// (an unknown flag or command): -o json wherever it stands, or the env.
func (a *app) outputBeforeResolve() string {
	if a.resolved {
		return a.env.Output
	}
	out := a.env.getenv("LEASEWAL_OUTPUT")
	fs := pflag.NewFlagSet("output", pflag.ContinueOnError)
	fs.ParseErrorsAllowlist.UnknownFlags = true
	fs.SetOutput(io.Discard)
	o := fs.StringP("output", "o", "", "")
	if fs.Parse(a.args) == nil && *o != "" {
		out = *o
	} else {
		for i, arg := range a.args { // a parse error stops pflag early: look for the flag by hand
			switch {
			case (arg == "-o" || arg == "--output") && i+1 < len(a.args):
				out = a.args[i+1]
			case strings.HasPrefix(arg, "--output="):
				out = arg[len("--output="):]
			case strings.HasPrefix(arg, "-o") && len(arg) > 2:
				out = strings.TrimPrefix(arg[2:], "=")
			}
		}
	}
	return strings.ToLower(out)
}

// version is this build's module version, its VCS revision when the build
// recorded one, and the Go release.
