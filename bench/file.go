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
// ran one request at a time (docs/performance.md). A slot asks for its
// request's report back from Submit (engine.SubmitOptions.Inline): a
// claimed copy returns it there, and the slot records it and goes on
// with nothing else involved. Other completions arrive on
// Batch.OnGroupDone (every one with Options.HookReports); a slot whose
// request finished inside its own Submit (or before Submit returned)
// finds the outcome waiting and goes on without a wake-up; otherwise
// the hook wakes it.
//
// The steady state takes no lock of the driver: a slot reserves a task
// slot with two atomic adds, the hook and the slot meet on the task's
// cell with one swap each (whoever comes second goes on: the slot
// records, or the hook wakes it), and each slot counts into its own
// result. A driver mutex taken three times per request (reserve, after
// Submit, in the hook) was the most contended lock of a QD 32 run on
// one batch, ahead of the engine's own (docs/performance.md): the
// benchmark measured itself. The mutex remains for what is rare: rolling
// over to a new batch, retiring the old one, and errors.
//
// A batch holds at most max_batch_requests tasks, so slots reserve task
// slots in the current batch; a full batch is retired (it joins
// d.retiring) and is freed once every task reserved in it was settled
// (its outcome recorded or its Submit failed), which is after its last
// Submit returned. At most maxRetiring full batches wait to be retired beside
// the current one: if the current one fills before the oldest drains (a
// stuck request), slots wait instead of allocating another. With one
// (two batches live), 32 slots of caller copies filled a 4096-task batch
// in 2 ms on 16 cores and spent 40 % of their time waiting for the
// previous one's Seal, Wait and Free (docs/performance.md).
//
// Invariants:
//   - A slot's claim on a batch is counted in live.pending before its
//     reservation (live.used) is taken, and given back only once settled,
//     so a batch seen full with nothing pending has no Submit in
//     progress and none to come.
//   - A task's cell is written by the hook before its swap, and read by
//     the slot only after its own swap or its wake-up saw the hook's.
//   - With one slot (queue depth 1) the driver has one task in flight at
//     a time, and its cell is the slot's own, which the slot resets
//     after reading and before its next Submit. A cell per task, in a
//     fresh array of max_batch_requests cells per batch, met the hook's
//     write cold when 32 jobs ran at QD 1 (the others ran between two
//     requests of one job): the hook's own time was 2.4 % of the run's
//     CPU (docs/performance.md).
//   - Only ops finished before the measurement's cutoff are counted.
//   - Every batch allocated is freed before Run returns, on every path.

package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
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
			offs: newOffsets(&o, uint64(j)), job: j}
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
	b *engine.Batch
	// pending counts claims on the batch not yet settled; used, the task
	// slots reserved (it passes capacity once the batch is full: a claim
	// that finds it full is given back).
	pending atomic.Int64
	used    atomic.Int64
	full    atomic.Bool // it joined d.retiring (set under d.mu)
	cells   []cell      // per task; nil with one slot (slot.cell)
}

// cell is where a task's hook and slot meet.
type cell struct {
	// state: 0 neither has come; cellDone: the hook left f; i+1: slot i
	// waits for its wake-up.
	state atomic.Int32
	f     finish
}

const cellDone = -1

// finish is one task's outcome as the completion hook saw it.
type finish struct {
	at    time.Time
	bytes uint64
	err   error // nil when the request completed
}

// slot is one buffer of bs bytes, the goroutine that keeps one request
// on it in flight, and that request.
type slot struct {
	start time.Time
	req   [1]engine.Request
	offs  *offsets      // its own random stream (seq offsets are the driver's)
	wake  chan struct{} // the hook's word that the slot's request finished
	ops   uint64        // measured ops and bytes: the slot's own, merged by run
	bytes uint64
	hist  *histShard
	rep   engine.Report // the report Submit returns (SubmitOptions.Inline)
	cell  cell          // every task's cell when the driver has only this slot
	_     [64]byte      // slots are written by their own goroutines only
}

// histShard is a latency histogram some slots share (one each up to
// maxHistShards; a histogram is 30 KiB, and 4096 slots may run).
type histShard struct {
	mu sync.Mutex
	h  Histogram
}

const maxHistShards = 64

type driver struct {
	e        *engine.Engine
	seg      *engine.Segment
	o        *Options
	base     uint64
	capacity int
	offs     *offsets // seq offsets, shared by the slots (safe for that)
	job      int

	slots  []slot
	hists  []histShard
	cur    atomic.Pointer[live]
	cutoff atomic.Int64 // UnixNano: ops finished later are not counted
	// stopped: the measurement ended or the run failed; slots stop.
	stopped atomic.Bool

	// mu guards everything below: the rare paths (roll-over, retiring,
	// errors, slots returning).
	mu       sync.Mutex
	cond     *sync.Cond
	running  int     // slot goroutines not yet returned
	retiring []*live // full batches not yet retired, oldest first
	// spare is the next batch, allocated ahead by run so that a
	// roll-over only swaps it in; noSpare: allocating one failed (an
	// engine limit), roll-overs allocate their own. cells are the
	// cleared cell arrays of retired batches, for the next ones.
	spare   *live
	noSpare bool
	broken  []*live // retired with an error: cleanup frees them
	cells   [][]cell
	batches int
	err     error

	// The measured interval, set by run; res merged from the slots.
	res     Result
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
	d.hists = make([]histShard, min(len(d.slots), maxHistShards))
	d.cutoff.Store(math.MaxInt64)
	t0 := time.Now()
	cpu0, allocs0 := cpuNow(), allocsNow()
	measuring := true
	stop := func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		if measuring {
			measuring = false
			now := time.Now()
			d.cutoff.Store(now.UnixNano())
			d.stopped.Store(true)
			d.elapsed = now.Sub(t0)
			d.cpu, d.allocs = cpuNow().sub(cpu0), allocsNow()-allocs0
			d.cond.Broadcast()
		}
	}
	d.running = len(d.slots)
	timer := time.AfterFunc(d.o.Runtime, stop)
	defer timer.Stop()
	defer context.AfterFunc(ctx, stop)()

	for i := range d.slots {
		s := &d.slots[i]
		s.wake = make(chan struct{}, 1)
		s.hist = &d.hists[i%len(d.hists)]
		s.offs = newOffsets(d.o, uint64(d.job*len(d.slots)+i))
		go d.slotLoop(i)
	}
	// This goroutine retires full batches once drained, and the rest
	// once every slot has returned.
	d.mu.Lock()
	for d.running > 0 {
		if k := d.drainedLocked(); k >= 0 {
			lv := d.retiring[k]
			d.mu.Unlock()
			err := d.retire(lv)
			d.mu.Lock()
			d.retiring = append(d.retiring[:k], d.retiring[k+1:]...)
			switch {
			case err != nil:
				d.broken = append(d.broken, lv) // cleanup frees it
			default:
				clear(lv.cells)
				d.putCellsLocked(lv.cells)
			}
			d.noSpare = false // the room it held is back
			d.failLocked(err)
			d.cond.Broadcast() // slots waiting to roll over
			continue
		}
		if cur := d.cur.Load(); d.spare == nil && !d.noSpare && d.err == nil && !d.stopped.Load() &&
			cur != nil && cur.used.Load() >= d.spareAt() {
			d.spareLocked()
			continue
		}
		d.cond.Wait()
	}
	err := d.err
	d.mu.Unlock()
	stop()
	for i := range d.slots {
		s := &d.slots[i]
		d.res.Ops += s.ops
		d.res.Bytes += s.bytes
	}
	for i := range d.hists {
		d.res.hist.Merge(&d.hists[i].h)
	}
	if err != nil {
		return err
	}
	for len(d.retiring) > 0 {
		if err := d.retire(d.retiring[0]); err != nil {
			return err
		}
		d.retiring = d.retiring[1:]
	}
	if err := d.retire(d.current()); err != nil {
		return err
	}
	d.cur.Store(nil)
	if err := d.retire(d.spare); err != nil {
		return err
	}
	d.spare = nil
	return nil
}

// current is the current batch unless it is full: a full one went to
// d.retiring, whose own retire (or cleanup) frees it, and may be freed
// already while d.cur still points to it (a roll-over waiting for room).
func (d *driver) current() *live {
	if lv := d.cur.Load(); lv != nil && !lv.full.Load() {
		return lv
	}
	return nil
}

// maxRetiring bounds the full batches waiting to be retired.
const maxRetiring = 3

// drainedLocked is the index in d.retiring of a batch with nothing
// pending, or -1. REQUIRES: d.mu.
func (d *driver) drainedLocked() int {
	for k, lv := range d.retiring {
		if lv.pending.Load() == 0 {
			return k
		}
	}
	return -1
}

// fail records the first error and stops the slots.
func (d *driver) fail(err error) {
	d.mu.Lock()
	d.failLocked(err)
	d.mu.Unlock()
}

// failLocked records the first error and wakes everyone. REQUIRES: d.mu.
func (d *driver) failLocked(err error) {
	if err != nil && d.err == nil {
		d.err = err
		d.stopped.Store(true)
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
		lv := d.reserve()
		if lv == nil {
			return
		}
		offs := s.offs // rand: the slot's stream
		if d.o.Pattern == Seq {
			offs = d.offs // seq: the job's, in order
		}
		s.req[0] = engine.Request{Address: d.base + uint64(i)*d.o.BlockSize, TargetOffset: offs.Next(), Length: d.o.BlockSize}
		s.start = time.Now()
		if h := d.o.submitting; h != nil {
			h()
		}
		var opts engine.SubmitOptions
		if !d.o.HookReports {
			s.rep = engine.Report{}
			opts.Inline = &s.rep
		}
		tr, err := lv.b.SubmitWith(d.o.Op, d.seg, s.req[:], nil, opts)
		if err != nil {
			d.fail(err)
			d.settle(lv)
			return
		}
		if s.rep.Done {
			// Submit returned the report: no hook runs for it.
			d.record(s, d.finishOf(lv, s.rep))
			d.settle(lv)
			continue
		}
		c := d.cellOf(lv, tr.First)
		if h := d.o.meet; h != nil {
			h(lv.b.ID(), tr.First, false, false)
		}
		first := c.state.Swap(int32(i+1)) != cellDone
		if h := d.o.meet; h != nil {
			h(lv.b.ID(), tr.First, false, true)
		}
		if first {
			<-s.wake
		}
		f := c.f
		c.f = finish{} // keep no error alive
		if lv.cells == nil {
			c.state.Store(0) // the slot's own cell: ready for its next task
		}
		d.record(s, f)
		d.settle(lv)
	}
}

// record counts slot s's finished request, or fails the run with its
// error.
func (d *driver) record(s *slot, f finish) {
	if f.err != nil {
		d.fail(f.err)
	} else if f.at.UnixNano() <= d.cutoff.Load() {
		s.hist.mu.Lock()
		s.hist.h.Record(f.at.Sub(s.start))
		s.hist.mu.Unlock()
		s.ops++
		s.bytes += f.bytes
	}
}

// finishOf is the outcome of report r of batch lv, read now.
func (d *driver) finishOf(lv *live, r engine.Report) finish {
	f := finish{at: time.Now(), bytes: r.CompletedBytes}
	if r.CompletedRequests != 1 {
		f.err = fmt.Errorf("batch %d task %d (%s of %d bytes): %w", lv.b.ID(), r.Tasks.First, d.o.Op, d.o.BlockSize, r.Err)
	}
	return f
}

// reserve takes a task slot in the current batch for one request,
// rolling over to a fresh batch when it is full (waiting while
// maxRetiring full batches are not yet retired). It
// returns nil once the measurement is over or the run failed.
func (d *driver) reserve() *live {
	for {
		if d.stopped.Load() {
			return nil
		}
		if lv := d.cur.Load(); lv != nil {
			lv.pending.Add(1) // before the reservation: see live
			u := lv.used.Add(1)
			if u <= int64(d.capacity) {
				if u == d.spareAt() {
					d.mu.Lock()
					d.cond.Broadcast() // run allocates the spare now
					d.mu.Unlock()
				}
				return lv
			}
			d.settle(lv)
			if u > int64(d.capacity)+1 {
				// The slot that found it full first rolls over; a spare
				// batch makes that a swap. Waiting for it on d.mu, all 32
				// slots of a QD 32 run queued there at every roll-over.
				for i := 0; i < 64 && d.cur.Load() == lv && !d.stopped.Load(); i++ {
					runtime.Gosched()
				}
				if d.cur.Load() != lv {
					continue
				}
			}
		}
		d.mu.Lock()
		err := d.rollOverLocked()
		d.failLocked(err)
		d.mu.Unlock()
	}
}

// rollOverLocked makes a batch with free task slots current, unless
// another slot already did or the run is over. REQUIRES: d.mu.
func (d *driver) rollOverLocked() error {
	for {
		if d.err != nil || d.stopped.Load() {
			return nil
		}
		cur := d.cur.Load()
		if cur != nil && cur.used.Load() < int64(d.capacity) {
			return nil
		}
		if cur != nil && !cur.full.Load() {
			if len(d.retiring) >= maxRetiring {
				d.cond.Wait()
				continue
			}
			cur.full.Store(true)
			d.retiring = append(d.retiring, cur)
			d.cond.Broadcast() // run retires it once drained
		}
		lv := d.spare
		if lv != nil {
			d.spare = nil
			d.cond.Broadcast() // run allocates the next one
		} else {
			cells := d.takeCellsLocked()
			var err error
			if lv, err = d.newLive(cells); err != nil {
				d.putCellsLocked(cells)
				if errors.Is(err, engine.ErrExhausted) && len(d.retiring) > 0 {
					// An engine limit (a smaller config than
					// EngineConfig's): a retire gives the room back.
					d.cond.Wait()
					continue
				}
				d.cur.Store(nil)
				return err
			}
		}
		d.cur.Store(lv)
		d.batches++
		return nil
	}
}

// newLive allocates a batch with its hook, and cells when the driver
// has several slots (those given, a retired batch's, or new ones).
// Callable with or without d.mu.
func (d *driver) newLive(cells []cell) (*live, error) {
	b, err := d.e.AllocateBatch(d.capacity)
	if err != nil {
		return nil, err
	}
	lv := &live{b: b, cells: cells}
	if len(d.slots) > 1 && cells == nil {
		lv.cells = make([]cell, d.capacity)
	}
	b.OnGroupDone(d.onDone(lv))
	return lv, nil
}

// takeCellsLocked takes the cleared cells of a retired batch, or nil;
// putCellsLocked gives cells back. REQUIRES: d.mu.
func (d *driver) takeCellsLocked() []cell {
	k := len(d.cells)
	if k == 0 {
		return nil
	}
	cells := d.cells[k-1]
	d.cells = d.cells[:k-1]
	return cells
}

func (d *driver) putCellsLocked(cells []cell) {
	if cells != nil {
		d.cells = append(d.cells, cells)
	}
}

// spareAt is the reservation in the current batch that has run
// allocate the next one: late enough that the batches retired meanwhile
// have handed their lists and groups back for it to take (a spare
// allocated at once held a batch's worth more of them, which a job at
// queue depth 1 then allocated afresh), early enough that it is ready.
func (d *driver) spareAt() int64 { return int64(d.capacity) * 3 / 4 }

// spareLocked allocates the next batch ahead of the roll-over that
// needs it, with d.mu let go meanwhile (slots roll over without it).
// REQUIRES: d.mu.
func (d *driver) spareLocked() {
	cells := d.takeCellsLocked()
	d.mu.Unlock()
	lv, err := d.newLive(cells)
	d.mu.Lock()
	if err != nil {
		d.noSpare = true // an engine limit: roll-overs allocate their own
		d.putCellsLocked(cells)
		return
	}
	d.spare = lv
}

// settle gives back one claim on lv; the last one on a full batch lets
// run retire it.
func (d *driver) settle(lv *live) {
	if lv.pending.Add(-1) == 0 && lv.full.Load() {
		d.mu.Lock()
		d.cond.Broadcast()
		d.mu.Unlock()
	}
}

// onDone is a batch's completion hook: it runs on the engine goroutine
// that finished the request (the submitting slot itself for a caller
// copy, a lane or the batch worker otherwise) and leaves the outcome in
// the task's cell, waking the slot if it already waits there.
func (d *driver) onDone(lv *live) func(engine.Report) {
	return func(r engine.Report) {
		c := d.cellOf(lv, r.Tasks.First)
		c.f = d.finishOf(lv, r)
		if h := d.o.meet; h != nil {
			h(lv.b.ID(), r.Tasks.First, true, false)
		}
		i := c.state.Swap(cellDone)
		if h := d.o.meet; h != nil {
			h(lv.b.ID(), r.Tasks.First, true, true)
		}
		if i > 0 {
			d.slots[i-1].wake <- struct{}{}
		}
	}
}

// cellOf is where task i of lv's hook and slot meet: its own cell, or,
// when the driver has one slot, that slot's.
func (d *driver) cellOf(lv *live, i int) *cell {
	if lv.cells == nil {
		return &d.slots[0].cell
	}
	return &lv.cells[i]
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
	for _, lv := range append(append(d.retiring, d.broken...), d.current(), d.spare) {
		if lv == nil {
			continue
		}
		lv.b.CancelAll()
		lv.b.Seal()
		lv.b.Wait(closeTimeout(d.e))
		lv.b.Free()
	}
	d.retiring, d.broken, d.spare = nil, nil, nil
	d.cur.Store(nil)
}
