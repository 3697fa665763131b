// ringexec.go owns the ring executor: the batch worker's io_uring queue
// seen from the task side. It writes the SQEs the scheduler (worker.go)
// chose, submits them, reaps CQEs into task outcomes, retires a ring, and
// ends groups whose CQEs are missing past deadline + quiesce_grace
// (unquiesced). Off-ring executors (offring.go, staged.go, gdsexec.go)
// run device-memory groups beside it.
//
// Invariants:
//   - The SQ side (prepareChosen, submit, releaseQueue) runs under
//     worker.ringMu; the CQ side (reap) on the worker goroutine alone.
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

// ringLiveLocked reports whether ops of this batch are on the ring.
// REQUIRES: b.mu.
func (w *worker) ringLiveLocked() bool {
	for _, g := range w.b.mu.inflight {
		if !g.offRing && !g.caller && g.outstanding > 0 {
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
		if g.offRing || g.caller {
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
		b.completeLocked(c)
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
		if g.offRing || g.caller || g.outstanding == 0 || now.Before(g.deadline.Add(grace)) {
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
