// Command floor is the benchmark's floor: a program that links the four
// packages leasewal is built on (cobra, viper, tablewriter, color). Without
// arguments it does nothing: no leasewal command can start faster. Given a
// file it also does the I/O every leasewal write does at least (open, lock,
// read the file, append a line, fsync), so no write command can be faster.
package main

import (
	"fmt"
	"io"
	"os"

	_ "github.com/fatih/color"
	_ "github.com/olekukonko/tablewriter"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		return
	}
	if err := appendLine(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

func appendLine(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		return err
	}
	if _, err := io.Copy(io.Discard, f); err != nil {
		return err
	}
	if _, err := f.WriteString("a line as long as a record's frame, give or take: LeaseGranted T1 L1 W\n"); err != nil {
		return err
	}
	return f.Sync()
}
