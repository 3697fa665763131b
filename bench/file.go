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
// The driver learns of completions through Batch.Changed: it takes the
// channel of every live batch, then reads the status of each outstanding
// task, and blocks on the channels only when nothing had finished, so no
// change is missed between the read and the wait.
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

	d := &driver{e: e, seg: seg, o: &o, base: region.BaseAddress(),
		capacity: e.Config().MaxBatchRequests, slots: make([]slot, o.QueueDepth),
		offs: newOffsets(&o, 0)}
	defer d.cleanup()
	res, err := d.run(ctx)
	if err != nil {
		return Result{}, err
	}
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
	used        int // tasks appended
	outstanding int // slots holding one of its unfinished tasks
}

// slot is one buffer of bs bytes and the request it carries.
type slot struct {
	b     *live // nil when idle
	task  int
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

	slots     []slot
	idle      []int
	cur, prev *live
	batches   int

	measuring bool
	res       Result
}

func (d *driver) run(ctx context.Context) (Result, error) {
	for i := range d.slots {
		d.idle = append(d.idle, i)
	}
	stats0 := d.e.Stats()
	timer := time.NewTimer(d.o.Runtime)
	defer timer.Stop()
	t0 := time.Now()
	cpu0, allocs0 := cpuNow(), allocsNow()
	deadline := t0.Add(d.o.Runtime)
	d.measuring = true
	var elapsed time.Duration
	var cpu cpuSpan
	var allocs uint64
	done := ctx.Done()
	stopped := false
	for {
		now := time.Now()
		if d.measuring && (stopped || !now.Before(deadline)) {
			d.measuring = false
			elapsed = now.Sub(t0)
			cpu, allocs = cpuNow().sub(cpu0), allocsNow()-allocs0
		}
		if d.measuring {
			if err := d.submitIdle(); err != nil {
				return Result{}, err
			}
		}
		if len(d.idle) == len(d.slots) {
			break
		}
		// Take the channels first: a change after this read closes them.
		var chCur, chPrev <-chan struct{}
		if d.cur != nil {
			chCur = d.cur.b.Changed()
		}
		if d.prev != nil {
			chPrev = d.prev.b.Changed()
		}
		n, err := d.harvest()
		if err != nil {
			return Result{}, err
		}
		if n > 0 {
			continue
		}
		select {
		case <-chCur:
		case <-chPrev:
		case <-timer.C:
		case <-done:
			stopped, done = true, nil
		}
	}
	if err := d.retire(d.prev); err != nil {
		return Result{}, err
	}
	d.prev = nil
	if err := d.retire(d.cur); err != nil {
		return Result{}, err
	}
	d.cur = nil
	d.res.Engine = countersSince(stats0, d.e.Stats(), d.batches)
	d.res.finish(d.o, ImplEngine, elapsed, cpu, allocs)
	return d.res, nil
}

// submitIdle hands every idle slot a new request, rolling over to a new
// batch when the current one is full.
func (d *driver) submitIdle() error {
	for len(d.idle) > 0 {
		if d.cur == nil || d.cur.used == d.capacity {
			if d.prev != nil {
				return nil // the previous batch still drains; wait for it
			}
			if d.cur != nil {
				if err := d.cur.b.Seal(); err != nil {
					return err
				}
				d.prev = d.cur
				d.cur = nil
				if d.prev.outstanding == 0 {
					if err := d.retire(d.prev); err != nil {
						return err
					}
					d.prev = nil
				}
			}
			b, err := d.e.AllocateBatch(d.capacity)
			if err != nil {
				return err
			}
			d.cur = &live{b: b}
			d.batches++
		}
		i := d.idle[len(d.idle)-1]
		d.idle = d.idle[:len(d.idle)-1]
		d.req[0] = engine.Request{Address: d.base + uint64(i)*d.o.BlockSize, TargetOffset: d.offs.Next(), Length: d.o.BlockSize}
		start := time.Now()
		tr, err := d.cur.b.Submit(d.o.Op, d.seg, d.req[:], nil, 0)
		if err != nil {
			d.idle = append(d.idle, i)
			return err
		}
		d.slots[i] = slot{b: d.cur, task: tr.First, start: start}
		d.cur.used++
		d.cur.outstanding++
	}
	return nil
}

// harvest frees every slot whose task has finished and counts it if the
// measurement is still on.
func (d *driver) harvest() (int, error) {
	n := 0
	now := time.Now() // when these completions were seen
	for i := range d.slots {
		s := &d.slots[i]
		if s.b == nil {
			continue
		}
		st, err := s.b.b.TaskStatus(s.task)
		if err != nil {
			return n, err
		}
		switch st.State {
		case engine.TaskCompleted:
		case engine.TaskFailed, engine.TaskCancelled:
			return n, fmt.Errorf("batch %d task %d (%s of %d bytes): %s: %w", s.b.b.ID(), s.task, d.o.Op, d.o.BlockSize, st.State, st.Err)
		default:
			continue
		}
		if d.measuring {
			d.res.hist.Record(now.Sub(s.start))
			d.res.Ops++
			d.res.Bytes += st.Transferred
		}
		lv := s.b
		lv.outstanding--
		s.b = nil
		d.idle = append(d.idle, i)
		n++
		if lv == d.prev && lv.outstanding == 0 {
			if err := d.retire(lv); err != nil {
				return n, err
			}
			d.prev = nil
		}
	}
	return n, nil
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
