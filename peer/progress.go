// progress.go owns the progress timeout of a peer connection
// (io_timeout once a frame has begun): a frame may take as long as its
// bytes keep moving, and fails once they stop moving for the timeout.
// A slow link is not a stall; a partition, a lost reply or a dead host
// is.
//
// Invariants:
//   - Writes carry no deadline of their own: the kernel's TCP user
//     timeout fails the connection when bytes it sent stay unacknowledged
//     (or the receiver's window stays shut) for the timeout, however long
//     the frame; a context still cuts a write by closing the connection.
//   - A read awaiting a reply or a payload gets the timeout anew at every
//     read call, so it fails only when no byte arrived for that long while
//     nothing this side sent was still being acknowledged.

package peer

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// setUserTimeout sets c's TCP user timeout to d (0 leaves the kernel's
// default).
func setUserTimeout(c net.Conn, d time.Duration) error {
	sc, ok := c.(syscall.Conn)
	if !ok || d <= 0 {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return err
	}
	ms := int(min(d.Milliseconds(), 1<<31-1))
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, max(ms, 1))
	}); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("TCP_USER_TIMEOUT %s: %w", d, serr)
	}
	return nil
}

// progressReader reads from c with a read deadline of timeout from each
// call; while timeout is 0 (a server waiting for its peer's next frame,
// which may never come) it sets none. A read that times out while the
// bytes this side sent are still draining from its socket (a slow link
// still carrying the request whose reply is awaited) is progress, not a
// stall: it waits again.
type progressReader struct {
	c       net.Conn
	timeout time.Duration
	gate    *Gate // a bulk read is copied in its slots (gate.go)
}

func (r *progressReader) Read(p []byte) (int, error) {
	last := -1
	for {
		if r.timeout > 0 {
			r.c.SetReadDeadline(time.Now().Add(r.timeout))
		}
		n, err := r.gate.read(r.c, p)
		if n == 0 && r.timeout > 0 && isTimeout(err) {
			if q := unsent(r.c); q > 0 && q != last {
				last = q
				continue
			}
		}
		return n, err
	}
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// unsent is how many bytes c's socket holds that the peer has not yet
// acknowledged (SIOCOUTQ), or 0 when that cannot be told.
func unsent(c net.Conn) int {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0
	}
	q := 0
	rc.Control(func(fd uintptr) {
		if v, err := unix.IoctlGetInt(int(fd), unix.SIOCOUTQ); err == nil {
			q = v
		}
	})
	return q
}
