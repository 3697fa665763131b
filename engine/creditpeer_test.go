package engine_test

// creditpeer_test.go: receiver credits over the real peer stack in one
// process: a client engine with device memory (the fake GPU, through
// the copy staging) writes and reads a peer's region under an automatic
// window from the server's issuer. The issuer's own count of the
// client's frames shows what was outstanding never passed the window,
// and every owner, host or device, READ or WRITE, spent its credit at
// its handoff.

import (
	"context"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer"
)

func TestCreditOverPeerDeviceMemory(t *testing.T) {
	const (
		window = 1 << 20
		chunk  = 256 << 10
		total  = 4 << 20
	)
	srv := gpuEngine(t, newFakeGPU(1), nil, nil)
	kv := register(t, srv, total)
	x := peer.NewIssuer(peer.IssuerLimits{MaxSessions: 4, MaxBytes: 4 * window, MaxRequests: 64, BytesPerSender: window, RequestsPerSender: 8})
	server := peer.NewServer(peer.ServerConfig{Name: "srv", Key: peerTestKey, IOTimeout: 10 * time.Second, MaxSlice: peer.DefaultMaxSlice, Credit: x}, regionExports{"kv": kv})
	if err := server.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { server.Close() })
	addr := server.Addr().String()

	cli := gpuEngine(t, newFakeGPU(1), nil, func(c *config.Engine) { c.MaxReceiverCreditSessions = 2 })
	local := deviceRegion(t, cli, 0, total)
	ctx := context.Background()
	const epoch = 0xc0ffee // the segment's lanes and the credit connection prove one identity
	dial := func() *peer.Conn {
		c, err := peer.Dial(ctx, addr, peer.Config{Name: "cli", Epoch: epoch, Key: peerTestKey, Lanes: 2, IOTimeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	r, err := peer.OpenRemote(ctx, dial(), "kv")
	if err != nil {
		t.Fatal(err)
	}
	seg, err := cli.OpenRemoteSegment("hp_tcp://"+addr+"/kv", r, engine.PermReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.CloseRemoteSegment(seg, time.Second) })
	is := peer.NewCreditIssuer(dial())
	if err := cli.ConnectReceiverCredit(ctx, addr, r.Info().Epoch, is, 0); err != nil {
		t.Fatal(err)
	}
	for _, op := range []engine.Op{engine.OpWrite, engine.OpRead} {
		b, err := cli.AllocateBatch(total / chunk)
		if err != nil {
			t.Fatal(err)
		}
		for off := uint64(0); off < total; off += chunk {
			req := []engine.Request{{Address: local.BaseAddress() + off, TargetOffset: off, Length: chunk}}
			if _, err := b.SubmitWith(op, seg, req, nil, engine.SubmitOptions{Timeout: time.Minute}); err != nil {
				t.Fatal(err)
			}
		}
		b.Seal()
		if st, err := b.Wait(30 * time.Second); err != nil || st != engine.StateCompleted {
			t.Fatalf("%s: %v %v", op, st, err)
		}
		b.Free()
	}
	s := x.Stats()
	if len(s.List) != 1 || s.List[0].ServedBytes != 2*total || s.List[0].PeakOutstandingBytes > window || s.Overruns != 0 {
		t.Fatalf("issuer: %+v", s)
	}
	var bs engine.CreditBindingStats
	for _, b := range cli.ReceiverCreditStats().Bindings {
		bs = b
	}
	if d := bs.Resource(engine.CreditDataBytes); d.Consumed != 2*total || d.Reserved != 0 || bs.Refunds != 0 || bs.Completed[0] != 2*total {
		t.Fatalf("binding: %+v", bs)
	}
	if err := cli.DisconnectReceiverCredit(ctx, addr); err != nil {
		t.Fatal(err)
	}
	if s := x.Stats(); s.Senders != 0 || s.Tombstones != 1 {
		t.Fatalf("issuer after disconnect: %+v", s)
	}
}
