// gate.go owns the bulk gate: the system calls that copy a bulk payload
// (over SmallFrame) between memory and a socket run at most
// GOMAXPROCS-1 at a time in a process while a small request is about,
// so its socket is noticed at once even under a saturating stream.
//
// Why: a goroutine parked on a socket is made runnable when a P's
// scheduler finds nothing else to run and polls the network (or blocks
// in the poll, waking the moment a packet lands), or else by the
// runtime's monitor, which polls only when nobody has for 10 ms. Bulk
// goroutines that copy megabytes keep every P busy, so without the gate
// the small lane's reply (client) or request (server) waited until a
// busy P happened to run dry: a 4 KiB round trip's p99 was 9-15 ms
// beside a 64 MiB stream. Bulk goroutines waiting for a slot are
// parked, not runnable, so one P runs dry and polls.
//
// The gate is engaged only while a small READ or WRITE is about: one is
// in flight in the process (client), or one ended or was answered
// within the last linger (config peer.bulk_gate_linger; 0: never
// engaged, every copy passes at once). Otherwise bulk copies pass
// without a slot: holding a P idle costs a bulk-only process its thread
// wake-ups (every goroutine made runnable wakes the idle P's thread,
// which polls, finds nothing and sleeps again: about twice the futex
// and epoll_pwait calls per GiB), and there is no small request for the
// idle P to notice.
//
// Invariants:
//   - While the gate is engaged, at most its slot count of bulk system
//     calls run at once; whether it is engaged is decided at each system
//     call, so a copy under way is gated from its next call on.
//   - A slot is held for one non-blocking system call and nothing else:
//     a call that would block (EAGAIN) gives its slot back before it
//     waits for the socket, so a slot is never held across a network
//     wait and the gate cannot deadlock a peer's two sides in one
//     process.
//   - Small payloads (SmallFrame or less) and headers never take a slot:
//     the small lane never waits behind a bulk copy.
//   - A gated read or write behaves as the connection's own (deadlines,
//     close, partial reads); only when the copies run changes.

package peer

import (
	"io"
	"net"
	"os"
	"runtime"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Gate bounds the bulk payload copies of a process. One Gate should be
// shared by every Conn and Server of a process (they share its Ps);
// a nil Gate in Config or ServerConfig makes one of their own.
type Gate struct {
	slots chan struct{}
	base  time.Time    // the origin of until
	small atomic.Int64 // small round trips in flight (client)
	until atomic.Int64 // engaged until then (nanoseconds since base)
	// linger is how long the gate stays engaged after a small round
	// trip; 0: never engaged.
	linger time.Duration
	// waiting and held, when set (tests), run when a copy finds no free
	// slot, and in a slot before its system call with the bytes it may
	// copy.
	waiting func()
	held    func(n int)
}

// DefaultGateLinger is how long a small round trip keeps the gate
// engaged after it unless configured: long enough to span the gap
// between a client's small requests at a steady rate (and so to be
// engaged before a server reads the next one), short enough that a
// bulk-only process is soon ungated.
const DefaultGateLinger = 250 * time.Millisecond

// NewGate makes a gate of GOMAXPROCS-1 slots (at least 1), read now,
// that stays engaged for linger after a small round trip; linger 0 makes
// a gate that is never engaged (bulk copies never wait for a slot, and
// a small request beside a stream waits for a busy P to run dry).
// A negative linger is 0.
func NewGate(linger time.Duration) *Gate {
	g := newGate(max(1, runtime.GOMAXPROCS(0)-1))
	g.linger = max(linger, 0)
	return g
}

func newGate(n int) *Gate {
	return &Gate{slots: make(chan struct{}, n), base: time.Now(), linger: DefaultGateLinger}
}

// Linger is how long the gate stays engaged after a small round trip
// (0: never engaged).
func (g *Gate) Linger() time.Duration { return g.linger }

// smallBegin and smallEnd bracket a small round trip on the client: the
// gate is engaged from before its request goes out until linger after
// its reply is in, so the reply is noticed at once.
func (g *Gate) smallBegin() {
	if g != nil {
		g.small.Add(1)
	}
}

func (g *Gate) smallEnd() {
	if g != nil {
		g.smallSeen()
		g.small.Add(-1)
	}
}

// smallSeen engages the gate for linger from now: a server answered a
// small request, and the next is likely near.
func (g *Gate) smallSeen() {
	if g == nil {
		return
	}
	t := int64(time.Since(g.base) + g.linger)
	for {
		old := g.until.Load()
		if old >= t || g.until.CompareAndSwap(old, t) {
			return
		}
	}
}

// engaged says whether bulk copies take a slot now: never with linger 0.
func (g *Gate) engaged() bool {
	if g.linger == 0 {
		return false
	}
	return g.small.Load() > 0 || int64(time.Since(g.base)) < g.until.Load()
}

// gated runs call in a slot while the gate is engaged, else at once.
func (g *Gate) gated(n int, call func()) {
	if !g.engaged() {
		call()
		return
	}
	g.enter(n)
	call()
	g.leave()
}

func (g *Gate) enter(n int) {
	select {
	case g.slots <- struct{}{}:
	default:
		if g.waiting != nil {
			g.waiting()
		}
		g.slots <- struct{}{}
	}
	if g.held != nil {
		g.held(n)
	}
}

func (g *Gate) leave() { <-g.slots }

// rawConn is c's file descriptor access when p is a bulk payload that
// the gate covers; nil otherwise.
func (g *Gate) rawConn(c net.Conn, n int) syscall.RawConn {
	if g == nil || n <= SmallFrame {
		return nil
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return nil
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil
	}
	return rc
}

// read is c.Read(p), each system call of a bulk p in a slot while the
// gate is engaged.
func (g *Gate) read(c net.Conn, p []byte) (int, error) {
	rc := g.rawConn(c, len(p))
	if rc == nil {
		return c.Read(p)
	}
	var n int
	var serr error
	err := rc.Read(func(fd uintptr) bool {
		for {
			g.gated(len(p), func() { n, serr = unix.Read(int(fd), p) })
			switch serr {
			case unix.EINTR:
				continue
			case unix.EAGAIN:
				return false // wait for the socket without a slot
			}
			return true
		}
	})
	n = max(n, 0)
	switch {
	case err != nil:
		return n, err
	case serr != nil:
		return n, &net.OpError{Op: "read", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("read", serr)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// writev writes a frame's head (header and metadata) and its payload
// whole to c; the system calls of a bulk payload's frame each run in a
// slot while the gate is engaged (the head does not count: a frame of SmallFrame payload bytes is
// small). It returns how many bytes went out.
func (g *Gate) writev(c net.Conn, head, payload []byte) (int64, error) {
	bufs := [][]byte{head}
	if len(payload) > 0 {
		bufs = append(bufs, payload)
	}
	total := len(head) + len(payload)
	rc := g.rawConn(c, len(payload))
	if rc == nil {
		nb := net.Buffers(bufs)
		return nb.WriteTo(c)
	}
	var sent int64
	var serr error
	err := rc.Write(func(fd uintptr) bool {
		for len(bufs) > 0 {
			var n int
			var err error
			g.gated(total-int(sent), func() { n, err = unix.Writev(int(fd), bufs) })
			if n > 0 {
				sent += int64(n)
				bufs = consume(bufs, n)
			}
			switch {
			case err == nil && n > 0, err == unix.EINTR:
				continue
			case err == unix.EAGAIN:
				return false // wait for room without a slot
			case err == nil:
				err = io.ErrShortWrite // no progress, no error: never loop on it
			}
			serr = err
			return true
		}
		return true
	})
	switch {
	case err != nil:
		return sent, err
	case serr != nil:
		return sent, &net.OpError{Op: "write", Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError("writev", serr)}
	}
	return sent, nil
}

// consume drops the first n bytes of bufs.
func consume(bufs [][]byte, n int) [][]byte {
	for n > 0 && len(bufs) > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			return bufs
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs
}
