// file.go owns the engine driver (Run): it keeps QueueDepth single-request
// groups in flight on one batch, one per buffer slot, and rolls over to a
// fresh batch before the current one's task slots run out.
//
// Design. Each slot has a goroutine of its own that submits the slot's
// next request as soon as the previous one finished; no lock of the
// driver is held across Submit, so QueueDepth Submits can run at once.
// The engine pipelines a batch's groups (distinct memory, and for writes
// distinct file bytes), so one batch carries queue depth N. Where the
// engine copies a small request on its submitter (a caller copy, for
// in-memory files), each slot copies on its own core. A first version
// submitted from one goroutine under a submit lock, resubmitting from the
// completion hook: a caller copy finishes inside Submit, so a QD 32 stream
// ran one request at a time (docs/performance.md). Completions arrive on
// Batch.OnGroupDone; a slot whose request finished inside its own Submit
// (or before Submit returned) finds the outcome waiting and goes on
// without a wake-up; otherwise the hook wakes it.
//
// A batch holds at most max_batch_requests tasks, so slots reserve task
// slots in the current batch; a full batch becomes the previous one and
// is freed once it has no Submit in progress and every one of its tasks
// was seen finished. At most two batches are live: if the new one fills
// before the old one drains (a stuck request), slots wait instead of
// allocating a third.
//
// Invariants:
//   - A reserved task is counted in live.outstanding until its outcome
//     was recorded (or its Submit failed); live.submitting counts the
//     Submits in progress on the batch.
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
	used        int // tasks reserved (submitted, or being submitted)
	submitting  int // Submit calls in progress on it
	outstanding int // reserved tasks not yet seen finished
	// slotOf maps a task to its slot + 1, 0 until the slot's Submit has
	// returned; a task that finishes before that (a caller copy finishes
	// inside Submit) leaves its outcome in early for the slot to record.
	slotOf []int
	early  []finish
}

// finish is one task's outcome as the completion hook saw it.
type finish struct {
	at    time.Time
	bytes uint64
	err   error // nil when the request completed
	valid bool
}

// slot is one buffer of bs bytes, the goroutine that keeps one request
// on it in flight, and that request.
type slot struct {
	start time.Time
	req   [1]engine.Request
	wake  chan struct{} // the hook's word that the slot's request finished
}

type driver struct {
	e        *engine.Engine
	seg      *engine.Segment
	o        *Options
	base     uint64
	capacity int
	offs     *offsets

	// mu guards everything below: completions arrive on engine
	// goroutines, submissions on the slots' own.
	mu        sync.Mutex
	cond      *sync.Cond
	slots     []slot
	running   int // slot goroutines not yet returned
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
// d.cpu and d.allocs then hold the measured interval. Each slot has a
// goroutine of its own that submits its next request as soon as the
// previous one finished, with no lock of the driver held across Submit:
// QueueDepth requests really are in flight at once, each submitter
// copying on its own core where the engine lets the caller copy
// (a single submitting goroutine kept a caller-copy stream at queue
// depth 1).
func (d *driver) run(ctx context.Context) error {
	d.cond = sync.NewCond(&d.mu)
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
	d.running = len(d.slots)
	timer := time.AfterFunc(d.o.Runtime, stop)
	defer timer.Stop()
	defer context.AfterFunc(ctx, stop)()

	for i := range d.slots {
		d.slots[i].wake = make(chan struct{}, 1)
		go d.slotLoop(i)
	}
	// This goroutine retires full batches once drained, and the rest
	// once every slot has returned.
	d.mu.Lock()
	for d.running > 0 {
		if lv := d.prev; lv != nil && lv.outstanding == 0 && lv.submitting == 0 {
			d.mu.Unlock()
			err := d.retire(lv)
			d.mu.Lock()
			d.prev = nil
			d.failLocked(err)
			d.cond.Broadcast() // slots waiting to roll over
			continue
		}
		d.cond.Wait()
	}
	err := d.err
	d.mu.Unlock()
	stop()
	if err != nil {
		return err
	}
	for _, lv := range []*live{d.prev, d.cur} {
		if err := d.retire(lv); err != nil {
			return err
		}
	}
	d.prev, d.cur = nil, nil
	return nil
}

// failLocked records the first error and wakes everyone. REQUIRES: d.mu.
func (d *driver) failLocked(err error) {
	if err != nil && d.err == nil {
		d.err = err
		d.cond.Broadcast()
	}
}

// slotLoop keeps slot i's request in flight until the measurement ends or
// an error stops the run.
func (d *driver) slotLoop(i int) {
	s := &d.slots[i]
	defer func() {
		d.mu.Lock()
		d.running--
		d.cond.Broadcast()
		d.mu.Unlock()
	}()
	for {
		d.mu.Lock()
		lv, err := d.reserveLocked()
		if lv == nil {
			d.failLocked(err)
			d.mu.Unlock()
			return
		}
		s.req[0] = engine.Request{Address: d.base + uint64(i)*d.o.BlockSize, TargetOffset: d.offs.Next(), Length: d.o.BlockSize}
		s.start = time.Now()
		d.mu.Unlock()

		if h := d.o.submitting; h != nil {
			h()
		}
		tr, err := lv.b.Submit(d.o.Op, d.seg, s.req[:], nil, 0)

		d.mu.Lock()
		lv.submitting--
		if err != nil {
			lv.outstanding--
			d.failLocked(err)
			d.cond.Broadcast()
			d.mu.Unlock()
			return
		}
		if f := &lv.early[tr.First]; f.valid {
			d.finishLocked(lv, i, f)
			*f = finish{}
			d.mu.Unlock()
			continue
		}
		lv.slotOf[tr.First] = i + 1
		d.mu.Unlock()
		<-s.wake
	}
}

// reserveLocked takes a task slot in the current batch for one request,
// rolling over to a fresh batch when it is full (a full batch waits for
// the previous one to be retired first: at most two are live). It
// returns nil once the measurement is over or the run failed.
// REQUIRES: d.mu.
func (d *driver) reserveLocked() (*live, error) {
	for {
		if d.err != nil || !d.measuring {
			return nil, nil
		}
		if d.cur != nil && d.cur.used < d.capacity {
			break
		}
		if d.cur != nil {
			if d.prev != nil {
				d.cond.Wait()
				continue
			}
			d.prev, d.cur = d.cur, nil
			d.cond.Broadcast() // run retires it once drained
		}
		b, err := d.e.AllocateBatch(d.capacity)
		if err != nil {
			return nil, err
		}
		lv := &live{b: b, slotOf: make([]int, d.capacity), early: make([]finish, d.capacity)}
		b.OnGroupDone(d.onDone(lv))
		d.cur = lv
		d.batches++
	}
	lv := d.cur
	lv.used++
	lv.submitting++
	lv.outstanding++
	return lv, nil
}

// finishLocked counts slot i's finished request. REQUIRES: d.mu.
func (d *driver) finishLocked(lv *live, i int, f *finish) {
	d.failLocked(f.err)
	if d.measuring {
		d.res.hist.Record(f.at.Sub(d.slots[i].start))
		d.res.Ops++
		d.res.Bytes += f.bytes
	}
	lv.outstanding--
	if lv == d.prev && lv.outstanding == 0 {
		d.cond.Broadcast()
	}
}

// onDone is a batch's completion hook: it runs on the engine goroutine
// that finished the request (the submitting slot itself for a caller
// copy, a lane or the batch worker otherwise), counts it and wakes its
// slot, or leaves it for the slot whose Submit has not returned yet.
func (d *driver) onDone(lv *live) func(engine.Report) {
	return func(r engine.Report) {
		f := finish{at: time.Now(), bytes: r.CompletedBytes, valid: true}
		if r.CompletedRequests != 1 {
			f.err = fmt.Errorf("batch %d task %d (%s of %d bytes): %w", lv.b.ID(), r.Tasks.First, d.o.Op, d.o.BlockSize, r.Err)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		i := lv.slotOf[r.Tasks.First] - 1
		if i < 0 {
			lv.early[r.Tasks.First] = f
			return
		}
		lv.slotOf[r.Tasks.First] = 0
		d.finishLocked(lv, i, &f)
		d.slots[i].wake <- struct{}{}
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
