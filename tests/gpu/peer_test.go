package gpu

// peer_test.go: GPU memory on both sides of a peer transfer with the
// real CUDA backend: two engines in this process, one serving its cuda:0
// region through a peer server on loopback, the other moving its own
// cuda:0 bytes to it and back over tcp and hp_tcp, both through their
// pinned copy staging; every byte checked against what was sent.

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer"
	"github.com/orbitefs/orbitefs/peer/wire"
)

type oneExport struct{ r *engine.Region }

func (x oneExport) Exports() []peer.Export {
	return []peer.Export{{Descriptor: wire.Descriptor{ID: 1, Name: "kv", Location: string(x.r.Location()), Bytes: x.r.Len(), Perm: wire.PermRead | wire.PermWrite}, Mem: x.r}}
}

func (x oneExport) Export(id uint64) (peer.Export, bool) {
	if id != 1 {
		return peer.Export{}, false
	}
	return x.Exports()[0], true
}

func TestPeerDeviceOverTCP(t *testing.T) {
	const n = 96 << 20
	srv := newEngine(t, nil)
	cli := newEngine(t, nil)
	kv, err := srv.RegisterDevice(0, n)
	if err != nil {
		t.Fatal(err)
	}
	local, err := cli.RegisterDevice(0, n)
	if err != nil {
		t.Fatal(err)
	}
	key := []byte("the gate's shared key, long enough")
	s := peer.NewServer(peer.ServerConfig{Name: "gpu-srv", Key: key, IOTimeout: time.Minute, MaxSlice: peer.DefaultMaxSlice}, oneExport{kv})
	if err := s.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, lanes := range []int{1, 4} {
		t.Run(fmt.Sprintf("lanes=%d", lanes), func(t *testing.T) {
			ctx := context.Background()
			c, err := peer.Dial(ctx, s.Addr().String(), peer.Config{Name: "gpu-cli", Key: key, Lanes: lanes, IOTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			r, err := peer.OpenRemote(ctx, c, "kv")
			if err != nil {
				c.Close()
				t.Fatal(err)
			}
			seg, err := cli.OpenRemoteSegment("tcp://"+s.Addr().String()+"/kv", r, engine.PermReadWrite)
			if err != nil {
				r.Close()
				t.Fatal(err)
			}
			defer cli.CloseRemoteSegment(seg, time.Minute)
			want := make([]byte, n)
			rand.Read(want)
			if _, err := local.WriteAt(want, 0); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			rep, err := cli.SubmitAndWait(engine.OpWrite, seg, []engine.Request{{Address: local.BaseAddress(), Length: n}}, timeout)
			if err != nil || rep.RemoteEffect != engine.EffectApplied {
				t.Fatalf("WRITE: %v, effect %v", err, rep.RemoteEffect)
			}
			t.Logf("WRITE cuda:0 -> peer cuda:0, %d MiB: %.2f GB/s", n>>20, float64(n)/time.Since(start).Seconds()/1e9)
			if !bytes.Equal(deviceBytes(t, kv, 0, n), want) {
				t.Fatal("the peer's device region differs from the bytes written")
			}
			if _, err := local.WriteAt(make([]byte, n), 0); err != nil {
				t.Fatal(err)
			}
			start = time.Now()
			if _, err := cli.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: local.BaseAddress(), Length: n}}, timeout); err != nil {
				t.Fatal(err)
			}
			t.Logf("READ peer cuda:0 -> cuda:0, %d MiB: %.2f GB/s", n>>20, float64(n)/time.Since(start).Seconds()/1e9)
			if !bytes.Equal(deviceBytes(t, local, 0, n), want) {
				t.Fatal("the local device region differs from the peer's bytes read")
			}
			if st := cli.Stats().CopyStaging; st == nil || st.Copies == 0 || st.Retained != 0 {
				t.Fatalf("client copy staging %+v", st)
			}
		})
	}
}
