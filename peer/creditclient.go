// creditclient.go owns the sending side of receiver credit: the
// engine's CreditIssuer over one Conn's control connection (connect,
// sync and close, one round trip each, never retried here).

package peer

import (
	"context"
	"errors"
	"fmt"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// CreditIssuer is a receiver's issuer reached over c; it owns c.
type CreditIssuer struct{ c *Conn }

var _ engine.CreditIssuer = (*CreditIssuer)(nil)

// NewCreditIssuer wraps c, which the issuer closes at Release.
func NewCreditIssuer(c *Conn) *CreditIssuer { return &CreditIssuer{c: c} }

// Conn is the connection the issuer speaks over.
func (x *CreditIssuer) Conn() *Conn { return x.c }

func (x *CreditIssuer) Connect(ctx context.Context, qosClass uint8) (engine.CreditGrant, error) {
	var g wire.CreditGrant
	err := x.c.request(ctx, "credit connect", wire.TypeCreditConnect, (&wire.CreditConnect{QoSClass: qosClass}).Marshal(), wire.TypeCreditGrant, &g)
	return engine.CreditGrant(g), err
}

func (x *CreditIssuer) Sync(ctx context.Context, bytes, reqs uint64) (engine.CreditGrant, error) {
	var g wire.CreditGrant
	err := x.c.request(ctx, "credit sync", wire.TypeCreditSync, (&wire.CreditDone{Bytes: bytes, Requests: reqs}).Marshal(), wire.TypeCreditGrant, &g)
	return engine.CreditGrant(g), err
}

func (x *CreditIssuer) Close(ctx context.Context, bytes, reqs uint64) error {
	return x.c.request(ctx, "credit close", wire.TypeCreditClose, (&wire.CreditDone{Bytes: bytes, Requests: reqs}).Marshal(), wire.TypeCreditClosed, noMeta{})
}

func (x *CreditIssuer) Release() { x.c.Close() }

// noMeta is a reply without metadata.
type noMeta struct{}

func (noMeta) Unmarshal(b []byte) error {
	if len(b) != 0 {
		return fmt.Errorf("%w: %d bytes of metadata on a reply that has none", wire.ErrCorrupt, len(b))
	}
	return nil
}

// request runs one request carrying meta on the control connection.
func (c *Conn) request(ctx context.Context, op string, t wire.Type, meta []byte, want wire.Type, m interface{ Unmarshal([]byte) error }) error {
	if err := c.Err(); err != nil {
		return &Error{Op: op, Peer: c.addr, Kind: kindOf(err), Err: err}
	}
	_, reply, err := c.ctrl.roundTrip(ctx, &wire.Frame{Type: t, ID: c.nextID.Add(1), Meta: meta}, want, nil)
	if err == nil {
		err = m.Unmarshal(reply)
	}
	if err != nil {
		var r *remoteError
		if !errors.As(err, &r) {
			c.fail(fmt.Errorf("control connection: %s: %w", op, err))
		}
		return &Error{Op: op, Peer: c.addr, Kind: kindOf(err), Err: err}
	}
	return nil
}
