// staged.go owns the CUDA <-> file executor through pinned staging: an
// engine-wide service of lanes, each with its own staging chunks, CUDA
// streams (one per device it served) and, while it has work, one io_uring
// ring. Every batch's staged jobs go into one fair queue (fairqueue.go);
// each free slot of a lane takes the next unit, so 64 clients' small
// groups and one large load share the lanes instead of each group
// starting lanes of its own that fight over rings and chunks.
//
//   - READ: the unit's bytes are read into a chunk (fixed-buffer SQE);
//     on its CQE the returned prefix's device copies are gathered; after
//     the reap pass that delivered it they are enqueued with the pass's
//     other copies (flushCopies: merged where contiguous on both sides,
//     one cuMemcpyBatchAsync per stream where the driver has it), then
//     one event per stream is recorded behind them and shared by their
//     slots (a stream completes in order, so it proves each of them); a
//     chunk takes new I/O only after its event completed.
//   - WRITE: the unit's device bytes are copied into a chunk and the copy
//     is confirmed before the SQE is written; host bytes are copied and
//     padding zeroed in the chunk. The units a lane takes in one fill
//     gather their device copies, enqueued together at the fill's end,
//     and share one event per stream behind them all.
//   - A refused copy call is retried copy by copy; only the units whose
//     own copy is refused fail (failCopies), after the lane's streams
//     drain or, if they cannot be confirmed, as dead slots.
//
// Lanes start on the first staged job (up to staging_lanes, never more
// than staging_chunk_count) and stop at Engine.Close. A lane holds a ring
// only while it has work, so batch workers keep the ring pool between
// bursts; one lane waits for a ring when no lane has one, the others only
// take a free one.
//
// Invariants (besides offring.go's):
//   - A slot is free, in I/O (its SQE is on the ring), copying (its CQE
//     arrived and device copies were enqueued), out (within one fill: a
//     WRITE unit's device copies into it were enqueued, not confirmed)
//     or dead; only a free slot is given a unit. A slot serves one unit
//     of one job at a time.
//   - Events shared by slots are closed only when the last of them is
//     freed; a slot that dies keeps them (never closed, never reused).
//   - A slot whose chunk the kernel or the GPU may still touch (no CQE by
//     its job's deadline + quiesce_grace, an SQE left in a ring whose
//     submit failed, a copy whose outcome is unknown) is dead: it never
//     takes another unit and its chunk never returns to the pool. Its
//     unit's job is marked undrained before the unit resolves.
//   - A ring that may still complete into a dead slot is never released:
//     the lane keeps it for good (abandoned at close); a poisoned ring is
//     abandoned once the kernel has completed what it took.
//   - No wait is unbounded: copies are polled and reaps bounded by the
//     earliest deadline + quiesce_grace among the lane's slots; producer
//     events are waited for before units are released (offRing.gate).
//   - A lane with no live slot stages in one pageable buffer charged
//     against max_inflight_bytes, only while no other lane has a live
//     slot; with that charge refused, the unit fails ResourceExhausted.
//   - The executor's lock (stagedExec.mu) is a leaf: no unit resolves
//     while it is held.

package engine

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// stagedExec is the engine-wide staged executor.
type stagedExec struct {
	e    *Engine
	done chan struct{} // closed at Engine.Close

	mu       sync.Mutex
	q        fairQueue
	lanes    []*lane
	starting bool  // lanes are being created
	err      error // why no lane can run (no GPU, no staging pool)
	closed   bool
	rings    int // lanes holding a ring
	live     int // lanes with a slot that can take a unit
	wg       sync.WaitGroup
}

type slotState uint8

const (
	slotFree slotState = iota
	slotIO
	slotCopy
	slotDead // its chunk may still be used by the kernel or the GPU
	// slotOut: a WRITE unit's device copies into the chunk are enqueued,
	// not yet confirmed; only within fill (confirmOuts ends it).
	slotOut
)

type slot struct {
	c     *chunk
	x     *offRing // the job of the unit it serves
	k     int      // unit index in x
	state slotState
	ev    *copyEvents // its copies' events, shared with its reap pass
	seq   uint64      // when its copies were enqueued, in the lane's order
	got   uint64
	short error // why a READ unit stopped short, reported after its copy
	cerr  error // why one of its device copies could not be enqueued (flushCopies)
}

// laneCopy is one device copy of a slot's unit, gathered during a reap
// pass (READ) or a fill (WRITE) and enqueued with the others at its end
// (flushCopies).
type laneCopy struct {
	slot  int
	dev   int
	toDev bool
	c     Copy
}

func (s *slot) cut(grace time.Duration) time.Time { return s.x.g.deadline.Add(grace) }

// copyEvents are the events recorded, one per stream of the lane, after
// the device copies of every slot reaped in one pass; those slots share
// them. They are closed when the last of those slots is freed; a slot
// that dies keeps its reference, so events behind a copy of unknown
// outcome are never closed (or reused by their stream).
type copyEvents struct {
	evs  []Event
	refs int
	done bool  // every event observed complete
	err  error // a query failed: the copies' outcome is unknown
}

type lane struct {
	s       *stagedExec
	p       *stagingPool
	wake    chan struct{}
	q       Queue // nil while idle
	slots   []slot
	streams map[int]Stream
	pending []int      // slots prepared, not yet consumed by Submit
	copyTab []int      // scratch of retireCopies: copying slots, oldest first
	reaped  []int      // slots whose copies this reap pass enqueued, no event yet
	outs    []int      // slotOut slots of this fill
	copies  []laneCopy // device copies gathered, not yet enqueued
	merged  []Copy     // scratch of flushCopies
	failed  []int      // scratch of flushCopies: slots with a refused copy
	copySeq uint64
	inIO    int
	inCopy  int
	live    bool // counted in stagedExec.live
	// keepRing: a dead slot's SQE may still complete on q, so q is never
	// released. poisoned: a submit failed for good, so q's SQ may still
	// hold SQEs; nothing more is prepared on it.
	keepRing    bool
	poisoned    bool
	keepStreams bool // a copy on some stream has an unknown outcome
	// parked: the lane is idle in pause with a live slot, so a wake-up
	// reaches it at once and it can take units. Guarded by
	// stagedExec.mu.
	parked bool
}

// stagingLanes is how many lanes the executor runs.
func (e *Engine) stagingLanes() int {
	if n := e.cfg.StagingLanes; n > 0 {
		return n
	}
	// One lane per core, up to 16: on page-cache files each lane's ring
	// copies in io_uring_enter on its own thread. Measured on the H200
	// (16 cores, 4 GiB tmpfs file -> GPU): 4 lanes 16 GB/s, 8 lanes 26,
	// 16 lanes 37 (docs/performance.md).
	return min(runtime.GOMAXPROCS(0), 16)
}

func newStagedExec(e *Engine) *stagedExec {
	return &stagedExec{e: e, done: make(chan struct{})}
}

// run queues a dispatched job; its units resolve through x.resolve.
func (s *stagedExec) run(x *offRing) {
	s.mu.Lock()
	err := s.err
	if s.closed {
		err = errorf(KindUnavailable, x.g.op.String(), x.g.b.name(), "the engine is closing")
	}
	if err != nil {
		s.mu.Unlock()
		go x.failRest(err)
		return
	}
	if x.hasProducers() {
		x.gate(func() { s.ready(x) })
	}
	s.q.push(x)
	start := s.lanes == nil && !s.starting
	s.starting = s.starting || start
	s.wakeLocked(x)
	s.mu.Unlock()
	if start {
		go s.start()
	}
}

// ready is called as a gated job releases units: it queues the job again
// if it had left the queue, or fails them when no lane can run.
func (s *stagedExec) ready(x *offRing) {
	s.mu.Lock()
	if err := s.err; err != nil {
		s.mu.Unlock()
		x.failRest(err)
		return
	}
	if !x.exhausted() && !s.q.holds(x) {
		s.q.push(x)
	}
	s.wakeLocked(x)
	s.mu.Unlock()
}

// wakeLocked wakes the lanes job x needs (every lane for a nil x).
// A job on a file read through the page cache wakes every lane: each
// lane's ring copies in io_uring_enter on its own thread, so spreading
// is the rate. An O_DIRECT job waits for the disk, not for a core: it
// wakes only enough parked lanes for its units to fill their slots, and
// every lane only when fewer are parked (a busy lane takes units at its
// next look). Waking all 16 lanes for a KV batch of 16 units of 128 KiB
// split the batch over several lanes, each with its own reap, device
// copy, event and poll, and left 0.4 s per second of lanes runnable
// waiting for a core; one lane took the batch 13 % faster on the H200
// (docs/performance.md). REQUIRES: s.mu.
func (s *stagedExec) wakeLocked(x *offRing) {
	n := len(s.lanes)
	if x != nil && x.direct() && n > 0 {
		per := max(1, s.e.cfg.StagingChunkCount/n)
		left := max(1, len(x.units)-int(x.next.Load()))
		n = min(n, (left+per-1)/per)
		for _, l := range s.lanes {
			if n > 0 && l.parked {
				l.parked = false // one wake-up per pause
				select {
				case l.wake <- struct{}{}:
				default: // one is pending already
				}
				n--
			}
		}
		if n == 0 {
			return
		}
	}
	for _, l := range s.lanes {
		select {
		case l.wake <- struct{}{}:
		default:
		}
	}
}

// direct reports whether x's units read or write through O_DIRECT (as
// fileFor will choose for them: the chunks are aligned, so the units'
// own offsets and lengths decide; the first stands for the job).
func (x *offRing) direct() bool {
	return x.g.ent != nil && len(x.units) > 0 && x.g.ent.directUnit(&x.units[0])
}

// start creates the lanes: the pinned pool split among them.
func (s *stagedExec) start() {
	e := s.e
	fail := func(err error) {
		s.mu.Lock()
		s.err, s.starting = err, false
		jobs := s.q.drain()
		s.mu.Unlock()
		for _, x := range jobs {
			x.failRest(err)
		}
	}
	if err := e.gpuReady("staging", "lanes"); err != nil {
		fail(err)
		return
	}
	p, err := e.staging()
	if err != nil {
		fail(err)
		return
	}
	n := min(e.stagingLanes(), e.cfg.StagingChunkCount)
	lanes := make([]*lane, n)
	for i := range n {
		per := e.cfg.StagingChunkCount / n
		if i < e.cfg.StagingChunkCount%n {
			per++
		}
		cs, _ := e.getChunks(p, per, false)
		l := &lane{s: s, p: p, wake: make(chan struct{}, 1), streams: map[int]Stream{}, live: len(cs) > 0}
		for _, c := range cs {
			l.slots = append(l.slots, slot{c: c, k: -1})
		}
		lanes[i] = l
	}
	s.mu.Lock()
	if s.closed {
		// Close ran meanwhile: nothing was queued that a lane could take.
		s.mu.Unlock()
		for _, l := range lanes {
			for _, sl := range l.slots {
				e.putChunks(p, []*chunk{sl.c})
			}
		}
		return
	}
	s.lanes, s.starting = lanes, false
	for _, l := range lanes {
		if l.live {
			s.live++
		}
		s.wg.Add(1)
		go l.loop()
	}
	s.wakeLocked(nil)
	s.mu.Unlock()
}

// laneCount is how many lanes run.
func (s *stagedExec) laneCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.lanes)
}

// take hands out the next unit in the fair order, or (nil, -1).
func (s *stagedExec) take() (*offRing, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.q.take()
}

// hasWork reports whether some job is queued.
func (s *stagedExec) hasWork() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.q.empty()
}

// close stops the lanes. Every batch has drained, so no lane has a unit
// in flight; a lane with dead slots keeps their chunks and its ring.
func (s *stagedExec) close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	jobs := s.q.drain()
	s.mu.Unlock()
	for _, x := range jobs {
		x.failRest(errorf(KindUnavailable, x.g.op.String(), x.g.b.name(), "the engine is closing"))
	}
	s.wg.Wait()
}

// loop runs the lane until the executor closes.
func (l *lane) loop() {
	defer l.s.wg.Done()
	grace := l.s.e.cfg.QuiesceGrace.D()
	for {
		l.retireCopies(time.Time{})
		if l.q == nil && l.s.hasWork() && !l.acquireRing() && l.inCopy == 0 {
			// No ring free now: retry shortly (batch workers give theirs
			// back between groups), unless the executor closes.
			if !l.pause(2 * time.Millisecond) {
				l.stop()
				return
			}
			continue
		}
		if l.q != nil && !l.poisoned {
			l.fill()
		}
		l.submit()
		if l.poisoned && l.inIO == 0 {
			// Whatever the kernel took has completed: retire the ring
			// (its SQ may still hold SQEs of dead slots) and go on with a
			// fresh one.
			l.q.Abandon()
			l.q, l.poisoned, l.keepRing = nil, false, false
			l.s.setRing(-1)
		}
		if l.inIO == 0 && l.inCopy == 0 {
			l.idle()
			if !l.pause(0) {
				l.stop()
				return
			}
			continue
		}
		cut, ok := l.earliestCut(grace)
		now := time.Now()
		if ok && !now.Before(cut) {
			l.cutoff(now, grace)
			continue
		}
		if l.inIO == 0 {
			// Only copies: wait a little for the oldest, never past its cut.
			soon := now.Add(200 * time.Microsecond)
			if cut.Before(soon) {
				soon = cut
			}
			l.retireCopies(soon)
			continue
		}
		wait := min(cut.Sub(now), maxReapWait)
		switch {
		case l.inCopy > 0:
			wait = min(wait, 100*time.Microsecond)
		case l.hasFreeSlot():
			// A unit queued meanwhile waits for this lane's next look
			// at the queue: bound it (the ring cannot be woken).
			wait = min(wait, time.Millisecond)
		}
		if _, err := l.q.Reap(wait, l.complete); err != nil {
			l.s.e.log.Warn("staged reap failed", "err", err)
		}
		l.recordReaped()
	}
}

// pause waits for new work (or, with d > 0, at most d); false when the
// executor closed. Only an idle lane's wait (d == 0) parks it, and only
// with a live slot, so wakeLocked never picks a lane that waits for a
// ring or can take no unit.
func (l *lane) pause(d time.Duration) bool {
	var timeout <-chan time.Time
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		timeout = t.C
	} else {
		l.park()
		defer func() {
			l.s.mu.Lock()
			l.parked = false
			l.s.mu.Unlock()
		}()
	}
	select {
	case <-l.wake:
		return true
	case <-timeout:
		return true
	case <-l.s.done:
		return false
	}
}

// park marks the lane parked if it has a live slot. Slots may have died
// since the lane's last fill (an unconfirmed WRITE copy, a poisoned
// ring), so live is looked at afresh.
func (l *lane) park() {
	alive := l.liveSlot()
	l.s.mu.Lock()
	l.parked = alive
	l.s.mu.Unlock()
}

// acquireRing takes a ring for the lane's work. It waits for one only
// when no lane has a ring (someone must run the queue); otherwise it
// takes a free one or none. When no ring can be had at all, the queued
// units fail.
func (l *lane) acquireRing() bool {
	s := l.s
	f := s.e.file
	if f == nil {
		s.failQueued(errorf(KindUnavailable, "staging", "lanes", "no io_uring transport in this build"))
		return false
	}
	q, err := f.TryAcquire()
	if q == nil && err == nil {
		s.mu.Lock()
		wait := s.rings == 0
		s.mu.Unlock()
		if !wait {
			return false
		}
		q, err = f.Acquire()
	}
	if err != nil {
		s.mu.Lock()
		alone := s.rings == 0
		s.mu.Unlock()
		if alone {
			s.failQueued(wrap(KindExhausted, "staging", "lanes", err))
		}
		return false
	}
	l.q = q
	s.setRing(1)
	return true
}

func (s *stagedExec) setRing(d int) {
	s.mu.Lock()
	s.rings += d
	s.mu.Unlock()
}

// failQueued fails every unit ready in the queue with err.
func (s *stagedExec) failQueued(err error) {
	for x, k := s.take(); k >= 0; x, k = s.take() {
		x.resolve(k, 0, err)
	}
}

// idle gives back what the lane holds only for work: its ring (unless a
// dead slot may still complete on it) and any pageable fallback.
func (l *lane) idle() {
	if l.q != nil && !l.keepRing {
		l.q.Release()
		l.q = nil
		l.s.setRing(-1)
	}
	l.dropFallbacks()
}

// dropFallbacks returns free pageable fallback buffers. Fallback slots
// are added after every pool slot died, so they are the last ones; only
// trailing slots go, so a dead slot's token (its index) never moves.
func (l *lane) dropFallbacks() {
	for n := len(l.slots); n > 0; n-- {
		sl := &l.slots[n-1]
		if sl.c.idx >= 0 || sl.state != slotFree {
			return
		}
		l.s.e.putChunks(l.p, []*chunk{sl.c})
		l.slots = l.slots[:n-1]
	}
}

// stop ends the lane at engine close: chunks of live slots and streams go
// back unless something may still touch them.
func (l *lane) stop() {
	if l.q != nil {
		if l.keepRing || l.poisoned || l.inIO > 0 {
			l.q.Abandon()
		} else {
			l.q.Release()
		}
		l.q = nil
	}
	for i := range l.slots {
		if sl := &l.slots[i]; sl.state == slotFree {
			l.s.e.putChunks(l.p, []*chunk{sl.c})
		}
	}
	if !l.keepStreams {
		for dev, st := range l.streams {
			l.s.e.putStream(dev, st)
		}
	}
}

// earliestCut is the earliest deadline + grace among busy slots.
func (l *lane) earliestCut(grace time.Duration) (time.Time, bool) {
	var cut time.Time
	ok := false
	for i := range l.slots {
		sl := &l.slots[i]
		if sl.state != slotIO && sl.state != slotCopy {
			continue
		}
		if c := sl.cut(grace); !ok || c.Before(cut) {
			cut, ok = c, true
		}
	}
	return cut, ok
}

// hasFreeSlot reports whether some slot could take a unit now.
func (l *lane) hasFreeSlot() bool {
	for i := range l.slots {
		if l.slots[i].state == slotFree {
			return true
		}
	}
	return false
}

// liveSlot reports whether some slot can still take a unit, and keeps
// the executor's count of such lanes.
func (l *lane) liveSlot() bool {
	alive := false
	for i := range l.slots {
		if l.slots[i].state != slotDead {
			alive = true
			break
		}
	}
	if alive != l.live {
		l.live = alive
		l.s.mu.Lock()
		if alive {
			l.s.live++
		} else {
			l.s.live--
		}
		l.s.mu.Unlock()
	}
	return alive
}

// fill gives free slots new units from the queue.
func (l *lane) fill() {
	defer l.confirmOuts()
	if !l.liveSlot() && !l.fallback() {
		return
	}
	for i := range l.slots {
		sl := &l.slots[i]
		for sl.state == slotFree && l.q.Space() > len(l.outs) {
			x, k := l.s.take()
			if k < 0 {
				return
			}
			l.start(i, x, k)
		}
	}
}

// fallback gives a lane with no live slot one pageable buffer for the
// next unit, only while no other lane has a live slot (they take the
// queue otherwise). A refused charge fails that unit before any I/O (no
// chunk, no room under max_inflight_bytes). It reports whether the lane
// now has a free slot.
func (l *lane) fallback() bool {
	s := l.s
	s.mu.Lock()
	others := s.live
	s.mu.Unlock()
	if others > 0 || !s.hasWork() {
		return false
	}
	x, k := s.take()
	if k < 0 {
		return false
	}
	cs, err := s.e.getChunks(l.p, 1, true)
	if err != nil {
		x.resolve(k, 0, err)
		return false
	}
	for _, c := range cs {
		l.slots = append(l.slots, slot{c: c, k: -1})
	}
	l.liveSlot()
	l.start(len(l.slots)-1, x, k)
	return true
}

// start stages unit k of job x in slot i and prepares its SQE.
func (l *lane) start(i int, x *offRing, k int) {
	sl := &l.slots[i]
	g := x.g
	u := &x.units[k]
	if err := x.startable(k); err != nil {
		x.resolve(k, 0, err)
		return
	}
	l.p.leased()
	if g.op == OpWrite {
		pending, err := l.stageOut(i, sl.c, u)
		if err != nil {
			l.p.returned()
			x.resolve(k, 0, unitErr(g, u, KindIO, err))
			return
		}
		if pending {
			sl.x, sl.k, sl.state = x, k, slotOut
			l.outs = append(l.outs, i)
			return
		}
	}
	l.prepare(i, x, k)
}

// prepare puts the SQE of unit k of job x, staged in slot i, on the ring.
func (l *lane) prepare(i int, x *offRing, k int) {
	sl := &l.slots[i]
	g := x.g
	u := &x.units[k]
	op := FileOp{Write: g.op == OpWrite, File: fileFor(g.ent, sl.c, u), Offset: u.off,
		Iov: []IOVec{{Base: sl.c.addr(), Len: u.n}}, Buf: sl.c.fixed, Token: uint64(i),
		Offload: g.ent != nil && g.ent.blocking} // storewait.go
	if err := l.q.Prepare(&op); err != nil {
		l.free(sl)
		x.resolve(k, 0, unitErr(g, u, KindIO, err))
		return
	}
	sl.x, sl.k, sl.state = x, k, slotIO
	l.inIO++
	l.pending = append(l.pending, i)
}

// fileFor picks the O_DIRECT fd when the unit and its chunk satisfy its
// alignment.
func fileFor(ent *segEntry, c *chunk, u *unit) FileRef {
	if ent.directUnit(u) && c.addr()%ent.dioMem == 0 {
		return ent.direct
	}
	return ent.buffered
}

// directUnit reports whether unit u's file range may go through the
// O_DIRECT fd (there is one, and u's offset and length are aligned).
func (ent *segEntry) directUnit(u *unit) bool {
	return ent.direct.FD >= 0 && u.off%ent.dioOff == 0 && u.n%ent.dioOff == 0
}

// free returns slot sl to the free state after its unit resolved. The
// last slot of a reap pass to go closes its events.
func (l *lane) free(sl *slot) {
	if ce := sl.ev; ce != nil {
		if ce.refs--; ce.refs == 0 {
			for _, ev := range ce.evs {
				ev.Close()
			}
		}
		sl.ev = nil
	}
	sl.state, sl.x, sl.k = slotFree, nil, -1
	l.p.returned()
}

// kill marks slot sl dead: its chunk stays out for good, and so do the
// events it shares (they are never closed: the GPU's use of the chunk is
// unknown).
func (l *lane) kill(sl *slot) {
	sl.state, sl.x, sl.k = slotDead, nil, -1
}

// submit hands prepared SQEs to the kernel. A persistent failure
// poisons the ring: the SQEs it did not take may still be in its SQ, so
// their slots die (the chunks stay out of use), their units fail as never
// submitted, and the lane only drains what the kernel took.
func (l *lane) submit() {
	for tries := 0; len(l.pending) > 0 && !l.poisoned; tries++ {
		n, err := l.q.Submit()
		n = min(n, len(l.pending))
		for _, i := range l.pending[:n] {
			if sl := &l.slots[i]; sl.x.g.op == OpWrite {
				sl.x.markSubmitted(sl.k)
			}
		}
		l.pending = l.pending[:copy(l.pending, l.pending[n:])]
		if err == nil {
			continue
		}
		transient := errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EINTR)
		if transient && tries < 3 {
			continue
		}
		l.poisoned = true
		for _, i := range l.pending {
			sl := &l.slots[i]
			x, k := sl.x, sl.k
			l.kill(sl)
			l.inIO--
			x.resolve(k, 0, unitErr(x.g, &x.units[k], KindIO, fmt.Errorf("not submitted: %w", err)))
		}
		l.pending = l.pending[:0]
	}
}

// complete applies one CQE.
func (l *lane) complete(c Completion) {
	sl := &l.slots[c.Token]
	if sl.state != slotIO {
		return // a dead slot's late completion: its unit already failed
	}
	x, k := sl.x, sl.k
	g := x.g
	u := &x.units[k]
	l.inIO--
	if c.Res < 0 {
		l.free(sl)
		x.resolve(k, 0, unitErr(g, u, KindIO, os.NewSyscallError(g.op.String(), unix.Errno(-c.Res))))
		return
	}
	got := uint64(c.Res)
	var short error
	if got < u.n {
		got, short = retryRest(x, sl.c, u, got)
	}
	if g.op == OpWrite || got == 0 {
		l.free(sl)
		x.resolve(k, got, short)
		return
	}
	// READ: copy the returned prefix to its destinations; the device
	// copies are enqueued with the rest of this reap pass's
	// (recordReaped), and one event goes behind them all.
	sl.got = got
	mark := len(l.copies)
	for _, p := range u.pieces {
		if p.rel >= got {
			continue
		}
		n := min(p.n, got-p.rel)
		switch p.kind {
		case pieceHost:
			copy(p.host[:n], sl.c.b[p.rel:p.rel+n])
		case pieceDevice:
			if _, err := l.stream(p.dev); err != nil {
				// Nothing of this unit went to a device yet.
				l.copies = l.copies[:mark]
				l.free(sl)
				x.resolve(k, 0, unitErr(g, u, KindIO, err))
				return
			}
			l.copies = append(l.copies, laneCopy{slot: int(c.Token), dev: p.dev, toDev: true,
				c: Copy{Dst: p.addr, Src: sl.c.addr() + p.rel, N: n}})
		}
	}
	sl.short = short
	l.copySeq++
	sl.seq = l.copySeq
	sl.state = slotCopy
	l.inCopy++
	l.reaped = append(l.reaped, int(c.Token))
}

// retryRest moves the rest of a short unit once more, synchronously, with
// pread/pwrite on the buffered fd (as shortio.go does for the ring), so
// the unit ends with its exact count and the real reason: end of file on
// a read stays a short count (KindRange), an errno becomes its kind
// (ENOSPC -> KindNoSpace).
func retryRest(x *offRing, c *chunk, u *unit, got uint64) (uint64, error) {
	g := x.g
	fd := g.ent.buffered.FD
	for got < u.n {
		var n int
		var err error
		if g.op == OpWrite {
			n, err = unix.Pwrite(fd, c.b[got:u.n], int64(u.off+got))
		} else {
			n, err = unix.Pread(fd, c.b[got:u.n], int64(u.off+got))
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			var errno unix.Errno
			kind := KindIO
			if errors.As(err, &errno) {
				kind = errnoKind(errno)
			}
			what := "short read"
			if g.op == OpWrite {
				what = "short write"
			}
			return got, &Error{Op: g.op.String(), Name: g.seg.name(), Kind: kind,
				Err: fmt.Errorf("requests[%d]: %s: %d of %d bytes at offset %d, the rest failed: %w", u.task, what, got, u.n, u.off, os.NewSyscallError(g.op.String(), err))}
		}
		if n == 0 {
			if g.op == OpWrite {
				return got, unitErr(g, u, KindIO, errShortWrite)
			}
			return got, nil // end of file: a short count, KindRange
		}
		got += uint64(n)
	}
	return got, nil
}

// recordReaped puts one event on every stream the lane used behind the
// copies of the slots the last reap pass completed, shared by them all.
// A record that fails aborts all of them, as a failed copy aborts one.
func (l *lane) recordReaped() {
	if len(l.reaped) == 0 {
		return
	}
	if failed := l.flushCopies(); len(failed) > 0 {
		l.failCopies(failed)
		l.reaped = slices.DeleteFunc(l.reaped, func(i int) bool { return l.slots[i].state != slotCopy })
		if len(l.reaped) == 0 {
			return
		}
	}
	ce := &copyEvents{refs: len(l.reaped)}
	var err error
	for _, st := range l.streams {
		var ev Event
		if ev, err = st.Record(); err != nil {
			break
		}
		ce.evs = append(ce.evs, ev)
	}
	reaped := l.reaped
	l.reaped = l.reaped[:0]
	if err != nil {
		for _, ev := range ce.evs {
			ev.Close()
		}
		cut := l.slots[reaped[0]].cut(l.s.e.cfg.QuiesceGrace.D())
		for _, i := range reaped[1:] {
			if c := l.slots[i].cut(l.s.e.cfg.QuiesceGrace.D()); c.Before(cut) {
				cut = c
			}
		}
		ok := l.drainStreams(cut)
		for _, i := range reaped {
			sl := &l.slots[i]
			x, k := sl.x, sl.k
			l.inCopy--
			if ok {
				l.free(sl)
			} else {
				l.uncertain(x)
				l.kill(sl)
			}
			x.resolve(k, 0, unitErr(x.g, &x.units[k], KindIO, err))
		}
		return
	}
	for _, i := range reaped {
		sl := &l.slots[i]
		if len(ce.evs) == 0 {
			// No stream: nothing went to a device.
			x, k, got, short := sl.x, sl.k, sl.got, sl.short
			l.free(sl)
			l.inCopy--
			x.resolve(k, got, short)
			continue
		}
		sl.ev = ce
	}
}

// flushCopies enqueues the device copies gathered in this reap pass or
// fill, per device: neighbours contiguous on both sides (host and
// device) merged into one copy, then all of them with one CopyBatch
// call where the stream has it, else one call each. A failed call is
// retried copy by copy, unmerged, so only the units whose own copy is
// refused fail (a copy the failed call did enqueue is enqueued again: it
// rewrites the same bytes, and the chunk stays held until an event
// behind both completes). It returns the slots with a refused copy,
// each with its cerr set.
func (l *lane) flushCopies() []int {
	failed := l.failed[:0]
	cs := l.copies
	slices.SortFunc(cs, func(a, b laneCopy) int {
		return cmp.Or(cmp.Compare(a.dev, b.dev), cmp.Compare(a.c.Src, b.c.Src))
	})
	for lo := 0; lo < len(cs); {
		hi := lo + 1
		for hi < len(cs) && cs[hi].dev == cs[lo].dev {
			hi++
		}
		st := l.streams[cs[lo].dev] // complete or stageOut made it
		l.merged = mergeCopies(l.merged[:0], cs[lo:hi])
		if err := enqueueCopies(st, l.merged, cs[lo].toDev); err != nil {
			for _, c := range cs[lo:hi] {
				if err := enqueueCopies(st, []Copy{c.c}, c.toDev); err != nil {
					if sl := &l.slots[c.slot]; sl.cerr == nil {
						sl.cerr = err
						failed = append(failed, c.slot)
					}
				}
			}
		}
		lo = hi
	}
	l.copies = cs[:0]
	l.failed = failed
	return failed
}

// mergeCopies appends cs to dst (sorted by source), merging each copy
// into the one before when both its host and device sides continue it.
func mergeCopies(dst []Copy, cs []laneCopy) []Copy {
	for i, c := range cs {
		if n := len(dst); n > 0 && cs[i-1].toDev == c.toDev {
			if last := &dst[n-1]; last.Src+last.N == c.c.Src && last.Dst+last.N == c.c.Dst {
				last.N += c.c.N
				continue
			}
		}
		dst = append(dst, c.c)
	}
	return dst
}

// enqueueCopies puts cs on st: one call with a CopyBatcher, else one per
// copy. On error some of them may be enqueued.
func enqueueCopies(st Stream, cs []Copy, toDev bool) error {
	if b, ok := st.(CopyBatcher); ok && len(cs) > 1 {
		return b.CopyBatch(cs)
	}
	for _, c := range cs {
		var err error
		if toDev {
			err = st.HtoD(c.Dst, uintptr(c.Src), c.N)
		} else {
			err = st.DtoH(uintptr(c.Dst), c.Src, c.N)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// failCopies ends the units of slots with a refused copy (flushCopies):
// it waits, bounded by the earliest of their cuts, for everything the
// lane enqueued; confirmed, their chunks are free again, otherwise their
// fate is unknown: the slots die and their jobs are undrained.
func (l *lane) failCopies(failed []int) {
	grace := l.s.e.cfg.QuiesceGrace.D()
	cut := l.slots[failed[0]].cut(grace)
	for _, i := range failed[1:] {
		if c := l.slots[i].cut(grace); c.Before(cut) {
			cut = c
		}
	}
	ok := l.drainStreams(cut)
	for _, i := range failed {
		sl := &l.slots[i]
		x, k, err := sl.x, sl.k, sl.cerr
		sl.cerr = nil
		what := "host-to-device copy"
		if sl.state == slotCopy {
			l.inCopy--
		} else {
			what = "device-to-host copy"
		}
		if ok {
			l.free(sl)
		} else {
			l.uncertain(x)
			l.kill(sl)
			err = fmt.Errorf("%w (and the copies enqueued before it could not be confirmed)", err)
		}
		x.resolve(k, 0, unitErr(x.g, &x.units[k], KindIO, fmt.Errorf("%s: %w", what, err)))
	}
}

// drainStreams waits, until cut, for every copy the lane enqueued; false
// when that cannot be confirmed.
func (l *lane) drainStreams(cut time.Time) bool {
	ok := true
	for _, st := range l.streams {
		ev, err := st.Record()
		if err != nil {
			ok = false
			continue
		}
		if done, err := waitEvent(ev, cut); !done || err != nil {
			ok = false
		}
		ev.Close()
	}
	return ok
}

// waitEvent polls ev until it completes or until cut (zero: no wait at
// all). It never blocks past cut: a copy that never completes must not
// hang its group (the caller ends it unquiesced).
func waitEvent(ev Event, cut time.Time) (bool, error) {
	pause := 10 * time.Microsecond
	for {
		done, err := ev.Done()
		if done || err != nil || cut.IsZero() || !time.Now().Before(cut) {
			return done, err
		}
		nap(min(pause, time.Until(cut)))
		pause = min(2*pause, time.Millisecond)
	}
}

// nap sleeps about d on the calling thread. Below a millisecond,
// time.Sleep sleeps about a whole one on Linux (the runtime's netpoller
// waits in whole milliseconds; measured 0.9-1.1 ms for 20 µs on the
// development machine), which put a millisecond on every device copy
// the lane waited for: the one-client KV swap into a GPU ran at half
// its rate into DRAM. nanosleep blocks the thread for d plus the
// kernel's timer slack, and the runtime hands the thread's processor on
// meanwhile. The slack is 50 µs by default, which made the first 10 µs
// poll of a copy event about 60 µs, most of what a batch of one client
// from ext4 into a GPU took longer than into DRAM; nap sets the thread's
// slack to napSlack first. Slack is per thread and the runtime may run
// the goroutine on any thread, so every nap sets it (one prctl, well
// under a microsecond); a thread keeps it for its other timed waits,
// which then wake closer to their deadlines too.
func nap(d time.Duration) {
	if d <= 0 {
		return
	}
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, uintptr(napSlack), 0, 0, 0) // best effort: the default slack only naps longer
	ts := unix.NsecToTimespec(int64(d))
	for unix.Nanosleep(&ts, &ts) == unix.EINTR {
	}
}

// napSlack is the timer slack nap asks for.
const napSlack = time.Microsecond

// retireCopies frees slots whose device copies completed, oldest first.
// With a nonzero cut it first waits (polling, never past cut) for the
// oldest copy.
//
// It stops at the first slot whose copies have not completed: a lane
// records each reap pass's events on each of its streams after that
// pass's copies, and a stream completes in order, so a younger slot
// cannot be done either. Querying it anyway costs a driver call that the
// driver serializes across lanes (backends/cuda: 1.2 us per query from 16
// goroutines); slots of one pass share their events, so one query (and
// one release) answers for the whole pass.
func (l *lane) retireCopies(cut time.Time) {
	tab := l.copyTab[:0]
	for i := range l.slots {
		if l.slots[i].state == slotCopy {
			tab = append(tab, i)
		}
	}
	slices.SortFunc(tab, func(a, b int) int { return cmp.Compare(l.slots[a].seq, l.slots[b].seq) })
	l.copyTab = tab
	for _, i := range tab {
		sl := &l.slots[i]
		done, err := l.copied(sl, cut)
		cut = time.Time{} // waited once; only poll the rest
		if err != nil {
			// The copy's outcome is unknown: the destination may still
			// change and the chunk may still be read by the GPU, so the
			// slot never takes another unit.
			x, k := sl.x, sl.k
			l.uncertain(x)
			l.kill(sl)
			l.inCopy--
			x.resolve(k, 0, unitErr(x.g, &x.units[k], KindIO, fmt.Errorf("device copy: %w", err)))
			continue
		}
		if !done {
			return
		}
		x, k, got, short := sl.x, sl.k, sl.got, sl.short
		l.free(sl)
		l.inCopy--
		x.resolve(k, got, short)
	}
}

// copied reports whether every event of slot sl completed, waiting until
// cut at most. The answer is kept on the shared events, so the other
// slots of its reap pass cost no query.
func (l *lane) copied(sl *slot, cut time.Time) (bool, error) {
	ce := sl.ev
	if ce.done || ce.err != nil {
		return ce.done, ce.err
	}
	for _, ev := range ce.evs {
		d, err := waitEvent(ev, cut)
		if err != nil {
			ce.err = err
			return false, err
		}
		if !d {
			return false, nil
		}
	}
	ce.done = true
	return true, nil
}

// stageOut fills chunk c of slot i with unit u's bytes for a WRITE:
// host bytes and padding at once; device bytes as copies gathered for
// this fill (pending), enqueued and confirmed by confirmOuts before the
// SQE is written. An error (no stream) leaves nothing of u gathered.
func (l *lane) stageOut(i int, c *chunk, u *unit) (pending bool, err error) {
	mark := len(l.copies)
	for _, p := range u.pieces {
		dst := c.b[p.rel : p.rel+p.n]
		switch p.kind {
		case pieceHost:
			copy(dst, p.host)
		case piecePad:
			clear(dst)
		case pieceDevice:
			if _, err := l.stream(p.dev); err != nil {
				l.copies = l.copies[:mark]
				return false, err
			}
			l.copies = append(l.copies, laneCopy{slot: i, dev: p.dev, c: Copy{Dst: c.addr() + p.rel, Src: p.addr, N: p.n}})
		}
	}
	return len(l.copies) > mark, nil
}

// confirmOuts confirms the device copies of this fill's WRITE units with
// one event per stream behind them all, then prepares their SQEs. It
// waits for each unit no later than its own cut, earliest cut first: a
// unit whose copies cannot be confirmed by then dies (its chunk's fate
// is unknown), and so do those events (never closed).
func (l *lane) confirmOuts() {
	if len(l.outs) == 0 {
		return
	}
	if failed := l.flushCopies(); len(failed) > 0 {
		l.failCopies(failed)
		l.outs = slices.DeleteFunc(l.outs, func(i int) bool { return l.slots[i].state != slotOut })
		if len(l.outs) == 0 {
			return
		}
	}
	grace := l.s.e.cfg.QuiesceGrace.D()
	outs := l.outs
	slices.SortFunc(outs, func(a, b int) int { return l.slots[a].cut(grace).Compare(l.slots[b].cut(grace)) })
	var evs []Event
	ok := true
	for _, st := range l.streams {
		ev, err := st.Record()
		if err != nil {
			ok = false
			break
		}
		evs = append(evs, ev)
	}
	confirmed := false
	for _, i := range outs {
		sl := &l.slots[i]
		x, k := sl.x, sl.k
		if ok && !confirmed {
			confirmed = true
			for _, ev := range evs {
				if done, err := waitEvent(ev, sl.cut(grace)); !done || err != nil {
					ok, confirmed = err == nil, false
					break
				}
			}
		}
		if confirmed {
			l.prepare(i, x, k)
			continue
		}
		l.uncertain(x)
		l.kill(sl)
		x.resolve(k, 0, unitErr(x.g, &x.units[k], KindIO, errors.New("device-to-host copy not confirmed by the deadline")))
	}
	if confirmed {
		for _, ev := range evs {
			ev.Close()
		}
	}
	l.outs = l.outs[:0]
}

// uncertain marks job x as unable to prove a drain, and the lane's
// streams as not reusable by others.
func (l *lane) uncertain(x *offRing) {
	l.keepStreams = true
	x.mu.Lock()
	x.undrained = true
	x.mu.Unlock()
}

// cutoff fails the units of slots whose deadline + grace passed with no
// CQE or no confirmed copy: they end unquiesced, their slots die, and the
// ring is kept for good (the kernel may still complete into the chunk).
func (l *lane) cutoff(now time.Time, grace time.Duration) {
	for i := range l.slots {
		sl := &l.slots[i]
		if (sl.state != slotIO && sl.state != slotCopy) || now.Before(sl.cut(grace)) {
			continue
		}
		if sl.state == slotCopy {
			if done, err := l.copied(sl, time.Time{}); done && err == nil {
				continue // retireCopies frees it
			}
			l.inCopy--
		} else {
			l.inIO--
			l.keepRing = true
		}
		x, k := sl.x, sl.k
		l.uncertain(x)
		l.kill(sl)
		x.resolve(k, 0, unitErr(x.g, &x.units[k], KindUnquiesced, fmt.Errorf("no completion %s after the deadline; its memory, file and ring stay retained", grace)))
	}
}

// stream returns the lane's stream on device dev.
func (l *lane) stream(dev int) (Stream, error) {
	if s, ok := l.streams[dev]; ok {
		return s, nil
	}
	s, err := l.s.e.getStream(dev)
	if err != nil {
		return nil, err
	}
	l.streams[dev] = s
	return s, nil
}

// getStream takes a pooled stream of device dev or creates one.
func (e *Engine) getStream(dev int) (Stream, error) {
	g := &e.gpu
	g.streamMu.Lock()
	if ss := g.streams[dev]; len(ss) > 0 {
		s := ss[len(ss)-1]
		g.streams[dev] = ss[:len(ss)-1]
		g.streamMu.Unlock()
		return s, nil
	}
	g.streamMu.Unlock()
	return g.b.NewStream(dev)
}

func (e *Engine) putStream(dev int, s Stream) {
	g := &e.gpu
	g.streamMu.Lock()
	if g.streams == nil {
		g.streams = map[int][]Stream{}
	}
	g.streams[dev] = append(g.streams[dev], s)
	g.streamMu.Unlock()
}
