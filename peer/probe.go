// probe.go owns the non-blocking looks at a connection's receive queue:
// whether an idle connection is still open (a peer that closed it, by a
// restart, a crash or an idle timeout, has sent a FIN or a reset that
// only a read sees, and a request written on such a connection would be
// posted into nothing, leaving a WRITE's effect unknown for no reason),
// and whether a connection in its handshake has bytes waiting that its
// goroutine has not read yet.

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

// pending says whether bytes wait in c's receive queue, unread. It peeks
// through Control, not Read: another goroutine may be blocked reading c
// (holding its read lock), and this look must neither wait for it nor
// take anything from it. A closed or failed connection has none.
func pending(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	n := 0
	var b [1]byte
	if err := rc.Control(func(fd uintptr) {
		n, _, _ = unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
	}); err != nil {
		return false
	}
	return n > 0
}
