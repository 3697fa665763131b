package engine_test

// failover_test.go: transport attempts (failover.go) over the fake
// cuFile, which fails calls on command, with the retry running through
// real io_uring staging on a real ext4 file.

import (
	"bytes"
	"crypto/rand"
	"errors"
	"os"
	"sync/atomic"
	"testing"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// failoverRig is an engine with fake GPU and cuFile, a 1 MiB file on the
// test's filesystem (ext4 in CI: GDS eligible) and a device region.
type failoverRig struct {
	e    *engine.Engine
	gpu  *fakeGPU
	gds  *fakeGDS
	seg  *engine.Segment
	dev  *engine.Region
	orig []byte
	path string
}

func newFailoverRig(t *testing.T, mut func(*config.Engine)) *failoverRig {
	t.Helper()
	r := &failoverRig{gpu: newFakeGPU(1), gds: &fakeGDS{}}
	r.e = gpuEngine(t, r.gpu, r.gds, func(c *config.Engine) {
		c.GDSBatchDepth = 1 // cuFile calls in file order, one at a time
		if mut != nil {
			mut(c)
		}
	})
	r.path, r.orig = randomFile(t, t.TempDir(), "f", 1<<20)
	r.seg = openSeg(t, r.e, r.path, engine.PermReadWrite)
	r.dev = deviceRegion(t, r.e, 0, 1<<20)
	return r
}

func (r *failoverRig) devBytes(t *testing.T, off, n uint64) []byte {
	t.Helper()
	got := make([]byte, n)
	if _, err := r.dev.ReadAt(got, int64(off)); err != nil {
		t.Fatal(err)
	}
	return got
}

// TestFailoverReadToStaging: an unspec READ whose cuFile attempt fails
// moves to io_uring staging, completes with the right bytes and reports
// transport io_uring and failover_count 1.
func TestFailoverReadToStaging(t *testing.T) {
	r := newFailoverRig(t, nil)
	r.gds.failReads.Store(1)
	b, err := r.e.SubmitAsync(engine.OpRead, r.seg, []engine.Request{{Address: r.dev.BaseAddress(), TargetOffset: 4096, Length: 256 << 10}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		ts, _ := b.TaskStatus(0)
		t.Fatalf("state %v %v, task %+v", st, err, ts)
	}
	ts, _ := b.TaskStatus(0)
	if ts.Transport != engine.TransportIOUring || ts.FailoverCount != 1 || ts.Transferred != 256<<10 || ts.Err != nil {
		t.Fatalf("task %+v: want io_uring after one failover, all bytes", ts)
	}
	if !bytes.Equal(r.devBytes(t, 0, 256<<10), r.orig[4096:4096+256<<10]) {
		t.Fatal("device bytes differ from the file")
	}
	if r.gds.reads.Load() != 1 || r.gpu.copies.Load() == 0 {
		t.Fatalf("cuFile reads %d, device copies %d: want one cuFile attempt then staging", r.gds.reads.Load(), r.gpu.copies.Load())
	}
	if st := r.e.Stats(); st.Failovers != 1 || st.TasksFailed != 0 {
		t.Fatalf("stats failovers %d tasks failed %d", st.Failovers, st.TasksFailed)
	}
}

// TestFailoverSyncTransfer: SubmitAndWait advances the failover too.
func TestFailoverSyncTransfer(t *testing.T) {
	r := newFailoverRig(t, nil)
	r.gds.failReads.Store(1)
	rep, err := r.e.SubmitAndWait(engine.OpRead, r.seg, []engine.Request{{Address: r.dev.BaseAddress(), Length: 64 << 10}}, ioTimeout)
	if err != nil || rep.CompletedBytes != 64<<10 {
		t.Fatalf("%v %+v", err, rep)
	}
}

// TestFailoverPinned: no retry when max_failover_attempts is 0, or when
// the request asked for gds explicitly (an explicit transport pins its
// route).
func TestFailoverPinned(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*config.Engine)
		tr   engine.TransportKind
	}{
		{"max_failover_attempts 0", func(c *config.Engine) { c.MaxFailoverAttempts = 0 }, engine.TransportUnspec},
		{"explicit gds", nil, engine.TransportGDS},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newFailoverRig(t, c.mut)
			r.gds.failReads.Store(1)
			rep, err := r.e.SubmitAndWait(engine.OpRead, r.seg, []engine.Request{{Transport: c.tr, Address: r.dev.BaseAddress(), Length: 64 << 10}}, ioTimeout)
			wantKind(t, err, engine.KindIO)
			if rep.RequestIndex != 0 || rep.CompletedRequests != 0 || rep.RemoteEffect != engine.EffectNone {
				t.Fatalf("report %+v", rep)
			}
			if r.gds.reads.Load() != 1 || r.gpu.copies.Load() != 0 || r.e.Stats().Failovers != 0 {
				t.Fatalf("cuFile reads %d, copies %d, failovers %d: want the one attempt only", r.gds.reads.Load(), r.gpu.copies.Load(), r.e.Stats().Failovers)
			}
		})
	}
}

// TestFailoverWriteMayHavePosted: a cuFile WRITE that failed may have
// reached the file: remote effect unknown, never retried.
func TestFailoverWriteMayHavePosted(t *testing.T) {
	r := newFailoverRig(t, nil)
	r.gds.failWrites.Store(1)
	b, err := r.e.SubmitAsync(engine.OpWrite, r.seg, []engine.Request{{Address: r.dev.BaseAddress(), Length: 64 << 10}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if st, _ := b.Wait(ioTimeout); st != engine.StateFailed {
		t.Fatalf("state %v, want failed", st)
	}
	ts, _ := b.TaskStatus(0)
	if ts.FailoverCount != 0 || ts.Transport != engine.TransportGDS || ts.RemoteEffect != engine.EffectUnknown {
		t.Fatalf("task %+v: want one gds attempt with unknown remote effect", ts)
	}
	if rep := b.Submissions()[0]; rep.RemoteEffect != engine.EffectUnknown || rep.RequestIndex != 0 {
		t.Fatalf("report %+v", rep)
	}
	if r.gds.writes.Load() != 1 || r.gpu.copies.Load() != 0 {
		t.Fatalf("cuFile writes %d, copies %d", r.gds.writes.Load(), r.gpu.copies.Load())
	}
}

// TestFailoverVectoredRead: a vectored READ retries only before it
// exposed its first byte.
func TestFailoverVectoredRead(t *testing.T) {
	vec := func(r *failoverRig) []engine.Request {
		a := r.dev.BaseAddress()
		return []engine.Request{engine.Vector(engine.TransportUnspec, 0, engine.Range(a, 64<<10), engine.Range(a+128<<10, 64<<10))}
	}
	t.Run("first byte not exposed", func(t *testing.T) {
		r := newFailoverRig(t, nil)
		r.gds.failReadNth.Store(1)
		rep, err := r.e.SubmitAndWait(engine.OpRead, r.seg, vec(r), ioTimeout)
		if err != nil || rep.CompletedBytes != 128<<10 {
			t.Fatalf("%v %+v", err, rep)
		}
		if !bytes.Equal(r.devBytes(t, 128<<10, 64<<10), r.orig[64<<10:128<<10]) {
			t.Fatal("second element's bytes differ")
		}
	})
	t.Run("after the first byte", func(t *testing.T) {
		r := newFailoverRig(t, nil)
		r.gds.failReadNth.Store(2) // the first element arrived
		rep, err := r.e.SubmitAndWait(engine.OpRead, r.seg, vec(r), ioTimeout)
		wantKind(t, err, engine.KindIO)
		if rep.CompletedRequests != 0 || r.e.Stats().Failovers != 0 {
			t.Fatalf("report %+v failovers %d", rep, r.e.Stats().Failovers)
		}
	})
}

// parkedBatch submits a READ whose cuFile attempt fails and returns once
// the failure is parked, without polling (a poll would decide it).
func parkedBatch(t *testing.T, r *failoverRig) *engine.Batch {
	t.Helper()
	r.gds.failReads.Store(1)
	b, err := r.e.SubmitAsync(engine.OpRead, r.seg, []engine.Request{{Address: r.dev.BaseAddress(), Length: 64 << 10}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.CancelAll(); b.Wait(ioTimeout); b.Free() })
	waitFor(t, "the failed attempt to park", func() bool { return b.ParkedAttempts() == 1 })
	return b
}

// TestFailoverOnPoll: with enable_auto_failover_on_poll a status poll
// starts the next attempt; without it the poll makes the failure final.
func TestFailoverOnPoll(t *testing.T) {
	t.Run("enabled", func(t *testing.T) {
		r := newFailoverRig(t, nil)
		b := parkedBatch(t, r)
		ts, _ := b.TaskStatus(0)
		if ts.State == engine.TaskFailed || ts.FailoverCount != 1 || ts.Transport != engine.TransportIOUring {
			t.Fatalf("after one poll: %+v, want the staging attempt started", ts)
		}
		if st, _ := b.Wait(ioTimeout); st != engine.StateCompleted {
			t.Fatalf("state %v", st)
		}
	})
	t.Run("disabled", func(t *testing.T) {
		r := newFailoverRig(t, func(c *config.Engine) { c.EnableAutoFailoverOnPoll = false })
		b := parkedBatch(t, r)
		if st := b.Status(); st != engine.StateFailed {
			t.Fatalf("status poll: %v, want failed (the poll observed the failure)", st)
		}
		ts, _ := b.TaskStatus(0)
		if ts.State != engine.TaskFailed || ts.FailoverCount != 0 || ts.Transport != engine.TransportGDS {
			t.Fatalf("task %+v", ts)
		}
	})
	t.Run("disabled, wait advances", func(t *testing.T) {
		r := newFailoverRig(t, func(c *config.Engine) { c.EnableAutoFailoverOnPoll = false })
		b := parkedBatch(t, r)
		if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
			t.Fatalf("wait: %v %v, want completed (wait advances an unobserved failure)", st, err)
		}
	})
}

// TestFailoverCancelParked: cancelling a task whose attempt failed ends
// retry; no staging attempt runs.
func TestFailoverCancelParked(t *testing.T) {
	for _, all := range []bool{false, true} {
		r := newFailoverRig(t, nil)
		b := parkedBatch(t, r)
		var err error
		if all {
			err = b.CancelAll()
		} else {
			err = b.Cancel(0)
		}
		if err != nil {
			t.Fatal(err)
		}
		if st, _ := b.Wait(ioTimeout); st != engine.StateCancelled {
			t.Fatalf("state %v, want cancelled", st)
		}
		ts, _ := b.TaskStatus(0)
		if ts.State != engine.TaskCancelled || ts.FailoverCount != 0 || r.gpu.copies.Load() != 0 {
			t.Fatalf("task %+v copies %d", ts, r.gpu.copies.Load())
		}
	}
}

// TestFailoverCancelParkedWindow: with io_uring.queue_depth 1 the group
// hands out one task at a time; a cancel that fences task 0's parked
// attempt leaves the group's next task to run (it was still pending),
// rather than ending the group with it.
func TestFailoverCancelParkedWindow(t *testing.T) {
	r := newFailoverRig(t, func(c *config.Engine) { c.IOUring.QueueDepth = 1 })
	r.gds.failReads.Store(1)
	const n = 64 << 10
	b, err := r.e.SubmitAsync(engine.OpRead, r.seg, []engine.Request{
		{Address: r.dev.BaseAddress(), Length: n},
		{Address: r.dev.BaseAddress() + n, TargetOffset: n, Length: n},
	}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.CancelAll(); b.Wait(ioTimeout); b.Free() })
	waitFor(t, "the failed attempt to park", func() bool { return b.ParkedAttempts() == 1 })
	if err := b.Cancel(0); err != nil {
		t.Fatal(err)
	}
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCancelled {
		t.Fatalf("state %v (%v), want cancelled", st, err)
	}
	ts := b.TaskStatuses()
	if ts[0].State != engine.TaskCancelled || ts[1].State != engine.TaskCompleted || ts[1].Transferred != n {
		t.Fatalf("tasks %v (%v) and %v with %d bytes (%v): want cancelled, then completed", ts[0].State, ts[0].Err, ts[1].State, ts[1].Transferred, ts[1].Err)
	}
	if !bytes.Equal(r.devBytes(t, n, n), r.orig[n:2*n]) {
		t.Fatal("task 1's bytes differ from the file")
	}
}

// TestFailoverWithHook: a batch with an OnGroupDone hook has no poller;
// the executor decides at once.
func TestFailoverWithHook(t *testing.T) {
	r := newFailoverRig(t, nil)
	r.gds.failReads.Store(1)
	b, err := r.e.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	done := make(chan engine.Report, 1)
	b.OnGroupDone(func(rep engine.Report) { done <- rep })
	if _, err := b.Submit(engine.OpRead, r.seg, []engine.Request{{Address: r.dev.BaseAddress(), Length: 64 << 10}}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	rep := <-done
	if rep.Err != nil || rep.CompletedBytes != 64<<10 {
		t.Fatalf("report %+v", rep)
	}
}

// onceFailedEvent reports an error the first time it is polled, then
// completion: a producer whose first check fails, so the GDS attempt is
// rejected before any cuFile call.
type onceFailedEvent struct{ polls atomic.Int64 }

func (p *onceFailedEvent) Done() (bool, error) {
	if p.polls.Add(1) == 1 {
		return false, errors.New("fake: CUDA_ERROR_NOT_READY")
	}
	return true, nil
}
func (p *onceFailedEvent) Wait() error  { _, err := p.Done(); return err }
func (p *onceFailedEvent) Close() error { return nil }

// TestFailoverWriteCleanRejection: a WRITE whose GDS attempt was rejected
// before anything reached cuFile (remote effect none, no byte moved)
// advances to io_uring staging, and the file gets the device's bytes.
func TestFailoverWriteCleanRejection(t *testing.T) {
	r := newFailoverRig(t, nil)
	out := make([]byte, 64<<10)
	rand.Read(out)
	if _, err := r.dev.WriteAt(out, 0); err != nil {
		t.Fatal(err)
	}
	ev := &onceFailedEvent{}
	b, err := r.e.SubmitAsync(engine.OpWrite, r.seg, []engine.Request{{Address: r.dev.BaseAddress(), Length: 64 << 10, Producer: ev}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		ts, _ := b.TaskStatus(0)
		t.Fatalf("state %v %v, task %+v: want the staging attempt to complete", st, err, ts)
	}
	ts, _ := b.TaskStatus(0)
	if ts.Transport != engine.TransportIOUring || ts.FailoverCount != 1 || ts.Transferred != 64<<10 || ts.RemoteEffect == engine.EffectUnknown {
		t.Fatalf("task %+v: want io_uring after one failover, all bytes", ts)
	}
	if r.gds.writes.Load() != 0 {
		t.Fatalf("%d cuFile writes: the rejection came before any", r.gds.writes.Load())
	}
	if back, _ := os.ReadFile(r.path); !bytes.Equal(back[:64<<10], out) {
		t.Fatal("the file lacks the device's bytes")
	}
}

// TestFailoverKeepsBandwidthBalanced: with the runtime queue on, a task
// that fails over from cuFile to staging gives back the bytes its window
// share put in flight on the path that took them (the cuFile one), so
// once it completes no path shows bytes in flight: none left stuck on
// gds (its rate would look ever busier), none taken off staged_gpu that
// it never had (its count wrapping, every later deadline infeasible).
func TestFailoverKeepsBandwidthBalanced(t *testing.T) {
	r := newFailoverRig(t, func(c *config.Engine) { c.RuntimeQueue.Enabled = true })
	r.gds.failReads.Store(1)
	b, err := r.e.SubmitAsync(engine.OpRead, r.seg, []engine.Request{{Address: r.dev.BaseAddress(), Length: 256 << 10}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if _, err := b.Wait(ioTimeout); err != nil {
		t.Fatal(err)
	}
	if ts, _ := b.TaskStatus(0); ts.State != engine.TaskCompleted || ts.FailoverCount != 1 {
		t.Fatalf("the read: %+v, want completed after one failover", ts)
	}
	bw := r.e.Stats().RuntimeQueue.Bandwidth
	for _, s := range bw {
		if s.InflightBytes != 0 {
			t.Fatalf("bandwidth estimates once the read completed: %+v, want no bytes in flight on any path", bw)
		}
	}
	if len(bw) == 0 {
		t.Fatal("no bandwidth estimate: the runtime queue granted no window share")
	}
}
