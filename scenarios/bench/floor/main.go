// Command floor is the benchmark's floor: a program that links the four
// packages leasewal is built on (cobra, viper, tablewriter, color). Without
// arguments it does nothing: no leasewal command can start faster. Given a
// file it also does the I/O every leasewal write does at least (open, lock,
// read the file, append a line, fsync), so no write command can be faster.
// With -table N it has tablewriter alone stream N rows of ten columns, shaped
// like inspect's, to stdout: the floor of a table of N tasks.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"

	_ "github.com/fatih/color"
	"github.com/olekukonko/tablewriter"
	"github.com/olekukonko/tablewriter/tw"
	_ "github.com/spf13/cobra"
	_ "github.com/spf13/viper"
	"golang.org/x/sys/unix"
)

func main() {
	if len(os.Args) < 2 {
		return
	}
	if os.Args[1] == "-table" && len(os.Args) == 3 {
		rows, err := strconv.Atoi(os.Args[2])
		if err == nil {
			err = streamTable(rows)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "floor:", err)
			os.Exit(1)
		}
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

func streamTable(rows int) error {
	out := bufio.NewWriter(os.Stdout)
	// Widths fixed as a stream needs them (it cannot measure rows it has
	// not seen), wide enough that no cell wraps.
	widths := tw.Mapper[int, int]{0: 10, 1: 11, 2: 5, 3: 10, 4: 11, 5: 8, 6: 8, 7: 10, 8: 9, 9: 22}
	t := tablewriter.NewTable(out, tablewriter.WithStreaming(tw.StreamConfig{Enable: true}), tablewriter.WithColumnWidths(widths))
	if err := t.Start(); err != nil {
		return err
	}
	t.Header("TASK", "STATE", "TRY", "LEASE", "WORKER", "EXPIRY", "READY", "DEADLINE", "QUEUE", "REASON")
	for i := range rows {
		id := strconv.Itoa(i + 1)
		if err := t.Append("T"+id, "COMPLETED", "1/3", "L"+id, "worker-"+strconv.Itoa(i%16), "", "3h ago", "2h ago", "default", "attempt "+id+" failed"); err != nil {
			return err
		}
	}
	if err := t.Close(); err != nil {
		return err
	}
	return out.Flush()
}
