// Package runner holds what runs a task's command for 'leasewal run': the
// per-child supervisor, which makes sure nothing a task started outlives the
// task or its runner.
package runner

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// SuperviseArg, as the first argument, runs leasewal as the supervisor of one
// child of 'run': leasewal __supervise GRACE_MS CMD [ARG...].
//
// Why a supervisor: a child must die with its runner, grandchildren included
// (sh -c 'a | b'). Pdeathsig alone does not do it: it reaches only the direct
// child, and fires when the forking thread exits, not the process (Go issue
// 27505). So the runner starts this tiny process with Pdeathsig=SIGTERM from
// a thread that lives as long as the runner; it puts the child in a process
// group of its own, and when the runner dies (or asks, with SIGTERM) it sends
// the whole group SIGTERM, then SIGKILL after the grace. When the child exits
// it clears the group too, so nothing a task started outlives the task.
//
// A descendant that left the group (setsid, setpgid) escapes a group kill.
// So the supervisor is a child subreaper: such a descendant, orphaned, is
// re-parented to it rather than to init, and once the child has ended it
// kills and reaps every process re-parented to it until none is left. What
// still escapes is a descendant whose parent outlives the supervisor itself
// (a SIGKILLed supervisor, or a double fork after it ended): that needs a
// cgroup, which leasewal does not use.
//
// It reports on file descriptor 3, one line each: "pid N" once the child is
// started, then "exit N", "signal NAME" or "cannot-start ERROR".
const SuperviseArg = "__supervise"

// Supervise is the supervisor's main: args are GRACE_MS CMD [ARG...]; it
// returns the process's exit code (0 once it has reported the child's end).
func Supervise(args []string) int {
	status := os.NewFile(3, "status")
	report := func(format string, a ...any) { fmt.Fprintf(status, format+"\n", a...) }
	if len(args) < 2 {
		report("cannot-start supervisor: no command")
		return 2
	}
	graceMs, err := strconv.Atoi(args[0])
	if err != nil {
		report("cannot-start supervisor: bad grace %q", args[0])
		return 2
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	runtime.LockOSThread() // the child's Pdeathsig is tied to this thread: keep it
	// A subreaper that cannot be had leaves only the group kill; the task
	// runs all the same.
	_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	child := exec.Command(args[1], args[2:]...)
	child.Stdin, child.Stdout, child.Stderr = os.Stdin, os.Stdout, os.Stderr
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := child.Start(); err != nil {
		report("cannot-start %v", err)
		return 127
	}
	pgid := child.Process.Pid
	report("pid %d", pgid)
	done := make(chan *os.ProcessState, 1)
	go func() {
		_ = child.Wait()
		done <- child.ProcessState
	}()
	var ps *os.ProcessState
	select {
	case ps = <-done:
	case <-sigs:
		_ = unix.Kill(-pgid, unix.SIGTERM)
		grace := time.NewTimer(time.Duration(graceMs) * time.Millisecond)
		select {
		case ps = <-done:
		case <-grace.C:
			_ = unix.Kill(-pgid, unix.SIGKILL)
			ps = <-done
		case <-sigs: // a second request: at once
			_ = unix.Kill(-pgid, unix.SIGKILL)
			ps = <-done
		}
	}
	_ = unix.Kill(-pgid, unix.SIGKILL) // what the child started and left behind
	killAdopted()
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		report("signal %s", unix.SignalName(ws.Signal()))
		return 0
	}
	report("exit %d", ps.ExitCode())
	return 0
}

// killAdopted kills and reaps every process re-parented to this subreaper,
// and those their deaths re-parent in turn, until it has no child left.
// The child itself has been reaped already, so nothing here takes its
// status.
func killAdopted() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		switch {
		case errors.Is(err, unix.EINTR) || (err == nil && pid > 0): // one reaped: look again
			continue
		case err != nil: // ECHILD: none left (most tasks leave none: no scan of /proc)
			return
		}
		for _, pid := range childrenOf(os.Getpid()) { // alive: kill them, then wait for one
			_ = unix.Kill(pid, unix.SIGKILL)
		}
		if _, err := unix.Wait4(-1, &ws, 0, nil); err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var children []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			children = append(children, child)
		}
	}
	return children
}
