// file.go owns the engine driver (Run): it keeps QueueDepth single-request
// groups in flight on one batch, resubmits each buffer slot as soon as its
// task completes, and rolls over to a fresh batch before the current one's
// task slots run out.
//
// Design. The engine's batch worker pipelines groups (worker.go): a new
// single-request group is dispatched while earlier ones are in flight, as
// long as they touch distinct memory (each slot has its own bs bytes of
// the region) and, for writes, distinct file bytes. So one batch carries
// queue depth N when the driver keeps N groups outstanding. A batch holds
// at most max_batch_requests tasks, so the driver seals a full batch,
// keeps feeding completions of its tasks back into a new batch, and frees
// the old one once it has seen every one of its tasks finish. At most two
// batches are live: if the new one fills before the old one drains (a
// stuck request), submission pauses instead of allocating a third.
//
// The driver learns of completions through Batch.OnGroupDone: the hook
// runs on the engine goroutine that reaped the completion, records it and
// submits the slot's next request from that same goroutine, the shape of
// fio's reap-and-resubmit loop. (A first version polled task status after
// Batch.Changed fired; the goroutine handoff cost a third of the IOPS,
// docs/performance.md.)
//
// Invariants:
//   - A slot is idle (b == nil) or holds exactly one task of one live
//     batch; live.outstanding counts the slots holding its tasks.
//   - Only ops seen finished before the measurement ended are counted.
//   - Every batch allocated is freed before Run returns, on every path.

package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// Run drives e through the workload o and returns the measurement. The
// engine must have been built from o.EngineConfig (or a config at least
// as permissive with the same direct_io): otherwise Run fails before any
// I/O and says which key is short. The file must exist and hold at least
// o.Size bytes; Run never creates or extends it. With o.Direct every
// request must go through O_DIRECT, and a file without an O_DIRECT path
// (tmpfs, or a filesystem refusing it) is an error.
//
// Run blocks for o.Runtime plus the time to drain the requests then in
// flight. Cancelling ctx ends the measurement early; the result then
// covers the shorter interval and the error is nil. Not safe to call
// concurrently on one file with a write workload.
func Run(ctx context.Context, e *engine.Engine, o Options) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	if err := o.checkEngine(e.Config()); err != nil {
		return Result{}, err
	}
	path, err := checkFile(&o)
	if err != nil {
		return Result{}, err
	}
	perm := engine.PermRead
	if o.Op == engine.OpWrite {
		perm = engine.PermWrite
	}
	seg, err := e.OpenFileSegment("file://"+path, perm)
	if err != nil {
		return Result{}, err
	}
	defer e.CloseFileSegment(seg, closeTimeout(e))
	info, err := e.FileSegmentInfo(seg)
	if err != nil {
		return Result{}, err
	}
	if info.Size < o.Size {
		return Result{}, fmt.Errorf("%s: is %d bytes, less than --size (%d)", path, info.Size, o.Size)
	}
	if o.Direct {
		if !info.DirectIO {
			return Result{}, fmt.Errorf("--direct: %s (%s) has no O_DIRECT path; run without --direct to use the page cache", path, info.Filesystem)
		}
		if a := max(info.DIOOffsetAlign, info.DIOMemAlign); o.BlockSize%a != 0 {
			return Result{}, fmt.Errorf("--direct: --bs (%d) is not a multiple of %s's O_DIRECT alignment (%d)", o.BlockSize, path, a)
		}
	}
	region, err := e.RegisterMemory(o.bufferBytes())
	if err != nil {
		return Result{}, err
	}
	defer e.Unregister(region)
	if o.Op == engine.OpWrite {
		if err := fillRandom(region, o.Seed); err != nil {
			return Result{}, err
		}
	}

	// Each job is its own driver over its own slots of the region and
	// its own offset stream; their results merge into one.
	ds := make([]*driver, o.jobs())
	for j := range ds {
		ds[j] = &driver{e: e, seg: seg, o: &o, base: region.BaseAddress() + uint64(j*o.QueueDepth)*o.BlockSize,
			capacity: e.Config().MaxBatchRequests, slots: make([]slot, o.QueueDepth),
			offs: newOffsets(&o, uint64(j))}
		defer ds[j].cleanup()
	}
	stats0 := e.Stats()
	errs := make([]error, len(ds))
	var wg sync.WaitGroup
	for j, d := range ds {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[j] = d.run(ctx)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Result{}, err
	}
	var res Result
	var elapsed time.Duration
	var cpu cpuSpan
	var allocs, batches uint64
	for _, d := range ds {
		res.Ops += d.res.Ops
		res.Bytes += d.res.Bytes
		res.hist.Merge(&d.res.hist)
		// The jobs' measured intervals overlap; CPU and allocations are
		// the process's, so the widest interval covers them all.
		elapsed = max(elapsed, d.elapsed)
		if d.cpu.user+d.cpu.sys > cpu.user+cpu.sys {
			cpu = d.cpu
		}
		allocs = max(allocs, d.allocs)
		batches += uint64(d.batches)
	}
	res.Engine = countersSince(stats0, e.Stats(), int(batches))
	res.finish(&o, ImplEngine, elapsed, cpu, allocs)
	return res, nil
}

// closeTimeout bounds how long teardown waits for in-flight requests:
// their deadline plus the quiesce grace, as the worker itself does.
func closeTimeout(e *engine.Engine) time.Duration {
	c := e.Config()
	return c.DefaultTimeout.D() + c.QuiesceGrace.D() + time.Second
}

// checkFile resolves o.File and checks it is a regular file holding at
// least o.Size bytes. It returns the absolute path.
func checkFile(o *Options) (string, error) {
	path, err := filepath.Abs(o.File)
	if err != nil {
		return "", fmt.Errorf("--file %s: %w", o.File, err)
	}
	st, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", fmt.Errorf("--file %s does not exist; create it first (--create writes --size bytes of random data)", path)
		}
		return "", fmt.Errorf("--file: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("--file %s is not a regular file", path)
	}
	if uint64(st.Size()) < o.Size {
		why := "a read needs --size bytes to read"
		if o.Op == engine.OpWrite {
			why = "a write run never extends the file, so it must already be --size bytes"
		}
		return "", fmt.Errorf("--file %s is %s (%d bytes), less than --size %s: %s; lower --size or add --create", path,
			config.Size(st.Size()), st.Size(), config.Size(o.Size), why)
	}
	return path, nil
}

// fillRandom writes pseudo-random bytes over the whole region, so a
// write workload stores incompressible data, as fio does by default.
func fillRandom(r *engine.Region, seed uint64) error {
	var key [32]byte
	for i := range 4 {
		key[i*8] = byte(seed >> (8 * i))
	}
	rng := rand.NewChaCha8(key)
	chunk := make([]byte, 1<<20)
	for off := uint64(0); off < r.Len(); off += uint64(len(chunk)) {
		n := min(uint64(len(chunk)), r.Len()-off)
		rng.Read(chunk[:n])
		if _, err := r.WriteAt(chunk[:n], int64(off)); err != nil {
			return err
		}
	}
	return nil
}

// live is one allocated batch and the driver's count of it.
type live struct {
	b           *engine.Batch
	used        int   // tasks appended
	outstanding int   // slots holding one of its unfinished tasks
	slotOf      []int // task index -> slot
}

// slot is one buffer of bs bytes and the request it carries.
type slot struct {
	b     *live // nil when idle
	start time.Time
}

type driver struct {
	e        *engine.Engine
	seg      *engine.Segment
	o        *Options
	base     uint64
	capacity int
	offs     *offsets
	req      [1]engine.Request

	// subMu serializes Submit calls, so a batch's task indices follow the
	// order slots are assigned in. It is held across Submit; mu is not,
	// because the engine may report a group done (onDone) from inside
	// Submit on the same goroutine.
	subMu sync.Mutex

	// mu guards everything below: completions arrive on batch workers.
	mu        sync.Mutex
	cond      *sync.Cond
	slots     []slot
	idle      []int
	cur, prev *live
	batches   int
	measuring bool
	err       error
	res       Result // Ops, Bytes and hist of the measured interval

	// The measured interval, set by run.
	elapsed time.Duration
	cpu     cpuSpan
	allocs  uint64
}

// run drives the workload for o.Runtime, then drains; d.res, d.elapsed,
// d.cpu and d.allocs then hold the measured interval.
func (d *driver) run(ctx context.Context) error {
	d.cond = sync.NewCond(&d.mu)
	for i := range d.slots {
		d.idle = append(d.idle, i)
	}
	t0 := time.Now()
	cpu0, allocs0 := cpuNow(), allocsNow()
	stop := func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.measuring {
			d.measuring = false
			d.elapsed = time.Since(t0)
			d.cpu, d.allocs = cpuNow().sub(cpu0), allocsNow()-allocs0
			d.cond.Broadcast()
		}
	}
	d.measuring = true
	timer := time.AfterFunc(d.o.Runtime, stop)
	defer timer.Stop()
	defer context.AfterFunc(ctx, stop)()

	d.mu.Lock()
	for d.err == nil {
		switch {
		case d.prev != nil && d.prev.outstanding == 0:
			lv := d.prev
			d.prev = nil
			d.mu.Unlock()
			err := d.retire(lv)
			d.mu.Lock()
			if err != nil && d.err == nil {
				d.err = err
			}
		case d.canSubmitLocked():
			d.mu.Unlock()
			d.subMu.Lock()
			err := d.fill()
			d.subMu.Unlock()
			d.mu.Lock()
			if err != nil && d.err == nil {
				d.err = err
			}
		case !d.measuring && len(d.idle) == len(d.slots):
			d.mu.Unlock()
			stop()
			for _, lv := range []*live{d.prev, d.cur} {
				if err := d.retire(lv); err != nil {
					return err
				}
			}
			d.prev, d.cur = nil, nil
			return nil
		default:
			d.cond.Wait()
		}
	}
	err := d.err
	d.mu.Unlock()
	stop()
	return err
}

// canSubmitLocked reports whether an idle slot can get a request now: a
// full batch waits for the previous one to drain before rolling over.
// REQUIRES: d.mu.
func (d *driver) canSubmitLocked() bool {
	return d.measuring && len(d.idle) > 0 && !(d.prev != nil && d.cur != nil && d.cur.used == d.capacity)
}

// onDone is a batch's completion hook: it runs on the engine goroutine
// that reaped the completion, records it and hands the slot its next
// request right there, so a completion and its replacement never wait for
// a goroutine switch (the shape of fio's reap-and-resubmit loop). When
// another goroutine is submitting, that one picks the slot up instead.
func (d *driver) onDone(lv *live) func(engine.Report) {
	return func(r engine.Report) {
		now := time.Now()
		d.mu.Lock()
		i := lv.slotOf[r.Tasks.First]
		s := &d.slots[i]
		if r.CompletedRequests != 1 && d.err == nil {
			d.err = fmt.Errorf("batch %d task %d (%s of %d bytes): %w", lv.b.ID(), r.Tasks.First, d.o.Op, d.o.BlockSize, r.Err)
		}
		if d.measuring {
			d.res.hist.Record(now.Sub(s.start))
			d.res.Ops++
			d.res.Bytes += r.CompletedBytes
		}
		lv.outstanding--
		s.b = nil
		d.idle = append(d.idle, i)
		// Wake run only when it has something to do: waking it for every
		// completion cost a futex round trip per op.
		if d.err != nil || (lv == d.prev && lv.outstanding == 0) || (!d.measuring && len(d.idle) == len(d.slots)) {
			d.cond.Broadcast()
		}
		d.mu.Unlock()
		if !d.subMu.TryLock() {
			// Another goroutine is submitting; its fill loop re-reads the
			// idle slots, but it may be past its last check: let run look.
			d.mu.Lock()
			d.cond.Broadcast()
			d.mu.Unlock()
			return
		}
		err := d.fill()
		d.subMu.Unlock()
		if err != nil {
			d.mu.Lock()
			if d.err == nil {
				d.err = err
			}
			d.cond.Broadcast()
			d.mu.Unlock()
		}
	}
}

// fill hands idle slots new requests, rolling over to a new batch when
// the current one is full. REQUIRES: d.subMu, not d.mu.
func (d *driver) fill() error {
	for {
		d.mu.Lock()
		if d.err != nil || !d.canSubmitLocked() {
			d.mu.Unlock()
			return nil
		}
		if d.cur == nil || d.cur.used == d.capacity {
			if d.cur != nil {
				if err := d.cur.b.Seal(); err != nil {
					d.mu.Unlock()
					return err
				}
				d.prev, d.cur = d.cur, nil
			}
			b, err := d.e.AllocateBatch(d.capacity)
			if err != nil {
				d.mu.Unlock()
				return err
			}
			lv := &live{b: b, slotOf: make([]int, d.capacity)}
			b.OnGroupDone(d.onDone(lv))
			d.cur = lv
			d.batches++
		}
		i := d.idle[len(d.idle)-1]
		d.idle = d.idle[:len(d.idle)-1]
		lv, task := d.cur, d.cur.used
		d.slots[i] = slot{b: lv, start: time.Now()}
		lv.slotOf[task] = i
		lv.used++
		lv.outstanding++
		d.req[0] = engine.Request{Address: d.base + uint64(i)*d.o.BlockSize, TargetOffset: d.offs.Next(), Length: d.o.BlockSize}
		d.mu.Unlock()
		tr, err := lv.b.Submit(d.o.Op, d.seg, d.req[:], nil, 0)
		if err != nil {
			return err
		}
		if tr.First != task {
			return fmt.Errorf("batch %d: request for slot %d became task %d, want %d", lv.b.ID(), i, tr.First, task)
		}
	}
}

// retire seals, waits for and frees a batch whose tasks have all been
// seen finished: the wait returns at once and the free cannot be busy.
func (d *driver) retire(lv *live) error {
	if lv == nil {
		return nil
	}
	if err := lv.b.Seal(); err != nil {
		return err
	}
	if _, err := lv.b.Wait(closeTimeout(d.e)); err != nil {
		return err
	}
	return lv.b.Free()
}

// cleanup frees whatever batches an error left behind: it cancels what
// has not started and waits for the rest.
func (d *driver) cleanup() {
	for _, lv := range []*live{d.prev, d.cur} {
		if lv == nil {
			continue
		}
		lv.b.CancelAll()
		lv.b.Seal()
		lv.b.Wait(closeTimeout(d.e))
		lv.b.Free()
	}
	d.prev, d.cur = nil, nil
}
