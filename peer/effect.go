// effect.go owns the remote effect of a request and the package's error
// type, which carries it.
//
// Invariants:
//   - EffectApplied is reported only for bytes whose WRITE ack arrived;
//     EffectNone only for bytes never posted on a socket or refused by
//     the server before it touched the region; everything else is
//     EffectUnknown.

package peer

import (
	"errors"
	"fmt"
	"strings"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// Effect is what a request did to the remote region.
type Effect uint8

// The effects.
const (
	EffectNone    Effect = iota // nothing reached the region; a retry is safe
	EffectApplied               // acknowledged: the bytes are in the region
	EffectUnknown               // posted, not acknowledged: never replay
)

func (e Effect) String() string {
	switch e {
	case EffectNone:
		return "none"
	case EffectApplied:
		return "applied"
	case EffectUnknown:
		return "unknown"
	}
	return fmt.Sprintf("effect(%d)", uint8(e))
}

// combine is the effect of a request made of slices a and b.
func combine(a, b Effect) Effect {
	if a == b {
		return a
	}
	return EffectUnknown
}

// Slice is one slice's outcome in a failed striped request.
type Slice struct {
	Offset, Len uint64 // within the request
	Effect      Effect
	Err         error // nil when the slice succeeded
}

// Error is a failed peer request.
type Error struct {
	Op     string // "dial", "read", "write", "regions", "ping"
	Peer   string // the address dialed
	Region string // the region's name, "" when none
	Kind   engine.Kind
	// Effect is the request's remote effect: EffectNone for every failed
	// READ and for a WRITE that reached nothing.
	Effect Effect
	// Slices lists every slice of a striped request (nil otherwise).
	Slices []Slice
	Err    error
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "peer %s: %s", e.Peer, e.Op)
	if e.Region != "" {
		fmt.Fprintf(&b, " %s", e.Region)
	}
	fmt.Fprintf(&b, ": %s", e.Kind)
	if e.Op == "write" {
		fmt.Fprintf(&b, " (remote effect %s)", e.Effect)
	}
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches the engine's kind sentinels (engine.ErrBusy, ...).
func (e *Error) Is(target error) bool { return errors.Is(&engine.Error{Kind: e.Kind}, target) }

// EffectOf is the remote effect of a Write's result: applied for nil,
// the Error's effect, unknown for anything else.
func EffectOf(err error) Effect {
	if err == nil {
		return EffectApplied
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Effect
	}
	return EffectUnknown
}

// remoteError is a TypeError reply: the server's own refusal or failure.
type remoteError struct{ m wire.Error }

func (r *remoteError) Error() string {
	return fmt.Sprintf("the peer answered %s: %s", r.m.Code, r.m.Message)
}

func (r *remoteError) kind() engine.Kind {
	switch r.m.Code {
	case wire.CodeNotFound:
		return engine.KindNotFound
	case wire.CodeDenied, wire.CodeAuth:
		return engine.KindPermission
	case wire.CodeRange:
		return engine.KindRange
	case wire.CodeBusy:
		return engine.KindBusy
	case wire.CodeTooLarge:
		return engine.KindTooLarge
	case wire.CodeCredit:
		return engine.KindExhausted
	case wire.CodeShutdown:
		return engine.KindClosed
	}
	return engine.KindIO
}

// kindOf classifies a failure: a server's reply by its code, a timeout as
// such, anything else as I/O.
func kindOf(err error) engine.Kind {
	var r *remoteError
	var pe *errProtection
	var te interface{ Timeout() bool }
	switch {
	case errors.As(err, &pe):
		return engine.KindPermission // refused at the handshake, as a wrong key is
	case errors.As(err, &r):
		return r.kind()
	case errors.Is(err, errRestarted), errors.Is(err, errClosed):
		return engine.KindClosed
	case errors.As(err, &te) && te.Timeout():
		return engine.KindTimeout
	}
	if k := engine.KindOf(err); k != engine.KindUnknown {
		return k
	}
	return engine.KindIO
}

var (
	// errRestarted: the peer came back with a new epoch; this Conn's
	// lanes and descriptors belong to the old one. Dial again.
	errRestarted = errors.New("the peer restarted (new epoch): its old lanes and descriptors are invalid; dial again")
	errClosed    = errors.New("connection closed")
)
