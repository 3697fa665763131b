// lanecopy.go owns lane copies: caller-copy groups (callercopy.go) that
// the host copy lanes (hostcopy.go, lanepool.go) copy instead of their
// submitter, so one batch with many small groups in flight spreads over
// the cores.
//
// Why: a caller copy returns only once its bytes moved, so a client that
// keeps 32 groups in flight on one batch from one goroutine (bench file
// at queue depth 32, an io_uring-shaped loop) had one in flight: 354k
// IOPS on 16 cores against 5.9M for 32 pread goroutines. The engine
// cannot see a client's depth until a Submit returns before its copy is
// done. So one caller copy in every lane_copy_probe of a batch goes to
// the lanes (a probe; never a batch's first group, so a one-group batch,
// SubmitAndWait's, keeps its copy on the caller); a group
// submitted while one of its batch's groups is on the lanes follows it
// there. A client that waits for each group (queue depth 1) never finds
// one on the lanes and keeps copying on its own goroutine, where a copy
// costs no wake-up at all. Nor does a group submitted while another
// submitter of the batch is copying: that client submits from several
// goroutines (bench file's slots) and already spreads its copies over
// the cores.
//
// A group's hook (Batch.OnGroupDone) runs on the lane that finished it
// and may submit: a client that resubmits from its hook (bench file)
// then runs its loop on that lane, copying inline there, until its next
// probe returns the lane to the queue. So a lane serves one such client
// for at most lane_copy_probe groups before it takes other work again.
//
// Invariants (besides callercopy.go's; a lane copy is a caller copy
// that another goroutine runs):
//   - Dispatched exactly as a caller copy (startCallerCopyLocked): FIFO,
//     fences, loans and task state are settled before it is queued, and
//     each op's outcome goes through Batch.completeLocked.
//   - A lane copy that reaches its lane past its deadline is not copied:
//     its tasks fail KindTimeout with nothing moved.
//   - b.mu.callerCopying counts the batch's caller copies running on
//     their submitters: it rises under b.mu when one stays on its caller
//     and falls with its outcomes.
//   - b.mu.laneCopies counts the batch's lane copies queued or running;
//     it rises under b.mu at dispatch and falls under b.mu with the
//     group's outcomes, so a Submit that sees it zero saw every earlier
//     lane copy finished.
//   - The lanes take lane copies and host copy units in turn, so neither
//     starves the other.

package engine

import "time"

// laneCopyLocked decides whether the lanes, not the submitter, copy g,
// which startCallerCopyLocked just dispatched. REQUIRES: b.mu.
func (b *Batch) laneCopyLocked(g *group) bool {
	probe := b.e.cfg.LaneCopyProbe
	// Another submitter copying right now: the client submits from
	// several goroutines and already spreads its copies over the cores,
	// so a hand-off to a lane would only add a wake-up.
	if probe == 0 || b.mu.callerCopying > 0 {
		b.mu.callerCopying++
		return false
	}
	if b.mu.laneCopies == 0 && b.mu.callerRun+1 < probe {
		b.mu.callerRun++
		b.mu.callerCopying++
		return false
	}
	b.mu.callerRun = 0
	b.mu.laneCopies++
	g.lane = true
	return true
}

// runCallerCopy copies caller copy g on a host copy lane when lane
// (laneCopyLocked's answer) and the lanes take it, else on the submitter;
// either way it delivers. REQUIRES: not b.mu.
func (b *Batch) runCallerCopy(g *group, lane bool) {
	if !lane || !b.e.hostCopy.runCopy(g) {
		b.callerCopy(g)
	}
}

// laneCopy runs lane copy g on a host copy lane.
func (b *Batch) laneCopy(g *group) {
	if h := b.e.laneCopyHeld; h != nil {
		h() // tests: the lane holds the copy here
	}
	if time.Now().After(g.deadline) {
		b.expireCopy(g)
		return
	}
	b.e.st.laneCopies.Add(1)
	b.callerCopy(g) // and delivers
}

// expireCopy fails caller or lane copy g, dispatched but not copied,
// whose deadline passed: its tasks fail KindTimeout with nothing moved.
// REQUIRES: not b.mu.
func (b *Batch) expireCopy(g *group) {
	b.mu.Lock()
	b.copyEndedLocked(g)
	for i := 0; i < g.n; i++ {
		b.finishTaskLocked(g, i, outcome{drained: true, err: errorf(KindTimeout, g.op.String(), b.name(), "deadline passed before requests[%d] was copied", i)})
	}
	b.unlockAndDeliver(true, true)
}
