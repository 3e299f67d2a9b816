package cmd

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/leasewal/leasewal/internal/testwait"
	"github.com/leasewal/leasewal/state"
	"github.com/leasewal/leasewal/wal"
)

func TestMain(m *testing.M) {
	testscript.Main(testwait.WaitBound{M: m, N: 4}, map[string]func(){
		"leasewal": func() { os.Exit(Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr)) },
		// lw WANT ARGS...: run leasewal and succeed only if it exits with WANT,
		// so that scripts assert exact exit codes.
		"lw": func() {
			want, err := strconv.Atoi(os.Args[1])
			if err != nil {
				fmt.Fprintln(os.Stderr, "usage: lw WANT-EXIT-CODE ARGS...")
				os.Exit(2)
			}
			if got := Main(os.Args[2:], os.Stdin, os.Stdout, os.Stderr); got != want {
				fmt.Fprintf(os.Stderr, "lw: exit code %d, want %d\n", got, want)
				os.Exit(1)
			}
			os.Exit(0)
		},
	})
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:           "../testdata/script",
		UpdateScripts: os.Getenv("LEASEWAL_UPDATE_GOLDEN") == "1", // rewrites the files 'cmp stdout' compares with
		Setup: func(env *testscript.Env) error {
			env.Setenv("LEASEWAL_WAL", env.WorkDir+"/q.wal")
			env.Setenv("LEASEWAL_ACTOR", "tester")
			env.Setenv("NO_COLOR", "1")
			// the seed WALs and traces, for the trace script
			if err := os.Mkdir(filepath.Join(env.WorkDir, "seeds"), 0o755); err != nil {
				return err
			}
			for _, name := range []string{"lease_expiry.wal", "lease_expiry.trace.yaml", "happy_path.wal", "happy_path.trace.yaml"} {
				b, err := os.ReadFile(filepath.Join("..", "testdata", "seeds", name))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(env.WorkDir, "seeds", name), b, 0o644); err != nil {
					return err
				}
			}
			// one byte over the payload limit, for the bad-input scripts
			return os.WriteFile(filepath.Join(env.WorkDir, "oversized.txt"), bytes.Repeat([]byte("x"), state.MaxPayloadBytes+1), 0o644)
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"rawappend":  rawAppend,
			"appendtorn": appendTorn,
		},
	})
}

// rawappend FILE JSON: append JSON as a correctly checksummed frame, creating
// the WAL if needed, without any of leasewal's rules: for hand-made WALs.
func rawAppend(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 2 {
		ts.Fatalf("usage: rawappend FILE JSON")
	}
	path := ts.MkAbs(args[0])
	if _, err := os.Stat(path); os.IsNotExist(err) {
		l, err := wal.Create(path, []byte(args[1]), nil)
		ts.Check(err)
		ts.Check(l.Close())
		return
	}
	l, err := wal.OpenAt(path, wal.Write, time.Second, wal.Position{}, nil)
	ts.Check(err)
	_, err = l.Append([]byte(args[1]))
	ts.Check(err)
	ts.Check(l.Close())
}

// appendtorn FILE: append the first 21 bytes of a frame, as a crash in the
// middle of an append leaves them.
func appendTorn(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 1 {
		ts.Fatalf("usage: appendtorn FILE")
	}
	f, err := os.OpenFile(ts.MkAbs(args[0]), os.O_APPEND|os.O_WRONLY, 0)
	ts.Check(err)
	_, err = f.WriteString(`0badc0de {"seq":9,"ty`)
	ts.Check(err)
	ts.Check(f.Close())
}
