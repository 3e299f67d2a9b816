// Package scenarios runs leasewal end to end: the shell stories in this
// folder and the process-level crash and concurrency tests, all against one
// freshly built binary.
package scenarios

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/leasewal/leasewal/internal/testwait"
)

// binDir holds the leasewal binary built for this test run.
var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "leasewal-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "leasewal"), "..")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building leasewal: %v\n%s", err, out)
		os.Exit(1)
	}
	binDir = dir
	code := testwait.WaitBound{M: m, N: 4}.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func binary() string { return filepath.Join(binDir, "leasewal") }

// run runs leasewal with extra environment and returns its exit code (-9 when
// SIGKILLed), stdout and stderr.
func run(t *testing.T, walPath string, env []string, args ...string) (int, string, string) {
	t.Helper()
	return runProgram(t, binary(), walPath, env, args...)
}

// runProgram is run of another program (a shell that runs leasewal).
func runProgram(t *testing.T, program, walPath string, env []string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(program, args...)
	cmd.Env = append(os.Environ(), append([]string{"LEASEWAL_WAL=" + walPath, "LEASEWAL_ACTOR=crash", "NO_COLOR=1", "LEASEWAL_FAILPOINT="}, env...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &exit):
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return -int(ws.Signal()), out.String(), errOut.String()
		}
		return exit.ExitCode(), out.String(), errOut.String()
	}
	t.Fatalf("running leasewal: %v", err)
	return 0, "", ""
}
