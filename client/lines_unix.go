//go:build unix

package client

import (
	"errors"
	"syscall"
)

// open says whether the connection may carry the next line: nothing to
// read on it (the server owes nothing on an idle one) and no end, seen
// without blocking.
func (lc *lineConn) open() bool {
	if lc.r.Buffered() > 0 {
		return false
	}
	sc, ok := lc.conn.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := true
	err = raw.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && (errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK))
		return true
	})
	return err == nil && open
}
