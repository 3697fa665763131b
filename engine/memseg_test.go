package engine_test

// memseg_test.go: memory segments, the local memory transport and
// physical owners (memseg.go, memgroup.go).

import (
	"bytes"
	"crypto/rand"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func fillRandom(t *testing.T, r *engine.Region) []byte {
	t.Helper()
	p := make([]byte, r.Len())
	rand.Read(p)
	if _, err := r.WriteAt(p, 0); err != nil {
		t.Fatal(err)
	}
	return p
}

func openMem(t *testing.T, e *engine.Engine, r *engine.Region, perm engine.Permission) *engine.MemSegment {
	t.Helper()
	ms, err := e.OpenMemorySegment("mem://t", r, perm)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// owners returns each task's physical owner after the batch ran.
func runOwners(t *testing.T, e *engine.Engine, op engine.Op, target engine.Target, reqs []engine.Request) []int {
	t.Helper()
	b, err := e.SubmitAsync(op, target, reqs, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v %v %+v", st, err, b.TaskStatuses())
	}
	var out []int
	for _, ts := range b.TaskStatuses() {
		if ts.Transport != engine.TransportMemory || ts.Transferred != ts.Length {
			t.Fatalf("task %+v", ts)
		}
		out = append(out, ts.PhysicalOwner)
	}
	return out
}

// TestMemSegmentMerge: adjacent requests merge into one physical owner
// (each task keeps its length and bytes); gaps and merge_requests=false
// keep them apart; bytes land as with one copy per request.
func TestMemSegmentMerge(t *testing.T) {
	needIOUring(t)
	for _, merge := range []bool{true, false} {
		e := newEngine(t, func(c *config.Engine) { c.MergeRequests = merge }, realTransports(config.DefaultEngine())...)
		local := register(t, e, 1<<20)
		remote := register(t, e, 1<<20)
		orig := fillRandom(t, remote)
		ms := openMem(t, e, remote, engine.PermReadWrite)
		a := local.BaseAddress()
		reqs := []engine.Request{
			{Address: a, TargetOffset: 8192, Length: 4096},
			{Address: a + 4096, TargetOffset: 12288, Length: 4096},   // adjacent both sides
			{Address: a + 8192, TargetOffset: 16384, Length: 100},    // adjacent
			{Address: a + 16384, TargetOffset: 16484, Length: 4096},  // local gap
			{Address: a + 20480, TargetOffset: 65536, Length: 4096},  // target gap
			{Address: a + 24576, TargetOffset: 69632, Length: 65536}, // adjacent
		}
		got := runOwners(t, e, engine.OpRead, ms, reqs)
		want := []int{0, 0, 0, 3, 4, 4}
		if !merge {
			want = []int{0, 1, 2, 3, 4, 5}
		}
		for i := range want {
			if got[i] != want[i] {
				t.Fatalf("merge=%v: physical owners %v, want %v", merge, got, want)
			}
		}
		lb := regionBytes(t, local)
		for i, r := range reqs {
			off := r.Address - a
			if !bytes.Equal(lb[off:off+r.Length], orig[r.TargetOffset:r.TargetOffset+r.Length]) {
				t.Fatalf("merge=%v: request %d bytes differ", merge, i)
			}
		}
		// WRITE back elsewhere in the target.
		w := []engine.Request{{Address: a, TargetOffset: 1 << 19, Length: 4096}, {Address: a + 4096, TargetOffset: 1<<19 + 4096, Length: 4096}}
		runOwners(t, e, engine.OpWrite, ms, w)
		rb := regionBytes(t, remote)
		if !bytes.Equal(rb[1<<19:1<<19+8192], lb[:8192]) {
			t.Fatal("write bytes differ")
		}
	}
}

// TestMemSegmentSelfOverlap: a self-transfer whose merged ranges would
// overlap stays two owners, so the result is strict FIFO order.
func TestMemSegmentSelfOverlap(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, nil, realTransports(config.DefaultEngine())...)
	r := register(t, e, 1<<16)
	orig := fillRandom(t, r)
	ms := openMem(t, e, r, engine.PermRead)
	a := r.BaseAddress()
	got := runOwners(t, e, engine.OpRead, ms, []engine.Request{
		{Address: a + 4096, TargetOffset: 0, Length: 4096},
		{Address: a + 8192, TargetOffset: 4096, Length: 4096},
	})
	if got[1] != 1 {
		t.Fatalf("owners %v: overlapping self-transfer merged", got)
	}
	b := regionBytes(t, r)
	if !bytes.Equal(b[8192:12288], orig[0:4096]) {
		t.Fatal("second copy did not see the first one's result (not FIFO)")
	}
}

// TestMemSegmentCancelAlias: cancelling any alias cancels its owner
// before payload I/O; an independent owner in the same group still runs.
func TestMemSegmentCancelAlias(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	defer ref.release()
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 16384)
	seg := openSeg(t, e, path, engine.PermRead)
	local := register(t, e, 1<<16)
	remote := register(t, e, 1<<16)
	orig := fillRandom(t, remote)
	ms := openMem(t, e, remote, engine.PermRead)
	a := local.BaseAddress()
	b, _ := e.AllocateBatch(8)
	defer b.Free()
	// A stalled file read into local[0:4096) fences the memory group.
	if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: a, Length: 4096}}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Submit(engine.OpRead, ms, []engine.Request{
		{Address: a, TargetOffset: 0, Length: 4096},
		{Address: a + 4096, TargetOffset: 4096, Length: 4096},
		{Address: a + 32768, TargetOffset: 32768, Length: 4096},
	}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the file op to stall", func() bool { return ref.prepared.Load() == 1 })
	if ts, _ := b.TaskStatus(2); ts.PhysicalOwner != 1 || ts.State != engine.TaskPending {
		t.Fatalf("alias before cancel: %+v", ts)
	}
	if err := b.Cancel(2); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 2} {
		if ts, _ := b.TaskStatus(i); ts.State != engine.TaskCancelled {
			t.Fatalf("task %d after cancelling alias 2: %+v", i, ts)
		}
	}
	ref.release()
	b.Seal()
	if st, _ := b.Wait(ioTimeout); st != engine.StateCancelled {
		t.Fatalf("state %v", st)
	}
	if ts, _ := b.TaskStatus(3); ts.State != engine.TaskCompleted {
		t.Fatalf("independent owner: %+v", ts)
	}
	lb := regionBytes(t, local)
	if !bytes.Equal(lb[32768:36864], orig[32768:36864]) || bytes.Equal(lb[4096:8192], orig[4096:8192]) {
		t.Fatal("the cancelled owner moved bytes, or the independent one did not")
	}
	rep := b.Submissions()[1]
	if rep.CompletedRequests != 0 || rep.RequestIndex != 0 || rep.Err == nil {
		t.Fatalf("report %+v", rep)
	}
}

// TestMemSegmentRules: permission, range, vectors, transports, close.
func TestMemSegmentRules(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, nil, realTransports(config.DefaultEngine())...)
	local := register(t, e, 1<<16)
	remote := register(t, e, 1<<16)
	ro := openMem(t, e, remote, engine.PermRead)
	a := local.BaseAddress()
	_, err := e.SubmitAndWait(engine.OpWrite, ro, []engine.Request{{Address: a, Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindPermission)
	_, err = e.SubmitAndWait(engine.OpRead, ro, []engine.Request{{Address: a, TargetOffset: 1<<16 - 100, Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindRange)
	_, err = e.SubmitAndWait(engine.OpRead, ro, []engine.Request{engine.Vector(engine.TransportUnspec, 0, engine.Range(a, 4096))}, ioTimeout)
	wantKind(t, err, engine.KindInvalid)
	_, err = e.SubmitAndWait(engine.OpRead, ro, []engine.Request{{Transport: engine.TransportIOUring, Address: a, Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindInvalid)
	_, err = e.OpenMemorySegment("file:///x", remote, engine.PermRead)
	wantKind(t, err, engine.KindInvalid)
	if err := e.CloseMemorySegment(ro, time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = e.SubmitAndWait(engine.OpRead, ro, []engine.Request{{Address: a, Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindBusy)
	// An unregistered target region fails submissions, naming it.
	ms := openMem(t, e, remote, engine.PermRead)
	if err := e.Unregister(remote); err != nil {
		t.Fatal(err)
	}
	_, err = e.SubmitAndWait(engine.OpRead, ms, []engine.Request{{Address: a, Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindNotFound)
}

// TestMemSegmentDevice: device memory on either side, through the GPU
// backend's copies.
func TestMemSegmentDevice(t *testing.T) {
	e := gpuEngine(t, newFakeGPU(1), nil, nil)
	host := register(t, e, 1<<20)
	orig := fillRandom(t, host)
	d := deviceRegion(t, e, 0, 1<<20)
	d2 := deviceRegion(t, e, 0, 1<<20)
	toDev := openMem(t, e, d, engine.PermReadWrite)
	runOwners(t, e, engine.OpWrite, toDev, []engine.Request{{Address: host.BaseAddress(), Length: 1 << 20}})
	fromDev := openMem(t, e, d, engine.PermRead)
	runOwners(t, e, engine.OpRead, fromDev, []engine.Request{{Address: d2.BaseAddress(), TargetOffset: 4096, Length: 8 << 10}})
	got := make([]byte, 8<<10)
	d2.ReadAt(got, 0)
	if !bytes.Equal(got, orig[4096:4096+8<<10]) {
		t.Fatal("device-to-device bytes differ")
	}
}

// TestMemSegmentNeedsFileTransport: without a file transport (a noiouring
// build) the batch worker has no ring: memory submissions are refused up
// front instead of reaching a worker that cannot run.
func TestMemSegmentNeedsFileTransport(t *testing.T) {
	e := newEngineOver(t, config.DefaultEngine())
	local := register(t, e, 1<<16)
	remote := register(t, e, 1<<16)
	ms := openMem(t, e, remote, engine.PermRead)
	_, err := e.SubmitAndWait(engine.OpRead, ms, []engine.Request{{Address: local.BaseAddress(), Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindUnavailable)
}

// TestMemSegmentSubmitOptions: a memory-segment submission honours its
// options as a file submission does: a deadline already past fails every
// task with KindTimeout and moves no byte; a policy from another engine
// is refused (ErrForeignQoS) with no task added; the policy's contract
// caps apply, counting physical owners (a hard-zero cap refuses it, a
// byte cap below one owner refuses it).
func TestMemSegmentSubmitOptions(t *testing.T) {
	needIOUring(t)
	const qos = `{"qos":{"tenants":[{"name":"zero","defaults":{"max_inflight_requests":0}},{"name":"small","defaults":{"max_inflight_bytes":"4KiB"}}]}}`
	e := newEngine(t, func(c *config.Engine) { c.QoS = mustQoS(t, qos) })
	local, target := register(t, e, 8192), register(t, e, 8192)
	want := fillRandom(t, target)
	before := regionBytes(t, local)
	ms := openMem(t, e, target, engine.PermReadWrite)
	reqs := []engine.Request{{Address: local.BaseAddress(), Length: 4096}, {Address: local.BaseAddress() + 4096, TargetOffset: 4096, Length: 4096}}

	t.Run("deadline passed", func(t *testing.T) {
		b, _ := e.AllocateBatch(2)
		defer b.Free()
		if _, err := b.SubmitWith(engine.OpRead, ms, reqs, nil, engine.SubmitOptions{Deadline: time.Now().Add(-time.Second)}); err != nil {
			t.Fatal(err)
		}
		if st := waitState(t, b); st != engine.StateFailed {
			t.Fatalf("state %v, want failed", st)
		}
		for _, ts := range b.TaskStatuses() {
			wantKind(t, ts.Err, engine.KindTimeout)
			if ts.Transferred != 0 {
				t.Fatalf("task %+v moved bytes after its deadline", ts)
			}
		}
		if !bytes.Equal(regionBytes(t, local), before) {
			t.Fatal("a READ past its deadline changed local memory")
		}
	})
	t.Run("foreign policy", func(t *testing.T) {
		other := newEngine(t, func(c *config.Engine) { c.QoS = mustQoS(t, qos) })
		b, _ := e.AllocateBatch(2)
		defer b.Free()
		_, err := b.SubmitWith(engine.OpRead, ms, reqs, nil, engine.SubmitOptions{QoS: resolve(t, other, "small", "", nil)})
		wantKind(t, err, engine.KindInvalid)
		if !errors.Is(err, engine.ErrForeignQoS) || b.TaskCount() != 0 {
			t.Fatalf("foreign policy: %v (tasks %d), want ErrForeignQoS and no task", err, b.TaskCount())
		}
	})
	t.Run("contract caps", func(t *testing.T) {
		for _, c := range []struct{ tenant, want string }{
			{"zero", "allows no requests"},
			{"small", "exceed"}, // the two requests merge into one 8 KiB owner
		} {
			b, _ := e.AllocateBatch(2)
			_, err := b.SubmitWith(engine.OpRead, ms, reqs, nil, engine.SubmitOptions{QoS: resolve(t, e, c.tenant, "", nil)})
			wantKind(t, err, engine.KindExhausted)
			if !strings.Contains(err.Error(), c.want) || b.TaskCount() != 0 {
				t.Fatalf("tenant %s: %v (tasks %d)", c.tenant, err, b.TaskCount())
			}
			b.Free()
		}
	})
	t.Run("within the deadline and caps", func(t *testing.T) {
		b, _ := e.AllocateBatch(2)
		defer b.Free()
		one := reqs[:1]
		if _, err := b.SubmitWith(engine.OpRead, ms, one, nil, engine.SubmitOptions{Deadline: time.Now().Add(ioTimeout), QoS: resolve(t, e, "small", "", nil)}); err != nil {
			t.Fatal(err)
		}
		if st := waitState(t, b); st != engine.StateCompleted {
			t.Fatalf("state %v", st)
		}
		if !bytes.Equal(regionBytes(t, local)[:4096], want[:4096]) {
			t.Fatal("bytes differ")
		}
	})
}

// TestMemSegmentDelayContract: under a delay contract (charged at the
// batch head) memory-segment submissions from several batches all run,
// and the contract's usage returns to zero.
func TestMemSegmentDelayContract(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.QoS = mustQoS(t, `{"qos":{"tenants":[{"name":"d","defaults":{"max_inflight_requests":1,"allowed_degraded_actions":["delay"]}}]}}`)
	})
	local, target := register(t, e, 1<<20), register(t, e, 1<<20)
	want := fillRandom(t, target)
	ms := openMem(t, e, target, engine.PermRead)
	pol := resolve(t, e, "d", "", nil)
	var bs []*engine.Batch
	for i := range 8 {
		off := uint64(i) * 128 << 10
		b, _ := e.AllocateBatch(1)
		if _, err := b.SubmitWith(engine.OpRead, ms, []engine.Request{{Address: local.BaseAddress() + off, TargetOffset: off, Length: 128 << 10}}, nil, engine.SubmitOptions{QoS: pol}); err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	for i, b := range bs {
		if st := waitState(t, b); st != engine.StateCompleted {
			t.Fatalf("batch %d: %v %+v", i, st, b.TaskStatuses())
		}
		b.Free()
	}
	if !bytes.Equal(regionBytes(t, local), want) {
		t.Fatal("bytes differ")
	}
	for _, u := range e.QoSUsage() {
		if u.Owners != 0 || u.Bytes != 0 {
			t.Fatalf("contract usage %+v still charged", u)
		}
	}
}

// TestMemSegmentLargerThanWindow: memory-segment owners take no dispatch
// window share, so a memory submission with more owners and bytes than
// the window is admitted and runs (a device-memory group that size is
// refused: it takes the window whole).
func TestMemSegmentLargerThanWindow(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxDispatchOwners, c.RuntimeQueue.MaxDispatchBytes = 2, 64<<10
		c.CallerFastPathBytes = 16 << 10
	})
	local, target := register(t, e, 1<<20), register(t, e, 1<<20)
	want := fillRandom(t, target)
	ms := openMem(t, e, target, engine.PermRead)
	var reqs []engine.Request
	for i := uint64(0); i < 4; i++ { // four owners (target gaps), 128 KiB
		reqs = append(reqs, engine.Request{Address: local.BaseAddress() + i*64<<10, TargetOffset: i * 128 << 10, Length: 32 << 10})
	}
	got := runOwners(t, e, engine.OpRead, ms, reqs)
	if got[3] != 3 {
		t.Fatalf("owners %v, want four", got)
	}
	lb := regionBytes(t, local)
	for _, r := range reqs {
		off := r.Address - local.BaseAddress()
		if !bytes.Equal(lb[off:off+r.Length], want[r.TargetOffset:r.TargetOffset+r.Length]) {
			t.Fatal("bytes differ")
		}
	}
}

// BenchmarkMemSegmentOwners: one memory-segment READ of 256 separate
// 4 KiB owners (merge_requests off) per op: the cost of handing a
// memory group's owners to the memory executor one at a time.
func BenchmarkMemSegmentOwners(b *testing.B) {
	const n, each = 256, 4096
	cfg := config.DefaultEngine()
	cfg.MergeRequests = false
	ts := realTransports(cfg)
	if len(ts) == 0 {
		b.Skip("memory segments need the file transport")
	}
	e, err := engine.New(cfg, ts[0])
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(5 * time.Second)
	local, err := e.RegisterMemory(n * each)
	if err != nil {
		b.Fatal(err)
	}
	target, err := e.RegisterMemory(n * each)
	if err != nil {
		b.Fatal(err)
	}
	ms, err := e.OpenMemorySegment("mem://bench", target, engine.PermRead)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]engine.Request, n)
	for i := range reqs {
		// Half of each 4 KiB slot: no two owners adjacent.
		reqs[i] = engine.Request{Address: local.BaseAddress() + uint64(i)*each, TargetOffset: uint64(i) * each, Length: each / 2}
	}
	b.SetBytes(n * each / 2)
	b.ResetTimer()
	for range b.N {
		if _, err := e.SubmitAndWait(engine.OpRead, ms, reqs, 10*time.Second); err != nil {
			b.Fatal(err)
		}
	}
}
