package engine_test

// gpu_test.go: the device-memory paths (pinned staging lanes and GDS)
// with real io_uring on real ext4 and tmpfs files, over the test-only
// GPU backend of fakegpu_test.go. The GPU gate (tests/gpu) runs the same
// checks on CUDA.

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// gpuEngine is an engine over real io_uring, the fake GPU and, when gds is
// not nil, the fake cuFile. Small chunks make every request span several
// units and lanes.
func gpuEngine(t *testing.T, gpu *fakeGPU, gds *fakeGDS, mut func(*config.Engine)) *engine.Engine {
	t.Helper()
	return gpuEngineOver(t, gpu, gds, nil, mut)
}

// gpuEngineOver is gpuEngine whose file transport wrap wraps (nil: none).
func gpuEngineOver(t *testing.T, gpu *fakeGPU, gds *fakeGDS, wrap func(engine.FileTransport) engine.FileTransport, mut func(*config.Engine)) *engine.Engine {
	t.Helper()
	needIOUring(t)
	cfg := config.DefaultEngine()
	cfg.StagingChunkCount = 8
	cfg.StagingChunkSize = 64 << 10
	cfg.StagingLanes = 3
	// The staging tests use tmpfs files too: the mapped route is for the
	// tests that ask for it (mapped_test.go).
	cfg.MappedFiles = false
	if mut != nil {
		mut(&cfg)
	}
	bs := []engine.Backend{}
	for _, tr := range realTransports(cfg) {
		if ft, ok := tr.(engine.FileTransport); ok && wrap != nil {
			tr = wrap(ft)
		}
		bs = append(bs, tr)
	}
	bs = append(bs, gpu)
	if gds != nil {
		bs = append(bs, gds)
	}
	return newEngineOver(t, cfg, bs...)
}

func deviceRegion(t *testing.T, e *engine.Engine, dev int, n uint64) *engine.Region {
	t.Helper()
	r, err := e.RegisterDevice(dev, n)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestStagedRoundTrip moves file -> device -> file through staging, with
// sizes below, at and across chunk and lane boundaries, aligned and not.
func TestStagedRoundTrip(t *testing.T) {
	cases := []struct {
		name    string
		fileOff uint64
		length  uint64
	}{
		{"4k", 0, 4096},
		{"one-chunk", 64 << 10, 64 << 10},
		{"many-chunks", 0, 1<<20 + 4096},
		{"unaligned", 3, 200001},
	}
	for fsName, dir := range filesystems(t) {
		t.Run(fsName, func(t *testing.T) {
			gpu := newFakeGPU(1)
			e := gpuEngine(t, gpu, nil, nil)
			path, orig := randomFile(t, dir, "src", 2<<20)
			out, _ := randomFile(t, dir, "dst", 2<<20)
			src := openSeg(t, e, path, engine.PermRead)
			dst := openSeg(t, e, out, engine.PermReadWrite)
			d := deviceRegion(t, e, 0, 2<<20)
			if d.Location() != "cuda:0" {
				t.Fatalf("location %q", d.Location())
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					req := []engine.Request{{Address: d.BaseAddress() + 4096, TargetOffset: c.fileOff, Length: c.length}}
					rep, err := e.SubmitAndWait(engine.OpRead, src, req, ioTimeout)
					if err != nil || rep.CompletedBytes != c.length || !rep.LocallyDrained {
						t.Fatalf("read: %v %+v", err, rep)
					}
					got := make([]byte, c.length)
					if _, err := d.ReadAt(got, 4096); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, orig[c.fileOff:c.fileOff+c.length]) {
						t.Fatal("device bytes differ from the file")
					}
					rep, err = e.SubmitAndWait(engine.OpWrite, dst, req, ioTimeout)
					if err != nil || rep.CompletedBytes != c.length {
						t.Fatalf("write: %v %+v", err, rep)
					}
					back, _ := os.ReadFile(out)
					if !bytes.Equal(back[c.fileOff:c.fileOff+c.length], got) {
						t.Fatal("file bytes differ from the device")
					}
				})
			}
			st := e.Stats()
			if st.Staging == nil || st.Staging.Leases == 0 || st.Staging.InUse != 0 || st.Staging.Chunks != 8 {
				t.Fatalf("staging stats %+v", st.Staging)
			}
			if gpu.copies.Load() == 0 {
				t.Fatal("no device copy ran")
			}
		})
	}
}

// TestStagedVector: a vector mixing device ranges, host ranges and
// padding, through staging, both directions.
func TestStagedVector(t *testing.T) {
	for fsName, dir := range filesystems(t) {
		t.Run(fsName, func(t *testing.T) {
			e := gpuEngine(t, newFakeGPU(2), nil, nil)
			path, orig := randomFile(t, dir, "f", 1<<20)
			seg := openSeg(t, e, path, engine.PermReadWrite)
			d0 := deviceRegion(t, e, 0, 256<<10)
			d1 := deviceRegion(t, e, 1, 256<<10)
			h := register(t, e, 256<<10)
			elems := []engine.Element{
				engine.Range(d0.BaseAddress(), 100000),
				engine.Pad(5000),
				engine.Range(h.BaseAddress()+7, 70000),
				engine.Range(d1.BaseAddress()+4096, 90000),
				engine.Pad(3),
			}
			const off = 12345
			rep, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{engine.Vector(engine.TransportUnspec, off, elems...)}, ioTimeout)
			if err != nil || rep.CompletedBytes != 265003 {
				t.Fatalf("read: %v %+v", err, rep)
			}
			check := func(r *engine.Region, roff, foff, n int) {
				t.Helper()
				got := make([]byte, n)
				r.ReadAt(got, int64(roff))
				if !bytes.Equal(got, orig[foff:foff+n]) {
					t.Fatalf("%s [%d,+%d) != file [%d,+%d)", r.Location(), roff, n, foff, n)
				}
			}
			check(d0, 0, off, 100000)
			check(h, 7, off+105000, 70000)
			check(d1, 4096, off+175000, 90000)

			// WRITE the same vector: padding becomes zeros.
			rand.Read(orig[off : off+265003])
			d0.WriteAt(orig[off:off+100000], 0)
			h.WriteAt(orig[off+105000:off+175000], 7)
			d1.WriteAt(orig[off+175000:off+265000], 4096)
			rep, err = e.SubmitAndWait(engine.OpWrite, seg, []engine.Request{engine.Vector(engine.TransportIOUring, off, elems...)}, ioTimeout)
			if err != nil || rep.CompletedBytes != 265003 {
				t.Fatalf("write: %v %+v", err, rep)
			}
			clear(orig[off+100000 : off+105000])
			clear(orig[off+265000 : off+265003])
			back, _ := os.ReadFile(path)
			if !bytes.Equal(back, orig) {
				t.Fatal("file after vectored WRITE differs")
			}
		})
	}
}

// TestStagedShortRead: a file shrunk between submit and I/O gives each
// task its exact prefix; only bytes before the gap count.
func TestStagedShortRead(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	gpu := newFakeGPU(1)
	cfg := config.DefaultEngine()
	cfg.StagingChunkCount, cfg.StagingChunkSize, cfg.StagingLanes = 4, 4096, 2
	cfg.MappedFiles = false // staging, also where the temporary directory is tmpfs
	e := newEngineOver(t, cfg, ref, gpu)
	path, orig := randomFile(t, t.TempDir(), "f", 32768)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 32768)
	b, _ := e.AllocateBatch(4)
	reqs := []engine.Request{
		{Address: d.BaseAddress(), TargetOffset: 0, Length: 12288},            // 3 units, complete
		{Address: d.BaseAddress() + 12288, TargetOffset: 12288, Length: 8192}, // short: 12288+5000
		{Address: d.BaseAddress() + 20480, TargetOffset: 24576, Length: 4096}, // 0 at EOF
	}
	if _, err := b.Submit(engine.OpRead, seg, reqs, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	os.Truncate(path, 12288+5000)
	ref.release()
	b.Seal()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateFailed {
		t.Fatalf("state %v err %v", st, err)
	}
	want := []struct {
		state engine.TaskState
		n     uint64
	}{{engine.TaskCompleted, 12288}, {engine.TaskFailed, 5000}, {engine.TaskFailed, 0}}
	for i, w := range want {
		ts, _ := b.TaskStatus(i)
		if ts.State != w.state || ts.Transferred != w.n || ts.Transport != engine.TransportIOUring {
			t.Errorf("task %d: %v %d bytes via %v, want %v %d (%v)", i, ts.State, ts.Transferred, ts.Transport, w.state, w.n, ts.Err)
		}
	}
	got := make([]byte, 17288)
	d.ReadAt(got, 0)
	if !bytes.Equal(got, orig[:17288]) {
		t.Fatal("returned prefix not on the device")
	}
	b.Free()
}

// TestRoutes: the one place that picks a path, observed per task.
func TestRoutes(t *testing.T) {
	needIOUring(t)
	shm, err := os.MkdirTemp("/dev/shm", "orbitefs-routes-")
	if err != nil {
		t.Skip("no /dev/shm")
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	gds := &fakeGDS{}
	e := gpuEngine(t, newFakeGPU(1), gds, nil)
	ext4, _ := randomFile(t, t.TempDir(), "f", 1<<20)
	tmpfs, _ := randomFile(t, shm, "f", 1<<20)
	segExt4 := openSeg(t, e, ext4, engine.PermReadWrite)
	segTmpfs := openSeg(t, e, tmpfs, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, 1<<20)
	h := register(t, e, 1<<20)

	run := func(seg *engine.Segment, r engine.Request) (engine.TransportKind, error) {
		b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{r}, nil, ioTimeout)
		if err != nil {
			return 0, err
		}
		defer b.Free()
		if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
			ts, _ := b.TaskStatus(0)
			t.Fatalf("state %v %v %v", st, err, ts.Err)
		}
		ts, _ := b.TaskStatus(0)
		return ts.Transport, nil
	}
	cases := []struct {
		name string
		seg  *engine.Segment
		req  engine.Request
		want engine.TransportKind
		err  string // Unavailable text, when refused
	}{
		{"host stays on the ring", segExt4, engine.Request{Address: h.BaseAddress(), Length: 65536}, engine.TransportIOUring, ""},
		{"aligned device on ext4 prefers gds", segExt4, engine.Request{Address: d.BaseAddress(), Length: 65536}, engine.TransportGDS, ""},
		{"unaligned device falls back to staging", segExt4, engine.Request{Address: d.BaseAddress() + 1, Length: 65536}, engine.TransportIOUring, ""},
		{"tmpfs device uses staging", segTmpfs, engine.Request{Address: d.BaseAddress(), Length: 65536}, engine.TransportIOUring, ""},
		{"explicit io_uring honoured", segExt4, engine.Request{Transport: engine.TransportIOUring, Address: d.BaseAddress(), Length: 65536}, engine.TransportIOUring, ""},
		{"explicit gds", segExt4, engine.Request{Transport: engine.TransportGDS, Address: d.BaseAddress(), Length: 65536}, engine.TransportGDS, ""},
		{"explicit gds on tmpfs", segTmpfs, engine.Request{Transport: engine.TransportGDS, Address: d.BaseAddress(), Length: 65536}, 0, "no O_DIRECT descriptor"},
		{"explicit gds with padding", segExt4, engine.Vector(engine.TransportGDS, 0, engine.Range(d.BaseAddress(), 4096), engine.Pad(4096)), 0, "padding"},
		{"explicit gds for host memory", segExt4, engine.Request{Transport: engine.TransportGDS, Address: h.BaseAddress(), Length: 4096}, 0, "device memory only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := run(c.seg, c.req)
			if c.err != "" {
				wantKind(t, err, engine.KindUnavailable)
				if !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %q does not say %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("transport %v err %v, want %v", got, err, c.want)
			}
		})
	}
	if gds.reads.Load() == 0 || gds.opened.Load() != 1 {
		t.Fatalf("cuFile reads %d, handles opened %d", gds.reads.Load(), gds.opened.Load())
	}
	if s := e.Stats().GDS; s.Mode != "native" || s.Files != 1 || s.BufferRegistrations != 1 {
		t.Fatalf("gds stats %+v", s)
	}
	// Closing the segment deregisters its cuFile handle.
	if err := e.CloseFileSegment(segExt4, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if gds.closed.Load() != 1 {
		t.Fatalf("cuFile handles closed: %d", gds.closed.Load())
	}
}

// TestGDSRegistrationFailure: a refused buffer registration is counted and
// leaves the region to staging; an explicit gds request is Unavailable.
func TestGDSRegistrationFailure(t *testing.T) {
	gds := &fakeGDS{}
	gds.failRegister.Store(true)
	e := gpuEngine(t, newFakeGPU(1), gds, nil)
	path, orig := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	_, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Transport: engine.TransportGDS, Address: d.BaseAddress(), Length: 65536}}, ioTimeout)
	wantKind(t, err, engine.KindUnavailable)
	b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 65536}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := b.Wait(ioTimeout); st != engine.StateCompleted {
		t.Fatalf("state %v", st)
	}
	if ts, _ := b.TaskStatus(0); ts.Transport != engine.TransportIOUring {
		t.Fatalf("transport %v, want io_uring (staging)", ts.Transport)
	}
	got := make([]byte, 65536)
	d.ReadAt(got, 0)
	if !bytes.Equal(got, orig[:65536]) {
		t.Fatal("bytes differ")
	}
	if n := e.Stats().GDS.BufferRegistrationFailures; n != 1 {
		t.Fatalf("registration failures %d, want 1 (cached per region)", n)
	}
}

// TestUncertainCopyRetains: a device copy whose outcome is unknown ends
// the group unquiesced; its loans, staging chunks and events stay held.
func TestUncertainCopyRetains(t *testing.T) {
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, nil)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	gpu.failEvent.Store(true)
	rep, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 256 << 10}}, ioTimeout)
	if err == nil || rep.LocallyDrained {
		t.Fatalf("err %v report %+v: want a failure that is not locally drained", err, rep)
	}
	wantKind(t, rep.Err, engine.KindUnquiesced)
	wantKind(t, e.Unregister(d), engine.KindBusy)
	if st := e.Stats(); st.UnquiescedGroups != 1 || st.Staging.InUse == 0 {
		t.Fatalf("unquiesced %d, staging in use %d", st.UnquiescedGroups, st.Staging.InUse)
	}
	// The events behind those copies stay too: a stream may reuse a
	// closed event, and these ones' copies may still be running.
	if n := gpu.releases.Load(); n != 0 {
		t.Fatalf("%d events of uncertain copies released", n)
	}
	wantKind(t, e.Close(ioTimeout), engine.KindUnquiesced)
}

// TestDeviceRegistration: errors say why, without a GPU backend and for
// a missing device; pinned memory is host memory that is also pinned.
func TestDeviceRegistration(t *testing.T) {
	bare := newEngine(t, nil)
	_, err := bare.RegisterDevice(0, 4096)
	wantKind(t, err, engine.KindUnavailable)
	if !strings.Contains(err.Error(), "no GPU backend") {
		t.Fatalf("error %q", err)
	}
	_, err = bare.RegisterPinned(4096)
	wantKind(t, err, engine.KindUnavailable)

	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, nil)
	_, err = e.RegisterDevice(3, 4096)
	wantKind(t, err, engine.KindUnavailable)
	if !strings.Contains(err.Error(), "no CUDA device 3 (this machine has 1)") {
		t.Fatalf("error %q", err)
	}
	p, err := e.RegisterPinned(8192)
	if err != nil || p.Location() != engine.LocationPinned || gpu.pinnedCount() != 1 {
		t.Fatalf("pinned: %v %v pinned=%d", err, p, gpu.pinnedCount())
	}
	if err := e.Unregister(p); err != nil || gpu.pinnedCount() != 0 {
		t.Fatalf("unregister: %v pinned=%d", err, gpu.pinnedCount())
	}
	for _, s := range []string{"cpu", "pinned", "cuda:0", "cuda:12"} {
		if _, err := engine.ParseLocation(s); err != nil {
			t.Errorf("%s: %v", s, err)
		}
	}
	for _, s := range []string{"", "gpu", "cuda:", "cuda:-1", "cuda:01", "cuda:x", "CPU"} {
		if _, err := engine.ParseLocation(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// producerEvent completes when the test says so.
type producerEvent struct {
	done chan struct{}
	err  error
}

func (p *producerEvent) Done() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}
func (p *producerEvent) Wait() error  { <-p.done; return p.err }
func (p *producerEvent) Close() error { return nil }

// TestProducerEvent: a WRITE from device memory waits for the producer's
// readiness event before reading that memory: bytes the producer wrote
// before signalling reach the file; a failed producer fails the task with
// nothing written; host-only requests refuse an event.
func TestProducerEvent(t *testing.T) {
	e := gpuEngine(t, newFakeGPU(1), nil, nil)
	path, orig := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, 1<<20)
	ev := &producerEvent{done: make(chan struct{})}
	b, err := e.SubmitAsync(engine.OpWrite, seg, []engine.Request{{Address: d.BaseAddress(), Length: 256 << 10, Producer: ev}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the task to start", func() bool { ts, _ := b.TaskStatus(0); return ts.State == engine.TaskRunning })
	// The "kernel" writes its output (straight into device memory, as a
	// kernel would: the engine's loan refuses Region.WriteAt now), then
	// records the event.
	out := make([]byte, 256<<10)
	rand.Read(out)
	copy(hostBytes(uintptr(d.BaseAddress()), 256<<10), out)
	close(ev.done)
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v %v", st, err)
	}
	b.Free()
	back, _ := os.ReadFile(path)
	if !bytes.Equal(back[:256<<10], out) {
		t.Fatal("the file has bytes from before the producer's event")
	}

	failed := &producerEvent{done: make(chan struct{}), err: errors.New("fake: CUDA_ERROR_LAUNCH_FAILED")}
	close(failed.done)
	d.WriteAt(make([]byte, 4096), 0)
	_, err = e.SubmitAndWait(engine.OpWrite, seg, []engine.Request{{Address: d.BaseAddress(), Length: 4096, Producer: failed}}, ioTimeout)
	wantKind(t, err, engine.KindIO)
	if back2, _ := os.ReadFile(path); !bytes.Equal(back2[:4096], back[:4096]) {
		t.Fatal("a failed producer's memory reached the file")
	}
	h := register(t, e, 4096)
	_, err = e.SubmitAndWait(engine.OpWrite, seg, []engine.Request{{Address: h.BaseAddress(), Length: 4096, Producer: ev}}, ioTimeout)
	wantKind(t, err, engine.KindInvalid)
	_ = orig
}

// TestStagedJobsShareFewRings: more concurrent staged groups than rings
// in the pool. Each batch's worker used to take a ring before
// dispatching its (off-ring) group and keep it, so every ring sat with a
// worker while every staging lane waited for one: 64 clients reading
// into cuda:0 on the GPU machine hung (docs/performance.md).
func TestStagedJobsShareFewRings(t *testing.T) {
	const batches = 6
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) { c.IOUring.MaxRings = 2 })
	path, orig := randomFile(t, t.TempDir(), "src", 1<<20)
	src := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, batches<<20)
	concurrently(t, batches, func(i int) error {
		return oneBatch(e, submission{engine.OpRead, src, engine.Request{Address: d.BaseAddress() + uint64(i)<<20, Length: 1 << 20}})
	})
	wantSlices(t, d, batches, orig)
}

// submission is one group of one request, for oneBatch.
type submission struct {
	op  engine.Op
	seg *engine.Segment
	req engine.Request
}

// oneBatch submits subs, in order, into a batch of its own, seals it and
// waits up to 10 s for it to complete.
func oneBatch(e *engine.Engine, subs ...submission) error {
	b, err := e.AllocateBatch(len(subs))
	if err != nil {
		return err
	}
	defer b.Free()
	for _, s := range subs {
		if _, err := b.Submit(s.op, s.seg, []engine.Request{s.req}, nil, 0); err != nil {
			return err
		}
	}
	b.Seal()
	if st, err := b.Wait(10 * time.Second); err != nil || st != engine.StateCompleted {
		return fmt.Errorf("batch %d: %v %v", b.ID(), st, err)
	}
	return nil
}

// concurrently runs one(i) for every i in [0, n) at once and fails the
// test with the errors they return.
func concurrently(t *testing.T, n int, one func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := one(i); err != nil {
				errs <- fmt.Errorf("%d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// wantSlices checks that each of the first n MiB of r holds want.
func wantSlices(t *testing.T, r *engine.Region, n int, want []byte) {
	t.Helper()
	got := make([]byte, len(want))
	for i := range n {
		if _, err := r.ReadAt(got, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("MiB %d: bytes differ from the file", i)
		}
	}
}

// TestGDSHandleClosedAfterBatch: a segment closed as soon as its GDS
// batch completed deregisters its cuFile handle. The job used to count
// the handle busy until after its last unit resolved, so a close that
// followed Wait at once could find it busy and leave it registered for
// good (seen as TestRoutes failing under load).
func TestGDSHandleClosedAfterBatch(t *testing.T) {
	gds := &fakeGDS{}
	e := gpuEngine(t, newFakeGPU(1), gds, nil)
	d := deviceRegion(t, e, 0, 1<<20)
	dir := t.TempDir()
	const rounds = 40
	for i := range rounds {
		path, _ := randomFile(t, dir, fmt.Sprintf("f%d", i), 1<<16)
		seg := openSeg(t, e, path, engine.PermRead)
		if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Transport: engine.TransportGDS, Address: d.BaseAddress(), Length: 1 << 16}}, ioTimeout); err != nil {
			t.Fatal(err)
		}
		if err := e.CloseFileSegment(seg, ioTimeout); err != nil {
			t.Fatal(err)
		}
		if got := gds.closed.Load(); got != int64(i+1) {
			t.Fatalf("round %d: %d cuFile handles closed, want %d", i, got, i+1)
		}
	}
}

// TestStagedLanesShareThePool: concurrent groups share the executor's
// lanes and their pinned chunks: none maps a pageable buffer. Each group
// used to start lanes of its own, and with the pool leased out by the
// others each fell back to a pageable buffer.
func TestStagedLanesShareThePool(t *testing.T) {
	const batches = 6
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) {
		c.StagingChunkCount, c.StagingLanes = 2, 2
	})
	path, orig := randomFile(t, t.TempDir(), "src", 1<<20)
	src := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, batches<<20)
	concurrently(t, batches, func(i int) error {
		return oneBatch(e, submission{engine.OpRead, src, engine.Request{Address: d.BaseAddress() + uint64(i)<<20, Length: 1 << 20}})
	})
	wantSlices(t, d, batches, orig)
	if st := e.Stats().Staging; st.Fallbacks != 0 || st.HighWater > 2 {
		t.Fatalf("%d pageable fallbacks, %d chunks in use at most, for %d groups: want none and at most the pool's 2", st.Fallbacks, st.HighWater, batches)
	}
}

// TestFencedRingGroupWaitsWithoutRing: with one ring, a batch runs a
// large ring READ, then a staged WRITE from the device (dispatched while
// the READ holds the ring, so its lane waits for it), then a ring READ of
// the written bytes, fenced behind the WRITE. The worker kept its ring
// while it waited at that fence, so the WRITE's lane never got one and
// the batch hung.
func TestFencedRingGroupWaitsWithoutRing(t *testing.T) {
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) {
		c.IOUring.MaxRings = 1
		c.MaxTransferBytes = 64 << 20
	})
	dir := t.TempDir()
	bigPath, _ := randomFile(t, dir, "big", 64<<20)
	big := openSeg(t, e, bigPath, engine.PermRead)
	path, _ := randomFile(t, dir, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, 1<<20)
	h := register(t, e, 65<<20)
	want := make([]byte, 1<<20)
	rand.Read(want)
	if _, err := d.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if err := oneBatch(e,
		submission{engine.OpRead, big, engine.Request{Transport: engine.TransportIOUring, Address: h.BaseAddress() + 1<<20, Length: 64 << 20}},
		submission{engine.OpWrite, seg, engine.Request{Address: d.BaseAddress(), Length: 1 << 20}},
		submission{engine.OpRead, seg, engine.Request{Transport: engine.TransportIOUring, Address: h.BaseAddress(), Length: 1 << 20}},
	); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1<<20)
	if _, err := h.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the read did not see the device bytes written before it")
	}
}

// TestFencedRingGroupsShareFewRings: more batches than rings, each a
// staged WRITE from the device followed by a ring READ of the same file
// bytes (fenced behind the write). A worker whose ring group waited at
// that fence held its ring while it slept, so with every ring held so,
// no staging lane got one and the writes never ran: a hang.
func TestFencedRingGroupsShareFewRings(t *testing.T) {
	const batches = 6
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) { c.IOUring.MaxRings = 2 })
	dir := t.TempDir()
	d := deviceRegion(t, e, 0, batches<<20)
	h := register(t, e, batches<<20)
	segs := make([]*engine.Segment, batches)
	for i := range segs {
		path, _ := randomFile(t, dir, fmt.Sprintf("f%d", i), 1<<20)
		segs[i] = openSeg(t, e, path, engine.PermReadWrite)
	}
	concurrently(t, batches, func(i int) error {
		off := uint64(i) << 20
		return oneBatch(e,
			submission{engine.OpWrite, segs[i], engine.Request{Address: d.BaseAddress() + off, Length: 1 << 20}},
			submission{engine.OpRead, segs[i], engine.Request{Transport: engine.TransportIOUring, Address: h.BaseAddress() + off, Length: 1 << 20}})
	})
	want := make([]byte, 1<<20)
	got := make([]byte, 1<<20)
	for i := range batches {
		if _, err := d.ReadAt(want, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
		if _, err := h.ReadAt(got, int64(i)<<20); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("batch %d: the read did not see the device bytes written before it", i)
		}
	}
}

// TestDeviceGroupDeadlineInfeasible: with EDF and a positive
// mlu_local_threshold, device-memory owners face the deadline prediction
// too, on the rate measured for their path (staged here, then GDS): once
// the path has a rate, an owner predicted not to fit is dropped with
// ErrDeadlineInfeasible before any I/O.
func TestDeviceGroupDeadlineInfeasible(t *testing.T) {
	for _, c := range []struct {
		name string
		gds  *fakeGDS
		path string
	}{
		{"staged", nil, "staged_gpu"},
		{"gds", &fakeGDS{}, "gds"},
	} {
		t.Run(c.name, func(t *testing.T) {
			gpu := newFakeGPU(1)
			e := gpuEngine(t, gpu, c.gds, func(cfg *config.Engine) {
				cfg.RuntimeQueue.Enabled = true
				cfg.RuntimeQueue.DeadlineAware = true
				cfg.RuntimeQueue.MLULocalThreshold = 1e-9 // any known rate and a finite deadline
			})
			const size = 4 << 20
			path, _ := randomFile(t, t.TempDir(), "f", size)
			seg := openSeg(t, e, path, engine.PermRead)
			d := deviceRegion(t, e, 0, size)
			reqs := []engine.Request{{Address: d.BaseAddress(), Length: 1 << 20}, {Address: d.BaseAddress() + 1<<20, TargetOffset: 1 << 20, Length: 1 << 20}}
			for tries := 0; ; tries++ {
				if _, err := e.SubmitAndWait(engine.OpRead, seg, reqs, 20*time.Second); err != nil {
					t.Fatalf("with no estimate yet: %v", err)
				}
				known := false
				for _, bw := range e.Stats().RuntimeQueue.Bandwidth {
					known = known || (bw.Path == c.path && bw.BytesPerSecond > 0)
				}
				if known {
					break
				}
				if tries == 100 {
					t.Fatalf("no %s estimate after %d transfers: %+v", c.path, tries, e.Stats().RuntimeQueue.Bandwidth)
				}
			}
			copies, reads := gpu.copies.Load(), int64(0)
			if c.gds != nil {
				reads = c.gds.reads.Load()
			}
			rep, err := e.SubmitAndWait(engine.OpRead, seg, reqs, 20*time.Second)
			if !errors.Is(err, engine.ErrDeadlineInfeasible) || engine.KindOf(err) != engine.KindTimeout || rep.CompletedRequests != 0 {
				t.Fatalf("infeasible: %v (report %+v)", err, rep)
			}
			if d := e.Stats().RuntimeQueue.DeadlineInfeasibleDrops; d != 2 {
				t.Fatalf("drops %d, want 2", d)
			}
			if gpu.copies.Load() != copies || (c.gds != nil && c.gds.reads.Load() != reads) {
				t.Fatal("a dropped owner moved bytes")
			}
		})
	}
}

// TestOffRingProgressPerUnit: a running device-memory task publishes its
// byte count as its units land in order (spec: the count advances as
// contiguous receipts arrive), not only at its last unit. One staging
// lane with one 64 KiB chunk moves the units one after the other in file
// order; the fake GPU holds every host-to-device copy past the first
// 128 KiB of the region, so exactly the first two units land. (With two
// chunks a third unit's held copy could enter the in-order stream ahead
// of the first unit's.)
func TestOffRingProgressPerUnit(t *testing.T) {
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) { c.StagingLanes, c.StagingChunkCount = 1, 1 })
	const size = 1 << 20
	path, orig := randomFile(t, t.TempDir(), "f", size)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, size)
	gpu.held = make(chan struct{})
	gpu.holdFrom.Store(d.BaseAddress() + 128<<10)
	released := false
	release := func() {
		if !released {
			released = true
			close(gpu.held)
		}
	}
	defer release()
	b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: size}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	var last engine.TaskStatus
	deadline := time.Now().Add(5 * time.Second)
	for {
		last, _ = b.TaskStatus(0)
		if last.State == engine.TaskRunning && last.Transferred == 128<<10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %+v: want it running with the first two units' bytes", last)
		}
		time.Sleep(time.Millisecond)
	}
	release()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v %v", st, err)
	}
	if ts, _ := b.TaskStatus(0); ts.Transferred != size {
		t.Fatalf("task %+v", ts)
	}
	got := make([]byte, size)
	d.ReadAt(got, 0)
	if !bytes.Equal(got, orig) {
		t.Fatal("device bytes differ")
	}
}
