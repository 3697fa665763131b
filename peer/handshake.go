// handshake.go owns the hello exchange that opens every connection:
//
//	client: hello     {name, epoch, role, session, client nonce}
//	server: challenge {name, epoch, server nonce, server proof}
//	client: auth      {client proof}
//	server: welcome   {session, max payload} or error {auth}
//
// With frame protection (protect.go) the hello names it, the challenge
// echoes it, both proofs cover it, and the welcome (or a refusal after
// the proofs) is the first sealed frame.
//
// Invariants:
//   - Each side checks the other's proof before it sends anything more:
//     the client never sends a request to a server that did not prove
//     the key, the server never serves a client that did not.
//   - Neither side sends the key; proofs are bound to both nonces.
//   - Both ends run the same frame protection or the handshake fails,
//     named as a mismatch on both sides: a server refuses a hello with
//     another protection than its own, and a client a challenge.

package peer

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// handshakeLimits: no handshake frame carries a payload.
var handshakeLimits = wire.Limits{MaxPayload: 0}

// maxEpoch bounds epochs to 53 bits so that every JSON reader (jq,
// JavaScript, Python's float parsing) holds one exactly: an epoch is
// copied from info files into credit commands and compared by scripts.
const maxEpoch = 1<<53 - 1

// NewEpoch draws an engine epoch: random, in [1, 2^53-1].
func NewEpoch() uint64 { return newEpoch() }

func newEpoch() uint64 {
	var b [8]byte
	for {
		rand.Read(b[:])
		if e := binary.LittleEndian.Uint64(b[:]) & maxEpoch; e != 0 {
			return e
		}
	}
}

// readMsg reads one clear frame of type want (or a TypeError) and
// decodes its metadata into m.
func readMsg(r io.Reader, want wire.Type, m interface{ Unmarshal([]byte) error }) error {
	return readSealed(r, nil, want, m)
}

// readSealed is readMsg on a connection protected by fs (nil: none).
func readSealed(r io.Reader, fs *frameSeal, want wire.Type, m interface{ Unmarshal([]byte) error }) error {
	buf := make([]byte, wire.HeaderLen)
	h, err := wire.ReadHeader(r, buf, handshakeLimits)
	if err != nil {
		return err
	}
	meta, err := fs.meta(r, &h)
	if err != nil {
		return err
	}
	if h.Type == wire.TypeError {
		var e wire.Error
		if err := e.Unmarshal(meta); err != nil {
			return err
		}
		return &remoteError{e}
	}
	if h.Type != want {
		return fmt.Errorf("%w: got a %s frame, want %s", wire.ErrCorrupt, h.Type, want)
	}
	return m.Unmarshal(meta)
}

func writeMsg(w io.Writer, t wire.Type, meta []byte) error {
	f := wire.Frame{Type: t, Meta: meta}
	_, err := f.Write(w)
	return err
}

// clientHandshake runs the client's half on c (h.Protect is the
// protection it runs) and returns the server's challenge (its name and
// epoch), its welcome and the connection's protection. With wantEpoch
// set (a lane of an existing Conn), a server with another epoch is left
// at the challenge: errRestarted.
func clientHandshake(c net.Conn, key []byte, h *wire.Hello, wantEpoch uint64) (*wire.Challenge, *wire.Welcome, *frameSeal, error) {
	rand.Read(h.Nonce[:])
	if err := writeMsg(c, wire.TypeHello, h.Marshal()); err != nil {
		return nil, nil, nil, err
	}
	var ch wire.Challenge
	if err := readMsg(c, wire.TypeChallenge, &ch); err != nil {
		var r *remoteError
		if errors.As(err, &r) && r.m.Code == wire.CodeProtocol && strings.HasPrefix(r.m.Message, "frame protection mismatch") {
			return nil, nil, nil, &errProtection{fmt.Sprintf("refused by the peer: %s", r.m.Message)}
		}
		return nil, nil, nil, err
	}
	if !wire.ProofOK(ch.Proof, wire.Proof(key, true, h, &ch)) {
		if ch.Protect != h.Protect {
			return nil, nil, nil, protectionMismatch(h.Protect, ch.Protect, fmt.Sprintf("server %q", ch.Name))
		}
		return nil, nil, nil, fmt.Errorf("authentication failed: the server %q did not prove the shared key (different key files?)", ch.Name)
	}
	if ch.Protect != h.Protect {
		// Its proof covers what it runs: it does run another protection.
		return nil, nil, nil, protectionMismatch(h.Protect, ch.Protect, fmt.Sprintf("server %q", ch.Name))
	}
	if wantEpoch != 0 && ch.Epoch != wantEpoch {
		return nil, nil, nil, errRestarted
	}
	a := wire.Auth{Proof: wire.Proof(key, false, h, &ch)}
	if err := writeMsg(c, wire.TypeAuth, a.Marshal()); err != nil {
		return nil, nil, nil, err
	}
	fs, err := newFrameSeal(key, h, &ch, true)
	if err != nil {
		return nil, nil, nil, err
	}
	var w wire.Welcome
	if err := readSealed(c, fs, wire.TypeWelcome, &w); err != nil {
		return nil, nil, nil, err
	}
	return &ch, &w, fs, nil
}

// serverHandshake runs the server's half on c, running protection
// protect: it returns the client's hello once its proof checked, and the
// connection's protection, or why it did not (the caller logs the reason
// and closes c).
func serverHandshake(c net.Conn, key []byte, name string, epoch uint64, protect wire.Protection, onHello func()) (*wire.Hello, *frameSeal, error) {
	var h wire.Hello
	if err := readMsg(c, wire.TypeHello, &h); err != nil {
		return nil, nil, fmt.Errorf("hello: %w", err)
	}
	onHello()
	if h.Protect != protect {
		err := protectionMismatch(protect, h.Protect, fmt.Sprintf("client %q", h.Name))
		e := wire.Error{Code: wire.CodeProtocol, Message: fmt.Sprintf("frame protection mismatch: this peer's [peer] frame_protection is %q, the client asked for %q", protect, h.Protect)}
		writeMsg(c, wire.TypeError, e.Marshal())
		return &h, nil, err
	}
	ch := wire.Challenge{Name: name, Epoch: epoch, Protect: protect}
	rand.Read(ch.Nonce[:])
	ch.Proof = wire.Proof(key, true, &h, &ch)
	if err := writeMsg(c, wire.TypeChallenge, ch.Marshal()); err != nil {
		return &h, nil, fmt.Errorf("challenge: %w", err)
	}
	var a wire.Auth
	if err := readMsg(c, wire.TypeAuth, &a); err != nil {
		return &h, nil, fmt.Errorf("auth: %w", err)
	}
	if !wire.ProofOK(a.Proof, wire.Proof(key, false, &h, &ch)) {
		e := wire.Error{Code: wire.CodeAuth, Message: "authentication failed"}
		writeMsg(c, wire.TypeError, e.Marshal())
		return &h, nil, fmt.Errorf("authentication failed: the client's proof does not match the shared key")
	}
	fs, err := newFrameSeal(key, &h, &ch, false)
	if err != nil {
		return &h, nil, err
	}
	return &h, fs, nil
}
