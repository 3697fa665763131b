package engine_test

// creditbench_test.go: what receiver credit gating costs a small peer
// submission (4 KiB READ on the in-process Remote), off and on with an
// automatic window that never starves.

import (
	"context"
	"testing"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func BenchmarkRemoteCredit(b *testing.B) {
	for _, on := range []bool{false, true} {
		name := "off"
		if on {
			name = "automatic"
		}
		b.Run(name, func(b *testing.B) {
			cfg := config.DefaultEngine()
			if on {
				cfg.MaxReceiverCreditSessions = 4
			}
			var bs []engine.Backend
			for _, tr := range realTransports(cfg) {
				bs = append(bs, tr)
			}
			e, err := engine.New(cfg, bs...)
			if err != nil {
				b.Skip(err)
			}
			defer e.Close(ioTimeout)
			f := newFakeRemote(64<<10, engine.PermReadWrite, peerUnit)
			seg, err := e.OpenRemoteSegment("tcp://127.0.0.1:1/kv", f, engine.PermReadWrite)
			if err != nil {
				b.Fatal(err)
			}
			if on {
				is := &fakeIssuer{window: engine.CreditGrant{Bytes: 1 << 40, Requests: 1 << 40}}
				if err := e.ConnectReceiverCredit(context.Background(), "127.0.0.1:1", 7, is, 0); err != nil {
					b.Fatal(err)
				}
			}
			r, err := e.RegisterMemory(4096)
			if err != nil {
				b.Fatal(err)
			}
			req := []engine.Request{{Address: r.BaseAddress(), Length: 4096}}
			b.SetBytes(4096)
			b.ResetTimer()
			for b.Loop() {
				if _, err := e.SubmitAndWait(engine.OpRead, seg, req, ioTimeout); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
