// remote.go owns the adapter that lets the engine reach one exported
// region of a peer as an engine.Remote (a remote segment's transport):
// ReadAt and WriteAt over a Conn, with the Conn's effect rules carried
// over unchanged, and a new Conn when the old one failed.
//
// Invariants:
//   - The adapter owns its Conn: Close closes it.
//   - WriteAt's effect is the Conn's (EffectOf): applied only when every
//     slice was acknowledged, none only when nothing was posted.
//   - A failed Conn (the peer restarted with a new epoch, its control
//     connection died) is never used again: the next request dials the
//     peer again, one redial at a time, and looks the region up by name
//     in the new epoch's descriptors; nothing is sent under an old
//     descriptor, and a region of another size is refused (the segment
//     was range-checked against the old one).
//   - The redial goes to the address of the last Conn, or, for a Remote
//     that follows a name (Follow), to the address the name resolves to
//     at that redial; it accepts only the engine the segment opened (the
//     same name, any epoch): another engine at the address is refused,
//     and nothing is sent to it.
//   - A request is sent a second time only when the first attempt found
//     the peer restarted, or its epoch forgotten (Forget), before it
//     posted anything (effect none): a WRITE that may have reached the
//     old epoch is never replayed.

package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// Remote is one exported region of a connected peer, as the engine's
// remote segments use it.
type Remote struct {
	turn chan struct{} // held by the one caller redialing

	// tookConn, when set (tests), runs in a request after it took its
	// Conn and before it uses it.
	tookConn func(*Conn)

	// resolve, when set (Follow), gives the address a redial dials.
	resolve func(context.Context) (string, error)

	mu struct {
		sync.Mutex
		c      *Conn
		info   engine.RemoteInfo
		closed bool
	}
}

// OpenRemote looks up region on c (refreshing the descriptors once) and
// returns it as an engine.Remote that owns c. It fails with
// engine.KindNotFound when the peer exports no such region; c stays the
// caller's then. Once c fails, the Remote dials c's address again with
// c's Config.
func OpenRemote(ctx context.Context, c *Conn, region string) (*Remote, error) {
	d, err := c.descriptor(ctx, "open", region)
	if err != nil {
		return nil, err
	}
	r := &Remote{turn: make(chan struct{}, 1)}
	r.mu.c = c
	r.mu.info = engine.RemoteInfo{Address: c.addr, Peer: c.peerName, Epoch: c.peerEpoch,
		Region: d.Name, Size: d.Bytes, Export: permission(d.Perm), Lanes: c.cfg.Lanes, Unit: c.cfg.MaxSlice,
		IPC: remoteIPC(d)}
	return r, nil
}

// Follow makes every later redial dial the address resolve returns (for
// a peer named in a cluster, its current address in the cluster's view)
// instead of the address of the last Conn, so a peer that came back at
// another address is found again. A resolve error fails the request
// with effect none (nothing was sent); it should match engine.ErrNotFound
// when the name is not resolvable. Call Follow before the Remote is used.
func (r *Remote) Follow(resolve func(context.Context) (string, error)) {
	r.resolve = resolve
}

// permission is the engine's name for an export permission.
func permission(p wire.Perm) engine.Permission {
	var out engine.Permission
	if p&wire.PermRead != 0 {
		out |= engine.PermRead
	}
	if p&wire.PermWrite != 0 {
		out |= engine.PermWrite
	}
	return out
}

// ReadAt fills p from off of the region.
func (r *Remote) ReadAt(ctx context.Context, p []byte, off uint64) error {
	return r.do(ctx, func(c *Conn, region string) error { return c.Read(ctx, region, off, p) })
}

// WriteAt stores p at off of the region and returns its remote effect.
func (r *Remote) WriteAt(ctx context.Context, p []byte, off uint64) (engine.RemoteEffect, error) {
	err := r.do(ctx, func(c *Conn, region string) error { return c.Write(ctx, region, off, p) })
	switch e := EffectOf(err); e {
	case EffectApplied:
		return engine.EffectApplied, err
	case EffectNone:
		return engine.EffectNone, err
	case EffectUnknown:
		return engine.EffectUnknown, err
	default:
		return engine.EffectUnknown, fmt.Errorf("remote effect %v: %w", e, err)
	}
}

// do runs one request on a usable Conn. A request that found the peer
// restarted before posting anything runs once more on a new Conn.
func (r *Remote) do(ctx context.Context, f func(*Conn, string) error) error {
	c, err := r.conn(ctx)
	if err != nil {
		return err
	}
	if r.tookConn != nil {
		r.tookConn(c)
	}
	region := r.Info().Region
	err = f(c, region)
	if err == nil || !(errors.Is(err, errRestarted) || errors.Is(err, errForgotten)) || EffectOf(err) != EffectNone {
		return err
	}
	if c, err = r.redial(ctx, c); err != nil {
		return err
	}
	return f(c, region)
}

// conn is the Remote's Conn, a new one if it failed.
func (r *Remote) conn(ctx context.Context) (*Conn, error) {
	r.mu.Lock()
	c := r.mu.c
	r.mu.Unlock()
	if c.Err() == nil {
		return c, nil
	}
	return r.redial(ctx, c)
}

// redial replaces old, a failed Conn, with a new one (unless another
// caller already did) to the same address or, following a name, to the
// name's address now, and closes old. It fails with effect none:
// nothing was sent.
func (r *Remote) redial(ctx context.Context, old *Conn) (*Conn, error) {
	fail := func(kind engine.Kind, err error) (*Conn, error) {
		var e *Error
		if errors.As(err, &e) {
			e.Op, e.Effect = "redial", EffectNone
			return nil, e
		}
		return nil, &Error{Op: "redial", Peer: old.addr, Region: r.Info().Region, Kind: kind, Err: err}
	}
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		return fail(engine.KindTimeout, fmt.Errorf("waiting for another caller's redial: %w (the connection failed: %v)", ctx.Err(), old.Err()))
	}
	defer func() { <-r.turn }()
	r.mu.Lock()
	c, closed, info := r.mu.c, r.mu.closed, r.mu.info
	r.mu.Unlock()
	switch {
	case closed:
		return fail(engine.KindClosed, errClosed)
	case c != old && c.Err() == nil:
		return c, nil // another caller redialed
	}
	addr, how := c.addr, "dialing again"
	if r.resolve != nil {
		a, err := r.resolve(ctx)
		if err != nil {
			return fail(engine.KindNotFound, fmt.Errorf("the connection failed (%v), and resolving %q again: %w", c.Err(), c.peerName, err))
		}
		if addr = a; addr != c.addr {
			how = fmt.Sprintf("dialing %q at its new address %s", c.peerName, addr)
		}
	}
	n, err := Dial(ctx, addr, c.cfg)
	if err != nil {
		return fail(engine.KindUnavailable, fmt.Errorf("the connection failed (%v), and %s: %w", c.Err(), how, err))
	}
	var d wire.Descriptor
	if n.peerName != c.peerName {
		// Another engine took the address: its region of that name is
		// not the one the segment opened (a peer://NAME segment never
		// reaches an engine other than NAME).
		err = &Error{Op: "redial", Peer: addr, Region: info.Region, Kind: engine.KindNotFound,
			Err: fmt.Errorf("the engine at %s is now %q (epoch %016x), not %q: open the segment again", addr, n.peerName, n.peerEpoch, c.peerName)}
	} else {
		d, err = n.descriptor(ctx, "redial", info.Region)
	}
	if err == nil && d.Bytes != info.Size {
		err = &Error{Op: "redial", Peer: addr, Region: info.Region, Kind: engine.KindNotFound,
			Err: fmt.Errorf("the peer %q (epoch %016x) exports region %q with %d bytes, not the %d it had when the segment opened: open the segment again",
				n.peerName, n.peerEpoch, info.Region, d.Bytes, info.Size)}
	}
	if err != nil {
		n.Close()
		return fail(engine.KindNotFound, err)
	}
	r.mu.Lock()
	if r.mu.closed {
		r.mu.Unlock()
		n.Close()
		return fail(engine.KindClosed, errClosed)
	}
	r.mu.c = n
	r.mu.info.Address = n.addr
	r.mu.info.Peer, r.mu.info.Epoch, r.mu.info.Export = n.peerName, n.peerEpoch, permission(d.Perm)
	r.mu.info.IPC = remoteIPC(d) // the new epoch's handle (ipc.go)
	r.mu.Unlock()
	n.log.Info("peer redialed", "op", "peer", "peer", n.addr, "old_peer", c.addr, "name", n.peerName, "region", info.Region,
		"old_epoch", fmt.Sprintf("%016x", c.peerEpoch), "epoch", fmt.Sprintf("%016x", n.peerEpoch), "reason", c.Err())
	c.Close()
	return n, nil
}

// Info describes the region as the peer announced it, in the epoch of
// the current Conn.
func (r *Remote) Info() engine.RemoteInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.info
}

// Close closes the connection; a redial under way is closed as it ends.
func (r *Remote) Close() error {
	r.mu.Lock()
	r.mu.closed = true
	c := r.mu.c
	r.mu.Unlock()
	return c.Close()
}

// errForgotten: the owner of the Remote learned (from the cluster's
// view) that the Conn's epoch left or restarted, and dropped the Conn.
var errForgotten = errors.New("the cluster reports this epoch gone; dial again")

// Forget drops the Remote's Conn if it is to the peer's epoch (the
// cluster reports that incarnation left or restarted), so that the next
// request dials again instead of sending under that epoch's lanes and
// descriptors, which a dead engine's silent socket (a partition, a
// crashed host) would not refuse. A request already on a lane finishes
// as it would have. It reports whether a Conn was dropped.
func (r *Remote) Forget(epoch uint64, why string) bool {
	r.mu.Lock()
	c := r.mu.c
	r.mu.Unlock()
	if c.peerEpoch != epoch || c.Err() != nil {
		return false
	}
	c.fail(fmt.Errorf("%w: %s", errForgotten, why))
	return true
}

var _ engine.Remote = (*Remote)(nil)
