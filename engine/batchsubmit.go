// batchsubmit.go owns one decision of the submit-through path: whether
// SQEs a caller just wrote go to the kernel at once or wait for the
// worker's next io_uring_enter.
//
// A buffered SQE costs its io_uring_enter the page-cache copy (ext4
// copies inline) or a hand-off to an io-wq thread (tmpfs cannot read
// without blocking, so every tmpfs SQE is punted; small tmpfs groups now
// skip the ring, callercopy.go), so a client that resubmits from its
// OnGroupDone hook would otherwise pay one io_uring_enter per 4 KiB
// request: on tmpfs the worker spent most of its time entering the
// kernel for one SQE at a time (docs/performance.md, "Memory speed").
// While the worker drains a burst of CQEs, SQEs on the buffered fd are
// left prepared and go in one io_uring_enter when the burst is applied
// (settle). O_DIRECT ops still go at once: the disk works while the rest
// of the burst is reaped, and deferring them made requests travel in
// convoys (finding 3 in docs/performance.md).
//
// Invariants:
//   - A deferral happens only while inDrain is set, that is between the
//     first callback of a Reap and its return, which never blocks after
//     that first callback: the worker's settle (or its next turn) submits
//     what was deferred before it waits for a completion again.
//   - Deferral changes when the kernel sees SQEs, never their order on
//     the SQ nor which ops are chosen: FIFO and fences are unaffected.

package engine

// deferSubmitLocked reports whether the ops just chosen by fillLocked may
// wait for the worker's next submit. REQUIRES: b.mu, w.ring.mu.
func (w *worker) deferSubmitLocked() bool {
	return !w.ring.choseDirect && !w.fast && w.ring.inDrain.Load()
}
