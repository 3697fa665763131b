// protect.go owns a connection's frame protection once its handshake
// agreed on one (wire/seal.go): the sealer of the frames it sends and
// the opener of those it receives, and reading and writing frames
// through them. A nil *frameSeal is an unprotected connection: the
// original wire, frames checked by their checksums.
//
// Invariants:
//   - On a protected connection every frame after the proofs is sealed,
//     both ways; an unsealed frame is refused (corrupt), and so is a
//     sealed one on an unprotected connection: neither side ever
//     accepts a downgrade.
//   - A protected payload is received into a buffer and opened there;
//     it reaches its destination (a region, a READ's memory, an inbox)
//     only after its tag checked. A payload dropped unread (a refused
//     request) is opened all the same, so the frame count stays in step
//     and the stream is checked to its end.
//   - Frames are sealed in the order they are written: the caller holds
//     the connection's write order (a lane's write lock, a server
//     connection's one goroutine).

package peer

import (
	"fmt"
	"io"
	"net"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// frameSeal is one connection's protection state.
type frameSeal struct {
	out *wire.Sealer
	in  *wire.Opener
}

// newFrameSeal derives a connection's keys from its handshake; client
// says which side this is. ProtectNone returns nil.
func newFrameSeal(key []byte, h *wire.Hello, ch *wire.Challenge, client bool) (*frameSeal, error) {
	if h.Protect == wire.ProtectNone {
		return nil, nil
	}
	c2s, s2c, err := wire.FrameKeys(key, h, ch)
	if err != nil {
		return nil, fmt.Errorf("frame keys: %w", err)
	}
	send, recv := c2s, s2c
	if !client {
		send, recv = s2c, c2s
	}
	fs := &frameSeal{}
	if fs.out, err = wire.NewSealer(send); err != nil {
		return nil, err
	}
	if fs.in, err = wire.NewOpener(recv); err != nil {
		return nil, err
	}
	return fs, nil
}

// errProtection is the kind of a handshake refused because the two ends
// run different frame protections.
type errProtection struct{ msg string }

func (e *errProtection) Error() string { return e.msg }

// protectionMismatch says why a connection whose ends run protections
// local and remote is refused.
func protectionMismatch(local, remote wire.Protection, remoteSide string) error {
	return &errProtection{fmt.Sprintf("frame protection mismatch: the %s runs %q, this engine's [peer] frame_protection is %q (both ends must set the same; a connection is never downgraded)",
		remoteSide, remote, local)}
}

// meta reads h's metadata: opened, or checked by its CRC.
func (fs *frameSeal) meta(r io.Reader, h *wire.Header) ([]byte, error) {
	if fs == nil {
		if h.Flags&wire.FlagSealed != 0 {
			return nil, fmt.Errorf("%w: a sealed %s frame on a connection without frame protection", wire.ErrCorrupt, h.Type)
		}
		return wire.ReadMeta(r, h)
	}
	return fs.in.Meta(r, h)
}

// payloadBuf reads h's payload into a pooled buffer (getBuf; the caller
// puts it back): opened, or checked by its CRC when it carries one.
func (fs *frameSeal) payloadBuf(r io.Reader, h *wire.Header) ([]byte, error) {
	if fs == nil {
		b := getBuf(h.PayloadLen)
		if err := wire.ReadPayload(r, h, b); err != nil {
			putBuf(b)
			return nil, err
		}
		return b, nil
	}
	if h.PayloadLen == 0 {
		return nil, nil // no payload, no tag: Meta counted the frame
	}
	b := getBuf(h.PayloadLen + wire.TagLen)
	p, err := fs.in.Payload(r, h, b)
	if err != nil {
		putBuf(b)
		return nil, err
	}
	return p, nil
}

// payload reads h's payload into dst (len(dst) == h.PayloadLen). A
// protected one goes through a buffer: dst is written only once its tag
// checked.
func (fs *frameSeal) payload(r io.Reader, h *wire.Header, dst []byte) error {
	if fs == nil {
		return wire.ReadPayload(r, h, dst)
	}
	if uint64(len(dst)) != h.PayloadLen {
		return fmt.Errorf("%w: %s payload of %d bytes, want %d", wire.ErrCorrupt, h.Type, h.PayloadLen, len(dst))
	}
	b, err := fs.payloadBuf(r, h)
	if err != nil {
		return err
	}
	copy(dst, b)
	putBuf(b)
	return nil
}

// discard reads and drops h's payload (a refused request's).
func (fs *frameSeal) discard(r io.Reader, h *wire.Header) error {
	if fs == nil || h.PayloadLen == 0 {
		_, err := io.CopyN(io.Discard, r, int64(h.PayloadLen))
		return err
	}
	b, err := fs.payloadBuf(r, h)
	putBuf(b)
	return err
}

// encode appends f's header and metadata onto head and returns the
// payload to write after it: f.Payload itself, or its sealed copy in a
// pooled buffer (body, to put back once written; nil otherwise).
func (fs *frameSeal) encode(head []byte, f *wire.Frame) (h, payload, body []byte) {
	if fs == nil {
		return f.Append(head), f.Payload, nil
	}
	if len(f.Payload) > 0 {
		body = getBuf(uint64(len(f.Payload)) + wire.TagLen)[:0]
	}
	head, body = fs.out.Seal(head, body, f)
	return head, body, body
}

// writeMsg writes one frame without payload (a handshake's welcome or
// refusal) on c.
func (fs *frameSeal) writeMsg(c net.Conn, t wire.Type, meta []byte) error {
	head, _, _ := fs.encode(nil, &wire.Frame{Type: t, Meta: meta})
	_, err := c.Write(head)
	return err
}
