// credit.go owns the daemon's receiver credits: its issuer (from
// [peer.receiver_credit], served by the peer listener) and the dialer a
// credit connect uses to reach another daemon's issuer, under this
// daemon's name and epoch (the ones its segments' lanes prove, so the
// receiver counts their frames against the same window).

package main

import (
	"context"
	"log/slog"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer"
)

// newIssuer builds the issuer when [peer.receiver_credit] enabled is
// set, and shows it in opts; nil otherwise.
func newIssuer(c config.ReceiverCredit, opts *control.Options) *peer.Issuer {
	if !c.Enabled {
		return nil
	}
	x := peer.NewIssuer(peer.IssuerLimits{MaxSessions: c.MaxSessions,
		MaxBytes: uint64(c.MaxBytes), MaxRequests: uint64(c.MaxRequests),
		BytesPerSender: uint64(c.BytesPerSender), RequestsPerSender: uint64(c.RequestsPerSender),
		MaxStagingSlots: uint64(c.MaxStagingSlots), MaxConsumerSlots: uint64(c.MaxConsumerSlots),
		StagingSlotsPerSender: uint64(c.StagingSlotsPerSender), ConsumerSlotsPerSender: uint64(c.ConsumerSlotsPerSender)})
	opts.CreditIssuer = func() any { return x.Stats() }
	return x
}

// creditDialer dials a peer's issuer with [peer]'s key and timeouts; nil
// without a key_file (credit connect is then refused).
func creditDialer(c config.Peer, n *notifications, lg *slog.Logger) control.CreditDialFunc {
	if n.key == nil {
		return nil
	}
	return func(ctx context.Context, addr string) (engine.CreditIssuer, uint64, error) {
		conn, err := peer.Dial(ctx, addr, peer.Config{Name: peerName(c), Epoch: n.epoch, Key: n.key,
			DialTimeout: c.DialTimeout.D(), IOTimeout: c.IOTimeout.D(), KeepAlive: c.KeepAliveInterval.D(),
			Protection: peerProtection(c), MaxSlice: uint64(c.MaxSliceBytes), Logger: lg, Gate: n.gate})
		if err != nil {
			return nil, 0, err
		}
		return peer.NewCreditIssuer(conn), conn.PeerEpoch(), nil
	}
}
