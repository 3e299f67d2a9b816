// Package scenarios runs leasewal end to end: the shell stories in this
// folder and the process-level crash and concurrency tests, all against one
// freshly built binary.
package scenarios

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
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
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func binary() string { return filepath.Join(binDir, "leasewal") }
