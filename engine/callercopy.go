// callercopy.go owns the caller copy: a small host-memory group on a file
// that lives in memory (tmpfs, ramfs, hugetlbfs) is moved by the
// submitting goroutine itself, with preadv/pwritev inside Submit, instead
// of through the batch worker's ring.
//
// Why: io_uring cannot read or write shmem without blocking (it has no
// IOCB_NOWAIT), so every such SQE went to an io-wq thread and its
// completion crossed back to the reaping thread; one batch's whole stream
// ran on its worker goroutine. Measured (docs/performance.md): 4 KiB
// random reads from tmpfs at 0.34x fio here and 0.03x a parallel pread
// loop on 16 cores. A copy from memory never waits for a disk, and at
// most caller_fast_path_bytes of it costs the caller microseconds, so the
// caller does it: no worker, no ring, no thread hop, and every client
// goroutine copies on its own core. This departs from the spec's caller
// fast path (one SQE on the caller's ring, a bounded CQE wait): same
// size bound, same eligibility spirit, a direct copy instead of an SQE.
//
// Invariants:
//   - Only where FIFO and fences allow the group to start now: nothing
//     queued before it, no group partly dispatched, no overlap with a
//     group in flight (for a read with only plain file reads in flight,
//     the only overlap possible is of memory, and acquireLoans refuses
//     it), no admission gate. The group is dispatched (in
//     b.mu.inflight, loans held, tasks running) before the copy and
//     finished after it under b.mu, so later groups fence against it as
//     against any ring group, and status readers see it running.
//   - Loans are held for the whole copy. A copy whose every op moved all
//     its bytes returns them, and its admission charges, once it is
//     done, just before its finish (outside b.mu): its memory is no
//     longer touched, so a group that then takes the same memory sees
//     the outcome of strict FIFO order.
//   - Each op's outcome goes through Batch.completeLocked, as its CQE
//     would: full, short (the rest retried once, shortio.go) or an errno.
//   - A group past its deadline is never copied: the worker fails it
//     before I/O (KindTimeout), as it does a late ring group.
//   - Explicit transport io_uring keeps the ring: the caller copy serves
//     requests that let the engine choose.

package engine

import (
	"time"

	"golang.org/x/sys/unix"
)

// callerCopyEligible reports whether g may be copied by its submitter.
func (g *group) callerCopyEligible() bool {
	e := g.b.e
	if !e.cfg.CallerCopy || g.offRing || g.mem != nil || g.ent == nil || !g.ent.inMemory || g.ent.blocking || len(g.scratch) > 0 || e.adm.gates() {
		return false
	}
	var total uint64
	for i := range g.ops {
		if g.policy[i].asked != TransportUnspec || g.ops[i].File.Key != g.ent.buffered.Key {
			return false
		}
		for _, v := range g.ops[i].Iov {
			total += v.Len
		}
	}
	// A lone scalar request of one host copy unit: the lanes leave it to
	// its submitter (hostCopyEligible).
	unit := total == hostCopyUnit && len(g.ops) == 1 && len(g.ops[0].Iov) == 1
	return unit || total <= uint64(e.cfg.CallerFastPathBytes)
}

// startCallerCopyLocked dispatches g for a caller copy if FIFO and fences
// allow it now, and reports whether it did. REQUIRES: b.mu; g accepted
// (tasks appended) but not queued.
func (b *Batch) startCallerCopyLocked(g *group) bool {
	if len(b.mu.queue) > 0 {
		return false
	}
	// A group already past its deadline fails before any I/O; the
	// worker's dispatch reports it (KindTimeout), as for a ring group.
	// Its submission read the clock microseconds ago: only a deadline
	// that was then less than deadlineSlack away needs another read.
	if g.nearDeadline && time.Now().After(g.deadline) {
		return false
	}
	if !b.noFenceLocked(g) {
		return false
	}
	g.dispatched = true
	if err := acquireLoans(g); err != nil {
		g.dispatched = false
		return false // the worker path reports it, or fences g
	}
	g.caller = true
	b.inflightLocked(g)
	for i := 0; i < g.n; i++ {
		t := &b.mu.tasks[g.first+i]
		t.state = TaskRunning
		t.submitted = true
		g.ops[i].Token = uint64(g.first + i)
		g.routes[i] = routeCopy
	}
	g.next, g.outstanding, g.lastSubmitted = g.n, g.n, g.n-1
	return true
}

// noFenceLocked reports whether no group in flight holds g back, but for
// an overlap of their memory, which acquireLoans then refuses (every
// group in flight holds loans on all of its memory). A read, with nothing
// in flight that writes, is off the ring, or is partly dispatched (only
// the last one can be once the others are plain file reads) needs no
// look at each group in flight: that look, one group at a time under
// b.mu, was the longest part of a submission with 32 groups in flight on
// one batch. REQUIRES: b.mu.
func (b *Batch) noFenceLocked(g *group) bool {
	if n := len(b.mu.inflight); g.op == OpRead && b.mu.hazards == 0 {
		return n == 0 || b.mu.inflight[n-1].next == b.mu.inflight[n-1].n
	}
	for _, f := range b.mu.inflight {
		if f.next < f.n || g.conflicts(f) {
			return false
		}
	}
	return true
}

// callerCopy moves g's bytes on the calling goroutine and publishes each
// op's outcome, then delivers finished groups' reports (Batch.deliver).
// REQUIRES: startCallerCopyLocked(g) returned true; not b.mu.
func (b *Batch) callerCopy(g *group) {
	if h := b.e.callerCopyHeld; h != nil && !g.lane {
		h() // tests: the submitter holds its copy here
	}
	// Its entry checked the deadline; an entry applied by the combiner
	// may start its copy later. Only a deadline that was then less than
	// deadlineSlack away needs another clock read.
	if !g.lane && g.nearDeadline && time.Now().After(g.deadline) {
		b.expireCopy(g)
		return
	}
	var one [1]int32
	res := one[:0]
	full := true
	for i := range g.ops {
		res = append(res, copyOp(g, &g.ops[i]))
		full = full && res[i] >= 0 && uint64(res[i]) == opBytes(&g.ops[i])
	}
	if full {
		// Every op moved all its bytes: nothing of the group is retried,
		// nothing touches its memory any more, and the finish below ends
		// it drained. Its loans and engine-wide admission charges go back
		// now, not under b.mu: a loan table's lock and the engine's
		// in-flight counters, which every core writes, taken inside the
		// batch's critical section lengthened it for every submitter
		// queued there. Its segment user stays until the finish, so a
		// segment's close still waits for the group's end.
		releaseLoans(g, -1)
		g.unadmit()
		g.settled = true
	}
	if h := b.e.callerCopyCopied; h != nil && !g.lane {
		h() // tests: the submitter holds its finish here
	}
	if full {
		b.finishCombined(g) // combine.go
		return
	}
	b.mu.Lock()
	b.finishCopyLocked(g, res)
	b.unlockAndDeliver(true, true)
}

// finishCopyLocked publishes the outcomes of caller copy g: res[i] is
// op i's result, or res is nil when every op moved all its bytes.
// REQUIRES: b.mu; g's copy has ended.
func (b *Batch) finishCopyLocked(g *group, res []int32) {
	b.copyEndedLocked(g)
	for i := range g.ops {
		r := int32(opBytes(&g.ops[i]))
		if res != nil {
			r = res[i]
		}
		b.completeLocked(Completion{Token: g.ops[i].Token, Res: r})
	}
}

// copyEndedLocked takes caller copy g off the batch's count of copies
// running on submitters or on the lanes (lanecopy.go). REQUIRES: b.mu.
func (b *Batch) copyEndedLocked(g *group) {
	if g.lane {
		b.mu.laneCopies--
	} else {
		b.mu.callerCopying--
	}
}

// unlockAndDeliver publishes a change made under b.mu, releases b.mu,
// pokes the worker when finished (a worker sleeping on in-flight work
// may exit or go on) and, with deliver, delivers finished groups'
// reports. It takes the reports in the same hold of b.mu: one
// acquisition fewer per request, which 32 submitters on one batch
// otherwise queue for. REQUIRES: b.mu, which it releases.
func (b *Batch) unlockAndDeliver(finished, deliver bool) {
	if reps, fn, ok := b.unlockTakingReports(finished, deliver); ok {
		b.runReports(reps, fn)
	}
}

// unlockTakingReports is unlockAndDeliver up to the delivery: it returns
// the reports taken, if any, for runReports, which the caller must then
// run. REQUIRES: b.mu, which it releases.
func (b *Batch) unlockTakingReports(finished, deliver bool) ([]Report, func(Report), bool) {
	b.changedLocked()
	w := b.mu.w
	var reps []Report
	var fn func(Report)
	deliver = deliver && b.deliverMu.TryLock()
	if deliver {
		reps, fn, deliver = b.takeReportsLocked()
	}
	b.mu.Unlock()
	if finished && w != nil {
		w.poke()
	}
	return reps, fn, deliver
}

// copyOp runs one op with preadv/pwritev and returns what its CQE would
// carry: bytes moved, or a negative errno.
func copyOp(g *group, op *FileOp) int32 {
	var n int
	var err error
	var one []byte // a scalar request: pread/pwrite, no iovec to build
	var bufs [][]byte
	if len(op.Iov) == 1 {
		one = g.mapped(op.Iov[0].Base, op.Iov[0].Len)
	} else {
		bufs, _ = g.iovBytes(op.Iov, 0)
	}
	if one == nil && bufs == nil {
		return -int32(unix.EFAULT)
	}
	for {
		switch {
		case one != nil && op.Write:
			n, err = unix.Pwrite(op.File.FD, one, int64(op.Offset))
		case one != nil:
			n, err = unix.Pread(op.File.FD, one, int64(op.Offset))
		case op.Write:
			n, err = unix.Pwritev(op.File.FD, bufs, int64(op.Offset))
		default:
			n, err = unix.Preadv(op.File.FD, bufs, int64(op.Offset))
		}
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		if errno, ok := err.(unix.Errno); ok {
			return -int32(errno)
		}
		return -int32(unix.EIO)
	}
	return int32(n)
}

// callerCopyExec is the caller copy seen from the seam: it owns no
// resource (the submitter's goroutine copies, or a host copy lane for a
// lane copy, lanecopy.go), so close has nothing to stop.
type callerCopyExec struct{}

func (callerCopyExec) transport() TransportKind { return TransportCopy }

func (callerCopyExec) path() string { return "caller_copy" }

func (callerCopyExec) close() {}
