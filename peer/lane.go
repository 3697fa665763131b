// lane.go owns one client connection (the control connection or a data
// lane): dialing it with the handshake, and one request/reply round trip
// at a time.
//
// Invariants:
//   - A lane carries one request at a time, and its reply must name that
//     request's id and slice.
//   - Any failure that leaves the stream in doubt (an I/O error, a
//     timeout, a cancel, a reply that fails a check) marks the lane dead
//     and closes it; a dead lane is never used again.
//   - posted reports whether any byte of the request reached the socket:
//     until then a WRITE has no remote effect.
//   - A round trip fails when its bytes stop moving for the timeout
//     (progress.go), not when it merely takes long.

package peer

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/orbitefs/orbitefs/peer/wire"
)

type lane struct {
	c    net.Conn
	br   *bufio.Reader
	hb   []byte
	lim  wire.Limits
	dead bool
	used time.Time // end of the last round trip
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
	c.SetDeadline(time.Now().Add(cfg.IOTimeout))
	ch, w, err := clientHandshake(c, cfg.Key, &h, wantEpoch)
	if err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	c.SetDeadline(time.Time{})
	if err := setUserTimeout(c, cfg.IOTimeout); err != nil {
		c.Close()
		return nil, nil, nil, err
	}
	br := bufio.NewReaderSize(&progressReader{c: c, timeout: cfg.IOTimeout}, 64<<10)
	l := &lane{c: c, br: br, hb: make([]byte, wire.HeaderLen), lim: wire.Limits{MaxPayload: cfg.MaxSlice}, used: time.Now()}
	return l, ch, w, nil
}

func (l *lane) close() {
	l.dead = true
	l.c.Close()
}

// roundTrip sends req and reads its reply; a reply's payload is read
// into dst (a READ's destination, or nil). It returns whether anything
// was posted, the reply's header and metadata. A TypeError reply comes
// back as *remoteError (the lane stays usable); any other failure kills
// the lane.
func (l *lane) roundTrip(ctx context.Context, req *wire.Frame, want wire.Type, dst []byte) (posted bool, meta []byte, err error) {
	if l.dead {
		return false, nil, errClosed
	}
	// The progress timeout (progress.go) bounds a stall; a cancel or the
	// context's deadline cuts the frame by closing the lane: the only way
	// to stop a socket write or read already under way.
	stop := context.AfterFunc(ctx, func() { l.c.Close() })
	defer func() {
		if !stop() {
			// The cancel closed the socket, perhaps after the reply
			// arrived: the result stands, the lane is gone.
			l.dead = true
		}
		if err != nil {
			var r *remoteError
			if !errors.As(err, &r) {
				l.close()
			}
			if ctx.Err() != nil && !errors.As(err, &r) {
				err = fmt.Errorf("%w (%v)", ctx.Err(), err)
			}
		}
		l.used = time.Now()
		l.c.SetReadDeadline(time.Time{}) // an idle lane's peek (stillOpen) must not time out
	}()
	n, err := req.Write(l.c)
	if n > 0 {
		posted = true
	}
	if err != nil {
		return posted, nil, fmt.Errorf("sending %s %d slice %d: %w", req.Type, req.ID, req.Slice, err)
	}
	h, err := wire.ReadHeader(l.br, l.hb, l.lim)
	if err != nil {
		return true, nil, fmt.Errorf("waiting for the reply to %s %d slice %d: %w", req.Type, req.ID, req.Slice, err)
	}
	if h.ID != req.ID || h.Slice != req.Slice {
		return true, nil, fmt.Errorf("%w: reply for request %d slice %d, want %d slice %d", wire.ErrCorrupt, h.ID, h.Slice, req.ID, req.Slice)
	}
	if meta, err = wire.ReadMeta(l.br, &h); err != nil {
		return true, nil, err
	}
	if h.Type == wire.TypeError {
		var e wire.Error
		if err := e.Unmarshal(meta); err != nil {
			return true, nil, err
		}
		if h.PayloadLen != 0 {
			return true, nil, fmt.Errorf("%w: an error reply with a payload", wire.ErrCorrupt)
		}
		return true, nil, &remoteError{e}
	}
	if h.Type != want {
		return true, nil, fmt.Errorf("%w: a %s reply to %s, want %s", wire.ErrCorrupt, h.Type, req.Type, want)
	}
	if h.PayloadLen != 0 || dst != nil {
		if err := wire.ReadPayload(l.br, &h, dst); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return true, nil, err
		}
	}
	return true, meta, nil
}
