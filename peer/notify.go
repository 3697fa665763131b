// notify.go owns the sending side of completion notifications: one
// NOTIFY round trip on the control connection, and the outcome it leaves.
//
// Invariants:
//   - Delivered only when the receiver answered notified (the message is
//     in its inbox); Busy only when it answered inbox full (nothing was
//     queued); NotSent only when nothing reached the socket or the
//     receiver refused it before queueing; anything else is Unknown and
//     is never sent again.
//   - A NotSent the receiver refused as invalid (too large, corrupt,
//     ...) wraps ErrRefused: sending it again would be refused again.
//     Busy and any other NotSent may be sent again.

package peer

import (
	"context"
	"errors"
	"fmt"

	"github.com/orbitefs/orbitefs/peer/wire"
)

// The defaults of a receiver's bounds, and the largest message.
const (
	DefaultMaxPending          = 1024
	DefaultMaxPendingPerSender = 256
	DefaultMaxPendingBytes     = 4 << 20
	DefaultMaxNotifyBytes      = 64 << 10
)

// ErrRefused is wrapped by a NotSent the receiver read and refused
// before queueing it for a reason other than a full inbox or its own
// shutdown: the same notification would be refused again.
var ErrRefused = errors.New("refused by the receiver")

// Delivery is the outcome of one notification to one destination.
type Delivery uint8

// The outcomes.
const (
	NotSent   Delivery = iota // nothing reached the receiver's inbox, and it never will
	Delivered                 // acknowledged: it is in the receiver's inbox
	Busy                      // the receiver's inbox was full: definitely not delivered
	Unknown                   // sent, no answer: it may or may not be in the inbox; never resent
)

func (d Delivery) String() string {
	switch d {
	case NotSent:
		return "not_sent"
	case Delivered:
		return "delivered"
	case Busy:
		return "busy"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("delivery(%d)", uint8(d))
}

// Notify sends one completion notification for submission to the peer
// and waits for its answer. It never retries. The Delivery says what the
// receiver holds; the error (nil only when Delivered) says why.
func (c *Conn) Notify(ctx context.Context, submission, message string) (Delivery, error) {
	if err := c.Err(); err != nil {
		return NotSent, &Error{Op: "notify", Peer: c.addr, Kind: kindOf(err), Err: err}
	}
	id := c.nextID.Add(1)
	f := wire.Frame{Type: wire.TypeNotify, ID: id, PayloadCRC: c.cfg.PayloadChecksum,
		Meta: (&wire.Notify{ID: id, Submission: submission}).Marshal(), Payload: []byte(message)}
	posted, _, err := c.ctrl.roundTrip(ctx, &f, wire.TypeNotified, nil)
	if err == nil {
		return Delivered, nil
	}
	var r *remoteError
	d := Unknown
	switch {
	case errors.As(err, &r) && r.m.Code == wire.CodeFull:
		d = Busy
	case errors.As(err, &r) && r.m.Code == wire.CodeShutdown:
		d = NotSent // not queued; a restarted receiver may take it
	case errors.As(err, &r):
		d = NotSent // refused before it was queued (too large, ...)
		err = fmt.Errorf("%w: %w", ErrRefused, err)
	case !posted:
		d = NotSent
	}
	if !errors.As(err, &r) {
		c.fail(fmt.Errorf("control connection: notify: %w", err))
	}
	return d, &Error{Op: "notify", Peer: c.addr, Kind: kindOf(err), Err: err}
}
