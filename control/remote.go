// remote.go owns peer segments at the control plane: the URI grammar
// (tcp://HOST:PORT/REGION for one lane, hp_tcp://HOST:PORT/REGION for
// the configured lanes, peer://NAME/REGION for an engine of the cluster
// by its name, with the configured lanes) and their open through
// Options.DialRemote.
//
// Invariants:
//   - A peer segment reaches the peer with the daemon's own key, so only
//     privileged callers (owner.go) open one.
//   - A failed open leaves no connection behind.
//   - peer://NAME resolves through this daemon's view of the cluster at
//     open: a name the view does not list (the engine left) is
//     KindNotFound before anything is dialed, and the dialer sends
//     nothing to an engine that is not NAME with the epoch the view
//     lists (it restarted since): KindNotFound too, effect none. The
//     dialer's connection resolves NAME again at every redial, so the
//     segment follows the engine to a new address.

package control

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"unicode"

	"github.com/orbitefs/orbitefs/engine"
)

// RemoteURI is a parsed peer segment URI.
type RemoteURI struct {
	// Scheme is "tcp" (one lane), "hp_tcp" (the configured lanes) or
	// "peer" (by name, the configured lanes).
	Scheme string
	Addr   string // host:port; for peer://, the address the cluster lists
	Region string // the peer's exported region
	// Name and Epoch, for peer://NAME, are the engine the cluster lists
	// (Epoch as 16 hex digits, set at open): the dialer sends nothing to
	// another engine or another epoch.
	Name, Epoch string
}

// maxPeerName bounds a cluster name (a key's last element in etcd).
const maxPeerName = 255

// peerName checks a cluster engine's name: 1 to 255 bytes, printable,
// no '/', no space.
func peerName(name string) error {
	if name == "" || len(name) > maxPeerName {
		return fmt.Errorf("engine name of %d bytes: want 1 to %d", len(name), maxPeerName)
	}
	for _, c := range name {
		if c == '/' || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return fmt.Errorf("engine name %s: %q is not allowed (printable, no '/', no space)", quoteText(name, 300), c)
		}
	}
	return nil
}

// ParseRemoteURI parses tcp://HOST:PORT/REGION, hp_tcp://HOST:PORT/REGION
// and peer://NAME/REGION; ok is false for any other scheme.
func ParseRemoteURI(uri string) (u RemoteURI, ok bool, err error) {
	if rest, found := strings.CutPrefix(uri, "peer://"); found {
		u.Scheme = "peer"
		name, region, slash := strings.Cut(rest, "/")
		if !slash || region == "" {
			return u, true, invalid("uri %s: no region: want peer://NAME/REGION", quoteText(uri, 300))
		}
		if err := peerName(name); err != nil {
			return u, true, invalid("uri %s: %v", quoteText(uri, 300), err)
		}
		if err := ValidateName(region); err != nil {
			return u, true, invalid("uri %s: region name: %v", quoteText(uri, 300), err)
		}
		u.Name, u.Region = name, region
		return u, true, nil
	}
	for _, scheme := range []string{"tcp", "hp_tcp"} {
		rest, found := strings.CutPrefix(uri, scheme+"://")
		if !found {
			continue
		}
		u.Scheme = scheme
		addr, region, slash := strings.Cut(rest, "/")
		if !slash || region == "" {
			return u, true, invalid("uri %s: no region: want %s://HOST:PORT/REGION", quoteText(uri, 300), scheme)
		}
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" {
			return u, true, invalid("uri %s: address %s: want HOST:PORT", quoteText(uri, 300), quoteText(addr, 300))
		}
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			return u, true, invalid("uri %s: port %s: want 1 to 65535", quoteText(uri, 300), quoteText(port, 20))
		}
		if err := ValidateName(region); err != nil {
			return u, true, invalid("uri %s: region name: %v", quoteText(uri, 300), err)
		}
		u.Addr, u.Region = addr, region
		return u, true, nil
	}
	return u, false, nil
}

// openRemote dials the peer of u for c and opens its region as a
// segment with perm.
func (s *Service) openRemote(c *engine.Caller, uri string, u RemoteURI, perm engine.Permission) (*engine.RemoteSegment, error) {
	if !s.privileged(c) {
		return nil, detail(engine.KindPermission, "uri %s: a peer segment uses the daemon's peer key; only root or the daemon's user (uid %d) may open one, not uid %d", uri, s.euid, c.UID)
	}
	if s.opts.DialRemote == nil {
		return nil, detail(engine.KindUnavailable, "uri %s: peers are not configured: set [peer] key_file in the daemon's config", uri)
	}
	if u.Scheme == "peer" {
		if s.opts.Cluster == nil {
			return nil, detail(engine.KindUnavailable, "uri %s: peer://NAME resolves through the cluster, and this daemon is no member: set [cluster] etcd_endpoints, or give tcp://HOST:PORT/REGION", uri)
		}
		p, ok := s.ClusterPeer(u.Name)
		if !ok {
			return nil, notFound("uri %s: no engine named %s in the cluster: it left, or never joined (ls /cluster/peers)", uri, quoteText(u.Name, 300))
		}
		u.Addr, u.Epoch = p.Addr, p.Epoch
	}
	r, err := s.opts.DialRemote(context.Background(), u)
	if err != nil {
		return nil, kinded(err)
	}
	seg, err := s.e.OpenRemoteSegment(uri, r, perm)
	if err != nil {
		r.Close()
		return nil, err
	}
	return seg, nil
}

// kinded gives an error from another package (the peer client's, which
// matches the engine's kind sentinels through errors.Is) its engine kind.
func kinded(err error) error {
	if engine.KindOf(err) != engine.KindUnknown {
		return err
	}
	for k, sentinel := range kindSentinels {
		if errors.Is(err, sentinel) {
			return &detailError{kind: k, err: err}
		}
	}
	return &detailError{kind: engine.KindIO, err: err}
}
