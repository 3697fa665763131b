// peer.go owns the [peer] section: the listener for other engines
// (off while listen is empty), this engine's advertised name, the key
// file, the client side's lanes and timeouts, and the bounds on
// completion notifications (the receiver's inbox, the sender's pending
// ones, one message).
//
// Invariants:
//   - With listen set, key_file is required: a daemon never serves peers
//     without authentication.
//   - Every bound is checked at load with the key's name and value.

package config

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// Peer configures engine-to-engine transfers.
type Peer struct {
	// Listen is host:port to accept peers on; "" disables the listener.
	Listen string `toml:"listen"`
	// Name is this engine's advertised name; "" is the host name.
	Name string `toml:"name"`
	// KeyFile holds the shared secret (mode 0600, at least 16 bytes).
	KeyFile string `toml:"key_file"`
	// AllowedNetworks, when not empty, are the only networks (CIDR) peers
	// may connect from; others are closed before the handshake.
	AllowedNetworks []string `toml:"allowed_networks"`
	// Lanes is the number of data connections a client opens to one
	// peer: 1 is tcp, more is hp_tcp (large requests striped).
	Lanes int `toml:"lanes"`
	// DialTimeout bounds connecting and the handshake.
	DialTimeout Duration `toml:"dial_timeout"`
	// IOTimeout bounds a stall of a frame once begun or of the wait for
	// its reply (no byte moving for that long), and a handshake.
	IOTimeout Duration `toml:"io_timeout"`
	// KeepAliveInterval is the control connection's ping interval, and
	// the idleness after which a lane is pinged before it carries data.
	KeepAliveInterval Duration `toml:"keepalive_interval"`
	// PayloadChecksum adds a CRC32C of every payload.
	PayloadChecksum bool `toml:"payload_checksum"`
	// FrameProtection guards every frame after the handshake: "none"
	// (checksums against accidents only) or "aead" (AES-256-GCM under
	// per-connection keys). Both ends of a connection must agree.
	FrameProtection string `toml:"frame_protection"`
	// MaxSliceBytes is the largest payload of one frame (and so of one
	// slice of a striped request).
	MaxSliceBytes Size `toml:"max_slice_bytes"`
	// BulkGateLinger is how long the process's bulk gate stays engaged
	// after a small READ or WRITE (a client's reply, or the listener's
	// answer to one): while engaged, bulk payload copies leave a CPU free
	// so the next small request is noticed at once beside a stream.
	// 0: the gate is never engaged.
	BulkGateLinger Duration `toml:"bulk_gate_linger"`
	// MaxHandshakes bounds the listener's connections accepted and not
	// yet past the handshake; at the bound a newcomer displaces one.
	MaxHandshakes int `toml:"max_handshakes"`
	// MaxPendingNotifications bounds the inbox's unread notifications (a
	// receiver); a sender's are bounded by engine.max_pending_notifications.
	MaxPendingNotifications int `toml:"max_pending_notifications"`
	// MaxPendingNotificationBytes bounds the inbox's bytes the same way.
	MaxPendingNotificationBytes Size `toml:"max_pending_notification_bytes"`
	// MaxPendingNotificationsPerPeer bounds the unread ones from one
	// sender, so one chatty peer cannot fill the inbox for all.
	MaxPendingNotificationsPerPeer int `toml:"max_pending_notifications_per_peer"`
	// MaxNotificationBytes bounds one notification's message.
	MaxNotificationBytes Size `toml:"max_notification_bytes"`
	// NotifyRetryInterval is the wait before a notification that was
	// definitely not delivered (busy, or nothing posted) is sent again;
	// each further wait doubles, up to NotifyRetryMaxInterval. The
	// submission's deadline ends the attempts.
	NotifyRetryInterval    Duration `toml:"notify_retry_interval"`
	NotifyRetryMaxInterval Duration `toml:"notify_retry_max_interval"`
	// ReceiverCredit is the credit issuer this engine runs as a receiver.
	ReceiverCredit ReceiverCredit `toml:"receiver_credit"`
}

// The bounds of [peer].
const (
	MaxPeerLanes                       = 64
	MinPeerSlice                       = 1 << 20
	MaxPeerSlice                       = 1 << 30
	MaxHandshakesCeiling               = 1 << 16
	maxPeerNameLen                     = 255
	minPeerDuration                    = Duration(1e6) // 1ms
	MaxPendingNotificationsCeiling     = 1 << 20
	MaxNotificationBytesCeiling        = 1 << 20 // fits one frame at the smallest max_slice_bytes
	MaxPendingNotificationBytesCeiling = 1 << 30
	maxNotifyRetryInterval             = Duration(60e9) // 1m
	maxNotifyRetryMaxInterval          = Duration(600e9)
	// MaxBulkGateLinger bounds peer.bulk_gate_linger: longer only keeps
	// a bulk-only process gated after its last small request.
	MaxBulkGateLinger = Duration(10e9) // 10s
)

// CheckBulkGateLinger is peer.bulk_gate_linger's bound, for the key and
// for a flag that overrides it (named by key).
func CheckBulkGateLinger(key string, d Duration) error {
	if d < 0 || d > MaxBulkGateLinger {
		return fmt.Errorf("%s (%s) must be in [0, 10s] (0: the bulk gate is never engaged)", key, d)
	}
	return nil
}

// CheckFrameProtection is peer.frame_protection's check, for the key and
// for a flag that overrides it (named by key).
func CheckFrameProtection(key, v string) error {
	if v != "none" && v != "aead" {
		return fmt.Errorf("%s %q: want \"none\" (frames in the clear, checksummed) or \"aead\" (every frame after the handshake encrypted and authenticated; both ends must set it)", key, v)
	}
	return nil
}

func (c *Peer) validate(p *problems) {
	if c.Listen != "" {
		host, port, err := net.SplitHostPort(c.Listen)
		n, perr := strconv.Atoi(port)
		switch {
		case err != nil:
			p.addf("peer.listen %q: want host:port, such as 127.0.0.1:7070 or [::]:7070 (%v)", c.Listen, err)
		case perr != nil || n < 0 || n > 65535:
			p.addf("peer.listen %q: port %q is not a number in [0, 65535]", c.Listen, port)
		case host != "" && net.ParseIP(host) == nil && host != "localhost":
			p.addf("peer.listen %q: host %q is not an IP address (a name could resolve to several)", c.Listen, host)
		}
		if c.KeyFile == "" {
			p.addf("peer.key_file is empty but peer.listen is %q: a listener needs the shared key (a file of mode 0600 with at least 16 bytes)", c.Listen)
		}
	}
	for _, n := range c.AllowedNetworks {
		if _, err := netip.ParsePrefix(n); err != nil {
			p.addf("peer.allowed_networks: %q is not a network in CIDR form, such as 10.0.0.0/8 or fd00::/8", n)
		}
	}
	if len(c.Name) > maxPeerNameLen {
		p.addf("peer.name is %d bytes, more than %d", len(c.Name), maxPeerNameLen)
	}
	p.between("peer.lanes", c.Lanes, 1, MaxPeerLanes)
	for _, d := range []struct {
		key string
		v   Duration
	}{{"peer.dial_timeout", c.DialTimeout}, {"peer.io_timeout", c.IOTimeout}} {
		if d.v < minPeerDuration {
			p.addf("%s (%s) must be at least 1ms", d.key, d.v)
		}
	}
	if c.KeepAliveInterval != 0 && c.KeepAliveInterval < minPeerDuration {
		p.addf("peer.keepalive_interval (%s) must be 0 (off) or at least 1ms", c.KeepAliveInterval)
	}
	if err := CheckFrameProtection("peer.frame_protection", c.FrameProtection); err != nil {
		p.addf("%v", err)
	}
	if c.MaxSliceBytes < MinPeerSlice || c.MaxSliceBytes > MaxPeerSlice {
		p.addf("peer.max_slice_bytes (%s) must be in [1MiB, 1GiB]", c.MaxSliceBytes)
	}
	if err := CheckBulkGateLinger("peer.bulk_gate_linger", c.BulkGateLinger); err != nil {
		p.addf("%v", err)
	}
	p.between("peer.max_handshakes", c.MaxHandshakes, 1, MaxHandshakesCeiling)
	p.between("peer.max_pending_notifications", c.MaxPendingNotifications, 1, MaxPendingNotificationsCeiling)
	if c.MaxPendingNotificationsPerPeer < 1 || c.MaxPendingNotificationsPerPeer > c.MaxPendingNotifications {
		p.addf("peer.max_pending_notifications_per_peer (%d) must be in [1, peer.max_pending_notifications (%d)]",
			c.MaxPendingNotificationsPerPeer, c.MaxPendingNotifications)
	}
	if c.MaxNotificationBytes < 1 || c.MaxNotificationBytes > MaxNotificationBytesCeiling {
		p.addf("peer.max_notification_bytes (%s) must be in [1, 1MiB]", c.MaxNotificationBytes)
	}
	if c.MaxPendingNotificationBytes < c.MaxNotificationBytes || c.MaxPendingNotificationBytes > MaxPendingNotificationBytesCeiling {
		p.addf("peer.max_pending_notification_bytes (%s) must be in [peer.max_notification_bytes (%s), 1GiB]",
			c.MaxPendingNotificationBytes, c.MaxNotificationBytes)
	}
	if c.NotifyRetryInterval < minPeerDuration || c.NotifyRetryInterval > maxNotifyRetryInterval {
		p.addf("peer.notify_retry_interval (%s) must be in [1ms, 1m]", c.NotifyRetryInterval)
	}
	if c.NotifyRetryMaxInterval < c.NotifyRetryInterval || c.NotifyRetryMaxInterval > maxNotifyRetryMaxInterval {
		p.addf("peer.notify_retry_max_interval (%s) must be in [peer.notify_retry_interval (%s), 10m]",
			c.NotifyRetryMaxInterval, c.NotifyRetryInterval)
	}
	c.ReceiverCredit.validate(p)
	if c.ReceiverCredit.Enabled && c.Listen == "" {
		p.addf("peer.receiver_credit.enabled is true but peer.listen is empty: senders reach the issuer through the listener")
	}
}
