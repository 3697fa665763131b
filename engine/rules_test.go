package engine_test

// rules_test.go: rules of the specification that had no test failing
// when they break. Each test names its rule; GPU rules run on the fake
// GPU and cuFile (fakegpu_test.go) over real io_uring and real files.

import (
	"bytes"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestRuleTerminalStatesNeverChange: once a sealed batch is terminal,
// neither it nor any task changes: cancels, progress, polls and waits
// leave every state and byte count as they were.
func TestRuleTerminalStatesNeverChange(t *testing.T) {
	e := newEngine(t, nil)
	seg, reg := smallTarget(t, e, 8192)
	b, err := e.AllocateBatch(4)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: reg.BaseAddress(), Length: 4096}}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if st := waitState(t, b); st != engine.StateCompleted {
		t.Fatalf("state %v", st)
	}
	before := b.TaskStatuses()
	b.Cancel(0)
	b.CancelAll()
	b.Seal()
	b.Progress()
	for range 3 {
		b.Status()
		b.TaskStatus(0)
	}
	if st, _ := b.Wait(ioTimeout); st != engine.StateCompleted {
		t.Fatalf("state after cancels and polls %v, want completed", st)
	}
	after := b.TaskStatuses()
	for i := range before {
		if before[i].State != after[i].State || before[i].Transferred != after[i].Transferred {
			t.Fatalf("task %d changed after the batch was terminal: %+v -> %+v", i, before[i], after[i])
		}
	}
}

// TestRuleMergeCappedAtMaxTransfer: adjacent memory requests merge into
// one physical owner only up to max_transfer_bytes.
func TestRuleMergeCappedAtMaxTransfer(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, func(c *config.Engine) { c.MaxTransferBytes = 8192; c.CallerFastPathBytes = 4096 })
	local, remote := register(t, e, 1<<16), register(t, e, 1<<16)
	fillRandom(t, remote)
	ms := openMem(t, e, remote, engine.PermRead)
	a := local.BaseAddress()
	var reqs []engine.Request
	for i := uint64(0); i < 5; i++ {
		reqs = append(reqs, engine.Request{Address: a + i*4096, TargetOffset: i * 4096, Length: 4096})
	}
	got := runOwners(t, e, engine.OpRead, ms, reqs)
	want := []int{0, 0, 2, 2, 4}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("physical owners %v, want %v (8 KiB owners)", got, want)
		}
	}
}

// TestRuleExpiredDeadlineEndsRetry: a failed attempt decided after its
// group's deadline is final; no next attempt runs.
func TestRuleExpiredDeadlineEndsRetry(t *testing.T) {
	r := newFailoverRig(t, func(c *config.Engine) { c.EnableAutoFailoverOnPoll = false })
	r.gds.failReads.Store(1)
	const timeout = 2 * time.Second // room for the cuFile attempt to fail and park first
	b, err := r.e.SubmitAsync(engine.OpRead, r.seg, []engine.Request{{Address: r.dev.BaseAddress(), Length: 64 << 10}}, nil, timeout)
	start := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	waitFor(t, "the failed attempt to park", func() bool { return b.ParkedAttempts() == 1 })
	time.Sleep(time.Until(start.Add(timeout + 50*time.Millisecond)))
	if st, _ := b.Wait(ioTimeout); st != engine.StateFailed {
		t.Fatalf("state %v, want failed", st)
	}
	ts, _ := b.TaskStatus(0)
	wantKind(t, ts.Err, engine.KindIO)
	if ts.FailoverCount != 0 || r.gpu.copies.Load() != 0 || r.e.Stats().Failovers != 0 {
		t.Fatalf("task %+v, copies %d: an attempt ran after the deadline", ts, r.gpu.copies.Load())
	}
}

// truncatingEvent is a producer event that truncates a file the first
// time it is polled: the file becomes shorter after the range check.
type truncatingEvent struct {
	path string
	size int64
	done atomic.Bool
}

func (p *truncatingEvent) Done() (bool, error) {
	if !p.done.Swap(true) {
		if err := os.Truncate(p.path, p.size); err != nil {
			return false, err
		}
	}
	return true, nil
}
func (p *truncatingEvent) Wait() error  { _, err := p.Done(); return err }
func (p *truncatingEvent) Close() error { return nil }

// TestRuleShortCompletionKeepsPrefix: a device-memory READ that finds the
// file shorter than at submit fails with KindRange and keeps exactly the
// bytes it read, on both device paths (staging: a full unit, then a short
// one; cuFile: one short call).
func TestRuleShortCompletionKeepsPrefix(t *testing.T) {
	for _, tr := range []engine.TransportKind{engine.TransportIOUring, engine.TransportGDS} {
		t.Run(tr.String(), func(t *testing.T) {
			r := newFailoverRig(t, nil)
			const short = 100000
			ev := &truncatingEvent{path: r.path, size: short}
			b, err := r.e.SubmitAsync(engine.OpRead, r.seg, []engine.Request{{Transport: tr, Address: r.dev.BaseAddress(), Length: 256 << 10, Producer: ev}}, nil, ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			b.Wait(ioTimeout)
			ts, _ := b.TaskStatus(0)
			wantKind(t, ts.Err, engine.KindRange)
			if ts.Transferred != short || ts.Transport != tr || ts.FailoverCount != 0 {
				t.Fatalf("task %+v, want %d bytes read before the end on %v", ts, short, tr)
			}
			if rep := b.Submissions()[0]; rep.CompletedRequests != 0 || rep.CompletedBytes != 0 {
				t.Fatalf("report %+v: the failed request is no part of the prefix", rep)
			}
			if !bytes.Equal(r.devBytes(t, 0, short), r.orig[:short]) {
				t.Fatal("the kept prefix differs from the file")
			}
		})
	}
}

// TestRuleOwnersAdmittedTogether: the runtime queue admits all physical
// owners of a submission together, or none: a group that does not fit
// the outstanding budget whole is refused, though some of its owners
// would fit.
func TestRuleOwnersAdmittedTogether(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxOutstandingOwners = 4
		c.RuntimeQueue.MaxDispatchOwners = 4
	})
	seg, reg := smallTarget(t, e, 32<<10)
	release := e.HoldWindowForTest(64, 0) // nothing dispatches: admitted groups stay outstanding
	a, _ := e.AllocateBatch(8)
	defer func() { release(); a.CancelAll(); waitState(t, a); a.Free() }()
	if _, err := a.Submit(engine.OpRead, seg, []engine.Request{read4k(reg, 0)[0], read4k(reg, 4096)[0], read4k(reg, 8192)[0]}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	b, _ := e.AllocateBatch(8)
	defer func() { b.CancelAll(); waitState(t, b); b.Free() }()
	_, err := b.Submit(engine.OpRead, seg, []engine.Request{read4k(reg, 16384)[0], read4k(reg, 20480)[0]}, nil, ioTimeout)
	wantKind(t, err, engine.KindExhausted)
	if b.TaskCount() != 0 || e.Stats().RuntimeQueue.OutstandingOwners != 3 {
		t.Fatalf("tasks %d, outstanding owners %d: want the two-owner group refused whole", b.TaskCount(), e.Stats().RuntimeQueue.OutstandingOwners)
	}
	if _, err := b.Submit(engine.OpRead, seg, read4k(reg, 16384), nil, ioTimeout); err != nil {
		t.Fatalf("one owner fits: %v", err)
	}
}

// TestRuleHardZeroCap: a contract cap of 0 (max_inflight_requests or
// max_inflight_bytes) is a hard zero that refuses every submission; an
// absent cap means no cap.
func TestRuleHardZeroCap(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.QoS = mustQoS(t, `{"qos":{"tenants":[
			{"name":"noreq","defaults":{"max_inflight_requests":0}},
			{"name":"nobytes","defaults":{"max_inflight_bytes":0}},
			{"name":"free","defaults":{}}]}}`)
	})
	seg, reg := smallTarget(t, e, 4096)
	for _, c := range []struct {
		tenant string
		ok     bool
	}{{"noreq", false}, {"nobytes", false}, {"free", true}} {
		rep, err := func() (engine.Report, error) {
			b, _ := e.AllocateBatch(1)
			defer b.Free()
			if _, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, 0), nil, engine.SubmitOptions{QoS: resolve(t, e, c.tenant, "", nil)}); err != nil {
				return engine.Report{}, err
			}
			waitState(t, b)
			return b.Submissions()[0], nil
		}()
		if c.ok {
			if err != nil || rep.Err != nil {
				t.Fatalf("tenant %s: %v %+v", c.tenant, err, rep)
			}
			continue
		}
		wantKind(t, err, engine.KindExhausted)
	}
}

// TestRuleStagingExhausted: staging chunks belong to the engine-wide
// staging lanes. With every chunk busy, a staged transfer waits in the
// executor's queue for one (no pageable fallback, no error) and completes
// once a chunk frees. With every chunk retained for good (an uncertain
// device copy) and no room under max_inflight_bytes for a pageable
// buffer, it fails with ResourceExhausted before any I/O.
func TestRuleStagingExhausted(t *testing.T) {
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) {
		c.StagingLanes, c.StagingChunkCount = 1, 2
		c.MaxInflightBytes = 256<<10 + 64<<10 // the two groups, no more
		c.MaxTransferBytes = 256 << 10
		c.CallerFastPathBytes = 64 << 10
	})
	path, orig := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	gpu.hang = make(chan struct{})
	hung := true
	defer func() {
		if hung {
			close(gpu.hang)
		}
	}()
	a, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Transport: engine.TransportIOUring, Address: d.BaseAddress(), Length: 256 << 10}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	waitFor(t, "the first group to hold both chunks", func() bool { st := e.Stats().Staging; return st != nil && st.InUse == 2 })
	b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Transport: engine.TransportIOUring, Address: d.BaseAddress() + 512<<10, TargetOffset: 512 << 10, Length: 64 << 10}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	waitFor(t, "the second group to be dispatched", func() bool { ts, _ := b.TaskStatus(0); return ts.State != engine.TaskPending })
	time.Sleep(100 * time.Millisecond) // room for a wrong failure
	if ts, _ := b.TaskStatus(0); ts.State != engine.TaskRunning {
		t.Fatalf("with every chunk busy the second group is %v (%v), want running (waiting for a chunk)", ts.State, ts.Err)
	}
	close(gpu.hang)
	hung = false
	for _, x := range []*engine.Batch{a, b} {
		if st, err := x.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
			t.Fatalf("batch %d: %v %v", x.ID(), st, err)
		}
	}
	got := make([]byte, 64<<10)
	d.ReadAt(got, 512<<10)
	if !bytes.Equal(got, orig[512<<10:576<<10]) {
		t.Fatal("the waiting group's bytes differ from the file")
	}
	if st := e.Stats().Staging; st.Fallbacks != 0 {
		t.Fatalf("%d pageable fallbacks: the waiting group should have had a pinned chunk", st.Fallbacks)
	}

	// Every chunk retained: a group whose two units' copies are uncertain
	// keeps both chunks (and its in-flight bytes) for good; the next group
	// has no chunk and no room for a pageable buffer.
	gpu2 := newFakeGPU(1)
	e2 := gpuEngine(t, gpu2, nil, func(c *config.Engine) {
		c.StagingLanes, c.StagingChunkCount = 1, 2
		c.MaxInflightBytes = 128<<10 + 64<<10 // the two groups, no more
		c.MaxTransferBytes = 128 << 10
	})
	seg2 := openSeg(t, e2, path, engine.PermRead)
	d2 := deviceRegion(t, e2, 0, 1<<20)
	gpu2.failEvent.Store(true)
	_, err = e2.SubmitAndWait(engine.OpRead, seg2, []engine.Request{{Transport: engine.TransportIOUring, Address: d2.BaseAddress(), Length: 128 << 10}}, ioTimeout)
	wantKind(t, err, engine.KindUnquiesced)
	if st := e2.Stats().Staging; st.InUse != 2 {
		t.Fatalf("%d chunks retained, want both", st.InUse)
	}
	gpu2.failEvent.Store(false)
	reads := e2.Stats().BytesRead
	_, err = e2.SubmitAndWait(engine.OpRead, seg2, []engine.Request{{Transport: engine.TransportIOUring, Address: d2.BaseAddress() + 512<<10, TargetOffset: 512 << 10, Length: 64 << 10}}, ioTimeout)
	wantKind(t, err, engine.KindExhausted)
	if st := e2.Stats(); st.Staging.Fallbacks != 0 || st.BytesRead != reads {
		t.Fatalf("fallbacks %d, bytes read %d -> %d: want nothing moved", st.Staging.Fallbacks, reads, st.BytesRead)
	}
	wantKind(t, e2.Close(ioTimeout), engine.KindUnquiesced)
}

// TestRuleGDSDisabled: gds_enabled=false keeps cuFile unloaded (never
// probed, no handle, no registration): device requests go through
// staging, and an explicit gds request is Unavailable naming the key.
func TestRuleGDSDisabled(t *testing.T) {
	r := newFailoverRig(t, func(c *config.Engine) { c.GDSEnabled = false })
	if tr := gdsRead(t, r); tr != engine.TransportIOUring {
		t.Fatalf("transport %v, want staging", tr)
	}
	_, err := r.e.SubmitAndWait(engine.OpRead, r.seg, []engine.Request{{Transport: engine.TransportGDS, Address: r.dev.BaseAddress(), Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindUnavailable)
	if !strings.Contains(err.Error(), "gds_enabled") {
		t.Fatalf("error %q does not name gds_enabled", err)
	}
	if r.gds.probes.Load() != 0 || r.gds.opened.Load() != 0 || r.gds.reads.Load() != 0 {
		t.Fatalf("cuFile probed %d, handles %d, reads %d: want none", r.gds.probes.Load(), r.gds.opened.Load(), r.gds.reads.Load())
	}
	if m := r.e.Stats().GDS.Mode; m != "unavailable" {
		t.Fatalf("gds mode %q, want unavailable", m)
	}
}

// TestRuleGDSSplit16MiB: cuFile calls move at most 16 MiB each: a 40 MiB
// request is three calls of 16, 16 and 8 MiB, in file order.
func TestRuleGDSSplit16MiB(t *testing.T) {
	gpu, gds := newFakeGPU(1), &fakeGDS{}
	e := gpuEngine(t, gpu, gds, func(c *config.Engine) { c.GDSBatchDepth = 1 })
	const n = 40 << 20
	path, orig := randomFile(t, t.TempDir(), "f", n)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, n)
	b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Transport: engine.TransportGDS, Address: d.BaseAddress(), Length: n}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v %v", st, err)
	}
	got := gds.sizes()
	want := []uint64{16 << 20, 16 << 20, 8 << 20}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("cuFile call sizes %v, want %v", got, want)
	}
	back := make([]byte, n)
	d.ReadAt(back, 0)
	if !bytes.Equal(back, orig) {
		t.Fatal("device bytes differ")
	}
}

// TestRuleGDSRequireNative: gds_require_native excludes cuFile when the
// driver permits compatibility mode, even with DMA possible (the fake:
// nvidia-fs loaded, compat-permitted): device requests take staging
// after the probe said so, an explicit gds request is Unavailable naming
// the key.
func TestRuleGDSRequireNative(t *testing.T) {
	r := newFailoverRig(t, func(c *config.Engine) { c.GDSRequireNative = true })
	r.gds.mode = "compat-permitted" // before the first submission probes it
	if tr := gdsRead(t, r); tr != engine.TransportIOUring || r.gds.probes.Load() != 1 {
		t.Fatalf("transport %v after %d probes, want staging after one", tr, r.gds.probes.Load())
	}
	_, err := r.e.SubmitAndWait(engine.OpRead, r.seg, []engine.Request{{Transport: engine.TransportGDS, Address: r.dev.BaseAddress(), Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindUnavailable)
	if !strings.Contains(err.Error(), "gds_require_native") || r.gds.reads.Load() != 0 {
		t.Fatalf("error %q, cuFile reads %d", err, r.gds.reads.Load())
	}
}

// TestRuleGDSFallbackUnspecTakesStaging: with cuFile in its POSIX
// fallback (no DMA), an unspecified transport takes the staging without
// calling cuFile: without nvidia-fs it is not even loaded; with the
// module but compatibility forced it is probed, and no file handle is
// registered. An explicit gds request still goes through cuFile. With
// DMA the same unspecified request takes cuFile.
func TestRuleGDSFallbackUnspecTakesStaging(t *testing.T) {
	for _, c := range []struct {
		name           string
		noNvfs         bool
		mode           string
		want           engine.TransportKind
		reads, probes  int64
		handles        int64
		tryExplicitGDS bool
	}{
		{"no nvidia-fs", true, "compat-permitted", engine.TransportIOUring, 0, 0, 0, true},
		{"compat forced", false, "compat-forced", engine.TransportIOUring, 0, 1, 0, true},
		{"native", false, "", engine.TransportGDS, 1, 1, 1, false},
		{"compat permitted with nvidia-fs", false, "compat-permitted", engine.TransportGDS, 1, 1, 1, false},
	} {
		r := newFailoverRig(t, nil)
		r.gds.noNvfs, r.gds.mode = c.noNvfs, c.mode // before the first submission probes it
		if tr := gdsRead(t, r); tr != c.want || r.gds.reads.Load() != c.reads || r.gds.probes.Load() != c.probes || r.gds.opened.Load() != c.handles {
			t.Fatalf("%s: transport %v, %d cuFile reads, %d probes, %d handles; want %v, %d, %d, %d", c.name, tr,
				r.gds.reads.Load(), r.gds.probes.Load(), r.gds.opened.Load(), c.want, c.reads, c.probes, c.handles)
		}
		if !c.tryExplicitGDS {
			continue
		}
		b, err := r.e.SubmitAsync(engine.OpRead, r.seg, []engine.Request{{Transport: engine.TransportGDS, Address: r.dev.BaseAddress(), Length: 64 << 10}}, nil, ioTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
			t.Fatalf("%s: explicit gds: state %v %v", c.name, st, err)
		}
		ts, _ := b.TaskStatus(0)
		b.Free()
		if ts.Transport != engine.TransportGDS || r.gds.reads.Load() != 1 {
			t.Fatalf("%s: explicit gds in the fallback: transport %v, cuFile reads %d", c.name, ts.Transport, r.gds.reads.Load())
		}
	}
}

// TestRuleInspectionDoesNotLoadCuFile: opening and inspecting a segment,
// registering device memory and reading stats never probe cuFile; the
// mode stays "unprobed" until a submission considers GDS.
func TestRuleInspectionDoesNotLoadCuFile(t *testing.T) {
	gpu, gds := newFakeGPU(1), &fakeGDS{}
	e := gpuEngine(t, gpu, gds, nil)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	seg := openSeg(t, e, path, engine.PermRead)
	if _, err := e.FileSegmentInfo(seg); err != nil {
		t.Fatal(err)
	}
	d := deviceRegion(t, e, 0, 1<<16)
	if st := e.Stats().GDS; gds.probes.Load() != 0 || gds.opened.Load() != 0 || st.Mode != "unprobed" {
		t.Fatalf("probes %d, handles %d, mode %q: want cuFile untouched", gds.probes.Load(), gds.opened.Load(), st.Mode)
	}
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 4096}}, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if gds.probes.Load() != 1 || e.Stats().GDS.Mode != "native" {
		t.Fatalf("after a device submission: probes %d, mode %q", gds.probes.Load(), e.Stats().GDS.Mode)
	}
}

// TestRuleVectoredWriteOneAttempt: a vectored WRITE has one attempt,
// even when its GDS attempt was rejected cleanly (a scalar WRITE would
// fail over: TestFailoverWriteCleanRejection).
func TestRuleVectoredWriteOneAttempt(t *testing.T) {
	r := newFailoverRig(t, nil)
	a := r.dev.BaseAddress()
	req := engine.Vector(engine.TransportUnspec, 0, engine.Range(a, 64<<10), engine.Range(a+128<<10, 64<<10))
	req.Producer = &onceFailedEvent{}
	_, err := r.e.SubmitAndWait(engine.OpWrite, r.seg, []engine.Request{req}, ioTimeout)
	wantKind(t, err, engine.KindIO)
	if r.e.Stats().Failovers != 0 || r.gpu.copies.Load() != 0 {
		t.Fatalf("failovers %d, device copies %d: want the one attempt only", r.e.Stats().Failovers, r.gpu.copies.Load())
	}
	if back, _ := os.ReadFile(r.path); !bytes.Equal(back, r.orig) {
		t.Fatal("the file changed")
	}
}

// TestRuleStagingReserves: ordinary admission may use only the runtime
// queue's outstanding totals minus staging_owner_reserve and
// staging_byte_reserve.
func TestRuleStagingReserves(t *testing.T) {
	for _, c := range []struct {
		name string
		mut  func(*config.RuntimeQueue)
	}{
		{"owners", func(q *config.RuntimeQueue) { q.MaxOutstandingOwners, q.StagingOwnerReserve = 4, 2 }},
		{"bytes", func(q *config.RuntimeQueue) { q.MaxOutstandingBytes, q.StagingByteReserve = 16<<10, 8<<10 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEngine(t, func(cfg *config.Engine) {
				cfg.RuntimeQueue.Enabled = true
				cfg.RuntimeQueue.MaxDispatchOwners, cfg.RuntimeQueue.MaxDispatchBytes = 4, 8<<10
				cfg.CallerFastPathBytes = 4 << 10
				c.mut(&cfg.RuntimeQueue)
			})
			seg, reg := smallTarget(t, e, 16<<10)
			b, _ := e.AllocateBatch(4)
			defer b.Free()
			_, err := b.Submit(engine.OpRead, seg, []engine.Request{read4k(reg, 0)[0], read4k(reg, 4096)[0], read4k(reg, 8192)[0]}, nil, ioTimeout)
			wantKind(t, err, engine.KindExhausted)
			if _, err := b.Submit(engine.OpRead, seg, []engine.Request{read4k(reg, 0)[0], read4k(reg, 4096)[0]}, nil, ioTimeout); err != nil {
				t.Fatalf("within the total minus the reserve: %v", err)
			}
			if st := waitState(t, b); st != engine.StateCompleted {
				t.Fatalf("state %v", st)
			}
		})
	}
}

// TestRuleWaitTimeoutKeepsWork: a wait that times out neither cancels nor
// releases the work it waited for: the running task keeps its loan and
// completes, the queued one (fenced behind it: same memory) still runs.
func TestRuleWaitTimeoutKeepsWork(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	e := newEngine(t, nil, ref)
	path, orig := randomFile(t, t.TempDir(), "f", 8192)
	seg := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 8192)
	b, err := e.AllocateBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	for range 2 {
		if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress(), Length: 8192}}, nil, ioTimeout); err != nil {
			t.Fatal(err)
		}
	}
	b.Seal()
	waitFor(t, "the first op to reach the transport", func() bool { return ref.prepared.Load() == 1 })
	_, err = b.Wait(20 * time.Millisecond)
	wantKind(t, err, engine.KindTimeout)
	ts := b.TaskStatuses()
	if ts[0].State != engine.TaskRunning || ts[1].State != engine.TaskPending {
		t.Fatalf("after the wait timed out: %+v", ts)
	}
	wantKind(t, e.Unregister(r), engine.KindBusy) // the loan is still held
	ref.release()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v %v", st, err)
	}
	if !bytes.Equal(regionBytes(t, r), orig) {
		t.Fatal("bytes differ")
	}
}

// TestRuleReportCountsSuccessfulPrefix: a group's report counts only the
// fully successful requests before the first unsuccessful one, while each
// task keeps its own result: a short first READ reports its bytes and the
// next task completes, yet the group reports zero requests and bytes.
func TestRuleReportCountsSuccessfulPrefix(t *testing.T) {
	for _, tr := range []engine.TransportKind{engine.TransportIOUring, engine.TransportGDS} {
		t.Run(tr.String(), func(t *testing.T) {
			r := newFailoverRig(t, nil)
			const short = 100000
			a := r.dev.BaseAddress()
			reqs := []engine.Request{
				{Transport: tr, Address: a, TargetOffset: 96 << 10, Length: 64 << 10, Producer: &truncatingEvent{path: r.path, size: short}},
				{Transport: tr, Address: a + 512<<10, Length: 64 << 10},
			}
			b, err := r.e.SubmitAsync(engine.OpRead, r.seg, reqs, nil, ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			b.Wait(ioTimeout)
			ts := b.TaskStatuses()
			if ts[0].State != engine.TaskFailed || ts[0].Transferred != short-96<<10 || ts[1].State != engine.TaskCompleted || ts[1].Transferred != 64<<10 {
				t.Fatalf("tasks %+v: want the first short with its bytes, the second complete", ts)
			}
			rep := b.Submissions()[0]
			if rep.CompletedRequests != 0 || rep.CompletedBytes != 0 || rep.RequestIndex != 0 {
				t.Fatalf("report %+v: want zero requests and bytes, request_index 0", rep)
			}
			wantKind(t, rep.Err, engine.KindRange)
		})
	}
}

// TestRuleStagedReadGapStopsCount: a staged READ whose middle unit fails
// counts only the units before the gap, though later units land.
func TestRuleStagedReadGapStopsCount(t *testing.T) {
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, nil) // 64 KiB chunks, several lanes
	path, orig := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	gpu.failHtoDAt.Store(d.BaseAddress() + 128<<10) // the third unit
	b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 512 << 10}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	b.Wait(ioTimeout)
	ts, _ := b.TaskStatus(0)
	wantKind(t, ts.Err, engine.KindIO)
	if ts.Transferred != 128<<10 {
		t.Fatalf("transferred %d, want the 128 KiB before the gap", ts.Transferred)
	}
	got := make([]byte, 512<<10)
	d.ReadAt(got, 0)
	if !bytes.Equal(got[:128<<10], orig[:128<<10]) || !bytes.Equal(got[192<<10:], orig[192<<10:512<<10]) {
		t.Fatal("units before and after the gap differ from the file")
	}
}

// TestRuleDeviceRangeHeld: a running transfer holds its whole device
// range: unregistering the region is refused and an overlapping transfer
// in another batch fails before I/O.
func TestRuleDeviceRangeHeld(t *testing.T) {
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, nil)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	gpu.hang = make(chan struct{})
	hung := true
	defer func() {
		if hung {
			close(gpu.hang)
		}
	}()
	a, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 256 << 10}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Free()
	waitFor(t, "the transfer to run", func() bool { ts, _ := a.TaskStatus(0); return ts.State == engine.TaskRunning })
	b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress() + 200<<10, Length: 4096}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	b.Wait(2 * time.Second) // a copy held by the fake would outlast this
	ts, _ := b.TaskStatus(0)
	if ts.State != engine.TaskFailed {
		t.Fatalf("overlapping transfer: %+v, want failed before I/O", ts)
	}
	wantKind(t, ts.Err, engine.KindBusy)
	wantKind(t, e.Unregister(d), engine.KindBusy)
	close(gpu.hang)
	hung = false
	if st, err := a.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v %v", st, err)
	}
	if err := e.Unregister(d); err != nil {
		t.Fatalf("after the transfer: %v", err)
	}
}

// TestRuleProgressStartsParkedAttempt: with enable_auto_failover_on_poll
// off, an explicit progress step still starts an unobserved failure's
// next attempt (a status poll would make it final instead).
func TestRuleProgressStartsParkedAttempt(t *testing.T) {
	r := newFailoverRig(t, func(c *config.Engine) { c.EnableAutoFailoverOnPoll = false })
	b := parkedBatch(t, r)
	if _, err := b.Progress(); err != nil {
		t.Fatal(err)
	}
	if b.ParkedAttempts() != 0 || r.e.Stats().Failovers != 1 {
		t.Fatalf("parked %d, failovers %d: want the attempt started", b.ParkedAttempts(), r.e.Stats().Failovers)
	}
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v %v", st, err)
	}
	if ts, _ := b.TaskStatus(0); ts.FailoverCount != 1 || ts.Transport != engine.TransportIOUring {
		t.Fatalf("task %+v", ts)
	}
}

// TestRuleDeviceRegistersOnFirstGDSUse: device memory is registered with
// cuFile on its first GDS use, once: not at RegisterDevice, not again on
// later transfers.
func TestRuleDeviceRegistersOnFirstGDSUse(t *testing.T) {
	r := newFailoverRig(t, nil)
	if n := r.gds.registers.Load(); n != 0 {
		t.Fatalf("%d cuFile registrations before any transfer", n)
	}
	for range 3 {
		if tr := gdsRead(t, r); tr != engine.TransportGDS {
			t.Fatalf("transport %v, want gds", tr)
		}
	}
	if n := r.gds.registers.Load(); n != 1 {
		t.Fatalf("%d cuFile registrations after three transfers, want 1", n)
	}
}

// TestRuleStagedChunkFD: a staging chunk uses the O_DIRECT fd when the
// unit's offset and length satisfy the file's DIO alignment, the buffered
// fd otherwise (read back from the kernel by the spy transport).
func TestRuleStagedChunkFD(t *testing.T) {
	needIOUring(t)
	dir, ok := filesystems(t)["ext4"]
	if !ok {
		t.Skip("no ext4 directory: the O_DIRECT path is not available")
	}
	cfg := config.DefaultEngine()
	cfg.StagingChunkCount, cfg.StagingChunkSize, cfg.StagingLanes = 4, 64<<10, 1
	spy := &spyTransport{FileTransport: realTransports(cfg)[0].(engine.FileTransport)}
	e := newEngineOver(t, cfg, spy, newFakeGPU(1))
	path, orig := randomFile(t, dir, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	for _, c := range []struct {
		off, n uint64
		direct bool
	}{
		{0, 128 << 10, true},
		{100, 4096, false},
	} {
		spy.take()
		if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), TargetOffset: c.off, Length: c.n}}, ioTimeout); err != nil {
			t.Fatal(err)
		}
		ops := spy.take()
		if len(ops) == 0 {
			t.Fatalf("offset %d: no op reached the ring", c.off)
		}
		for _, op := range ops {
			if op.direct != c.direct {
				t.Fatalf("offset %d length %d: ops %+v, want O_DIRECT %v", c.off, c.n, ops, c.direct)
			}
		}
		got := make([]byte, c.n)
		d.ReadAt(got, 0)
		if !bytes.Equal(got, orig[c.off:c.off+c.n]) {
			t.Fatalf("offset %d: bytes differ", c.off)
		}
	}
}

// TestRuleDefaultContractApplies: a submission without a policy is held
// to the global default contract (it cannot bypass a configured default
// budget), and an intent's budget is charged to the intent alone, not
// also to its tenant's default.
func TestRuleDefaultContractApplies(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.QoS = mustQoS(t, `{"qos":{"defaults":{"max_inflight_requests":1},"tenants":[{"name":"a","defaults":{"max_inflight_requests":1},"intents":{"get":{"max_inflight_requests":1}}}]}}`)
	})
	seg, reg := smallTarget(t, e, 16<<10)
	release := e.HoldWindowForTest(64, 0) // nothing dispatches: admitted groups stay charged
	var bs []*engine.Batch
	defer func() {
		release()
		for _, b := range bs {
			b.CancelAll()
			waitState(t, b)
			b.Free()
		}
	}()
	submit := func(pol *engine.QoSPolicy, off uint64) error {
		b, _ := e.AllocateBatch(1)
		bs = append(bs, b)
		_, err := b.SubmitWith(engine.OpRead, seg, read4k(reg, off), nil, engine.SubmitOptions{QoS: pol})
		return err
	}
	if err := submit(nil, 0); err != nil {
		t.Fatal(err)
	}
	wantKind(t, submit(nil, 4096), engine.KindExhausted) // the default's one request is taken
	if err := submit(resolve(t, e, "a", "get", nil), 8192); err != nil {
		t.Fatal(err)
	}
	if err := submit(resolve(t, e, "a", "", nil), 12288); err != nil {
		t.Fatalf("tenant a's default after its intent took its own budget: %v", err)
	}
	for _, u := range e.QoSUsage() {
		if u.Owners != 1 {
			t.Fatalf("usage %+v: want one owner charged to each contract", e.QoSUsage())
		}
	}
}

// TestRuleGDSBatchDepth: at most gds_batch_depth cuFile calls of one job
// are in flight at once (a 64 MiB WRITE is four 16 MiB calls).
func TestRuleGDSBatchDepth(t *testing.T) {
	gpu, gds := newFakeGPU(1), &fakeGDS{}
	e := gpuEngine(t, gpu, gds, func(c *config.Engine) { c.GDSBatchDepth = 2 })
	const n = 64 << 20
	path, _ := randomFile(t, t.TempDir(), "f", n)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, n)
	out := make([]byte, n)
	for i := range out {
		out[i] = byte(i * 7)
	}
	d.WriteAt(out, 0)
	gds.callDelay.Store(int64(20 * time.Millisecond))
	if _, err := e.SubmitAndWait(engine.OpWrite, seg, []engine.Request{{Transport: engine.TransportGDS, Address: d.BaseAddress(), Length: n}}, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if m, w := gds.maxCalls.Load(), gds.writes.Load(); m > 2 || w != 4 {
		t.Fatalf("peak cuFile calls in flight %d of %d writes, want at most 2 of 4", m, w)
	}
	if back, _ := os.ReadFile(path); !bytes.Equal(back, out) {
		t.Fatal("the file differs from the device bytes")
	}
}
