// remote.go owns peer segments at the control plane: the URI grammar
// (tcp://HOST:PORT/REGION for one lane, hp_tcp://HOST:PORT/REGION for
// the configured lanes) and their open through Options.DialRemote.
//
// Invariants:
//   - A peer segment reaches the peer with the daemon's own key, so only
//     privileged callers (owner.go) open one.
//   - A failed open leaves no connection behind.

package control

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"

	"github.com/orbitefs/orbitefs/engine"
)

// RemoteURI is a parsed peer segment URI.
type RemoteURI struct {
	Scheme string // "tcp" (one lane) or "hp_tcp" (the configured lanes)
	Addr   string // host:port
	Region string // the peer's exported region
}

// ParseRemoteURI parses tcp://HOST:PORT/REGION and hp_tcp://HOST:PORT/REGION;
// ok is false for any other scheme.
func ParseRemoteURI(uri string) (u RemoteURI, ok bool, err error) {
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
