// Command leasewal is a task-lease coordinator whose only source of truth is
// one append-only write-ahead log file.
package main

import (
	"os"
	_ "time/tzdata" // schedules' time zones on a machine without zone data

	"github.com/leasewal/leasewal/cmd"
)

func main() {
	growStack(0)
	cmd.TuneGC()
	os.Exit(cmd.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// growStack gives the main goroutine at once the stack a command's calls
// reach (cobra, the store, bbolt, tablewriter: under 64 KiB). Grown by
// doubling as the calls went deeper, the stack was copied at each step, the
// runtime looking up the layout of every frame on it: a one-shot `submit` or
// `lease` took 4 % less time without those copies. A frame this size makes
// the runtime grow the stack here, where there is little to copy.
//
//go:noinline
func growStack(i int) byte {
	var frame [48 << 10]byte
	return frame[i]
}
