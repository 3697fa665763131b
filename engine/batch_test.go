package engine_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

func TestBatchLifecycle(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	s := openSeg(t, e, path, engine.PermReadWrite)
	r := register(t, e, 1<<16)
	b1, _ := e.AllocateBatch(4)
	b2, _ := e.AllocateBatch(4)
	if b2.ID() <= b1.ID() {
		t.Fatalf("batch IDs not increasing: %d then %d", b1.ID(), b2.ID())
	}
	if _, err := b1.Wait(time.Second); engine.KindOf(err) != engine.KindInvalid {
		t.Fatalf("wait before seal: %v", err)
	}
	req := func(off uint64) []engine.Request {
		return []engine.Request{{Address: r.BaseAddress() + off, TargetOffset: off, Length: 4096}}
	}
	tr, err := b1.Submit(engine.OpRead, s, req(0), nil, 5*time.Second)
	if err != nil || tr.First != 0 || tr.Count != 1 {
		t.Fatalf("submit: %+v %v", tr, err)
	}
	tr, _ = b1.Submit(engine.OpRead, s, append(req(4096), req(8192)...), nil, 5*time.Second)
	if tr.First != 1 || tr.Count != 2 {
		t.Fatalf("second group range %+v", tr)
	}
	_, err = b1.Submit(engine.OpRead, s, append(req(12288), req(16384)...), nil, time.Second)
	wantKind(t, err, engine.KindExhausted)
	if b1.TaskCount() != 3 {
		t.Fatal("a rejected group added tasks")
	}
	if b1.Status() != engine.StateOpen {
		t.Fatal("unsealed batch not open")
	}
	wantKind(t, b1.Free(), engine.KindBusy)
	b1.Seal()
	_, err = b1.Submit(engine.OpRead, s, req(12288), nil, time.Second)
	wantKind(t, err, engine.KindInvalid)

	// Wait's timeout neither cancels nor releases work.
	if _, err := b1.Wait(20 * time.Millisecond); engine.KindOf(err) != engine.KindTimeout {
		t.Fatalf("wait on stalled batch: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	_, err = b1.WaitContext(ctx)
	cancel()
	if err == nil || b1.Status() != engine.StateOpen {
		t.Fatalf("interrupted wait changed the batch: %v %v", err, b1.Status())
	}
	ref.release()
	st, err := b1.Wait(5 * time.Second)
	if err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v %v", st, err)
	}
	if len(b1.Submissions()) != 2 {
		t.Fatal("submissions")
	}
	for _, ts := range b1.TaskStatuses() {
		if ts.State != engine.TaskCompleted || ts.Transferred != 4096 || ts.PhysicalOwner != ts.Index || ts.Transport != engine.TransportIOUring {
			t.Fatalf("task %+v", ts)
		}
	}
	if err := b1.Free(); err != nil {
		t.Fatal(err)
	}
	_, err = b1.TaskStatus(0)
	wantKind(t, err, engine.KindNotFound)
	_, err = e.Batch(b1.ID())
	wantKind(t, err, engine.KindNotFound)
	b2.Seal()
	if st, _ := b2.Wait(time.Second); st != engine.StateCompleted {
		t.Fatalf("empty sealed batch: %v", st)
	}
	b2.Free()
}

func TestCancel(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	s := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 1<<16)
	b, _ := e.AllocateBatch(8)
	// Group 1 runs (stalled); group 2 overlaps its memory, so it is fenced
	// and queued; its tasks can be cancelled.
	b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 8192}}, nil, 5*time.Second)
	b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}, {Address: r.BaseAddress() + 4096, Length: 4096}}, nil, 5*time.Second)
	waitFor(t, "task 0 running", func() bool { ts, _ := b.TaskStatus(0); return ts.State == engine.TaskRunning })
	wantKind(t, b.Cancel(0), engine.KindBusy)
	if err := b.Cancel(1); err != nil {
		t.Fatal(err)
	}
	wantKind(t, b.Cancel(9), engine.KindNotFound)
	b.Seal()
	ref.release()
	st, _ := b.Wait(5 * time.Second)
	if st != engine.StateCancelled {
		t.Fatalf("state %v, want cancelled", st)
	}
	want := []engine.TaskState{engine.TaskCompleted, engine.TaskCancelled, engine.TaskCompleted}
	for i, w := range want {
		if ts, _ := b.TaskStatus(i); ts.State != w {
			t.Errorf("task %d %v, want %v", i, ts.State, w)
		}
	}
	if rep := b.Submissions()[1]; !rep.LocallyDrained || rep.RequestIndex != 0 {
		t.Errorf("partly cancelled group: %+v", rep)
	}
	// CancelAll of a batch whose groups are all queued ends them at once.
	ref.stallAgain()
	b2, _ := e.AllocateBatch(4)
	b2.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress() + 8192, Length: 8192}}, nil, 5*time.Second)
	b2.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress() + 8192, Length: 10}}, nil, 5*time.Second)
	b2.CancelAll()
	b2.Seal()
	ref.release()
	if st, _ := b2.Wait(5 * time.Second); st != engine.StateCancelled {
		t.Fatalf("state %v", st)
	}
	// A cancelled queued group gives back its admission charge and its
	// segment user: nothing of it reached the kernel.
	for _, rep := range b2.Submissions() {
		if !rep.LocallyDrained {
			t.Errorf("cancelled queued group reports locally_drained=false: %+v", rep)
		}
	}
	if st := e.Stats(); st.InflightGroups != 0 || st.InflightBytes != 0 {
		t.Fatalf("charges left after cancel: %+v", st)
	}
	if info, _ := e.FileSegmentInfo(s); info.Users != 0 {
		t.Fatalf("segment users %d after cancel", info.Users)
	}
	if err := e.CloseFileSegment(s, time.Second); err != nil {
		t.Fatalf("close after cancel: %v", err)
	}
}

// TestOverlappingLoans: a group whose memory overlaps another batch's
// in-flight loan fails before any I/O; the region cannot be unregistered
// or written through WriteAt while loaned.
func TestOverlappingLoans(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	s := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 1<<16)
	a, _ := e.AllocateBatch(1)
	a.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, 5*time.Second)
	waitFor(t, "a running", func() bool { ts, _ := a.TaskStatus(0); return ts.State == engine.TaskRunning })

	b, _ := e.AllocateBatch(2)
	b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress() + 8192, Length: 100}, {Address: r.BaseAddress() + 2048, Length: 4096}}, nil, 5*time.Second)
	b.Seal()
	if st, _ := b.Wait(5 * time.Second); st != engine.StateFailed {
		t.Fatalf("overlapping group: %v", st)
	}
	for i := 0; i < 2; i++ {
		ts, _ := b.TaskStatus(i)
		wantKind(t, ts.Err, engine.KindBusy)
		if !strings.Contains(ts.Err.Error(), "overlaps a loan") {
			t.Fatalf("message %q", ts.Err)
		}
	}
	// a's one op is prepared (and stalled); none of b's may reach the ring.
	if n := ref.prepared.Load(); n != 1 {
		t.Fatalf("%d ops prepared, want only the loan holder's 1: I/O ran before the loan check", n)
	}
	wantKind(t, e.Unregister(r), engine.KindBusy)
	_, err := r.WriteAt([]byte{1}, 100)
	wantKind(t, err, engine.KindBusy)
	if _, err := r.WriteAt([]byte{1}, 5000); err != nil {
		t.Fatalf("write outside the loan: %v", err)
	}
	ref.release()
	a.Seal()
	a.Wait(5 * time.Second)
	if err := e.Unregister(r); err != nil {
		t.Fatal(err)
	}
	wantKind(t, e.Unregister(r), engine.KindNotFound)
}

// TestUnquiesced: a missing completion past deadline + quiesce_grace
// fails the group unquiesced and retains its memory, file and charge.
func TestUnquiesced(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{}), lose: true}
	const deadline, grace = 20 * time.Millisecond, 300 * time.Millisecond
	e := newEngine(t, func(c *config.Engine) {
		c.QuiesceGrace = config.Duration(grace)
		c.MaxAllocatedBatches = 2
	}, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 8192)
	s := openSeg(t, e, path, engine.PermWrite)
	r := register(t, e, 8192)
	b, _ := e.AllocateBatch(1)
	start := time.Now()
	b.Submit(engine.OpWrite, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, deadline)
	b.Seal()
	st, err := b.Wait(5 * time.Second)
	if err != nil || st != engine.StateFailed {
		t.Fatalf("state %v %v", st, err)
	}
	// The missing CQE is waited for through the grace, not just the deadline.
	if d := time.Since(start); d < deadline+grace {
		t.Fatalf("group ended unquiesced after %v, before deadline %v + grace %v", d, deadline, grace)
	}
	ts, _ := b.TaskStatus(0)
	wantKind(t, ts.Err, engine.KindUnquiesced)
	if !strings.Contains(ts.Err.Error(), "unquiesced") || ts.RemoteEffect != engine.EffectUnknown {
		t.Fatalf("task %+v", ts)
	}
	rep := b.Submissions()[0]
	if rep.LocallyDrained || rep.RequestIndex != 0 || rep.RemoteEffect != engine.EffectUnknown {
		t.Fatalf("report %+v", rep)
	}
	wantKind(t, rep.Err, engine.KindUnquiesced)
	wantKind(t, e.Unregister(r), engine.KindBusy)
	wantKind(t, e.CloseFileSegment(s, 10*time.Millisecond), engine.KindTimeout)
	stats := e.Stats()
	if stats.UnquiescedGroups != 1 || stats.InflightBytes != 4096 {
		t.Fatalf("stats %+v", stats)
	}
	waitFor(t, "ring abandoned", func() bool { return ref.abandons.Load() == 1 })
	if err := b.Free(); err != nil {
		t.Fatalf("free of a terminal batch: %v", err)
	}
	// Freed, but quarantined: the ID is gone, the capacity and the batch
	// slot stay consumed.
	if _, err := e.Batch(b.ID()); engine.KindOf(err) != engine.KindNotFound {
		t.Fatalf("lookup of a freed batch: %v", err)
	}
	if st := e.Stats(); st.QuarantinedBatches != 1 || st.ReservedRequests != 1 || st.Batches != 0 {
		t.Fatalf("after free: %+v", st)
	}
	live, err := e.AllocateBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.AllocateBatch(1)
	wantKind(t, err, engine.KindExhausted)
	live.Free()

	// Close keeps the unquiesced group's file open (its fd number must not
	// be reused under an op the kernel may still complete) and says why.
	if n := fdsOn(t, path); n == 0 {
		t.Fatal("no fd on the file before close: the check below proves nothing")
	}
	wantKind(t, e.Close(time.Second), engine.KindUnquiesced)
	if n := fdsOn(t, path); n == 0 {
		t.Fatal("engine close closed the fds an unquiesced group holds")
	}
}

// fdsOn counts this process's fds open on path (read from /proc).
func fdsOn(t *testing.T, path string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range ents {
		if target, err := os.Readlink("/proc/self/fd/" + d.Name()); err == nil && target == path {
			n++
		}
	}
	return n
}

func TestAllocationLimits(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) {
		c.MaxBatchRequests = 8
		c.MaxAllocatedBatches = 3
		c.MaxAllocatedRequests = 16
	}, &refTransport{})
	for _, c := range []int{0, -1, 9} {
		_, err := e.AllocateBatch(c)
		wantKind(t, err, engine.KindInvalid)
	}
	b1, _ := e.AllocateBatch(8)
	b2, _ := e.AllocateBatch(8)
	_, err := e.AllocateBatch(1)
	wantKind(t, err, engine.KindExhausted) // 17 > max_allocated_requests
	b2.Free()
	b3, _ := e.AllocateBatch(4)
	b4, _ := e.AllocateBatch(4)
	_, err = e.AllocateBatch(1)
	wantKind(t, err, engine.KindExhausted) // 4 > max_allocated_batches
	if !strings.Contains(err.Error(), "max_allocated_batches (3)") {
		t.Fatalf("message %q", err)
	}
	for _, b := range []*engine.Batch{b1, b3, b4} {
		b.Free()
	}
	if st := e.Stats(); st.Batches != 0 || st.ReservedRequests != 0 {
		t.Fatalf("stats after free %+v", st)
	}
}

func TestInflightLimits(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	e := newEngine(t, func(c *config.Engine) {
		c.MaxInflightBytes = 8192
		c.MaxTransferBytes = 8192
		c.CallerFastPathBytes = 4096
		c.MaxInflightBatches = 2
	}, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	s := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 1<<16)
	b, _ := e.AllocateBatch(16)
	_, err := b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 8193}}, nil, time.Second)
	wantKind(t, err, engine.KindTooLarge)
	if _, err := b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 8192}}, nil, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err = b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress() + 8192, Length: 1}}, nil, time.Second)
	wantKind(t, err, engine.KindExhausted)
	ref.release()
	b.Seal()
	b.Wait(5 * time.Second)
	b.Free()
	if st := e.Stats(); st.InflightBytes != 0 || st.InflightGroups != 0 {
		t.Fatalf("charges not returned: %+v", st)
	}
}

func ioUringFDs(t *testing.T) int {
	ents, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, d := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + d.Name()); err == nil && strings.Contains(l, "io_uring") {
			n++
		}
	}
	return n
}

// TestIdleEngine: construction, segment open and info start no worker,
// create no ring and load no GPU library; the first submission does.
func TestIdleEngine(t *testing.T) {
	needIOUring(t)
	baseFDs := ioUringFDs(t)
	baseG := runtime.NumGoroutine()
	e := newEngine(t, nil)
	path, _ := randomFile(t, t.TempDir(), "f", 4096)
	s := openSeg(t, e, path, engine.PermRead)
	if _, err := e.FileSegmentInfo(s); err != nil {
		t.Fatal(err)
	}
	r := register(t, e, 4096)
	e.Stats()
	if n := ioUringFDs(t); n != baseFDs {
		t.Fatalf("%d io_uring fds after construction, open and info (was %d)", n, baseFDs)
	}
	// Opens run on a short-lived helper (bounded store calls); it may
	// still be on its way out, so allow it a moment, but no goroutine
	// may stay.
	waitFor(t, "no goroutine left after construction, open and info", func() bool { return runtime.NumGoroutine() <= baseG })
	maps, _ := os.ReadFile("/proc/self/maps")
	for _, lib := range []string{"libcuda", "libcufile"} {
		if strings.Contains(string(maps), lib) {
			t.Fatalf("%s mapped by an idle engine", lib)
		}
	}
	if _, err := e.SubmitAndWait(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if n := ioUringFDs(t); n <= baseFDs {
		t.Fatalf("no io_uring fd after the first submission: the check above proves nothing")
	}
	waitFor(t, "worker exit", func() bool { return e.Stats().WorkersRunning == 0 })
}

func TestEngineClose(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	cfg := config.DefaultEngine()
	e, _ := engine.New(cfg, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 8192)
	s, _ := e.OpenFileSegment("file://"+path, engine.PermRead)
	r, _ := e.RegisterMemory(8192)
	b, _ := e.AllocateBatch(2)
	b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, 5*time.Second)
	b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 10}}, nil, 5*time.Second)
	start := time.Now()
	wantKind(t, e.Close(50*time.Millisecond), engine.KindTimeout)
	if time.Since(start) > time.Second {
		t.Fatal("close not prompt with a blocked transfer")
	}
	_, err := e.AllocateBatch(1)
	wantKind(t, err, engine.KindClosed)
	_, err = e.OpenFileSegment("file://"+path, engine.PermRead)
	wantKind(t, err, engine.KindClosed)
	ref.release()
	if err := e.Close(5 * time.Second); err != nil {
		t.Fatalf("retry close: %v", err)
	}
	if ts, _ := b.TaskStatus(1); ts.State != engine.TaskCancelled {
		t.Fatalf("queued task after close: %v", ts.State)
	}
	if err := e.Close(time.Second); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// TestOnGroupDone: every group's report reaches the hook exactly once,
// and a hook that submits the next group (on the worker goroutine) keeps
// the batch going without deadlock, the way a streaming client uses it.
func TestOnGroupDone(t *testing.T) {
	for name, transports := range map[string]func(config.Engine) []engine.Transport{
		"reference": func(config.Engine) []engine.Transport { return []engine.Transport{&refTransport{}} },
		"io_uring":  realTransports,
	} {
		t.Run(name, func(t *testing.T) {
			if name == "io_uring" {
				needIOUring(t)
			}
			e := newEngine(t, nil, transports(config.DefaultEngine())...)
			path, _ := randomFile(t, t.TempDir(), "f", 1<<20)
			s := openSeg(t, e, path, engine.PermRead)
			r := register(t, e, 1<<20)
			const total, depth = 200, 8
			b, _ := e.AllocateBatch(total)
			var mu sync.Mutex
			seen := map[int]bool{}
			submitted := 0
			done := make(chan struct{})
			var submit func()
			submit = func() {
				mu.Lock()
				if submitted == total {
					mu.Unlock()
					return
				}
				i := submitted
				submitted++
				mu.Unlock()
				off := uint64(i%256) * 4096
				if _, err := b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress() + off, TargetOffset: off, Length: 4096}}, nil, ioTimeout); err != nil {
					t.Error(err)
				}
			}
			b.OnGroupDone(func(rep engine.Report) {
				mu.Lock()
				if seen[rep.Tasks.First] || rep.Err != nil || rep.CompletedBytes != 4096 {
					t.Errorf("report %+v (seen before: %v)", rep, seen[rep.Tasks.First])
				}
				seen[rep.Tasks.First] = true
				n := len(seen)
				mu.Unlock()
				if n == total {
					close(done)
					return
				}
				submit() // from the hook: the next group goes out right here
			})
			for range depth {
				submit()
			}
			select {
			case <-done:
			case <-time.After(ioTimeout):
				t.Fatalf("only %d of %d groups reported", len(seen), total)
			}
			b.Seal()
			if st, _ := b.Wait(ioTimeout); st != engine.StateCompleted {
				t.Fatalf("state %v", st)
			}
			// Hooks run on the worker with its ring free, so their
			// submissions go straight onto it.
			if st := e.Stats(); st.SubmitThrough == 0 {
				t.Errorf("no submission went through the running worker's ring: %+v", st)
			}
			b.Free()
		})
	}
}

// TestFastPathNeverWaitsForARing: with every ring held by another batch,
// a fast-path Submit returns at once and a worker goroutine waits for the
// ring instead (a hook submitting to a fresh batch must not deadlock).
func TestFastPathNeverWaitsForARing(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{}), limit: 1}
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	s := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 1<<16)
	a, _ := e.AllocateBatch(1)
	a.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, ioTimeout)
	waitFor(t, "a holding the only queue", func() bool { ts, _ := a.TaskStatus(0); return ts.State == engine.TaskRunning })
	start := time.Now()
	b, err := e.SubmitAsync(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress() + 8192, Length: 4096}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("fast-path Submit waited %v for a ring", d)
	}
	ref.release()
	if st, _ := b.Wait(ioTimeout); st != engine.StateCompleted {
		t.Fatalf("state %v", st)
	}
	a.Seal()
	a.Wait(ioTimeout)
}

// TestHookUnregistersItself: a hook that cancels a queued group and then
// unregisters drops the queued report instead of calling a nil hook.
func TestHookUnregistersItself(t *testing.T) {
	ref := &refTransport{stall: make(chan struct{})}
	e := newEngine(t, nil, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	s := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 1<<16)
	b, _ := e.AllocateBatch(4)
	var calls atomic.Int32
	b.OnGroupDone(func(rep engine.Report) {
		calls.Add(1)
		b.Cancel(1) // the queued, fenced group: its report is queued now
		b.OnGroupDone(nil)
	})
	b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}}, nil, ioTimeout)
	b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress(), Length: 10}}, nil, ioTimeout) // fenced behind the first
	ref.release()
	b.Seal()
	if st, _ := b.Wait(ioTimeout); st != engine.StateCancelled {
		t.Fatalf("state %v", st)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("hook ran %d times, want 1", n)
	}
}

// TestSQPoll runs a stream of groups through rings with a kernel
// submission thread, whose Submit counts differently.
func TestSQPoll(t *testing.T) {
	needIOUring(t)
	e := newEngine(t, func(c *config.Engine) { c.IOUring.SQPoll = true })
	path, data := randomFile(t, t.TempDir(), "f", 1<<20)
	s := openSeg(t, e, path, engine.PermRead)
	r := register(t, e, 1<<20)
	b, _ := e.AllocateBatch(256)
	for i := uint64(0); i < 256; i++ {
		if _, err := b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress() + i*4096, TargetOffset: i * 4096, Length: 4096}}, nil, ioTimeout); err != nil {
			t.Fatal(err)
		}
	}
	b.Seal()
	if st, err := b.Wait(ioTimeout); st != engine.StateCompleted {
		t.Fatalf("state %v %v", st, err)
	}
	if !bytes.Equal(regionBytes(t, r), data) {
		t.Fatal("bytes differ")
	}
	if st := e.Stats(); st.IOUring.Submitted != 256 {
		t.Fatalf("sqes submitted %d, want 256", st.IOUring.Submitted)
	}
}

// TestUnquiescedOutranksEarlierFailure: the first request fails for its
// own reason (EIO), the second never completes. The group reports
// Unquiesced at the first unsuccessful index, not the first task's EIO.
func TestUnquiescedOutranksEarlierFailure(t *testing.T) {
	ref := &refTransport{failNth: 1, errno: 5 /* EIO */, loseAfter: 1}
	e := newEngine(t, func(c *config.Engine) { c.QuiesceGrace = config.Duration(50 * time.Millisecond) }, ref)
	path, _ := randomFile(t, t.TempDir(), "f", 8192)
	s := openSeg(t, e, path, engine.PermWrite)
	r := register(t, e, 8192)
	b, _ := e.AllocateBatch(2)
	b.Submit(engine.OpWrite, s, []engine.Request{{Address: r.BaseAddress(), Length: 4096}, {Address: r.BaseAddress() + 4096, TargetOffset: 4096, Length: 4096}}, nil, 20*time.Millisecond)
	b.Seal()
	if st, err := b.Wait(5 * time.Second); st != engine.StateFailed {
		t.Fatalf("state %v %v", st, err)
	}
	t0, _ := b.TaskStatus(0)
	wantKind(t, t0.Err, engine.KindIO)
	t1, _ := b.TaskStatus(1)
	wantKind(t, t1.Err, engine.KindUnquiesced)
	rep := b.Submissions()[0]
	if rep.RequestIndex != 0 || rep.LocallyDrained || rep.AffectedRequests != 2 || rep.RemoteEffect != engine.EffectUnknown {
		t.Fatalf("report %+v", rep)
	}
	wantKind(t, rep.Err, engine.KindUnquiesced)
	if !errors.Is(rep.Err, engine.ErrUnquiesced) {
		t.Fatalf("errors.Is(%v, ErrUnquiesced) = false", rep.Err)
	}
	wantKind(t, e.Close(time.Second), engine.KindUnquiesced)
	if err := e.Close(time.Second); err != nil {
		t.Fatalf("close after a completed close: %v", err)
	}
}
