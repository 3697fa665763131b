package engine_test

// ipcexec_test.go: the CUDA IPC executor over the fake GPU's IPC
// (fakeipc_test.go) and a fake Remote whose region is an exported fake
// device allocation: mixed submissions in input order, a failure that
// skips later legs, cancel of a queued and of a running copy, an
// uncertain WRITE, and the mappings closed at a peer restart and at
// segment close.

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

// orderLog records the start and end of every transfer by target offset.
type orderLog struct {
	mu  sync.Mutex
	evs []string
}

func (l *orderLog) add(what string, off uint64) {
	l.mu.Lock()
	l.evs = append(l.evs, fmt.Sprintf("%s%d", what, off/peerUnit))
	l.mu.Unlock()
}

func (l *orderLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.evs)
}

// loggedRemote logs the TCP calls of a fake Remote.
type loggedRemote struct {
	*fakeRemote
	log *orderLog
}

func (r *loggedRemote) ReadAt(ctx context.Context, p []byte, off uint64) error {
	r.log.add("s", off)
	defer r.log.add("e", off)
	return r.fakeRemote.ReadAt(ctx, p, off)
}

func (r *loggedRemote) WriteAt(ctx context.Context, p []byte, off uint64) (engine.RemoteEffect, error) {
	r.log.add("s", off)
	defer r.log.add("e", off)
	return r.fakeRemote.WriteAt(ctx, p, off)
}

// ipcFixture is an engine with a remote segment over a fake Remote whose
// region (units blocks of peerUnit bytes) is an exported fake device
// allocation, local device memory dev and host memory host of the same
// size, and a log of every transfer.
type ipcFixture struct {
	e      *engine.Engine
	gpu    *fakeGPU
	remote *fakeRemote
	seg    *engine.RemoteSegment
	exp    *engine.Region
	dev    *engine.Region
	host   *engine.Region
	log    *orderLog
	n      int
}

func newIPCFixture(t *testing.T, units int) *ipcFixture {
	f := &ipcFixture{gpu: newFakeGPU(1), log: &orderLog{}, n: units * peerUnit}
	f.e = gpuEngine(t, f.gpu, nil, nil)
	f.remote = newFakeRemote(f.n, engine.PermReadWrite, peerUnit)
	f.exp = f.remote.exportIPC(t, f.e, f.n)
	base := f.exp.BaseAddress()
	inExp := func(a uint64) bool { return a >= base && a < base+uint64(f.n) }
	f.gpu.onDtoD = func(dst, src, n uint64) {
		if inExp(dst) {
			f.log.add("s", dst-base)
		} else if inExp(src) {
			f.log.add("s", src-base)
		}
	}
	f.gpu.onDtoDDone = func(dst, src, n uint64) {
		if inExp(dst) {
			f.log.add("e", dst-base)
		} else if inExp(src) {
			f.log.add("e", src-base)
		}
	}
	rs, err := f.e.OpenRemoteSegment("tcp://127.0.0.1:1/kv", &loggedRemote{f.remote, f.log}, engine.PermReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	f.seg = rs
	f.dev = deviceRegion(t, f.e, 0, uint64(f.n))
	f.host = register(t, f.e, uint64(f.n))
	return f
}

// alternating is one request per unit: even units from device memory
// (cuda_ipc), odd ones from host memory (tcp).
func (f *ipcFixture) alternating() []engine.Request { return f.mixed(false) }

// padTail is the padding that keeps a staged request off cuda_ipc.
const padTail = 4096

// mixed is alternating, or with staged, odd units from device memory in
// a vector ending in padTail bytes of padding, which cuda_ipc does not
// take: GPU memory staged over TCP.
func (f *ipcFixture) mixed(staged bool) []engine.Request {
	var reqs []engine.Request
	for i := 0; i < f.n/peerUnit; i++ {
		off := uint64(i * peerUnit)
		switch {
		case i%2 == 0:
			reqs = append(reqs, engine.Request{Address: f.dev.BaseAddress() + off, TargetOffset: off, Length: peerUnit})
		case staged:
			reqs = append(reqs, engine.Request{TargetOffset: off, Elements: []engine.Element{
				engine.Range(f.dev.BaseAddress()+off, peerUnit-padTail), engine.Pad(padTail)}})
		default:
			reqs = append(reqs, engine.Request{Address: f.host.BaseAddress() + off, TargetOffset: off, Length: peerUnit})
		}
	}
	return reqs
}

// inputOrder reports whether log entries (by request index) never go
// back: no request started before every event of the one before it.
func inputOrder(log []string, n int) bool {
	last := 0
	seen := map[int]bool{}
	for _, ev := range log {
		var i int
		fmt.Sscanf(ev[1:], "%d", &i)
		if i < last {
			return false
		}
		last = i
		seen[i] = true
	}
	return len(seen) == n
}

// ipcInOrder is the log of requests 0..n-1 run one after the other.
func ipcInOrder(n int) []string {
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("s%d", i), fmt.Sprintf("e%d", i))
	}
	return want
}

// TestIPCMixedInputOrder: a submission alternating GPU-direct (cuda_ipc)
// and TCP requests runs them in input order, each ending before the
// next starts, with slow GPU copies that a concurrent TCP leg would
// overtake; the bytes land and each task reports its route.
func TestIPCMixedInputOrder(t *testing.T) {
	for _, c := range []struct {
		op     engine.Op
		staged bool // odd requests: device memory staged over TCP, else host memory
	}{{engine.OpWrite, false}, {engine.OpRead, false}, {engine.OpWrite, true}, {engine.OpRead, true}} {
		op := c.op
		name := op.String()
		if c.staged {
			name += ", staged"
		}
		t.Run(name, func(t *testing.T) {
			f := newIPCFixture(t, 6)
			f.gpu.slowCopy.Store(int64(20 * time.Millisecond))
			src := make([]byte, f.n)
			rand.Read(src)
			if op == engine.OpWrite {
				mustWrite(t, f.dev, src)
				mustWrite(t, f.host, src)
			} else {
				copy(f.remote.data, src)
			}
			b, err := f.e.AllocateBatch(f.n / peerUnit)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			if _, err := b.Submit(op, f.seg, f.mixed(c.staged), nil, ioTimeout); err != nil {
				t.Fatal(err)
			}
			b.Seal()
			if _, err := b.Wait(ioTimeout); err != nil {
				t.Fatal(err)
			}
			for i := range f.n / peerUnit {
				ts, _ := b.TaskStatus(i)
				want := engine.TransportCUDAIPC
				if i%2 == 1 {
					want = engine.TransportTCP
				}
				if ts.State != engine.TaskCompleted || ts.Transport != want || ts.Transferred != peerUnit {
					t.Fatalf("task %d: %v over %v, %d bytes (%v); want completed over %v", i, ts.State, ts.Transport, ts.Transferred, ts.Err, want)
				}
			}
			if got := f.log.get(); c.staged && !inputOrder(got, f.n/peerUnit) {
				t.Fatalf("transfers ran as %v, want input order", got)
			} else if want := ipcInOrder(f.n / peerUnit); !c.staged && !slices.Equal(got, want) {
				t.Fatalf("transfers ran as %v, want input order %v", got, want)
			}
			want := bytes.Clone(src)
			var got []byte
			if op == engine.OpWrite {
				got = f.remote.bytes()
				if c.staged { // the padding wrote zeros
					for i := peerUnit; i < f.n; i += 2 * peerUnit {
						clear(want[i+peerUnit-padTail : i+peerUnit])
					}
				}
			} else {
				got = make([]byte, f.n)
				d, h := regionBytes(t, f.dev), regionBytes(t, f.host)
				for i := 0; i < f.n; i += peerUnit {
					from := d
					if i/peerUnit%2 == 1 && !c.staged {
						from = h
					}
					copy(got[i:i+peerUnit], from[i:i+peerUnit])
					if i/peerUnit%2 == 1 && c.staged { // the padding's bytes were discarded
						copy(got[i+peerUnit-padTail:i+peerUnit], want[i+peerUnit-padTail:i+peerUnit])
					}
				}
			}
			if !bytes.Equal(got, want) {
				t.Fatal("the bytes differ")
			}
		})
	}
}

func mustWrite(t *testing.T, r *engine.Region, p []byte) {
	t.Helper()
	if _, err := r.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
}

// TestIPCMixedFailureSkipsLater: a TCP request failing in the middle of
// a mixed WRITE keeps the completed prefix, and the later GPU-direct and
// TCP requests never start (failed, not started, nothing moved).
func TestIPCMixedFailureSkipsLater(t *testing.T) {
	f := newIPCFixture(t, 6)
	orig := f.remote.bytes()
	src := make([]byte, f.n)
	rand.Read(src)
	mustWrite(t, f.dev, src)
	mustWrite(t, f.host, src)
	none := engine.EffectNone
	f.remote.failOff, f.remote.failEffect = 3*peerUnit, &none
	rep, err := f.e.SubmitAndWait(engine.OpWrite, f.seg, f.alternating(), ioTimeout)
	if err == nil || rep.RequestIndex != 3 || rep.CompletedRequests != 3 {
		t.Fatalf("report %+v, err %v; want requests 0-2 completed, failure at 3", rep, err)
	}
	got := f.remote.bytes()
	if !bytes.Equal(got[:3*peerUnit], src[:3*peerUnit]) || !bytes.Equal(got[4*peerUnit:], orig[4*peerUnit:]) {
		t.Fatal("want the prefix written and nothing past the failed request")
	}
	for _, e := range f.log.get() {
		if e == "s4" || e == "s5" {
			t.Fatalf("request after the failure started: log %v", f.log.get())
		}
	}
	if st := f.gpu.dtods.Load(); st != 2 {
		t.Fatalf("%d device copies, want 2 (requests 0 and 2)", st)
	}
}

// TestIPCCancel: a cuda_ipc task whose copy is on the GPU cannot be
// cancelled (Unavailable, it completes); one whose copy was not queued
// yet (behind a held TCP request of the same submission) is cancelled
// with nothing moved.
func TestIPCCancel(t *testing.T) {
	t.Run("running", func(t *testing.T) {
		f := newIPCFixture(t, 2)
		f.gpu.hang = make(chan struct{})
		released := false
		defer func() {
			if !released {
				close(f.gpu.hang)
			}
		}()
		b, err := f.e.AllocateBatch(1)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		if _, err := b.Submit(engine.OpWrite, f.seg, []engine.Request{{Address: f.dev.BaseAddress(), Length: peerUnit}}, nil, ioTimeout); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the copy to be queued", func() bool { return f.gpu.dtods.Load() == 1 })
		wantKind(t, b.Cancel(0), engine.KindUnavailable)
		close(f.gpu.hang)
		released = true
		b.Seal()
		if _, err := b.Wait(ioTimeout); err != nil {
			t.Fatal(err)
		}
		if ts, _ := b.TaskStatus(0); ts.State != engine.TaskCompleted || ts.RemoteEffect != engine.EffectApplied {
			t.Fatalf("the running copy: %v, effect %v (%v); want completed, applied", ts.State, ts.RemoteEffect, ts.Err)
		}
	})
	for _, how := range []string{"cancel", "cancel_all"} {
		t.Run("not started, "+how, func(t *testing.T) { cancelQueuedIPC(t, how) })
	}
}

// cancelQueuedIPC cancels (Cancel or CancelAll) a cuda_ipc task held
// behind a TCP request of its submission.
func cancelQueuedIPC(t *testing.T, how string) {
	{
		f := newIPCFixture(t, 2)
		orig := f.remote.bytes()
		rel := make(chan struct{})
		f.remote.mu.Lock()
		f.remote.hold, f.remote.holdEnd = rel, peerUnit
		f.remote.mu.Unlock()
		mustWrite(t, f.dev, bytes.Repeat([]byte{7}, f.n))
		b, err := f.e.AllocateBatch(2)
		if err != nil {
			t.Fatal(err)
		}
		defer b.Free()
		reqs := []engine.Request{
			{Address: f.host.BaseAddress(), Length: peerUnit},                                   // tcp, held
			{Address: f.dev.BaseAddress() + peerUnit, TargetOffset: peerUnit, Length: peerUnit}, // cuda_ipc
		}
		if _, err := b.Submit(engine.OpWrite, f.seg, reqs, nil, ioTimeout); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the TCP request to be held", func() bool { return f.remote.writes.Load() == 1 })
		cancel := func() error { return b.Cancel(1) }
		if how == "cancel_all" {
			cancel = b.CancelAll
		}
		if err := cancel(); err != nil {
			t.Fatalf("%s of a cuda_ipc task not yet started: %v", how, err)
		}
		close(rel)
		b.Seal()
		if _, err := b.Wait(ioTimeout); err != nil {
			t.Fatal(err)
		}
		ts, _ := b.TaskStatus(1)
		if ts.State != engine.TaskCancelled || ts.Transferred != 0 || ts.RemoteEffect != engine.EffectNone {
			t.Fatalf("cancelled cuda_ipc task: %v, %d bytes, effect %v (%v)", ts.State, ts.Transferred, ts.RemoteEffect, ts.Err)
		}
		if f.gpu.dtods.Load() != 0 || !bytes.Equal(f.remote.bytes()[peerUnit:], orig[peerUnit:]) {
			t.Fatal("the cancelled copy ran")
		}
	}
}

// TestIPCUncertainWrite: a WRITE copy whose event fails is uncertain:
// effect unknown, not drained, never replayed, and the mapping it used
// stays open for good.
func TestIPCUncertainWrite(t *testing.T) {
	f := newIPCFixture(t, 1)
	f.gpu.failEvent.Store(true)
	rep, err := f.e.SubmitAndWait(engine.OpWrite, f.seg, []engine.Request{{Address: f.dev.BaseAddress(), Length: peerUnit}}, ioTimeout)
	wantKind(t, err, engine.KindUnquiesced)
	if rep.LocallyDrained || rep.RemoteEffect != engine.EffectUnknown {
		t.Fatalf("report %+v: want not drained, effect unknown", rep)
	}
	if n := f.gpu.dtods.Load(); n != 1 {
		t.Fatalf("%d copies, want 1 (never replayed)", n)
	}
	if st := f.e.Stats().IPC; st.Retained != 1 {
		t.Fatalf("ipc stats %+v: want the mapping retained", st)
	}
	// The unquiesced group keeps its segment user: close cannot finish.
	wantKind(t, f.e.CloseRemoteSegment(f.seg, 50*time.Millisecond), engine.KindTimeout)
	if f.gpu.ipcClosed.Load() != 0 || f.gpu.ipcOpen.Load() != 1 {
		t.Fatalf("%d closed, %d open: want the retained mapping never closed", f.gpu.ipcClosed.Load(), f.gpu.ipcOpen.Load())
	}
	wantKind(t, f.e.Close(ioTimeout), engine.KindUnquiesced)
}

// TestIPCMappingLifetime: one import per segment and device, reused by
// later submissions; closed when the segment closes, and when the peer
// restarted (its Remote reports an error: device requests then take the
// TCP route, through copy staging; or it shows a new epoch: the new
// handle is opened); an import refused leaves device requests on TCP.
func TestIPCMappingLifetime(t *testing.T) {
	write := func(f *ipcFixture) error {
		if tr := ipcWrite(t, f); tr != engine.TransportCUDAIPC {
			return fmt.Errorf("WRITE over %v, want cuda_ipc", tr)
		}
		return nil
	}
	t.Run("segment close", func(t *testing.T) {
		f := newIPCFixture(t, 1)
		for range 3 {
			if err := write(f); err != nil {
				t.Fatal(err)
			}
		}
		if f.gpu.ipcOpen.Load() != 1 || f.e.Stats().IPC.Imports != 1 || f.seg.IPCMappings() != 1 {
			t.Fatalf("%d mappings open, stats %+v: want one import reused", f.gpu.ipcOpen.Load(), f.e.Stats().IPC)
		}
		if err := f.e.CloseRemoteSegment(f.seg, ioTimeout); err != nil {
			t.Fatal(err)
		}
		if f.gpu.ipcOpen.Load() != 0 || f.gpu.ipcClosed.Load() != 1 {
			t.Fatalf("after close: %d open, %d closed", f.gpu.ipcOpen.Load(), f.gpu.ipcClosed.Load())
		}
	})
	t.Run("peer restarted", func(t *testing.T) {
		f := newIPCFixture(t, 1)
		if err := write(f); err != nil {
			t.Fatal(err)
		}
		gone := errors.New("the peer restarted with another epoch")
		f.remote.gone.Store(&gone)
		if tr := ipcWrite(t, f); tr != engine.TransportTCP {
			t.Fatalf("WRITE after the restart over %v, want tcp", tr)
		}
		if f.gpu.ipcOpen.Load() != 0 || f.gpu.ipcClosed.Load() != 1 || f.gpu.dtods.Load() != 1 {
			t.Fatalf("after the restart: %d open, %d closed, %d copies; want the mapping closed and no copy", f.gpu.ipcOpen.Load(), f.gpu.ipcClosed.Load(), f.gpu.dtods.Load())
		}
	})
	t.Run("peer restarted, redialed", func(t *testing.T) {
		// The connection redialed the peer's new epoch, which exports
		// the region anew (other memory, another handle).
		f := newIPCFixture(t, 1)
		if err := write(f); err != nil {
			t.Fatal(err)
		}
		exp2 := deviceRegion(t, f.e, 0, uint64(f.n))
		h, err := exp2.IPCHandle()
		if err != nil {
			t.Fatal(err)
		}
		f.remote.mu.Lock()
		f.remote.info.Epoch++
		f.remote.info.IPC = &engine.RemoteIPC{Handle: h}
		f.remote.mu.Unlock()
		want := bytes.Repeat([]byte{0x3c}, f.n)
		mustWrite(t, f.dev, want)
		if err := write(f); err != nil {
			t.Fatal(err)
		}
		st := f.e.Stats().IPC
		if f.gpu.ipcOpen.Load() != 1 || f.gpu.ipcClosed.Load() != 1 || st.Imports != 2 {
			t.Fatalf("%d open, %d closed, stats %+v: want the old epoch's mapping closed and the new one opened", f.gpu.ipcOpen.Load(), f.gpu.ipcClosed.Load(), st)
		}
		if !bytes.Equal(regionBytes(t, exp2), want) {
			t.Fatal("the WRITE did not land in the new epoch's region")
		}
	})
	t.Run("import refused", func(t *testing.T) {
		f := newIPCFixture(t, 1)
		f.gpu.failImport.Store(true)
		for range 2 {
			if tr := ipcWrite(t, f); tr != engine.TransportTCP {
				t.Fatalf("WRITE with the import refused over %v, want tcp", tr)
			}
		}
		if f.gpu.dtods.Load() != 0 || f.e.Stats().IPC.Imports != 0 || f.gpu.importTries.Load() != 1 {
			t.Fatalf("%d copies, %d import calls: want none over the GPU and the import tried once", f.gpu.dtods.Load(), f.gpu.importTries.Load())
		}
	})
}

// TestIPCOneCopyPerRequest: a cuda_ipc request of up to 1 GiB (here
// just over 256 MiB: the fake's memory is populated host memory) is one
// device-to-device copy of all of it, each way, so its per-copy cost
// (queue, record, the wake on its event) is paid once. The fake moves no
// byte (dma): only the copies are counted.
func TestIPCOneCopyPerRequest(t *testing.T) {
	const n = 256<<20 + peerUnit
	gpu := newFakeGPU(1)
	gpu.dma.Store(true)
	var mu sync.Mutex
	var sizes []uint64
	gpu.onDtoD = func(dst, src, n uint64) {
		mu.Lock()
		sizes = append(sizes, n)
		mu.Unlock()
	}
	e := gpuEngine(t, gpu, nil, nil)
	remote := newFakeRemote(0, engine.PermReadWrite, peerUnit)
	remote.size, remote.info.Size = n, n
	remote.exportIPC(t, e, n)
	seg, err := e.OpenRemoteSegment("tcp://127.0.0.1:1/kv", remote, engine.PermReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	dev := deviceRegion(t, e, 0, n)
	for _, op := range []engine.Op{engine.OpWrite, engine.OpRead} {
		mu.Lock()
		sizes = nil
		mu.Unlock()
		b, err := e.AllocateBatch(1)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Submit(op, seg, []engine.Request{{Address: dev.BaseAddress(), Length: n}}, nil, ioTimeout); err != nil {
			t.Fatal(err)
		}
		b.Seal()
		if _, err := b.Wait(ioTimeout); err != nil {
			t.Fatal(err)
		}
		if ts, _ := b.TaskStatus(0); ts.State != engine.TaskCompleted || ts.Transport != engine.TransportCUDAIPC || ts.Transferred != n {
			t.Fatalf("%v: %v over %v, %d bytes (%v); want completed over cuda_ipc, %d bytes", op, ts.State, ts.Transport, ts.Transferred, ts.Err, n)
		}
		mu.Lock()
		got := slices.Clone(sizes)
		mu.Unlock()
		if !slices.Equal(got, []uint64{n}) {
			t.Fatalf("%v: copies of %v bytes, want one of %d", op, got, n)
		}
		b.Free()
	}
}
