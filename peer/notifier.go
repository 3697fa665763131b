// notifier.go owns a sender's connections for notifications: one Conn
// per destination address, dialed on first use and dialed again once it
// failed, so a restarted receiver is reached under its new epoch.
//
// Invariants:
//   - A failed dial is NotSent: nothing reached the receiver.
//   - A Conn that failed is never used again (Conn.Notify refuses it);
//     the next notification to its address dials a new one.

package peer

import (
	"context"
	"fmt"
	"sync"

	"github.com/orbitefs/orbitefs/engine"
)

// Notifier sends completion notifications to peers by address. Safe for
// concurrent use; Close it when done.
type Notifier struct {
	cfg Config
	mu  struct {
		sync.Mutex
		conns  map[string]*Conn
		closed bool
	}
	dialMu sync.Mutex // one dial at a time: two senders to a new peer share its Conn
}

// NewNotifier makes a Notifier dialing with cfg (its Lanes are unused:
// notifications travel on the control connection).
func NewNotifier(cfg Config) *Notifier {
	cfg.KeepAlive = 0 // no pinging goroutine per idle destination; a dead Conn is seen at use
	n := &Notifier{cfg: cfg}
	n.mu.conns = map[string]*Conn{}
	return n
}

// Notify sends one notification to the peer at addr (host:port): see
// Conn.Notify for the outcomes.
func (n *Notifier) Notify(ctx context.Context, addr, submission, message string) (Delivery, error) {
	c, err := n.conn(ctx, addr)
	if err != nil {
		return NotSent, err
	}
	return c.Notify(ctx, submission, message)
}

// NotifyEngine is Notify to the engine name with epoch epoch at addr (an
// engine of the cluster, by its record): if the engine answering there
// is another one, or another incarnation, nothing is sent (NotSent, an
// error matching engine.ErrNotFound).
func (n *Notifier) NotifyEngine(ctx context.Context, addr, name string, epoch uint64, submission, message string) (Delivery, error) {
	c, err := n.conn(ctx, addr)
	if err != nil {
		return NotSent, err
	}
	if c.PeerName() != name || c.PeerEpoch() != epoch {
		return NotSent, &Error{Op: "notify", Peer: addr, Kind: engine.KindNotFound,
			Err: fmt.Errorf("the engine there is %q epoch %016x, not %q epoch %016x (it restarted or left since the record was read); nothing was sent", c.PeerName(), c.PeerEpoch(), name, epoch)}
	}
	return c.Notify(ctx, submission, message)
}

// conn returns a usable Conn to addr, dialing one if there is none.
func (n *Notifier) conn(ctx context.Context, addr string) (*Conn, error) {
	n.dialMu.Lock()
	defer n.dialMu.Unlock()
	n.mu.Lock()
	c, closed := n.mu.conns[addr], n.mu.closed
	n.mu.Unlock()
	if closed {
		return nil, &Error{Op: "notify", Peer: addr, Kind: kindOf(errClosed), Err: errClosed}
	}
	if c != nil && c.Err() == nil && c.ctrl.idleOpen() {
		return c, nil
	}
	if c != nil {
		c.Close()
	}
	c, err := Dial(ctx, addr, n.cfg)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	n.mu.conns[addr] = c
	n.mu.Unlock()
	return c, nil
}

// Close closes every connection. Notifications in flight end unknown.
func (n *Notifier) Close() error {
	n.mu.Lock()
	n.mu.closed = true
	conns := n.mu.conns
	n.mu.conns = map[string]*Conn{}
	n.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return nil
}
