// peers.go owns the daemon's peer figures in the mount: one entry per
// peer connection, both directions (the engines this daemon dialed, for
// segments and notifications, and the sessions peers opened to its
// listener), in /peers, /stats and /metrics.
//
// Invariants:
//   - An entry's name is unique among those listed at once and stable
//     for the connection's life: out-ID for a connection this daemon
//     dialed, in-ID for a session a peer opened (IDs never reused).
//   - An entry that closed reads ENOENT and leaves the listing at once;
//     nothing is cached.

package control

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// PeerConn is one peer connection's figures.
type PeerConn struct {
	Entry     string `json:"entry"`     // its name under /peers
	ID        uint64 `json:"-"`         // unique per Direction
	Direction string `json:"direction"` // out: this daemon dialed it; in: the peer did
	Addr      string `json:"addr"`      // the peer's address
	Name      string `json:"name"`      // the peer's proved name
	Epoch     string `json:"epoch"`
	// Lanes: configured bulk lanes (out), lanes open now (in).
	Lanes     int    `json:"lanes"`
	OpenLanes int    `json:"open_lanes,omitempty"` // out: open now, the small lane included
	State     string `json:"state"`
	// Bytes: on the wire, frames included (out); payload (in).
	BytesSent     uint64    `json:"bytes_sent"`
	BytesReceived uint64    `json:"bytes_received"`
	Frames        uint64    `json:"frames"` // requests sent (out) or served (in)
	Errors        uint64    `json:"errors"`
	RTTMicros     float64   `json:"rtt_us,omitempty"` // out: average small round trip
	Since         time.Time `json:"since"`
}

// PeerListener is the peer listener's totals since it started: what the
// per-connection entries cannot show, connections that never became
// sessions (refused at the handshake, displaced while in it, ended by a
// corrupt frame).
type PeerListener struct {
	Sessions    int    `json:"sessions"`    // open now
	Lanes       int    `json:"lanes"`       // open now
	Handshaking int    `json:"handshaking"` // connections in their handshake now
	Refused     uint64 `json:"refused"`     // connections refused at the handshake (wrong key, network not allowed, superseded epoch)
	Displaced   uint64 `json:"displaced"`   // closed in their handshake to make room (peer.max_handshakes)
	Corrupt     uint64 `json:"corrupt"`     // connections ended by a frame that failed a check
	Reads       uint64 `json:"reads"`       // requests served, refused ones included
	Writes      uint64 `json:"writes"`
	BytesIn     uint64 `json:"bytes_in"` // payload bytes
	BytesOut    uint64 `json:"bytes_out"`
	Notified    uint64 `json:"notified"`      // notifications queued in the inbox
	InboxFull   uint64 `json:"inbox_full"`    // notifications answered busy
	Pending     int    `json:"inbox_pending"` // notifications waiting in the inbox now
}

// listenerMetrics are the listener's series of /metrics.
var listenerMetrics = []struct {
	name, typ, help string
	value           func(*PeerListener) float64
}{
	{"peer_listener_sessions", "gauge", "Peer sessions open on the listener.", func(l *PeerListener) float64 { return float64(l.Sessions) }},
	{"peer_listener_handshaking", "gauge", "Connections in their handshake.", func(l *PeerListener) float64 { return float64(l.Handshaking) }},
	{"peer_listener_refused_total", "counter", "Connections refused at the handshake.", func(l *PeerListener) float64 { return float64(l.Refused) }},
	{"peer_listener_displaced_total", "counter", "Connections closed in their handshake to make room.", func(l *PeerListener) float64 { return float64(l.Displaced) }},
	{"peer_listener_corrupt_total", "counter", "Connections ended by a frame that failed a check.", func(l *PeerListener) float64 { return float64(l.Corrupt) }},
	{"peer_listener_inbox_full_total", "counter", "Notifications answered busy (inbox full).", func(l *PeerListener) float64 { return float64(l.InboxFull) }},
}

// appendListenerMetrics appends the listener's series to b.
func appendListenerMetrics(b []byte, l *PeerListener) []byte {
	for _, m := range listenerMetrics {
		b = fmt.Appendf(b, "# HELP orbitefs_%s %s\n# TYPE orbitefs_%s %s\norbitefs_%s %s\n", m.name, m.help, m.name, m.typ,
			m.name, strconv.FormatFloat(m.value(l), 'f', -1, 64))
	}
	return b
}

// PeersEnabled reports whether the daemon has peer figures.
func (s *Service) PeersEnabled() bool { return s.opts.Peers != nil }

// PeerConns lists the peer connections: out first, then in, each by ID.
func (s *Service) PeerConns() []PeerConn {
	if s.opts.Peers == nil {
		return nil
	}
	ps := s.opts.Peers()
	for i := range ps {
		ps[i].Entry = fmt.Sprintf("%s-%d", ps[i].Direction, ps[i].ID)
	}
	return ps
}

// PeerConn finds a listed connection by its entry name.
func (s *Service) PeerConn(entry string) (PeerConn, bool) {
	if !strings.HasPrefix(entry, "out-") && !strings.HasPrefix(entry, "in-") {
		return PeerConn{}, false
	}
	for _, p := range s.PeerConns() {
		if p.Entry == entry {
			return p, true
		}
	}
	return PeerConn{}, false
}

// PeerInfo renders /peers/ENTRY: KindNotFound once it closed.
func (s *Service) PeerInfo(entry string) ([]byte, error) {
	p, ok := s.PeerConn(entry)
	if !ok {
		return nil, s.fail(scope{op: "read", name: "peers/" + entry}, notFound("peer connection %q closed (ls /peers)", entry))
	}
	return marshal(p), nil
}

// peerMetrics are the per-connection series of /metrics, labelled by
// direction, entry, peer name and address.
var peerMetrics = []struct {
	name, typ, help string
	value           func(*PeerConn) float64
}{
	{"peer_sent_bytes_total", "counter", "Bytes sent to the peer (out: on the wire; in: reply payloads).", func(p *PeerConn) float64 { return float64(p.BytesSent) }},
	{"peer_received_bytes_total", "counter", "Bytes received from the peer (out: on the wire; in: write payloads).", func(p *PeerConn) float64 { return float64(p.BytesReceived) }},
	{"peer_frames_total", "counter", "Requests sent to the peer (out) or served for it (in).", func(p *PeerConn) float64 { return float64(p.Frames) }},
	{"peer_errors_total", "counter", "Error replies and failed connections.", func(p *PeerConn) float64 { return float64(p.Errors) }},
	{"peer_lanes", "gauge", "Data lanes: configured (out) or open (in).", func(p *PeerConn) float64 { return float64(p.Lanes) }},
	{"peer_rtt_seconds", "gauge", "Moving average of small round trips to the peer (out only; 0 before the first).", func(p *PeerConn) float64 { return p.RTTMicros / 1e6 }},
	{"peer_up", "gauge", "1 while the connection is usable.", func(p *PeerConn) float64 { return b2f(!strings.HasPrefix(p.State, "failed")) }},
}

// appendPeerMetrics appends the peer series to b, each metric's HELP and
// TYPE once.
func appendPeerMetrics(b []byte, ps []PeerConn) []byte {
	for _, m := range peerMetrics {
		b = fmt.Appendf(b, "# HELP orbitefs_%s %s\n# TYPE orbitefs_%s %s\n", m.name, m.help, m.name, m.typ)
		for i := range ps {
			p := &ps[i]
			b = fmt.Appendf(b, "orbitefs_%s{direction=%q,entry=%q,peer=%q,addr=%q} %s\n", m.name, p.Direction, p.Entry, p.Name, p.Addr,
				strconv.FormatFloat(m.value(p), 'f', -1, 64))
		}
	}
	return b
}
