// remote.go owns the adapter that lets the engine reach one exported
// region of a peer as an engine.Remote (a remote segment's transport):
// ReadAt and WriteAt over a Conn, with the Conn's effect rules carried
// over unchanged.
//
// Invariants:
//   - The adapter owns its Conn: Close closes it.
//   - WriteAt's effect is the Conn's (EffectOf): applied only when every
//     slice was acknowledged, none only when nothing was posted.

package peer

import (
	"context"
	"fmt"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// Remote is one exported region of a connected peer, as the engine's
// remote segments use it.
type Remote struct {
	c    *Conn
	info engine.RemoteInfo
}

// OpenRemote looks up region on c (refreshing the descriptors once) and
// returns it as an engine.Remote that owns c. It fails with
// engine.KindNotFound when the peer exports no such region; c stays the
// caller's then.
func OpenRemote(ctx context.Context, c *Conn, region string) (*Remote, error) {
	d, err := c.descriptor(ctx, "open", region)
	if err != nil {
		return nil, err
	}
	return &Remote{c: c, info: engine.RemoteInfo{Address: c.addr, Peer: c.peerName, Epoch: c.peerEpoch,
		Region: d.Name, Size: d.Bytes, Export: permission(d.Perm), Lanes: c.cfg.Lanes, Unit: c.cfg.MaxSlice,
		IPC: remoteIPC(d)}}, nil
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
	return r.c.Read(ctx, r.info.Region, off, p)
}

// WriteAt stores p at off of the region and returns its remote effect.
func (r *Remote) WriteAt(ctx context.Context, p []byte, off uint64) (engine.RemoteEffect, error) {
	err := r.c.Write(ctx, r.info.Region, off, p)
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

// Info describes the region as the peer announced it at open.
func (r *Remote) Info() engine.RemoteInfo { return r.info }

// Close closes the connection.
func (r *Remote) Close() error { return r.c.Close() }

var _ engine.Remote = (*Remote)(nil)
