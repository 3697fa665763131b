// probe.go owns the check that an idle connection is still open: a
// peer that closed it (a restart, a crash, an idle timeout) has sent a
// FIN or a reset that only a read sees, and a request written on such a
// connection would be posted into nothing, leaving a WRITE's effect
// unknown for no reason.

package peer

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// stillOpen peeks at c without blocking: true only when the peer has
// neither closed it nor sent anything unasked (nothing is expected on an
// idle connection).
func stillOpen(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	var b [1]byte
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = n < 0 && errors.Is(rerr, unix.EAGAIN)
		return true // never wait: this is a poll, not a read
	})
	return err == nil && open
}
