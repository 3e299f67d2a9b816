// Package testwait lets a test wait for the event it needs instead of
// sleeping and hoping: a condition polled until it holds, bounded only by a
// hang guard of minutes that says what it waited for and what it saw.
package testwait

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// HangGuard is how long a wait may last before it is taken for a hang. It is
// no deadline of what a test checks: a loaded machine may take any time below
// it.
const HangGuard = 5 * time.Minute

// Until polls cond until it holds. After the hang guard it fails the test
// with what it waited for and, when seen is not nil, what seen reports.
func Until(t testing.TB, what string, cond func() bool, seen func() string) {
	t.Helper()
	for guard := time.Now().Add(HangGuard); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(guard) {
			msg := fmt.Sprintf("hang guard: waited %s for %s", HangGuard, what)
			if seen != nil {
				msg += "; saw: " + seen()
			}
			t.Fatal(msg)
		}
	}
}

// LockWaiters is how many flock(2) calls are blocked on path's file now, as
// Linux's /proc/locks lists them (a waiter's line holds "->").
func LockWaiters(path string) (int, error) {
	info, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	inode := strconv.FormatUint(info.Sys().(*syscall.Stat_t).Ino, 10)
	locks, err := os.ReadFile("/proc/locks")
	if err != nil {
		return 0, err
	}
	waiters := 0
	for _, line := range strings.Split(string(locks), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 7 || fields[1] != "->" {
			continue
		}
		// fields: id: -> FLOCK ADVISORY WRITE pid maj:min:inode start end
		if dev := fields[6]; dev[strings.LastIndexByte(dev, ':')+1:] == inode {
			waiters++
		}
	}
	return waiters, nil
}

// UntilLockWaiters waits until at least n flock(2) calls are blocked on path.
func UntilLockWaiters(t testing.TB, path string, n int) {
	t.Helper()
	var last int
	var lastErr error
	Until(t, fmt.Sprintf("%d waiter(s) blocked on the lock of %s", n, path), func() bool {
		last, lastErr = LockWaiters(path)
		return lastErr == nil && last >= n
	}, func() string { return fmt.Sprintf("%d waiting (%v)", last, lastErr) })
}

// HoldsInotify reports whether process pid holds an inotify instance: a
// leasewal that waits for its WAL to change.
func HoldsInotify(pid int) bool { return InotifyCount(pid) > 0 }

// InotifyCount is how many inotify instances process pid holds.
func InotifyCount(pid int) int {
	n := 0
	fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	for _, fd := range fds {
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); link == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// WaitBound runs a package's tests (Run, from TestMain) N at once where go
// test would run as many as there are CPUs (2 on this project's machine),
// unless -parallel or -fuzz was given: tests that mostly wait, for servers,
// clusters and child processes, overlap their waits.
type WaitBound struct {
	M interface{ Run() int }
	N int
}

func (w WaitBound) Run() int {
	if !flag.Parsed() {
		flag.Parse()
	}
	given := false // -parallel given; or -fuzz, whose workers -parallel counts and which compute, not wait
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" || f.Name == "test.fuzz" })
	if !given && runtime.GOMAXPROCS(0) < w.N {
		flag.Set("test.parallel", strconv.Itoa(w.N))
	}
	return w.M.Run()
}
