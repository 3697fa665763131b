package config_test

// libdefaults_test.go holds the peer package's own defaults, which a Go
// program using it without a config file gets, to the [peer] defaults
// the daemon reads from default.toml: the same limits on either path.

import (
	"testing"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/peer"
)

func TestPeerLibraryDefaultsMatchConfig(t *testing.T) {
	d, err := config.Parse("")
	if err != nil {
		t.Fatal(err)
	}
	c := d.Peer
	for _, x := range []struct {
		key       string
		lib, conf uint64
	}{
		{"peer.max_slice_bytes (peer.DefaultMaxSlice)", peer.DefaultMaxSlice, uint64(c.MaxSliceBytes)},
		{"peer.max_pending_notifications (peer.DefaultMaxPending)", peer.DefaultMaxPending, uint64(c.MaxPendingNotifications)},
		{"peer.max_pending_notifications_per_peer (peer.DefaultMaxPendingPerSender)", peer.DefaultMaxPendingPerSender, uint64(c.MaxPendingNotificationsPerPeer)},
		{"peer.max_pending_notification_bytes (peer.DefaultMaxPendingBytes)", peer.DefaultMaxPendingBytes, uint64(c.MaxPendingNotificationBytes)},
		{"peer.max_notification_bytes (peer.DefaultMaxNotifyBytes)", peer.DefaultMaxNotifyBytes, uint64(c.MaxNotificationBytes)},
		{"peer.bulk_gate_linger in ns (peer.DefaultGateLinger)", uint64(peer.DefaultGateLinger), uint64(c.BulkGateLinger)},
	} {
		if x.lib != x.conf {
			t.Errorf("%s: the peer package's default is %d, default.toml's %d", x.key, x.lib, x.conf)
		}
	}
}
