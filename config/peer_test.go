package config

import (
	"strings"
	"testing"
	"time"
)

func TestPeerDefaultsOff(t *testing.T) {
	d, err := Parse("")
	if err != nil {
		t.Fatal(err)
	}
	p := d.Peer
	if p.Listen != "" || p.Lanes != 1 || p.IOTimeout.String() != "30s" || p.DialTimeout.String() != "5s" ||
		p.KeepAliveInterval.String() != "15s" || p.MaxSliceBytes != 64<<20 || p.PayloadChecksum ||
		p.BulkGateLinger.D() != 250*time.Millisecond || p.FrameProtection != "none" {
		t.Fatalf("peer defaults %+v", p)
	}
}

func TestPeerValidation(t *testing.T) {
	for _, tc := range []struct{ toml, want string }{
		{`listen = "127.0.0.1:7070"`, `peer.key_file is empty but peer.listen is "127.0.0.1:7070"`},
		{`listen = "7070"
key_file = "/k"`, `peer.listen "7070": want host:port`},
		{`listen = "127.0.0.1:70700"
key_file = "/k"`, `port "70700" is not a number in [0, 65535]`},
		{`listen = "example.com:7070"
key_file = "/k"`, `host "example.com" is not an IP address`},
		{`lanes = 0`, `peer.lanes (0) must be in [1, 64]`},
		{`lanes = 65`, `peer.lanes (65) must be in [1, 64]`},
		{`io_timeout = "0s"`, `peer.io_timeout (0s) must be at least 1ms`},
		{`dial_timeout = "10us"`, `peer.dial_timeout (10µs) must be at least 1ms`},
		{`keepalive_interval = "1us"`, `peer.keepalive_interval (1µs) must be 0 (off) or at least 1ms`},
		{`max_slice_bytes = "512KiB"`, `peer.max_slice_bytes (512KiB) must be in [1MiB, 1GiB]`},
		{`bulk_gate_linger = "-1ms"`, `peer.bulk_gate_linger (line 2): duration "-1ms": must not be negative`},
		{`bulk_gate_linger = "1h"`, `peer.bulk_gate_linger (1h0m0s) must be in [0, 10s] (0: the bulk gate is never engaged)`},
		{`bulk_gate_linger = 250`, `peer.bulk_gate_linger (line 2): duration 250: want a duration like 5s`},
		{`lanse = 2`, `lanse`},
		{`frame_protection = "tls"`, `peer.frame_protection "tls": want "none" (frames in the clear, checksummed) or "aead"`},
		{`frame_protection = ""`, `peer.frame_protection "": want "none"`},
		{`allowed_networks = ["10.0.0.0/8", "10.1.2.3"]`, `peer.allowed_networks: "10.1.2.3" is not a network in CIDR form`},
	} {
		_, err := Parse("[peer]\n" + tc.toml + "\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.toml, err, tc.want)
		}
	}
	d, err := Parse("[peer]\nlisten = \"127.0.0.1:0\"\nkey_file = \"/k\"\nlanes = 4\nkeepalive_interval = \"0s\"\nbulk_gate_linger = \"0s\"\nframe_protection = \"aead\"\n")
	if err != nil || d.Peer.Lanes != 4 || d.Peer.Listen != "127.0.0.1:0" || d.Peer.BulkGateLinger != 0 || d.Peer.FrameProtection != "aead" {
		t.Fatalf("a valid [peer]: %v %+v", err, d)
	}
}

func TestPeerNotificationBounds(t *testing.T) {
	d, err := Parse("")
	if err != nil {
		t.Fatal(err)
	}
	p := d.Peer
	if p.MaxPendingNotifications != 1024 || p.MaxPendingNotificationBytes != 4<<20 ||
		p.MaxPendingNotificationsPerPeer != 256 || p.MaxNotificationBytes != 64<<10 ||
		p.NotifyRetryInterval.D() != 10*time.Millisecond || p.NotifyRetryMaxInterval.D() != time.Second {
		t.Fatalf("notification defaults %+v", p)
	}
	if p.MaxHandshakes != 64 {
		t.Fatalf("max_handshakes default %d, want 64", p.MaxHandshakes)
	}
	for _, tc := range []struct{ toml, want string }{
		{`max_handshakes = 0`, `peer.max_handshakes (0) must be in [1, 65536]`},
		{`max_handshakes = 65537`, `peer.max_handshakes (65537) must be in [1, 65536]`},
		{`max_pending_notifications = 0`, `peer.max_pending_notifications (0) must be in [1, 1048576]`},
		{`max_pending_notifications_per_peer = 1025`, `peer.max_pending_notifications_per_peer (1025) must be in [1, peer.max_pending_notifications (1024)]`},
		{`max_pending_notifications_per_peer = 0`, `peer.max_pending_notifications_per_peer (0) must be in [1,`},
		{`max_notification_bytes = "2MiB"`, `peer.max_notification_bytes (2MiB) must be in [1, 1MiB]`},
		{`max_notification_bytes = 0`, `peer.max_notification_bytes (0B) must be in [1, 1MiB]`},
		{`max_pending_notification_bytes = "32KiB"`, `peer.max_pending_notification_bytes (32KiB) must be in [peer.max_notification_bytes (64KiB), 1GiB]`},
		{`notify_retry_interval = "0s"`, `peer.notify_retry_interval (0s) must be in [1ms, 1m]`},
		{`notify_retry_interval = "2m"`, `peer.notify_retry_interval (2m0s) must be in [1ms, 1m]`},
		{`notify_retry_max_interval = "5ms"`, `peer.notify_retry_max_interval (5ms) must be in [peer.notify_retry_interval (10ms), 10m]`},
		{`notify_retry_max_interval = "11m"`, `peer.notify_retry_max_interval (11m0s) must be in [peer.notify_retry_interval (10ms), 10m]`},
	} {
		_, err := Parse("[peer]\n" + tc.toml + "\n")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.toml, err, tc.want)
		}
	}
}

// TestPendingNotificationBytesFitAMessage: the sender's pending budget
// below the largest message would refuse such a message with EAGAIN for
// ever; the config is refused instead, naming both keys.
func TestPendingNotificationBytesFitAMessage(t *testing.T) {
	_, err := Parse("[engine]\nmax_pending_notification_bytes = \"32KiB\"\n")
	want := "invalid config: engine.max_pending_notification_bytes (32KiB) must be >= peer.max_notification_bytes (64KiB): one pending notification with the largest message must fit"
	if err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
	if _, err := Parse("[engine]\nmax_pending_notification_bytes = \"32KiB\"\n[peer]\nmax_notification_bytes = \"32KiB\"\nmax_pending_notification_bytes = \"32KiB\"\n"); err != nil {
		t.Errorf("a budget equal to the largest message is refused: %v", err)
	}
}
