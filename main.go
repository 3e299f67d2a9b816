// Command leasewal is a task-lease coordinator whose only source of truth is
// one append-only write-ahead log file.
package main

import (
	"os"
	_ "time/tzdata" // schedules' time zones on a machine without zone data

	"github.com/leasewal/leasewal/cmd"
)

func main() {
	cmd.TuneGC()
	os.Exit(cmd.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
