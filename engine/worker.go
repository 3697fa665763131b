// worker.go owns the execution of a batch's groups on one file queue.
//
// One worker per batch, started by the Submit that finds none running and
// gone again once the batch has nothing queued or in flight, so an idle
// engine has no goroutine. The worker keeps the ring full across group
// boundaries: groups are dispatched strictly in FIFO order, but group k+1
// may start while group k still has SQEs in flight, unless the two touch
// overlapping local memory or overlapping file bytes with a write (a
// fence), in which case k+1 and everything behind it wait. This keeps the
// device at full queue depth for callers that stream small groups, which
// a barrier per group would not.
//
// One turn of the worker: fill (dispatch what the FIFO allows, write the
// SQEs) and submit; reap (block for a completion, then publish each
// completion and run its OnGroupDone hook before looking at the next, so
// a hook's replacement request reaches the kernel at once); settle
// (submit anything left prepared, exit when idle). A Submit that finds the worker running puts its group
// on the ring itself (submitThrough) when the worker is not using the SQ
// side, so the group does not wait for the worker to wake from its reap.
// The SQ side is serialized by ringMu; the CQ side belongs to the worker
// goroutine alone, as liburing allows.
//
// A batch's first group, when small, may run on the submitting caller
// first (fastPath): one nonblocking CQ check, then at most three timed
// waits sharing one caller_fast_path_wait window; whatever is still in
// flight is handed, with its ring, to a worker goroutine that drains it.
// Nothing is ever resubmitted.
//
// Invariants:
//   - Only the worker goroutine (or the caller acting as it) changes w.q,
//     and only under ringMu; SQEs are written under ringMu but outside
//     Batch.mu (registering a fixed buffer can be slow).
//   - A task is marked running exactly when its op is chosen for the
//     ring, and is completed/failed only from its CQE, a submit failure of
//     its unconsumed SQE, or the unquiesced cutoff.
//   - A ring with a missing CQE past deadline+quiesce_grace is tainted:
//     no new op goes on it, and once the live ops drain it is abandoned,
//     never released to the pool.
//   - An exited worker (w.exited, under Batch.mu) never takes new work:
//     submitThrough checks it under the same lock that decides the exit.

package engine

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

type worker struct {
	b *Batch

	// ringMu serializes the ring's SQ side between the worker and callers
	// submitting through (submitThrough); it guards q's identity, pending
	// and toPrepare. Lock order: ringMu, then Batch.mu. The CQ side (Reap)
	// runs without it, on the worker goroutine only, which is also the
	// only goroutine that changes q.
	ringMu    sync.Mutex
	q         Queue
	pending   []uint64 // tokens prepared but not yet consumed by Submit
	toPrepare []FileOp // ops chosen under Batch.mu, written to the ring after it
	tainted   atomic.Bool
	exited    bool // guarded by Batch.mu: no caller may use this worker's ring
	// stalled (guarded by Batch.mu) is set when the last fill stopped at
	// a fence or a full ring: only a completion can unblock the queue, so
	// the worker may sleep in Reap. Otherwise a group queued after the
	// fill (a caller's submitThrough lost the race for ringMu) makes the
	// worker turn again at once instead of sleeping until the next CQE.
	stalled bool
	fast    bool // running on the submitting caller (fastPath): never wait for a ring
	// wake is poked by off-ring executors after each task, so a worker
	// with nothing on its ring learns that a fence may have cleared, and
	// by admission when capacity this worker waits for frees.
	wake chan struct{}
	// inDrain is set by the reap callback while the worker applies a
	// burst of CQEs without blocking, and cleared when Reap returns; see
	// submitThrough (deferred buffered submissions, batchsubmit.go).
	inDrain atomic.Bool
	// choseDirect (guarded by Batch.mu) records that the last fillLocked
	// chose an op on the O_DIRECT fd.
	choseDirect bool
	// admWait (guarded by Batch.mu) is set when the last fill stopped at
	// an admission gate (runqueue.go): the worker sleeps on wake, no
	// later than admUntil (the waiting group's deadline).
	admWait  bool
	admUntil time.Time
}

// poke wakes the worker if it waits for off-ring work; never blocks.
func (w *worker) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// maxReapWait bounds one blocking wait so cutoffs are checked regularly.
const maxReapWait = time.Second

func (w *worker) start() {
	e := w.b.e
	e.st.workersStarted.Add(1)
	e.st.workersRunning.Add(1)
	go func() {
		defer e.st.workersRunning.Add(-1)
		for w.turn(maxReapWait) {
		}
	}()
}

// fastPath runs the single small group just queued on the caller.
func (w *worker) fastPath() {
	e := w.b.e
	w.fast = true
	if !w.turn(0) { // fill, submit, one nonblocking reap
		e.st.fastPathHits.Add(1)
		return
	}
	window := e.cfg.CallerFastPathWait.D()
	w.b.mu.Lock()
	if len(w.b.mu.inflight) > 0 {
		window = min(window, time.Until(w.b.mu.inflight[0].deadline))
	}
	w.b.mu.Unlock()
	end := time.Now().Add(window)
	for tries := 0; tries < 3; tries++ {
		left := time.Until(end)
		if left <= 0 {
			break
		}
		w.reap(left)
		if !w.settle() {
			e.st.fastPathHits.Add(1)
			return
		}
	}
	e.st.fastPathHandoffs.Add(1)
	w.fast = false // before the goroutine owns w
	w.start()
}

// turn is one loop iteration of the worker goroutine.
func (w *worker) turn(wait time.Duration) bool {
	w.ringMu.Lock()
	more := w.fill()
	if more {
		w.submit()
	}
	w.ringMu.Unlock()
	if !more {
		w.b.deliver()
		return false
	}
	w.reap(wait)
	return w.settle()
}

// submitThrough puts groups just queued onto the worker's ring from the
// submitting goroutine, so they reach the kernel at once instead of
// waiting until the worker, blocked reaping, wakes for the next
// completion (measured: requests then travel in convoys and the device
// sees a shallower queue; docs/performance.md). Best effort: when the
// worker holds the SQ side, has no usable ring or is exiting, the group
// stays queued and the worker dispatches it.
func (w *worker) submitThrough() {
	if !w.ringMu.TryLock() {
		return
	}
	defer w.ringMu.Unlock()
	if w.q == nil || w.tainted.Load() {
		return
	}
	b := w.b
	b.mu.Lock()
	if w.exited {
		b.mu.Unlock()
		return
	}
	n := len(w.toPrepare)
	w.choseDirect = false
	w.fillLocked()
	deferred := w.deferSubmitLocked()
	b.mu.Unlock()
	if len(w.toPrepare) > n {
		b.e.st.submitThrough.Add(1)
	}
	w.prepareChosen()
	if deferred {
		return
	}
	w.submit()
}

// exitLocked marks the worker gone. REQUIRES: b.mu.
func (w *worker) exitLocked() {
	b := w.b
	b.mu.worker = false
	if b.mu.w == w {
		b.mu.w = nil
	}
	w.exited = true
}

// fill dispatches queued groups and prepares ops while the ring has
// space. It returns false (after releasing the ring) when the batch is
// idle. REQUIRES: w.ringMu.
func (w *worker) fill() bool {
	b := w.b
	for {
		if w.q == nil && !w.tainted.Load() {
			b.mu.Lock()
			idle := len(b.mu.queue) == 0 && len(b.mu.inflight) == 0
			if idle {
				w.exitLocked()
				b.mu.Unlock()
				return false
			}
			b.mu.Unlock()
			var q Queue
			var err error
			if w.fast {
				// The caller must not wait for another batch's ring: with
				// none free, the group goes to a worker goroutine.
				if q, err = b.e.file.TryAcquire(); q == nil && err == nil {
					break
				}
			} else {
				q, err = b.e.file.Acquire()
			}
			if err != nil {
				b.mu.Lock()
				if len(b.mu.queue) > 0 {
					g := b.mu.queue[0]
					b.mu.queue = b.mu.queue[1:]
					w.failRestLocked(g, 0, wrap(KindExhausted, "dispatch", b.name(), err))
					g.finishLocked(true)
					b.changedLocked()
				}
				b.mu.Unlock()
				continue
			}
			w.q = q
		}
		break
	}
	b.mu.Lock()
	if w.q != nil && !w.tainted.Load() {
		w.fillLocked()
	}
	if len(b.mu.queue) == 0 && len(b.mu.inflight) == 0 {
		w.exitLocked()
		b.mu.Unlock()
		w.releaseQueue()
		return false
	}
	// A worker that waits for admission with nothing on its ring gives
	// the ring back while it sleeps, so waiting batches can never hold
	// every ring of the pool from the batch that is next in order.
	idleWait := w.admWait && len(w.toPrepare) == 0 && len(w.pending) == 0 && !w.ringLiveLocked()
	b.mu.Unlock()
	w.prepareChosen()
	if idleWait && !w.tainted.Load() {
		w.releaseQueue()
	}
	return true
}

// ringLiveLocked reports whether ops of this batch are on the ring.
// REQUIRES: b.mu.
func (w *worker) ringLiveLocked() bool {
	for _, g := range w.b.mu.inflight {
		if !g.offRing && g.outstanding > 0 {
			return true
		}
	}
	return false
}

// prepareChosen writes the ops fillLocked chose to the ring. SQEs are
// written outside the batch lock: preparing may register a fixed buffer
// (pinning a large region takes long) and status readers must not wait
// for that. REQUIRES: w.ringMu.
func (w *worker) prepareChosen() {
	for i := range w.toPrepare {
		if err := w.q.Prepare(&w.toPrepare[i]); err != nil {
			w.failUnsent(w.toPrepare[i:], err)
			break
		}
		w.pending = append(w.pending, w.toPrepare[i].Token)
	}
	w.toPrepare = w.toPrepare[:0]
}

// failUnsent fails ops that never reached the ring and taints it.
func (w *worker) failUnsent(ops []FileOp, err error) {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, op := range ops {
		w.failTokenLocked(op.Token, err)
	}
	w.tainted.Store(true)
	b.changedLocked()
}

// failTokenLocked fails a running task whose op was never consumed by the
// kernel. REQUIRES: b.mu.
func (w *worker) failTokenLocked(tok uint64, err error) {
	b := w.b
	t := &b.mu.tasks[tok]
	if t.state != TaskRunning {
		return // already ended (the unquiesced cutoff)
	}
	t.state = TaskFailed
	t.err = wrap(KindIO, t.g.op.String(), b.name(), fmt.Errorf("task %d not submitted: %w", tok, err))
	b.e.st.tasksFailed.Add(1)
	b.e.adm.ownerDone(t.g, int(tok)-t.g.first, 0)
	t.g.outstanding--
	if t.g.next == t.g.n && t.g.outstanding == 0 {
		t.g.finishLocked(true)
	}
}

// releaseQueue gives the ring back (or abandons a tainted one).
// REQUIRES: w.ringMu, not b.mu.
func (w *worker) releaseQueue() {
	if w.q == nil {
		return
	}
	if w.tainted.Load() {
		w.q.Abandon()
	} else {
		w.q.Release()
	}
	w.q = nil
	w.tainted.Store(false)
	w.pending = w.pending[:0]
}

// fillLocked prepares ops in FIFO order. REQUIRES: b.mu.
func (w *worker) fillLocked() {
	b := w.b
	changed := false
	defer func() {
		if changed {
			b.changedLocked()
		}
	}()
	space := func() int { return w.q.Space() - len(w.toPrepare) }
	// One clock read per fill: it runs without blocking, and a clock read
	// per group cost 5 % of a 4 KiB tmpfs run (docs/performance.md).
	now := time.Now()
	w.stalled = true
	w.admWait, w.admUntil = false, time.Time{}
	for space() > 0 {
		var g *group
		if n := len(b.mu.inflight); n > 0 && b.mu.inflight[n-1].next < b.mu.inflight[n-1].n {
			g = b.mu.inflight[n-1]
		} else if len(b.mu.queue) > 0 {
			h := b.mu.queue[0]
			for _, f := range b.mu.inflight {
				if h.conflicts(f) {
					return // fence: h and all behind it wait
				}
			}
			// Admission at the batch head (runqueue.go): wait, or fail
			// the group before any I/O.
			if ok, err := w.headGate(h, time.Now()); err != nil {
				b.mu.queue = b.mu.queue[1:]
				changed = true
				w.failRestLocked(h, 0, err)
				h.finishLocked(true)
				continue
			} else if !ok {
				return
			}
			b.mu.queue = b.mu.queue[1:]
			changed = true
			if !w.dispatchLocked(h, now) {
				continue
			}
			if h.offRing {
				w.startOffRingLocked(h)
				continue
			}
			g = h
		} else {
			w.stalled = false
			return
		}
		for g.next < g.n && space() > 0 {
			i := g.next
			t := &b.mu.tasks[g.first+i]
			if t.state != TaskPending {
				g.next++
				continue
			}
			if now.After(g.deadline) {
				w.failRestLocked(g, i, errorf(KindTimeout, g.op.String(), b.name(), "deadline passed before requests[%d] was dispatched", i))
				break
			}
			switch w.ownerGate(g, i, now) { // the dispatch window (runqueue.go)
			case ownerWait:
				return
			case ownerDrop:
				g.next++
				changed = true
				continue
			}
			op := g.ops[i]
			op.Token = uint64(g.first + i)
			if op.File.Key == g.ent.direct.Key && g.ent.direct.FD >= 0 {
				w.choseDirect = true
			}
			w.toPrepare = append(w.toPrepare, op)
			t.state = TaskRunning
			g.outstanding++
			g.next++
			changed = true
		}
		if g.next == g.n && g.outstanding == 0 {
			g.finishLocked(true)
			changed = true
		}
	}
}

// dispatchLocked moves g to in flight: deadline check and loans. It
// returns false when g finished without I/O. REQUIRES: b.mu.
func (w *worker) dispatchLocked(g *group, now time.Time) bool {
	b := w.b
	g.dispatched = true
	b.mu.inflight = append(b.mu.inflight, g)
	live := false
	for i := 0; i < g.n; i++ {
		if b.mu.tasks[g.first+i].state == TaskPending {
			live = true
			break
		}
	}
	if !live {
		g.next = g.n
		g.finishLocked(true)
		return false
	}
	if now.After(g.deadline) {
		w.failRestLocked(g, 0, errorf(KindTimeout, g.op.String(), b.name(), "deadline passed while queued"))
		g.finishLocked(true)
		return false
	}
	if err := acquireLoans(g); err != nil {
		g.dispatched = false // no loans to return
		w.failRestLocked(g, 0, err)
		g.finishLocked(true)
		return false
	}
	return true
}

// failRestLocked fails every pending task of g from request i on.
func (w *worker) failRestLocked(g *group, from int, err error) {
	b := w.b
	for i := from; i < g.n; i++ {
		t := &b.mu.tasks[g.first+i]
		if t.state == TaskPending {
			t.state = TaskFailed
			t.err = err
			b.e.st.tasksFailed.Add(1)
		}
	}
	g.next = g.n
}

// submit hands prepared ops to the kernel. A transient refusal leaves
// them prepared for the next turn; a persistent one fails the unsent
// tail and taints the ring. REQUIRES: w.ringMu.
func (w *worker) submit() {
	if len(w.pending) == 0 || w.q == nil {
		return
	}
	n, err := w.q.Submit()
	n = min(n, len(w.pending))
	b := w.b
	b.mu.Lock()
	for _, tok := range w.pending[:n] {
		t := &b.mu.tasks[tok]
		t.submitted = true
		if i := int(tok) - t.g.first; i > t.g.lastSubmitted {
			t.g.lastSubmitted = i
		}
	}
	w.pending = w.pending[:copy(w.pending, w.pending[n:])]
	if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EINTR) {
		for _, tok := range w.pending {
			w.failTokenLocked(tok, err)
		}
		w.pending = w.pending[:0]
		w.tainted.Store(true)
		b.changedLocked()
	}
	b.mu.Unlock()
}

// reap reaps completions (waiting up to wait when ops are in flight, not
// at all when queued groups could be dispatched) and applies them and the
// unquiesced cutoff.
func (w *worker) reap(wait time.Duration) {
	b := w.b
	e := b.e
	b.mu.Lock()
	if len(b.mu.queue) > 0 && !w.stalled {
		wait = 0
	}
	live, offLive := 0, 0
	cutoff := time.Time{}
	for _, g := range b.mu.inflight {
		if g.offRing {
			offLive += g.outstanding // its executor enforces its own cutoff
			continue
		}
		live += g.outstanding
		if g.outstanding > 0 {
			c := g.deadline.Add(e.cfg.QuiesceGrace.D())
			if cutoff.IsZero() || c.Before(cutoff) {
				cutoff = c
			}
		}
	}
	admWait, admUntil := w.admWait, w.admUntil
	b.mu.Unlock()
	if admWait {
		// Capacity freed by another batch cannot interrupt a ring wait:
		// poll the ring, and sleep on wake when it has nothing live. The
		// spec's progress_fallback_interval bounds the sleep while the
		// runtime queue owns work (0: wake-ups only).
		if fb := e.cfg.ProgressFallbackInterval.D(); fb > 0 {
			wait = min(wait, fb)
		}
		if !admUntil.IsZero() {
			wait = min(wait, max(time.Until(admUntil), 0)+time.Millisecond)
		}
		if live > 0 {
			wait = min(wait, time.Millisecond)
		}
	}
	if live == 0 || w.q == nil {
		if (offLive > 0 || admWait) && wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-w.wake:
			case <-t.C:
			}
			t.Stop()
		}
		return
	}
	if offLive > 0 {
		// Off-ring completions cannot interrupt a ring wait: poll.
		wait = min(wait, time.Millisecond)
	}
	if !cutoff.IsZero() {
		wait = min(wait, max(time.Until(cutoff), 0))
	}
	// Each completion is published and handed to the hooks before the next
	// one is looked at, so a hook's replacement request reaches the kernel
	// while the rest of a burst is still being reaped. Applying a whole
	// burst first and submitting the replacements together made requests
	// travel in convoys: a bare ring driven that way did 50.9k 4 KiB IOPS
	// here, one resubmitting per completion 61.9k (fio: 55.6k).
	_, err := w.q.Reap(wait, func(c Completion) {
		w.inDrain.Store(true)
		b.mu.Lock()
		w.completeLocked(c)
		b.changedLocked()
		b.mu.Unlock()
		b.deliver()
	})
	w.inDrain.Store(false)
	b.mu.Lock()
	if err != nil {
		e.log.Warn("reap failed", "batch", b.id, "err", err)
	}
	w.cutoffLocked(time.Now())
	b.mu.Unlock()
}

// settle runs the OnGroupDone hooks of groups finished outside a reap
// (cutoffs), submits anything still prepared, drops a tainted ring once
// its live ops drained, and exits when the batch has nothing left. It
// reports whether the worker goes on.
func (w *worker) settle() bool {
	b := w.b
	b.deliver()
	more := w.settleRing()
	// A caller's submitThrough may have finished a group without I/O
	// between the deliver above and the ring lock: report it before the
	// worker possibly exits.
	b.deliver()
	return more
}

func (w *worker) settleRing() bool {
	b := w.b
	w.ringMu.Lock()
	defer w.ringMu.Unlock()
	w.submit()
	b.mu.Lock()
	drained := true
	for _, g := range b.mu.inflight {
		if g.outstanding > 0 {
			drained = false
			break
		}
	}
	abandon := w.tainted.Load() && w.q != nil && drained
	exit := len(b.mu.queue) == 0 && len(b.mu.inflight) == 0
	if exit {
		w.exitLocked()
	}
	b.mu.Unlock()
	if abandon || exit {
		// A tainted ring goes once its live ops drained; releaseQueue
		// abandons rather than pools it.
		w.releaseQueue()
	}
	return !exit
}

// completeLocked applies one CQE. REQUIRES: b.mu.
func (w *worker) completeLocked(c Completion) {
	b := w.b
	e := b.e
	if c.Token >= uint64(len(b.mu.tasks)) {
		return
	}
	t := &b.mu.tasks[c.Token]
	g := t.g
	if t.state != TaskRunning {
		return // a late CQE of an unquiesced group
	}
	idx := int(c.Token) - g.first
	switch {
	case c.Res >= 0 && uint64(c.Res) == t.length:
		t.state = TaskCompleted
		t.transferred = t.length
		e.st.tasksCompleted.Add(1)
	case c.Res >= 0:
		w.completeShortLocked(t, idx, uint64(c.Res)) // shortio.go
	default:
		errno := unix.Errno(-c.Res)
		t.state = TaskFailed
		if g.op == OpWrite {
			t.effect = EffectUnknown
		}
		t.err = wrap(errnoKind(errno), g.op.String(), g.seg.name(), fmt.Errorf("requests[%d]: %w", idx, os.NewSyscallError(g.op.String(), errno)))
		e.st.tasksFailed.Add(1)
	}
	if c.Res > 0 {
		if g.op == OpRead {
			e.st.bytesRead.Add(uint64(c.Res))
		} else {
			e.st.bytesWritten.Add(uint64(c.Res))
		}
	}
	if t.state.terminal() { // its window share and the bandwidth estimate
		e.adm.ownerDone(g, idx, t.transferred)
	}
	g.outstanding--
	if g.outstanding == 0 && g.next == g.n {
		g.finishLocked(true)
	}
}

// cutoffLocked ends groups whose CQEs are missing past deadline +
// quiesce_grace: they fail unquiesced and keep everything. REQUIRES: b.mu.
func (w *worker) cutoffLocked(now time.Time) {
	b := w.b
	e := b.e
	grace := e.cfg.QuiesceGrace.D()
	for k := 0; k < len(b.mu.inflight); k++ {
		g := b.mu.inflight[k]
		if g.offRing || g.outstanding == 0 || now.Before(g.deadline.Add(grace)) {
			continue
		}
		for i := 0; i < g.n; i++ {
			t := &b.mu.tasks[g.first+i]
			switch t.state {
			case TaskRunning:
				t.state = TaskFailed
				if g.op == OpWrite {
					t.effect = EffectUnknown
				}
				t.err = errorf(KindUnquiesced, g.op.String(), g.seg.name(), "requests[%d]: no completion %s after the deadline; its memory, file and ring stay retained", i, grace)
				e.st.tasksFailed.Add(1)
			case TaskPending:
				t.state = TaskFailed
				t.err = errorf(KindTimeout, g.op.String(), b.name(), "deadline passed before requests[%d] was dispatched", i)
				e.st.tasksFailed.Add(1)
			}
		}
		g.outstanding = 0
		g.next = g.n
		w.tainted.Store(true)
		e.st.unquiesced.Add(1)
		e.log.Error("group unquiesced", "batch", b.id, "task", g.first, "segment", g.seg.uri)
		g.finishLocked(false)
		k--
		b.changedLocked()
	}
}
