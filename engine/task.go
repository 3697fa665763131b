// task.go owns a task's state: the public states, the per-task record,
// and every transition (failing the rest of a group, failing an op the
// kernel never took, cancelling, and ending a running task with an
// executor's outcome, finishTaskLocked and endTaskLocked), together with
// the counters each of them moves. Executors only produce outcomes, and
// every outcome takes one path, finishTaskLocked: the ring's CQEs and the
// caller copy's results (as Completions, ringexec.go), the off-ring
// lanes' units (offring.go); failover.go may park a failed attempt there
// before its outcome is final. The ring's unquiesced cutoff (ringexec.go)
// ends a whole group at once.
//
// Invariants:
//   - A task's state only moves forward: pending -> running ->
//     completed|failed, or pending -> cancelled; a parked task (a failed
//     attempt awaiting failover) stays running until failover decides,
//     and may then end cancelled.
//   - Each transition counts itself once; all run under Batch.mu.

package engine

import (
	"errors"
	"fmt"
	"time"
)

// TaskState is one task's state.
type TaskState uint8

const (
	TaskPending TaskState = iota
	TaskRunning
	TaskCompleted
	TaskFailed
	TaskCancelled
)

func (s TaskState) String() string {
	return [...]string{"pending", "running", "completed", "failed", "cancelled"}[s]
}

func (s TaskState) terminal() bool { return s >= TaskCompleted }

// task is one public task's record, in Batch.mu.tasks.
type task struct {
	state       TaskState
	length      uint64
	transferred uint64
	err         error
	effect      RemoteEffect
	submitted   bool
	failovers   int  // attempts started after a failed one
	parked      bool // a failed attempt awaits its failover decision
	g           *group
}

// taskStatusLocked is task i's published state. REQUIRES: b.mu.
func (b *Batch) taskStatusLocked(i int) TaskStatus {
	t := &b.mu.tasks[i]
	return TaskStatus{Index: i, State: t.state, Length: t.length, Transferred: t.transferred,
		Transport: b.e.executor(t.g.routes[i-t.g.first]).transport(), FailoverCount: t.failovers, PhysicalOwner: t.g.ownerIndex(i - t.g.first), Err: t.err, RemoteEffect: t.remoteEffect()}
}

// cancelTaskLocked marks a pending task cancelled, with every alias of
// its physical owner (memgroup.go); a queued group whose tasks are all
// terminal finishes at once. REQUIRES: b.mu.
func (b *Batch) cancelTaskLocked(i int) {
	g := b.mu.tasks[i].g
	first, last := g.aliases(i - g.first)
	for j := g.first + first; j <= g.first+last; j++ {
		if t := &b.mu.tasks[j]; t.state == TaskPending {
			t.state = TaskCancelled
			t.err = errCancelled
			b.e.st.tasksCancelled.Add(1)
		}
	}
	if g.dispatched {
		return // the worker skips it and finishes the group
	}
	for j := g.first; j < g.first+g.n; j++ {
		if !b.mu.tasks[j].state.terminal() {
			return
		}
	}
	for k, q := range b.mu.queue {
		if q == g {
			b.mu.queue = append(b.mu.queue[:k], b.mu.queue[k+1:]...)
			break
		}
	}
	g.finishLocked(true) // never dispatched: nothing of it reached the kernel
}

// failTokenLocked fails a running task whose op was never consumed by the
// kernel. REQUIRES: b.mu.
func (b *Batch) failTokenLocked(tok uint64, err error) {
	t := &b.mu.tasks[tok]
	if t.state != TaskRunning {
		return // already ended (the unquiesced cutoff)
	}
	b.finishTaskLocked(t.g, int(tok)-t.g.first, outcome{
		err: wrap(KindIO, t.g.op.String(), b.name(), fmt.Errorf("task %d not submitted: %w", tok, err)), drained: true})
}

// failRestLocked fails every pending task of g from request from on:
// the first with err, each later one with an error of its own saying it
// was not started because the submission stopped at request from (so a
// task's error file never claims another task's failure as its own).
func (w *worker) failRestLocked(g *group, from int, err error) { w.b.failRestLocked(g, from, err) }

func (b *Batch) failRestLocked(g *group, from int, err error) {
	var rest error
	for i := from; i < g.n; i++ {
		t := &b.mu.tasks[g.first+i]
		if t.state != TaskPending {
			continue
		}
		t.state = TaskFailed
		b.e.st.tasksFailed.Add(1)
		if i == from {
			t.err = err
			continue
		}
		if rest == nil {
			rest = &Error{Op: g.op.String(), Name: b.name(), Kind: KindOf(err),
				Err: &notStartedError{at: from, task: g.first + from, cause: err}}
		}
		t.err = rest
	}
	g.next = g.n
}

// notStartedError is the failure of a task that was never attempted
// because its submission stopped at an earlier request. It unwraps to
// that request's failure, so errors.Is and KindOf see its kind.
type notStartedError struct {
	at, task int // the request (submission-relative) and task it stopped at
	cause    error
}

func (e *notStartedError) Error() string {
	return fmt.Sprintf("not started: its submission stopped at requests[%d] (task %d): %s", e.at, e.task, bareText(e.cause, true))
}

func (e *notStartedError) Unwrap() error { return e.cause }

// inContext is an error quoted inside an *Error that names the same
// operation and object: it prints without repeating them ("read
// batches/2: timed out: requests[3] (task 3): deadline passed ..."
// rather than "...: requests[3] (task 3): read batches/2: timed out:
// deadline passed ..."), and unwraps to the original.
type inContext struct {
	err      error
	showKind bool // the quoting error's kind differs from err's
}

func (c inContext) Error() string { return bareText(c.err, !c.showKind) }
func (c inContext) Unwrap() error { return c.err }

// quoted is err as the detail of an error with op, name and kind: without
// the op and name when err repeats them, and without its kind too when
// that is the same.
func quoted(err error, op, name string, kind Kind) error {
	if e, ok := err.(*Error); ok && e.Op == op && e.Name == name {
		return inContext{err: err, showKind: e.Kind != kind}
	}
	return err
}

// bareText is err's message without its op and name when it is an
// *Error, and without its kind when dropKind.
func bareText(err error, dropKind bool) string {
	e, ok := err.(*Error)
	if !ok {
		return err.Error()
	}
	switch {
	case e.Err == nil:
		return e.Kind.String()
	case dropKind:
		return e.Err.Error()
	}
	return e.Kind.String() + ": " + e.Err.Error()
}

// outcome is what an executor learned about one running task: the bytes
// it moved (the consecutive prefix), why it stopped short (nil: all of
// them), what a WRITE may have done to the target, and whether everything
// the executor used for it is known idle (false: the group ends
// unquiesced and keeps its resources).
type outcome struct {
	transferred uint64
	err         error
	effect      RemoteEffect
	drained     bool
}

// finishTaskLocked is the one task path: every executor's outcome for a
// running task arrives here (ring CQEs and caller copies through
// Batch.completeLocked, off-ring units through offRing.resolve and
// finishTask, a lane copy that missed its deadline, an op the kernel
// never took). A failed attempt that may fail over is parked
// (failover.go); any other outcome ends the task (endTaskLocked). A group
// dispatched a window at a time (offring.go) gets its next window from
// here, on the goroutine that ended the task: waking the worker for it
// cost a goroutine round trip per window (60 us per owner of a memory
// group, one owner a window). It reports whether the task was running
// (a late outcome of a task the unquiesced cutoff ended changes
// nothing). REQUIRES: b.mu.
func (b *Batch) finishTaskLocked(g *group, i int, o outcome) bool {
	t := &b.mu.tasks[g.first+i]
	if t.state != TaskRunning {
		return false
	}
	if o.err != nil && b.retryableLocked(g, i, t, o.transferred, o.effect, o.drained) {
		b.parkLocked(parked{g: g, i: i, transferred: o.transferred, err: o.err, effect: o.effect})
	} else {
		b.endTaskLocked(g, i, o)
	}
	if g.offRing && g.next < g.n && !g.finished {
		b.feedLocked(g, time.Now())
	}
	return true
}

// endTaskLocked makes running task i of g final: every executor's outcome
// ends here (through finishTaskLocked, or failover's decision), and so do
// the counters it moves, the task's window share, and the group's end
// after its last task. REQUIRES: b.mu.
func (b *Batch) endTaskLocked(g *group, i int, o outcome) {
	e := b.e
	t := &b.mu.tasks[g.first+i]
	t.transferred = o.transferred
	t.effect = o.effect
	switch {
	case o.err == nil:
		t.state = TaskCompleted
		e.st.tasksCompleted.Add(1)
	case errors.Is(o.err, errCutRunning):
		t.state = TaskCancelled // cut by its executor on a cancel (executor.go)
		t.err = o.err
		e.st.tasksCancelled.Add(1)
	default:
		t.state = TaskFailed
		t.err = o.err
		e.st.tasksFailed.Add(1)
	}
	if g.op == OpRead {
		e.st.bytesRead.Add(o.transferred)
	} else {
		e.st.bytesWritten.Add(o.transferred)
	}
	if !o.drained {
		g.offUndrained = true
	} else {
		e.adm.ownerDone(g, i, o.transferred) // window share, bandwidth
	}
	g.outstanding--
	if g.outstanding == 0 && g.next == g.n {
		b.endGroupLocked(g)
	}
}

// endGroupLocked finishes g once nothing of it runs and every task was
// dispatched: unquiesced if some executor could not prove its drain.
// REQUIRES: b.mu.
func (b *Batch) endGroupLocked(g *group) {
	drained := !g.offUndrained
	if !drained {
		b.e.st.unquiesced.Add(1)
		b.e.log.Error("group unquiesced", "batch", b.id, "task", g.first, "segment", g.targetURI())
	}
	g.finishLocked(drained)
}

// remoteEffect is what the task may have done to the target: unknown as
// its executor recorded it, else applied when a WRITE confirmed bytes.
func (t *task) remoteEffect() RemoteEffect {
	if t.effect == EffectNone && t.g.op == OpWrite && t.transferred > 0 {
		return EffectApplied
	}
	return t.effect
}
