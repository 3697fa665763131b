// worker.go owns the batch scheduler: the transport-agnostic part of
// executing a batch's groups (its worker goroutine, FIFO dispatch,
// fences, deadlines at dispatch, loans, admission gates, the caller fast
// path and submit-through). It names no executor: a group goes out in
// the shape its routes chose (executor.go), ops onto the ring the ring
// executor lends the batch (ringLane, ringexec.go) or windows of jobs to
// the job executors route.go maps its routes to (offring.go).
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
// The SQ side is serialized by ring.mu; the CQ side belongs to the worker
// goroutine alone, as liburing allows.
//
// A batch's first group, when small, may run on the submitting caller
// first (fastPath): one nonblocking CQ check, then at most three timed
// waits sharing one caller_fast_path_wait window; whatever is still in
// flight is handed, with its ring, to a worker goroutine that drains it.
// Nothing is ever resubmitted.
//
// Invariants:
//   - Only the worker goroutine (or the caller acting as it) changes w.ring.q,
//     and only under ring.mu; SQEs are written under ring.mu but outside
//     Batch.mu (registering a fixed buffer can be slow).
//   - A task is marked running exactly when its op is chosen for the
//     ring (ringexec.go says how it ends).
//   - An exited worker (w.exited, under Batch.mu) never takes new work:
//     submitThrough checks it under the same lock that decides the exit.

package engine

import (
	"sync/atomic"
	"time"
)

type worker struct {
	b *Batch

	// ring is the ring the ring executor lends the batch while its groups
	// are on the ring route (ringexec.go).
	ring   ringLane
	exited bool // guarded by Batch.mu: no caller may use this worker's ring
	// stalled (guarded by Batch.mu) is set when the last fill stopped at
	// a fence or a full ring: only a completion can unblock the queue, so
	// the worker may sleep in Reap. Otherwise a group queued after the
	// fill (a caller's submitThrough lost the race for ring.mu) makes the
	// worker turn again at once instead of sleeping until the next CQE.
	stalled bool
	// fast: running on the submitting caller (fastPath), so never wait
	// for a ring. Set before the worker is published, cleared under
	// ring.mu: another caller's submitThrough reads it.
	fast bool
	// wake is poked by off-ring executors after each task, so a worker
	// with nothing on its ring learns that a fence may have cleared, and
	// by admission when capacity this worker waits for frees.
	wake chan struct{}
	// admWait (guarded by Batch.mu) is set when the last fill stopped at
	// an admission gate (runqueue.go): the worker sleeps on wake, no
	// later than admUntil (the waiting group's deadline, or the moment
	// it ages or is promoted).
	admWait  bool
	admUntil time.Time
	// creditSync is the credit binding this worker must sync after its
	// fill (creditsync.go); atomic, so a turn without one takes no lock.
	creditSync atomic.Pointer[creditBinding]
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
	w.ring.mu.Lock()
	w.fast = false // before the goroutine owns w
	w.ring.mu.Unlock()
	w.start()
}

// turn is one loop iteration of the worker goroutine.
func (w *worker) turn(wait time.Duration) bool {
	w.ring.mu.Lock()
	more := w.fill()
	if more {
		w.ring.submit(w.b)
	}
	w.ring.mu.Unlock()
	w.syncCredit()
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
// sees a shallower queue; docs/performance.md). A worker without a ring
// gets its off-ring groups dispatched here the same way. Best effort:
// when the worker holds the SQ side, its ring is tainted, a group needs
// a ring it has not taken yet, or it is exiting, the group stays queued
// and the worker dispatches it.
func (w *worker) submitThrough() {
	if !w.ring.mu.TryLock() {
		return
	}
	defer w.ring.mu.Unlock()
	if w.ring.tainted.Load() {
		return
	}
	b := w.b
	b.mu.Lock()
	if w.exited {
		b.mu.Unlock()
		return
	}
	if w.ring.q == nil {
		// A worker without a ring sleeps until an off-ring completion
		// pokes it: dispatch the off-ring heads here, or a group queued
		// behind one in flight waited for that one's end (two 4 MiB
		// host copies on one batch ran one at a time). A head that needs
		// a ring stays queued, and the poke sends the worker for one.
		w.fillLocked()
		queued := len(b.mu.queue) > 0
		b.mu.Unlock()
		if queued {
			w.poke()
		}
		return
	}
	n := len(w.ring.toPrepare)
	w.ring.choseDirect = false
	w.fillLocked()
	deferred := w.deferSubmitLocked()
	b.mu.Unlock()
	if len(w.ring.toPrepare) > n {
		b.e.st.submitThrough.Add(1)
	}
	w.ring.prepareChosen(w.b)
	if deferred {
		return
	}
	w.ring.submit(w.b)
}

// exitLocked marks the worker gone. REQUIRES: b.mu.
func (w *worker) exitLocked() {
	b := w.b
	b.mu.worker = false
	if b.mu.w == w {
		b.mu.w = nil
	}
	w.exited = true
	if b.e.credit.enabled() {
		b.e.credit.forget(w)
	}
}

// fill dispatches queued groups and prepares ops while the ring has
// space. It returns false (after releasing the ring) when the batch is
// idle. REQUIRES: w.ring.mu.
func (w *worker) fill() bool {
	b := w.b
	for {
		if w.ring.q == nil && !w.ring.tainted.Load() {
			b.mu.Lock()
			idle := len(b.mu.queue) == 0 && len(b.mu.inflight) == 0
			if idle {
				w.exitLocked()
				b.mu.Unlock()
				return false
			}
			need := w.ringNeededLocked()
			b.mu.Unlock()
			if !need {
				// Off-ring groups dispatch without a ring: a worker that
				// held one for them could leave none to their staging
				// lanes (64 batches into cuda:0 hung on 64 rings).
				break
			}
			// The caller must not wait for another batch's ring: with
			// none free, the group goes to a worker goroutine.
			q, err := b.e.ring().lend(!w.fast)
			if q == nil && err == nil {
				break
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
			w.ring.q = q
		}
		break
	}
	b.mu.Lock()
	if !w.ring.tainted.Load() {
		w.fillLocked()
	}
	if len(b.mu.queue) == 0 && len(b.mu.inflight) == 0 {
		w.exitLocked()
		b.mu.Unlock()
		w.ring.release()
		return false
	}
	// A worker that waits (for admission, off-ring groups or a fence) with
	// nothing on its ring gives the ring back while it sleeps, so waiting
	// batches can never hold every ring of the pool from the batch that
	// is next in order, nor from the staging lanes of their own groups.
	idleWait := (w.admWait || !w.ringNeededLocked()) && len(w.ring.toPrepare) == 0 && len(w.ring.pending) == 0 && !w.ringLiveLocked()
	b.mu.Unlock()
	w.ring.prepareChosen(w.b)
	if idleWait && !w.ring.tainted.Load() {
		w.ring.release()
	}
	return true
}

// ringNeededLocked reports whether what fillLocked would dispatch next
// needs a ring: a ring group partly dispatched, or one at the queue's
// head that no fence holds back. A head waiting at a fence needs no ring
// until the fence clears: a worker that held one there could starve the
// staging lanes of the very group it waits for (one ring, a staged WRITE
// then a ring READ of its bytes hung). REQUIRES: b.mu.
func (w *worker) ringNeededLocked() bool {
	b := w.b
	if n := len(b.mu.inflight); n > 0 && b.mu.inflight[n-1].next < b.mu.inflight[n-1].n {
		// A partly dispatched group: a ring group's next ops, or an
		// off-ring group's next window (no ring).
		return !b.mu.inflight[n-1].offRing
	}
	if len(b.mu.queue) == 0 || b.mu.queue[0].offRing {
		return false
	}
	for _, f := range b.mu.inflight {
		if b.mu.queue[0].conflicts(f) {
			return false
		}
	}
	return true
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
	space := func() int {
		if w.ring.q == nil {
			return 1 // no ring: only off-ring heads are dispatched (fill)
		}
		return w.ring.q.Space() - len(w.ring.toPrepare)
	}
	// One clock read per fill: it runs without blocking, and a clock read
	// per group cost 5 % of a 4 KiB tmpfs run (docs/performance.md).
	now := time.Now()
	w.stalled = true
	w.admWait, w.admUntil = false, time.Time{}
	for space() > 0 {
		var g *group
		if w.ring.q == nil && w.ringNeededLocked() {
			w.stalled = false // the worker turns again and takes a ring
			return
		}
		if n := len(b.mu.inflight); n > 0 && b.mu.inflight[n-1].next < b.mu.inflight[n-1].n {
			g = b.mu.inflight[n-1]
			if g.offRing {
				// Its next window, once half the last one ended; nothing
				// behind it is dispatched before (FIFO).
				if !b.feedLocked(g, now) {
					return
				}
				continue
			}
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
				b.feedLocked(h, now)
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
				w.ring.choseDirect = true
			}
			w.ring.toPrepare = append(w.ring.toPrepare, op)
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
	b.inflightLocked(g)
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
	w.ring.mu.Lock()
	defer w.ring.mu.Unlock()
	w.ring.submit(w.b)
	b.mu.Lock()
	drained := true
	for _, g := range b.mu.inflight {
		if g.outstanding > 0 {
			drained = false
			break
		}
	}
	abandon := w.ring.tainted.Load() && w.ring.q != nil && drained
	exit := len(b.mu.queue) == 0 && len(b.mu.inflight) == 0
	if exit {
		w.exitLocked()
	}
	b.mu.Unlock()
	if abandon || exit {
		// A tainted ring goes once its live ops drained; ringLane.release
		// abandons rather than pools it.
		w.ring.release()
	}
	return !exit
}
