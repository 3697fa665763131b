//go:build linux && !noiouring

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// needIOUring skips when the kernel refuses io_uring, with the reason.
func needIOUring(t *testing.T) {
	t.Helper()
	if err := iouring.Probe(); err != nil {
		if errors.Is(err, engine.ErrUnavailable) {
			t.Skipf("io_uring: %v", err)
		}
		t.Fatalf("io_uring probe failed: %v", err)
	}
}

// newEngine builds an engine for o from base, closed at cleanup, and
// fails the test if anything leaked.
func newEngine(t *testing.T, o *Options, base config.Engine) *engine.Engine {
	t.Helper()
	return newEngineFrom(t, o.EngineConfig(base))
}

// newEngineFrom builds an engine from cfg as is, checked for leaks and
// closed at cleanup.
func newEngineFrom(t *testing.T, cfg config.Engine) *engine.Engine {
	t.Helper()
	e, err := engine.New(cfg, iouring.New(cfg.IOUring))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s := e.Stats()
		if s.Batches != 0 || s.Segments != 0 || s.Regions != 0 || s.InflightGroups != 0 {
			t.Errorf("leaked: %d batches, %d segments, %d regions, %d groups in flight", s.Batches, s.Segments, s.Regions, s.InflightGroups)
		}
		if err := e.Close(5 * time.Second); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// tempFile makes a file of size bytes under dir (t.TempDir() if empty).
func tempFile(t *testing.T, dir string, size uint64) string {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	p := filepath.Join(dir, "bench.bin")
	if _, err := Prepare(p, size); err != nil {
		t.Fatal(err)
	}
	return p
}

func checkResult(t *testing.T, r Result, o Options, impl string) {
	t.Helper()
	if r.Ops == 0 || r.Bytes != r.Ops*o.BlockSize {
		t.Fatalf("%d ops, %d bytes (bs %d)", r.Ops, r.Bytes, o.BlockSize)
	}
	if r.Impl != impl || r.Op != o.Op.String() || r.Pattern != o.Pattern.String() || r.QueueDepth != o.QueueDepth {
		t.Errorf("result echoes %s %s %s qd %d", r.Impl, r.Op, r.Pattern, r.QueueDepth)
	}
	if r.Seconds <= 0 || r.IOPS <= 0 || r.BytesPerSec <= 0 || r.P50Us <= 0 || r.P99Us < r.P50Us || r.MaxUs < r.P99Us {
		t.Errorf("derived fields: %+v", r)
	}
	if r.Histogram().Count() != r.Ops {
		t.Errorf("histogram has %d values for %d ops", r.Histogram().Count(), r.Ops)
	}
}

func TestRunEngine(t *testing.T) {
	needIOUring(t)
	for _, c := range []struct {
		name    string
		op      engine.Op
		pattern Pattern
		direct  bool
		qd      int
	}{
		{"read rand direct", engine.OpRead, Rand, true, 8},
		{"read seq page cache", engine.OpRead, Seq, false, 4},
		{"write seq direct", engine.OpWrite, Seq, true, 4},
		{"write rand page cache", engine.OpWrite, Rand, false, 3},
		{"read qd1", engine.OpRead, Seq, true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{File: tempFile(t, "", 256<<10), Op: c.op, Pattern: c.pattern, BlockSize: 4096,
				QueueDepth: c.qd, Size: 256 << 10, Runtime: 150 * time.Millisecond, Direct: c.direct, Seed: 3}
			// A tiny batch capacity makes the driver roll over many times.
			base := config.DefaultEngine()
			base.MaxBatchRequests = 1
			e := newEngine(t, &o, base)
			r, err := Run(context.Background(), e, o)
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, r, o, "engine")
			if r.Engine == nil || r.Engine.Batches < 2 {
				t.Fatalf("engine counters %+v: want several batches (rollover)", r.Engine)
			}
			if r.Engine.GroupsSubmitted < r.Ops {
				t.Errorf("%d groups for %d ops", r.Engine.GroupsSubmitted, r.Ops)
			}
			if c.direct && r.Engine.FixedBufferOps == 0 {
				t.Errorf("direct run used no fixed buffers: %+v", r.Engine)
			}
			if !c.direct && r.Engine.FixedBufferOps != 0 {
				t.Errorf("page cache run used fixed buffers (the O_DIRECT fd): %+v", r.Engine)
			}
		})
	}
}

// TestRunWritesSlots checks the bytes a write run leaves: every block it
// wrote holds one whole slot's buffer.
func TestRunWritesSlots(t *testing.T) {
	needIOUring(t)
	const bs, qd = 4096, 4
	path := tempFile(t, "", 16*bs)
	zero := make([]byte, 16*bs)
	if err := os.WriteFile(path, zero, 0o644); err != nil {
		t.Fatal(err)
	}
	o := Options{File: path, Op: engine.OpWrite, Pattern: Seq, BlockSize: bs, QueueDepth: qd,
		Size: 16 * bs, Runtime: 100 * time.Millisecond, Direct: true, Seed: 9}
	e := newEngine(t, &o, config.DefaultEngine())
	if _, err := Run(context.Background(), e, o); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	slots := map[string]bool{}
	for off := 0; off < len(got); off += bs {
		blk := got[off : off+bs]
		if bytes.Equal(blk, zero[:bs]) {
			t.Fatalf("block at %d was never written", off)
		}
		slots[string(blk)] = true
	}
	if len(slots) > qd {
		t.Errorf("file holds %d distinct blocks, more than the %d slots", len(slots), qd)
	}
}

func TestRunCancel(t *testing.T) {
	needIOUring(t)
	o := Options{File: tempFile(t, "", 1<<20), Op: engine.OpRead, Pattern: Rand, BlockSize: 4096,
		QueueDepth: 4, Size: 1 << 20, Runtime: time.Hour, Direct: true}
	e := newEngine(t, &o, config.DefaultEngine())
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	r, err := Run(ctx, e, o)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second || r.Seconds > 5 || r.Ops == 0 {
		t.Errorf("cancelled run took %s, measured %.2fs, %d ops", el, r.Seconds, r.Ops)
	}
}

func TestRunErrors(t *testing.T) {
	needIOUring(t)
	small := tempFile(t, "", 64<<10)
	ok := Options{File: small, Op: engine.OpRead, Pattern: Seq, BlockSize: 4096, QueueDepth: 2,
		Size: 64 << 10, Runtime: 50 * time.Millisecond, Direct: true}
	cases := []struct {
		name string
		edit func(*Options)
		want string
	}{
		{"missing", func(o *Options) { o.File = filepath.Join(t.TempDir(), "nope") }, "does not exist; create it first (--create"},
		{"short read", func(o *Options) { o.Size = 128 << 10 }, "less than --size 128KiB: a read needs --size bytes"},
		{"short write", func(o *Options) { o.Op = engine.OpWrite; o.Size = 128 << 10 }, "a write run never extends the file"},
		{"directory", func(o *Options) { o.File = t.TempDir() }, "is not a regular file"},
		{"invalid", func(o *Options) { o.QueueDepth = 0 }, "--qd (0) must be in [1, 4096]"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := ok
			c.edit(&o)
			e := newEngine(t, &ok, config.DefaultEngine())
			_, err := Run(context.Background(), e, o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Run: %v, want %q", err, c.want)
			}
			if _, err := RunPread(context.Background(), o); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("RunPread: %v, want %q", err, c.want)
			}
		})
	}
	t.Run("config mismatch", func(t *testing.T) {
		e := newEngine(t, &Options{Direct: false, QueueDepth: 1, BlockSize: 4096}, config.DefaultEngine())
		_, err := Run(context.Background(), e, ok)
		if err == nil || !strings.Contains(err.Error(), "engine io_uring.direct_io is false but the workload has direct=true") {
			t.Fatalf("Run: %v", err)
		}
	})
	t.Run("direct on tmpfs", func(t *testing.T) {
		if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
			t.Skip("no /dev/shm")
		}
		dir, err := os.MkdirTemp("/dev/shm", "orbitefs-bench-test")
		if err != nil {
			t.Skip(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		o := ok
		o.File = tempFile(t, dir, 64<<10)
		e := newEngine(t, &o, config.DefaultEngine())
		_, err = Run(context.Background(), e, o)
		if err == nil || !strings.Contains(err.Error(), "has no O_DIRECT path; run without --direct") {
			t.Fatalf("Run: %v", err)
		}
		// The page cache works there.
		o.Direct = false
		e = newEngine(t, &o, config.DefaultEngine())
		r, err := Run(context.Background(), e, o)
		if err != nil {
			t.Fatal(err)
		}
		checkResult(t, r, o, "engine")
	})
}

func TestRunPread(t *testing.T) {
	for _, c := range []struct {
		name    string
		op      engine.Op
		pattern Pattern
		direct  bool
	}{
		{"read rand direct", engine.OpRead, Rand, true},
		{"read seq page cache", engine.OpRead, Seq, false},
		{"write seq direct", engine.OpWrite, Seq, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := Options{File: tempFile(t, "", 256<<10), Op: c.op, Pattern: c.pattern, BlockSize: 4096,
				QueueDepth: 4, Size: 256 << 10, Runtime: 100 * time.Millisecond, Direct: c.direct}
			r, err := RunPread(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			checkResult(t, r, o, "pread")
			if r.Engine != nil {
				t.Error("pread result carries engine counters")
			}
		})
	}
}

// TestRunQueueDepthInFlight: the driver's slots submit at once, holding
// no lock across Submit: every one of QueueDepth slots reaches its Submit
// while the others are held just before theirs. A driver that submitted
// one request at a time (under a lock across Submit, or from one
// goroutine) never has more than one slot there.
func TestRunQueueDepthInFlight(t *testing.T) {
	needIOUring(t)
	const qd = 8
	dir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir = t.TempDir()
		if d, err := os.MkdirTemp("/dev/shm", "orbitefs-bench-qd"); err == nil {
			dir = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	var mu sync.Mutex
	waiting, most, released := 0, 0, false
	all := make(chan struct{})
	o := Options{File: tempFile(t, dir, 1<<20), Op: engine.OpRead, Pattern: Rand, BlockSize: 4096, QueueDepth: qd,
		Size: 1 << 20, Runtime: 200 * time.Millisecond, Seed: 3}
	o.submitting = func() {
		mu.Lock()
		waiting++
		most = max(most, waiting)
		if waiting == qd && most == qd && !released {
			released = true
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
		case <-time.After(5 * time.Second): // a serializing driver: report, do not hang
		}
		mu.Lock()
		waiting--
		mu.Unlock()
	}
	e := newEngine(t, &o, config.DefaultEngine())
	r, err := Run(context.Background(), e, o)
	if err != nil {
		t.Fatal(err)
	}
	if most != qd {
		t.Fatalf("at most %d slots were about to submit at once, want all %d", most, qd)
	}
	checkResult(t, r, o, "engine")
}

// TestRunHookMeetsSlot: a task's completion hook and its slot meet in the
// task's cell in either order, and the slot records the outcome the hook
// left (checkResult: every op counted with its bytes). Each case holds
// one side just before its swap until the other side has swapped, on
// every task: the hook first (as for a caller copy, which finishes
// inside Submit), or the slot first (as for a ring completion), at
// queue depth 4 (a cell per task) and 1 (the slot's own cell, reused by
// every task). The
// requests go through the ring (O_DIRECT) and never the caller fast path,
// so the hook runs on the batch worker and may be held without holding
// the slot's Submit; but a Submit delivers the reports that finished
// meanwhile (engine: submitThrough), possibly its own task's, so a hook
// that runs inside a slot's Submit is not held (that slot cannot swap
// before its Submit returns) and counts as inline.
func TestRunHookMeetsSlot(t *testing.T) {
	needIOUring(t)
	for _, c := range []struct {
		name      string
		hookFirst bool
		qd        int // 1: every task meets in the slot's own cell
	}{
		{"hook first", true, 4},
		{"slot first", false, 4},
		{"hook first qd1", true, 1},
		{"slot first qd1", false, 1},
	} {
		hookFirst := c.hookFirst
		t.Run(c.name, func(t *testing.T) {
			o := Options{File: tempFile(t, "", 256<<10), Op: engine.OpRead, Pattern: Rand, BlockSize: 4096,
				QueueDepth: c.qd, Size: 256 << 10, Runtime: 150 * time.Millisecond, Direct: true, Seed: 3}
			type key struct {
				batch uint64
				task  int
			}
			var mu sync.Mutex
			swapped := map[key]chan struct{}{} // closed once the side that goes first swapped
			done := func(k key) chan struct{} {
				mu.Lock()
				defer mu.Unlock()
				if swapped[k] == nil {
					swapped[k] = make(chan struct{})
				}
				return swapped[k]
			}
			var held, late, inline atomic.Int64
			var inSubmit sync.Map // goroutine id of a slot inside Submit
			o.submitting = func() { inSubmit.Store(goid(), true) }
			o.meet = func(batch uint64, task int, hook, after bool) {
				k := key{batch, task}
				if !hook && !after {
					inSubmit.Delete(goid()) // its Submit returned
				}
				switch {
				case after && hook == hookFirst:
					close(done(k))
				case !after && hook != hookFirst:
					if _, ok := inSubmit.Load(goid()); ok {
						inline.Add(1)
						return
					}
					select {
					case <-done(k):
						held.Add(1)
					case <-time.After(5 * time.Second):
						late.Add(1) // reported below; do not hang
					}
				}
			}
			base := config.DefaultEngine()
			base.CallerFastPathWait = 0
			e := newEngine(t, &o, base)
			r, err := Run(context.Background(), e, o)
			if err != nil {
				t.Fatal(err)
			}
			if late.Load() > 0 || held.Load() == 0 {
				t.Fatalf("%d meetings held in order, %d timed out (%d hooks inside a Submit)", held.Load(), late.Load(), inline.Load())
			}
			t.Logf("%d meetings held in order, %d hooks inside a Submit", held.Load(), inline.Load())
			checkResult(t, r, o, "engine")
		})
	}
}

// goid returns the calling goroutine's id (from its stack header,
// "goroutine N [...]"): tests only.
func goid() uint64 {
	var buf [64]byte
	f := strings.Fields(string(buf[:runtime.Stack(buf[:], false)]))
	id, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		panic(fmt.Sprintf("goroutine header %q: %v", f, err))
	}
	return id
}

// TestRunCallerCopyQD1Jobs: jobs at queue depth 1 on an in-memory file,
// where every request is a caller copy whose hook runs inside its
// slot's Submit, meet in each slot's own cell (one per driver) across
// many batch roll-overs: every op is counted, with its bytes, and the
// engine finished as many groups as it was given.
func TestRunCallerCopyQD1Jobs(t *testing.T) {
	if st, err := os.Stat("/dev/shm"); err != nil || !st.IsDir() {
		t.Skip("no /dev/shm")
	}
	dir, err := os.MkdirTemp("/dev/shm", "orbitefs-bench-qd1")
	if err != nil {
		t.Skip(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	o := Options{File: tempFile(t, dir, 1<<20), Op: engine.OpRead, Pattern: Rand, BlockSize: 4096, QueueDepth: 1, Jobs: 4,
		Size: 1 << 20, Runtime: 150 * time.Millisecond, Seed: 3}
	base := config.DefaultEngine()
	base.MaxBatchRequests = 64 // many roll-overs, each batch's lists pooled
	e := newEngine(t, &o, base)
	r, err := Run(context.Background(), e, o)
	if err != nil {
		t.Fatal(err)
	}
	checkResult(t, r, o, "engine")
	if r.Engine == nil || r.Engine.Batches < 8 {
		t.Fatalf("engine counters %+v: want many batches (roll-over)", r.Engine)
	}
	if r.Engine.GroupsSubmitted < r.Ops {
		t.Errorf("%d groups for %d ops", r.Engine.GroupsSubmitted, r.Ops)
	}
	st := e.Stats()
	if st.CallerCopies == 0 || st.TasksCompleted != st.GroupsSubmitted {
		t.Errorf("stats after the run: %d caller copies, %d tasks completed of %d groups", st.CallerCopies, st.TasksCompleted, st.GroupsSubmitted)
	}
}

// TestRunRetiringWithinEngineLimits: a batch that cannot drain (its
// first request held) while the next ones fill must not fail the run on
// the engine's max_allocated_requests: the driver holds a spare and up
// to maxRetiring full batches, EngineConfig raises the limit for them,
// and a roll-over that still meets the limit waits for a retire.
// (EngineConfig once allowed two batches per job while the driver kept
// five: the run failed "exhausted".)
func TestRunRetiringWithinEngineLimits(t *testing.T) {
	needIOUring(t)
	for _, tc := range []struct {
		name  string
		limit int // max_allocated_requests before EngineConfig
		tight bool
	}{
		{"EngineConfig's limit", 8, false},
		{"a tighter limit than EngineConfig's", 16, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{File: tempFile(t, "", 1<<20), Op: engine.OpRead, Pattern: Rand, BlockSize: 4096,
				QueueDepth: 2, Size: 1 << 20, Runtime: time.Second, Seed: 3}
			base := config.DefaultEngine()
			base.MaxBatchRequests = 8
			base.MaxAllocatedRequests = tc.limit
			var n atomic.Int64
			release := make(chan struct{})
			time.AfterFunc(300*time.Millisecond, func() { close(release) })
			o.submitting = func() {
				if n.Add(1) == 1 {
					<-release // the first request is slow: its batch cannot drain
				}
			}
			cfg := o.EngineConfig(base)
			if tc.tight {
				cfg.MaxAllocatedRequests = tc.limit // two batches of 8
			}
			r, err := Run(context.Background(), newEngineFrom(t, cfg), o)
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
			checkResult(t, r, o, "engine")
		})
	}
}

// TestRunStopsWhileRollOverWaits: the measurement ends while a
// roll-over waits for the engine's limit, its full batch already among
// the retiring ones and still current. Run must free each batch once:
// the full current batch is retired with the others, not again as the
// current one. Two requests are held (one in each of the two batches
// the limit allows) until after the end, so the roll-over is waiting
// when the clock runs out. (It was retired twice: "seal batches/N: not
// found: batch was freed".)
func TestRunStopsWhileRollOverWaits(t *testing.T) {
	needIOUring(t)
	o := Options{File: tempFile(t, "", 1<<20), Op: engine.OpRead, Pattern: Rand, BlockSize: 4096,
		QueueDepth: 3, Size: 1 << 20, Runtime: 200 * time.Millisecond, Seed: 3}
	base := config.DefaultEngine()
	base.MaxBatchRequests = 8
	cfg := o.EngineConfig(base)
	cfg.MaxAllocatedRequests = 2 * cfg.MaxBatchRequests // two batches: the roll-over of the second waits
	release := make(chan struct{})
	time.AfterFunc(500*time.Millisecond, func() { close(release) }) // well after the end
	var n atomic.Int64
	o.submitting = func() {
		// The first request is in the first batch; with three slots, the
		// twelfth reserved at least the tenth task slot: the second batch.
		if k := n.Add(1); k == 1 || k == 12 {
			<-release
		}
	}
	r, err := Run(context.Background(), newEngineFrom(t, cfg), o)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	if r.Ops == 0 {
		t.Fatal("no request finished")
	}
}
