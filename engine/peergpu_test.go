package engine_test

// peergpu_test.go: GPU memory on either side of a peer transfer, over
// real sockets on loopback between two engines, each with its own fake
// GPU: a client engine's cuda:0 region moved to and from a server
// engine's exported cuda:0 region through the peer package (server and
// client), both through their pinned copy staging. Bytes are checked in
// the fake devices directly, not through the path under test; a failed
// device copy on either side gives the remote effect the rules say.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer"
	"github.com/orbitefs/orbitefs/peer/wire"
)

var peerTestKey = []byte("a shared test key of enough bytes")

// regionExports serves engine regions to peers by name.
type regionExports map[string]*engine.Region

func (x regionExports) desc(id uint64, name string, r *engine.Region) peer.Export {
	return peer.Export{Descriptor: wire.Descriptor{ID: id, Name: name, Location: string(r.Location()), Bytes: r.Len(), Perm: wire.PermRead | wire.PermWrite}, Mem: r}
}

func (x regionExports) Exports() []peer.Export {
	var out []peer.Export
	id := uint64(1)
	for name, r := range x {
		out = append(out, x.desc(id, name, r))
		id++
	}
	return out
}

func (x regionExports) Export(id uint64) (peer.Export, bool) {
	for _, e := range x.Exports() {
		if e.ID == id {
			return e, true
		}
	}
	return peer.Export{}, false
}

// devBytes is a fake device region's memory, read and written without
// the engine.
func devBytes(r *engine.Region) []byte { return hostBytes(uintptr(r.BaseAddress()), r.Len()) }

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*13) ^ seed ^ byte(i>>11)
	}
}

// peerGPUPair is a server engine exporting a cuda:0 region "kv" through
// a peer server, and a client engine with a cuda:0 region and a remote
// segment on "kv".
type peerGPUPair struct {
	srvGPU, cliGPU *fakeGPU
	srv, cli       *engine.Engine
	kv, local      *engine.Region
	server         *peer.Server
	seg            *engine.RemoteSegment
}

func newPeerGPUPair(t *testing.T, n uint64, lanes int, chunk config.Size) *peerGPUPair {
	t.Helper()
	p := &peerGPUPair{srvGPU: newFakeGPU(1), cliGPU: newFakeGPU(1)}
	p.srv = gpuEngine(t, p.srvGPU, nil, func(c *config.Engine) { c.QuiesceGrace = config.Duration(2 * time.Second) })
	p.cli = gpuEngine(t, p.cliGPU, nil, func(c *config.Engine) {
		c.StagingChunkSize = chunk
		c.QuiesceGrace = config.Duration(2 * time.Second)
	})
	p.kv = deviceRegion(t, p.srv, 0, n)
	p.local = deviceRegion(t, p.cli, 0, n)
	p.server = peer.NewServer(peer.ServerConfig{Name: "gpu-srv", Key: peerTestKey, IOTimeout: 10 * time.Second, MaxSlice: peer.DefaultMaxSlice}, regionExports{"kv": p.kv})
	if err := p.server.Listen("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.server.Close() })
	ctx := context.Background()
	addr := p.server.Addr().String()
	c, err := peer.Dial(ctx, addr, peer.Config{Name: "gpu-cli", Key: peerTestKey, Lanes: lanes, IOTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := peer.OpenRemote(ctx, c, "kv")
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	scheme := "tcp"
	if lanes > 1 {
		scheme = "hp_tcp"
	}
	p.seg, err = p.cli.OpenRemoteSegment(fmt.Sprintf("%s://%s/kv", scheme, addr), r, engine.PermReadWrite)
	if err != nil {
		r.Close()
		t.Fatal(err)
	}
	// A group that ended unquiesced keeps its user of the segment for
	// good: do not wait for it.
	t.Cleanup(func() { p.cli.CloseRemoteSegment(p.seg, time.Second) })
	return p
}

func (p *peerGPUPair) move(op engine.Op, off, n uint64) (engine.Report, error) {
	return p.cli.SubmitAndWait(op, p.seg, []engine.Request{{Address: p.local.BaseAddress() + off, TargetOffset: off, Length: n}}, ioTimeout)
}

// TestPeerDeviceRoundTrip writes a local cuda:0 region into a peer's
// exported cuda:0 region and reads other bytes back, over one lane
// (small chunks: many units) and over four (a 4 MiB chunk: every unit
// striped in 1 MiB slices).
func TestPeerDeviceRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lanes int
		chunk config.Size
		n     uint64
	}{
		{"tcp", 1, 64 << 10, 1<<20 + 12288},
		{"hp_tcp", 4, 4 << 20, 9<<20 + 4096},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPeerGPUPair(t, tc.n, tc.lanes, tc.chunk)
			src, dst := devBytes(p.local), devBytes(p.kv)
			fill(src, 1)
			fill(dst, 0xEE)
			rep, err := p.move(engine.OpWrite, 0, tc.n)
			if err != nil || rep.RemoteEffect != engine.EffectApplied || rep.CompletedBytes != tc.n {
				t.Fatalf("WRITE: %v, effect %v, %d bytes", err, rep.RemoteEffect, rep.CompletedBytes)
			}
			if !bytes.Equal(dst, src) {
				t.Fatal("the peer's device region differs from the local device bytes written")
			}
			fill(dst, 2)
			if _, err := p.move(engine.OpRead, 0, tc.n); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(src, dst) {
				t.Fatal("the local device region differs from the peer's device bytes read")
			}
			for _, e := range []*engine.Engine{p.srv, p.cli} {
				st := e.Stats().CopyStaging
				if st == nil || st.Copies == 0 || st.Free != st.Chunks || st.Retained != 0 {
					t.Fatalf("copy staging %+v: want copies made and every chunk back", st)
				}
			}
			if st := p.cli.Stats().CopyStaging; st.ChunkSize != uint64(tc.chunk) {
				t.Fatalf("client chunk %d, want %d", st.ChunkSize, tc.chunk)
			}
		})
	}
}

// TestPeerDeviceCopyFailure: a device copy that fails gives the remote
// effect of where it failed. A clean failure before anything was posted
// (the client's device-to-host enqueue) is none and the peer is
// untouched; the server's host-to-device enqueue refused is none too (it
// moved nothing); a server copy event that errs is unknown (the GPU may
// still write the region, which is then never freed) and is never
// retried; a client READ whose copy into device memory has no confirmed
// outcome ends unquiesced.
func TestPeerDeviceCopyFailure(t *testing.T) {
	const n = 256 << 10
	t.Run("client copy out refused", func(t *testing.T) {
		p := newPeerGPUPair(t, n, 1, 64<<10)
		fill(devBytes(p.local), 3)
		fill(devBytes(p.kv), 0xEE)
		before := bytes.Clone(devBytes(p.kv))
		writes := p.server.Stats().Writes
		p.cliGPU.failDtoHNth.Store(p.cliGPU.dtohs.Load() + 1)
		// One unit: a unit running beside it on another lane could post.
		rep, err := p.move(engine.OpWrite, 0, 64<<10)
		wantKind(t, err, engine.KindIO)
		if rep.RemoteEffect != engine.EffectNone || !rep.LocallyDrained || !strings.Contains(err.Error(), "device-to-host copy") {
			t.Fatalf("WRITE: effect %v, drained %v, %v; want none, drained, the copy named", rep.RemoteEffect, rep.LocallyDrained, err)
		}
		if !bytes.Equal(devBytes(p.kv), before) || p.server.Stats().Writes != writes {
			t.Fatal("a WRITE whose device copy failed reached the peer")
		}
	})
	t.Run("server copy in refused", func(t *testing.T) {
		p := newPeerGPUPair(t, n, 1, 64<<10)
		fill(devBytes(p.local), 4)
		fill(devBytes(p.kv), 0xEE)
		before := bytes.Clone(devBytes(p.kv))
		p.srvGPU.failHtoDAt.Store(p.kv.BaseAddress())
		rep, err := p.move(engine.OpWrite, 0, 64<<10)
		if err == nil || rep.RemoteEffect != engine.EffectNone || !strings.Contains(err.Error(), "host-to-device copy") {
			t.Fatalf("WRITE: effect %v, %v; want failed with effect none, the copy named", rep.RemoteEffect, err)
		}
		if !bytes.Equal(devBytes(p.kv), before) {
			t.Fatal("a refused copy changed the region")
		}
	})
	t.Run("server copy event fails", func(t *testing.T) {
		p := newPeerGPUPair(t, n, 1, 64<<10)
		fill(devBytes(p.local), 5)
		writes := p.server.Stats().Writes
		p.srvGPU.failEvent.Store(true)
		b, err := p.cli.SubmitAsync(engine.OpWrite, p.seg, []engine.Request{{Address: p.local.BaseAddress(), Length: 64 << 10}}, nil, ioTimeout)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		if _, err := b.Wait(ioTimeout); err != nil {
			t.Fatal(err)
		}
		rep := b.Submissions()[0]
		err = rep.Err
		ts, _ := b.TaskStatus(0)
		if err == nil || rep.RemoteEffect != engine.EffectUnknown || ts.RemoteEffect != engine.EffectUnknown || ts.FailoverCount != 0 {
			t.Fatalf("WRITE: effect %v (task %v, %d failovers), %v; want unknown, never retried", rep.RemoteEffect, ts.RemoteEffect, ts.FailoverCount, err)
		}
		if got := p.server.Stats().Writes - writes; got != 1 {
			t.Fatalf("the peer served %d WRITEs; want 1 (no replay)", got)
		}
		if st := p.srv.Stats().CopyStaging; st.Retained != 1 {
			t.Fatalf("server copy staging %+v: want the chunk of the unknown copy retained", st)
		}
		// The GPU may still write the region: it is never freed.
		err = p.srv.Unregister(p.kv)
		wantKind(t, err, engine.KindBusy)
		if !strings.Contains(err.Error(), "a device copy of unknown outcome") {
			t.Fatalf("unregister: %v", err)
		}
	})
	t.Run("client copy in unconfirmed", func(t *testing.T) {
		p := newPeerGPUPair(t, n, 1, 64<<10)
		fill(devBytes(p.kv), 6)
		p.cliGPU.failEvent.Store(true)
		rep, err := p.move(engine.OpRead, 0, 64<<10)
		if err == nil || rep.LocallyDrained || !errors.Is(err, engine.ErrUnquiesced) {
			t.Fatalf("READ: drained %v, %v; want unquiesced", rep.LocallyDrained, err)
		}
		if st := p.cli.Stats().CopyStaging; st.Retained != 1 {
			t.Fatalf("client copy staging %+v: want the chunk retained", st)
		}
		wantKind(t, p.cli.Close(ioTimeout), engine.KindUnquiesced)
	})
}

// TestPeerDeviceWaitsForCopy: bytes headed for device memory count only
// once their copy event completed. The fake GPU holds host-to-device
// copies into the region until the test releases them: the peer's WRITE
// ack (server side) and a READ's completion (client side) must wait for
// that, and the bytes are there when they arrive.
func TestPeerDeviceWaitsForCopy(t *testing.T) {
	const n = 128 << 10
	for _, side := range []string{"server", "client"} {
		t.Run(side, func(t *testing.T) {
			p := newPeerGPUPair(t, n, 1, 64<<10)
			fill(devBytes(p.local), 7)
			fill(devBytes(p.kv), 8)
			gpu, r, op := p.srvGPU, p.kv, engine.OpWrite
			if side == "client" {
				gpu, r, op = p.cliGPU, p.local, engine.OpRead
			}
			want := bytes.Clone(devBytes(p.local))
			if op == engine.OpRead {
				want = bytes.Clone(devBytes(p.kv))
			}
			gpu.held = make(chan struct{})
			gpu.holdFrom.Store(r.BaseAddress())
			b, err := p.cli.SubmitAsync(op, p.seg, []engine.Request{{Address: p.local.BaseAddress(), Length: n}}, nil, ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			time.Sleep(200 * time.Millisecond) // ample for 128 KiB on loopback
			if ts, _ := b.TaskStatus(0); ts.State != engine.TaskRunning {
				t.Fatalf("%s with its device copy held: task %v; want running until the copy completes", op, ts.State)
			}
			close(gpu.held)
			if _, err := b.Wait(ioTimeout); err != nil {
				t.Fatal(err)
			}
			if rep := b.Submissions()[0]; rep.Err != nil || rep.CompletedBytes != n {
				t.Fatalf("%s: %v, %d bytes", op, rep.Err, rep.CompletedBytes)
			}
			if !bytes.Equal(devBytes(r), want) {
				t.Fatalf("%s: the device bytes differ once acknowledged", op)
			}
		})
	}
}
