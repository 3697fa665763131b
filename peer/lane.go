// lane.go owns one client connection (the control connection or a data
// lane): dialing it with the handshake, and its requests, several of
// which may be in flight at once (pipelined): each caller writes its
// frame whole under the write lock, and one reader matches the replies
// to their requests by id.
//
// Invariants:
//   - A request is registered before its first byte is written, so its
//     reply always finds it; a reply that names no request in flight (or
//     another slice) fails the lane.
//   - Frames never interleave on the stream: a frame is written whole
//     (header, metadata and payload in one writev) under wmu.
//   - At most one reader runs, and only while requests are in flight: an
//     idle lane has no reader, so a peek (stillOpen) can tell whether the
//     peer closed it. A request sent on a lane with nothing in flight
//     reads its own reply (no reader goroutine, no hand-off between
//     goroutines per round trip); when its reply is in and others are
//     still in flight, a reader goroutine takes over before it returns.
//     It cannot hold up a reply by writing: the peer answers requests in
//     order, and nothing was in flight before it.
//   - Any failure that leaves the stream in doubt (an I/O error, a
//     timeout, a cancel of any of its requests, a reply that fails a
//     check) kills the lane: it is closed and every request in flight on
//     it fails; a dead lane is never used again.
//   - roundTrip returns only once the lane is done with the caller's
//     buffer: the reader has finished filling it, or the lane is dead and
//     its reader gone.
//   - posted reports whether any byte of the request reached the socket:
//     until then a WRITE has no remote effect.
//   - A round trip fails when its bytes stop moving for the timeout
//     (progress.go), not when it merely takes long: writes carry no
//     deadline (the kernel's TCP user timeout bounds a stalled send), and
//     the reader's every read call waits at most the timeout unless this
//     side's bytes are still draining.

package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
)

type lane struct {
	c    net.Conn
	br   *bufio.Reader
	lim  wire.Limits
	gate *Gate      // bulk payloads are copied in its slots (gate.go)
	seal *frameSeal // nil: frames in the clear (protect.go)

	wmu  sync.Mutex // one frame written at a time
	head []byte     // header and metadata of the frame being written; under wmu
	hb   []byte     // the header being read; the reader's only

	// readerStarted, when set (tests), runs as a reader goroutine is
	// started.
	readerStarted func()

	mu      sync.Mutex
	dead    bool
	reading bool             // a reader runs
	pending map[uint64]*call // by request id
	used    time.Time        // end of the last request
	err     error            // why the lane died

	// inflight and queued (bytes) are the pool's accounting of what
	// callers hold on this lane; see pool.go.
	inflight int
	queued   uint64

	// frames counts frames whose sending began on this lane: a frame
	// the peer is not reading yet counts, however much of it the
	// socket buffers took.
	frames atomic.Uint64
	cnt    *counters // its Conn's figures (stats.go)
}

// call is one request waiting for its reply.
type call struct {
	id    uint64
	slice uint32
	want  wire.Type
	dst   []byte // a READ's destination, or nil
	meta  []byte
	err   error
	done  chan struct{}
}

// dialLane connects to addr and runs the handshake as h.Role, expecting
// the server at wantEpoch (0: any).
func dialLane(ctx context.Context, addr string, cfg *Config, h wire.Hello, wantEpoch uint64) (*lane, *wire.Challenge, *wire.Welcome, error) {
	d := net.Dialer{Timeout: cfg.DialTimeout}
	d.SetMultipathTCP(false)
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, nil, err
	}
	// The handshake ends by io_timeout or ctx, whichever comes first (a
	// notification's attempt is bounded by its submission's deadline).
	dl := time.Now().Add(cfg.IOTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	h.Protect = cfg.Protection
	ch, w, fs, err := clientHandshake(c, cfg.Key, &h, wantEpoch)
	if !stop() && err == nil {
		err = ctx.Err() // the deadline may have been cut under the reply
	}
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	c.SetDeadline(time.Time{})
	if err := setUserTimeout(c, cfg.IOTimeout); err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	br := bufio.NewReaderSize(&progressReader{c: c, timeout: cfg.IOTimeout, gate: cfg.Gate}, 64<<10)
	l := &lane{c: c, br: br, lim: wire.Limits{MaxPayload: cfg.MaxSlice}, gate: cfg.Gate, seal: fs, hb: make([]byte, wire.HeaderLen),
		used: time.Now(), pending: map[uint64]*call{}, cnt: &counters{}}
	return l, ch, w, nil
}

// close kills the lane (if it lives) with errClosed.
func (l *lane) close() { l.kill(errClosed) }

// kill marks the lane dead for reason and closes its socket, which ends
// any write or read under way; the reader fails the requests in flight.
func (l *lane) kill(reason error) {
	l.mu.Lock()
	if !l.dead {
		l.dead, l.err = true, reason
		if !errors.Is(reason, errClosed) {
			l.cnt.errors.Add(1)
		}
	}
	reading := l.reading
	l.mu.Unlock()
	l.c.Close()
	if !reading {
		l.failPending()
	}
}

// isDead says whether the lane was killed.
func (l *lane) isDead() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dead
}

// idleOpen says whether a lane with nothing in flight is still open: the
// peer has neither closed it nor sent anything unasked. A lane with
// requests in flight is open while it is not dead (its reader watches).
func (l *lane) idleOpen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dead {
		return false
	}
	if l.reading {
		return true
	}
	return stillOpen(l.c)
}

// idleSince is when the lane last finished a request.
func (l *lane) idleSince() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.used
}

// roundTrip sends req and waits for its reply; a reply's payload is read
// into dst (a READ's destination, or nil). It returns whether anything
// was posted, and the reply's metadata. A TypeError reply comes back as
// *remoteError (the lane stays usable); any other failure kills the lane
// and every request in flight on it.
func (l *lane) roundTrip(ctx context.Context, req *wire.Frame, want wire.Type, dst []byte) (posted bool, meta []byte, err error) {
	cl := &call{id: req.ID, slice: req.Slice, want: want, dst: dst, done: make(chan struct{})}
	l.mu.Lock()
	if l.dead {
		l.mu.Unlock()
		return false, nil, errClosed
	}
	if _, dup := l.pending[req.ID]; dup {
		l.mu.Unlock()
		return false, nil, fmt.Errorf("request id %d already in flight on this lane", req.ID)
	}
	l.pending[req.ID] = cl
	// Alone on the lane: this caller reads its own reply (readFor).
	lead := !l.reading
	l.reading = true
	l.mu.Unlock()

	// The progress timeout (progress.go) bounds a stall; a cancel or the
	// context's deadline cuts the frame by closing the lane: the only way
	// to stop a socket write or read already under way.
	stop := context.AfterFunc(ctx, func() { l.kill(fmt.Errorf("request %d: %w", req.ID, ctx.Err())) })
	small := len(req.Payload) <= SmallFrame && len(dst) <= SmallFrame
	if small && (req.Type == wire.TypeRead || req.Type == wire.TypeWrite) {
		// The process's bulk copies leave a P free for this reply.
		l.gate.smallBegin()
		defer l.gate.smallEnd()
	}
	t0 := time.Now()
	posted, err = l.send(req)
	if err != nil {
		l.kill(err)
	}
	if lead {
		l.readFor(cl) // on a dead lane: fails what is in flight
	}
	<-cl.done
	if err == nil && cl.err == nil && small {
		l.cnt.sample(time.Since(t0))
	}
	cancelled := !stop()
	if cl.err != nil && err == nil {
		err = cl.err
	}
	if err == nil {
		return posted, cl.meta, nil
	}
	var r *remoteError
	if errors.As(err, &r) {
		if cancelled || r.m.Code == wire.CodeCorrupt {
			// The reply arrived, but the cancel closed the lane; or the
			// peer refused a frame as corrupt and ends the connection.
			l.kill(errClosed)
		}
		return true, nil, err
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", ctx.Err(), err)
	}
	return posted, nil, err
}

// send writes req whole under the write lock. It sets no deadline:
// the kernel's user timeout fails a send that stops moving, and the
// caller's context closes the lane.
func (l *lane) send(req *wire.Frame) (posted bool, err error) {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.isDead() {
		return false, errClosed
	}
	l.frames.Add(1)
	var payload, body []byte
	l.head, payload, body = l.seal.encode(l.head[:0], req)
	n, err := l.gate.writev(l.c, l.head, payload)
	putBuf(body)
	l.cnt.sent.Add(uint64(n))
	if err != nil {
		return n > 0, fmt.Errorf("sending %s %d slice %d: %w", req.Type, req.ID, req.Slice, err)
	}
	l.cnt.frames.Add(1)
	return true, nil
}

// startReader starts a reader goroutine (reading is set for it).
func (l *lane) startReader() {
	if l.readerStarted != nil {
		l.readerStarted()
	}
	go l.read()
}

// read is the lane's reader goroutine: it reads replies and hands each
// to its request until none is in flight, or the lane fails.
func (l *lane) read() { l.readFor(nil) }

// readFor reads replies and hands each to its request until none is in
// flight, or the lane fails, or (mine not nil) mine has its reply: a
// reader goroutine then takes over the requests still in flight. The
// caller is the lane's one reader (reading is set for it).
func (l *lane) readFor(mine *call) {
	for {
		got, err := l.readOne(l.hb)
		l.mu.Lock()
		if err == nil && len(l.pending) > 0 {
			if mine != nil && got == mine {
				l.mu.Unlock()
				l.startReader() // reading stays set: the lane's reader changes hands
				return
			}
			l.mu.Unlock()
			continue
		}
		if err == nil {
			l.reading = false
			l.used = time.Now()
			l.c.SetReadDeadline(time.Time{}) // an idle lane's peek (stillOpen) must not time out
			l.mu.Unlock()
			return
		}
		if !l.dead {
			l.dead, l.err = true, err
			l.cnt.errors.Add(1)
		}
		l.reading = false
		l.mu.Unlock()
		l.c.Close()
		l.failPending()
		return
	}
}

// readOne reads one reply and completes its request, which it returns.
// An error kills the lane (the caller does it).
func (l *lane) readOne(hb []byte) (*call, error) {
	cl, err := l.readReply(hb)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	delete(l.pending, cl.id)
	l.mu.Unlock()
	close(cl.done)
	return cl, nil
}

// readReply reads one reply into its request.
func (l *lane) readReply(hb []byte) (*call, error) {
	h, err := wire.ReadHeader(l.br, hb, l.lim)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("waiting for a reply: %w", err)
	}
	l.mu.Lock()
	cl := l.pending[h.ID]
	l.mu.Unlock()
	if cl == nil || cl.slice != h.Slice {
		return nil, fmt.Errorf("%w: reply %s for request %d slice %d, which is not in flight on this lane", wire.ErrCorrupt, h.Type, h.ID, h.Slice)
	}
	meta, err := l.seal.meta(l.br, &h)
	if err != nil {
		return nil, err
	}
	switch {
	case h.Type == wire.TypeError:
		var e wire.Error
		if err := e.Unmarshal(meta); err != nil {
			return nil, err
		}
		if h.PayloadLen != 0 {
			return nil, fmt.Errorf("%w: an error reply with a payload", wire.ErrCorrupt)
		}
		cl.err = &remoteError{e}
	case h.Type != cl.want:
		return nil, fmt.Errorf("%w: a %s reply to request %d, want %s", wire.ErrCorrupt, h.Type, h.ID, cl.want)
	case h.PayloadLen != 0 || cl.dst != nil:
		if err := l.seal.payload(l.br, &h, cl.dst); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return nil, fmt.Errorf("reply to request %d: %w", h.ID, err)
		}
	}
	l.cnt.recv.Add(wire.HeaderLen + uint64(h.MetaLen) + h.PayloadLen)
	if h.Type == wire.TypeError {
		l.cnt.errors.Add(1)
	}
	cl.meta = meta
	return cl, nil
}

// failPending fails every request in flight on a dead lane with its
// reason; only the reader (or kill, when none runs) calls it, so no
// buffer is still being filled.
func (l *lane) failPending() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, cl := range l.pending {
		cl.err = l.err
		if cl.err == nil {
			cl.err = errClosed
		}
		delete(l.pending, id)
		close(cl.done)
	}
}
