// clusterconns.go owns how the daemon's peer connections follow its view
// of the cluster: the peer:// segments' connections, pooled by engine
// name, and the epochs the view saw superseded by a restart.
//
// Invariants:
//   - When the view says an incarnation (name, epoch) left or restarted,
//     every peer:// segment's connection to that epoch is dropped, so the
//     segment's next transfer dials again and nothing more is sent under
//     that epoch's lanes and descriptors, even when its socket would not
//     tell (a partition, a crashed host: no FIN, no RST).
//   - An epoch superseded by a restart is dead for good (epochs are new
//     and random at every start): its inbound sessions are closed, and
//     its handshakes refused. One that only left may come back (its lease
//     lapsed during a partition) and is refused nothing.
//   - A segment removes its connection from the pool when it closes, so
//     the pool holds only open segments.
//   - A pooled connection's redial resolves its name again through the
//     view (lookup), so an engine that came back at another address is
//     followed there; a name the view does not list is not dialed.

package main

import (
	"context"
	"fmt"
	"sync"

	"github.com/orbitefs/orbitefs/discovery"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer"
)

// maxSuperseded bounds the superseded epochs remembered per name; an
// older one forgotten is only accepted again if that incarnation still
// runs, which a superseded one does not.
const maxSuperseded = 64

// namedRemotes are the open peer:// segments' connections, by engine name.
type namedRemotes struct {
	// lookup is the view's address of a live engine by name; nil (no
	// view) leaves redials at the address of the open.
	lookup func(name string) (addr string, ok bool)

	mu sync.Mutex
	m  map[string]map[*namedRemote]struct{}
}

// namedRemote is a peer:// segment's Remote, in the pool while open.
type namedRemote struct {
	*peer.Remote
	name string
	pool *namedRemotes
}

func (r *namedRemote) Close() error {
	r.pool.mu.Lock()
	delete(r.pool.m[r.name], r)
	if len(r.pool.m[r.name]) == 0 {
		delete(r.pool.m, r.name)
	}
	r.pool.mu.Unlock()
	return r.Remote.Close()
}

// add pools r as a connection to the engine named name, whose redials
// follow name's address in the view. Call it before r is used.
func (p *namedRemotes) add(name string, r *peer.Remote) engine.Remote {
	if lookup := p.lookup; lookup != nil {
		r.Follow(func(context.Context) (string, error) {
			addr, ok := lookup(name)
			if !ok {
				return "", fmt.Errorf("peer://%s: no engine of that name in the cluster: it left, or never joined (ls /cluster/peers): %w", name, engine.ErrNotFound)
			}
			return addr, nil
		})
	}
	nr := &namedRemote{Remote: r, name: name, pool: p}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]map[*namedRemote]struct{}{}
	}
	if p.m[name] == nil {
		p.m[name] = map[*namedRemote]struct{}{}
	}
	p.m[name][nr] = struct{}{}
	return nr
}

// forget drops the connections to name's epoch; it returns how many.
func (p *namedRemotes) forget(name string, epoch discovery.Epoch, why string) int {
	p.mu.Lock()
	rs := make([]*namedRemote, 0, len(p.m[name]))
	for r := range p.m[name] {
		rs = append(rs, r)
	}
	p.mu.Unlock()
	n := 0
	for _, r := range rs {
		if r.Forget(uint64(epoch), why) {
			n++
		}
	}
	return n
}

// superseded are the epochs of each name the view saw replaced by a
// restart, the most recent last.
type superseded map[string][]discovery.Epoch

func (s superseded) add(name string, e discovery.Epoch) {
	l := append(s[name], e)
	if len(l) > maxSuperseded {
		l = l[len(l)-maxSuperseded:]
	}
	s[name] = l
}

func (s superseded) has(name string, e discovery.Epoch) bool {
	for _, x := range s[name] {
		if x == e {
			return true
		}
	}
	return false
}
