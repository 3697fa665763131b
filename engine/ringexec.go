// ringexec.go owns the ring executor: the engine's io_uring rings, one
// lent to each busy batch (ringLane), seen from the task side. It writes
// the SQEs the scheduler (worker.go) chose, submits them, reaps CQEs into
// task outcomes on the one task path (task.go's finishTaskLocked),
// retires a ring, and ends groups whose CQEs are missing past deadline +
// quiesce_grace (unquiesced). Executors that take jobs (executor.go,
// offring.go) run beside it.
//
// Invariants:
//   - The SQ side (prepareChosen, submit, release) runs under
//     ringLane.mu; the CQ side (reap) on the worker goroutine alone.
//   - A task is completed/failed only from its CQE, a submit failure of
//     its unconsumed SQE, or the unquiesced cutoff.
//   - A ring with a missing CQE past deadline+quiesce_grace is tainted:
//     no new op goes on it, and once the live ops drain it is abandoned,
//     never released to the pool.

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

// ringExec is the ring executor: the engine's file transport, whose
// rings it lends, one to each busy batch whose groups are on the ring
// route. The batch worker fills its ring op by op (worker.go) rather than
// handing it jobs: that keeps a batch's SQEs of many groups in one
// submit, lets a submitter put its ops on the ring itself
// (submitThrough) and lets the worker sleep in the ring's reap.
type ringExec struct{ e *Engine }

func (ringExec) transport() TransportKind { return TransportIOUring }

func (ringExec) path() string { return ringPath }

// close has nothing to stop: each batch gives its ring back (or abandons
// a tainted one) when its worker exits, and the pool closes with its
// backend at Engine.Close.
func (ringExec) close() {}

// lend lends a batch a ring from the pool. A caller that must not wait
// (the fast path runs on the submitter) gets none, and no error, when
// every ring is taken.
func (r ringExec) lend(wait bool) (Queue, error) {
	if wait {
		return r.e.file.Acquire()
	}
	return r.e.file.TryAcquire()
}

// ringLane is the ring the ring executor lends one batch: the SQ side,
// which the batch worker fills and a submitting caller may fill too
// (submitThrough), and the CQ side, which the worker goroutine alone
// reaps. It holds its ring only while the batch has ring work (worker.go
// gives it back while the batch waits with nothing on it).
type ringLane struct {
	// mu serializes the SQ side between the worker and callers
	// submitting through (submitThrough); it guards q's identity, pending
	// and toPrepare. Lock order: mu, then Batch.mu. The CQ side (Reap)
	// runs without it, on the worker goroutine only, which is also the
	// only goroutine that changes q.
	mu        sync.Mutex
	q         Queue
	pending   []uint64 // tokens prepared but not yet consumed by Submit
	toPrepare []FileOp // ops chosen under Batch.mu, written to the ring after it
	tainted   atomic.Bool
	// inDrain is set by the reap callback while the worker applies a
	// burst of CQEs without blocking, and cleared when Reap returns; see
	// submitThrough (deferred buffered submissions, batchsubmit.go).
	inDrain atomic.Bool
	// choseDirect (guarded by Batch.mu) records that the last fillLocked
	// chose an op on the O_DIRECT fd.
	choseDirect bool
}

// onRing reports whether g's ops go on its batch's ring: it is neither
// dispatched as jobs (offring.go) nor a caller copy (callercopy.go).
func (g *group) onRing() bool { return !g.offRing && !g.caller }

// ringLiveLocked reports whether ops of this batch are on the ring.
// REQUIRES: b.mu.
func (w *worker) ringLiveLocked() bool {
	for _, g := range w.b.mu.inflight {
		if g.onRing() && g.outstanding > 0 {
			return true
		}
	}
	return false
}

// prepareChosen writes the ops fillLocked chose to the ring. SQEs are
// written outside the batch lock: preparing may register a fixed buffer
// (pinning a large region takes long) and status readers must not wait
// for that. REQUIRES: r.mu.
func (r *ringLane) prepareChosen(b *Batch) {
	for i := range r.toPrepare {
		if h := b.e.unitHeld; h != nil {
			h(int(r.toPrepare[i].Token)) // tests: an op is the ring's unit
		}
		if err := r.q.Prepare(&r.toPrepare[i]); err != nil {
			r.failUnsent(b, r.toPrepare[i:], err)
			break
		}
		r.pending = append(r.pending, r.toPrepare[i].Token)
	}
	r.toPrepare = r.toPrepare[:0]
}

// failUnsent fails ops that never reached the ring and taints it.
func (r *ringLane) failUnsent(b *Batch, ops []FileOp, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, op := range ops {
		b.failTokenLocked(op.Token, err)
	}
	r.tainted.Store(true)
	b.changedLocked()
}

// release gives the ring back to the ring executor's pool (or abandons
// a tainted one). REQUIRES: r.mu, not b.mu.
func (r *ringLane) release() {
	if r.q == nil {
		return
	}
	if r.tainted.Load() {
		r.q.Abandon()
	} else {
		r.q.Release()
	}
	r.q = nil
	r.tainted.Store(false)
	r.pending = r.pending[:0]
}

// submit hands prepared ops to the kernel. A transient refusal leaves
// them prepared for the next turn; a persistent one fails the unsent
// tail and taints the ring. REQUIRES: r.mu.
func (r *ringLane) submit(b *Batch) {
	if len(r.pending) == 0 || r.q == nil {
		return
	}
	n, err := r.q.Submit()
	n = min(n, len(r.pending))
	b.mu.Lock()
	for _, tok := range r.pending[:n] {
		t := &b.mu.tasks[tok]
		t.submitted = true
		if i := int(tok) - t.g.first; i > t.g.lastSubmitted {
			t.g.lastSubmitted = i
		}
	}
	r.pending = r.pending[:copy(r.pending, r.pending[n:])]
	if err != nil && !errors.Is(err, unix.EAGAIN) && !errors.Is(err, unix.EBUSY) && !errors.Is(err, unix.EINTR) {
		for _, tok := range r.pending {
			b.failTokenLocked(tok, err)
		}
		r.pending = r.pending[:0]
		r.tainted.Store(true)
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
		if !g.onRing() {
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
	if live == 0 || w.ring.q == nil {
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
	_, err := w.ring.q.Reap(wait, func(c Completion) {
		w.ring.inDrain.Store(true)
		b.mu.Lock()
		b.completeLocked(c)
		b.changedLocked()
		b.mu.Unlock()
		b.deliver()
	})
	w.ring.inDrain.Store(false)
	b.mu.Lock()
	if err != nil {
		e.log.Warn("reap failed", "batch", b.id, "err", err)
	}
	w.cutoffLocked(time.Now())
	b.mu.Unlock()
}

// completeLocked turns the result of one ring op, or of one caller copy
// (callercopy.go) carried as its CQE would be, into the task's outcome
// and ends the task on the one task path (task.go). REQUIRES: b.mu.
func (b *Batch) completeLocked(c Completion) {
	if c.Token >= uint64(len(b.mu.tasks)) {
		return
	}
	t := &b.mu.tasks[c.Token]
	g := t.g
	if t.state != TaskRunning {
		return // a late CQE of an unquiesced group
	}
	idx := int(c.Token) - g.first
	o := outcome{drained: true}
	switch {
	case c.Res >= 0 && uint64(c.Res) == t.length:
		o.transferred = t.length
	case c.Res >= 0:
		o = b.shortOutcomeLocked(g, idx, uint64(c.Res)) // shortio.go
	default:
		errno := unix.Errno(-c.Res)
		if g.op == OpWrite {
			o.effect = EffectUnknown
		}
		o.err = wrap(errnoKind(errno), g.op.String(), g.seg.name(), fmt.Errorf("requests[%d]: %w", idx, os.NewSyscallError(g.op.String(), errno)))
	}
	b.finishTaskLocked(g, idx, o) // task.go
}

// cutoffLocked ends groups whose CQEs are missing past deadline +
// quiesce_grace: they fail unquiesced and keep everything. REQUIRES: b.mu.
func (w *worker) cutoffLocked(now time.Time) {
	b := w.b
	e := b.e
	grace := e.cfg.QuiesceGrace.D()
	for k := 0; k < len(b.mu.inflight); k++ {
		g := b.mu.inflight[k]
		if !g.onRing() || g.outstanding == 0 || now.Before(g.deadline.Add(grace)) {
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
		w.ring.tainted.Store(true)
		e.st.unquiesced.Add(1)
		e.log.Error("group unquiesced", "batch", b.id, "task", g.first, "segment", g.seg.uri)
		g.finishLocked(false)
		k--
		b.changedLocked()
	}
}
