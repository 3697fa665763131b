// claim.go owns claimed copies: a caller copy that reads an in-memory
// file into host memory and asks for its report back from Submit
// (SubmitOptions.Inline) enters its batch without the batch's lock,
// copies, and returns its report itself,
// with no hook and no other goroutine involved. The batch's lists learn
// of it later, when someone needs them (fold).
//
// Why: every caller copy took b.mu (directly or through the combiner,
// combine.go) to enter and again to finish, and its report reached its
// submitter through the one goroutine running the batch's hooks. 32
// submitters on one batch on 16 cores were bound by those hand-offs at
// 0.08x a parallel pread loop (docs/performance.md, "One batch at queue
// depth 32").
//
// State: the claimed copies in flight (Batch.claiming, a users count
// on padded shards whose closing flag is set while claims are closed),
// the next task slot (Batch.claimNext, on a cache line of its own) and,
// per shard, a stack of the claimed copies that finished
// (Batch.claimDone). A claim writes its own shard's lines and one shared
// word, the slot counter, once: one compare-and-swap loop on one word
// that also counted copies in flight held 32 submitters to 1.6M requests
// per second on 16 cores (docs/performance.md).
//
// Invariants:
//   - Claims open only while the batch holds nothing a read must wait
//     for: not sealed or freed, nothing queued or parked, no lane copy,
//     and no group in flight but caller copies that read
//     (openClaimsLocked checks each under b.mu). One of those copies may
//     still fail while claims are open and park its attempt for
//     failover, which may then retry it on another route: that is a
//     read too, and its loans keep every claim off its memory. Every
//     path that could change one of these, and every reader of the
//     batch's lists, folds first (foldLocked): it closes claims, waits
//     for the claimed copies in flight (which never take b.mu before
//     they are counted out) and applies every claimed copy to the lists,
//     in task order. Only the locked entry of a caller copy that asks for
//     an inline report opens claims again, at the slots it counted. So
//     while claims are open the lists lag by the claimed copies alone,
//     and whoever looks at them sees them whole.
//   - Claimed copies close no Changed channel, and none is missed: a
//     goroutine takes one only by folding (Changed, Wait, drain), which
//     closes claims, and the entry that opens them again closes every
//     channel taken before (changedLocked) just before it does.
//   - A claim counts itself in flight before it reads whether claims are
//     open, and a fold closes them before it sums the copies in flight
//     (both sequentially consistent): either the fold sees the claim and
//     waits for it, or the claim sees them closed and goes the locked
//     way. A claim takes its slot after it counted itself, and publishes
//     its group before it leaves, so once the sum is 0 the slot counter
//     and the stacks are final: every slot below the capacity that was
//     handed out has its group on a stack. A slot at or past the
//     capacity is never used: its claim goes the locked way, which
//     reports the batch full.
//   - A claim takes its loans before its slot (loans need no batch
//     lock): a copy whose memory is in use goes the locked way, which
//     fences or reports it.
//   - A claimed copy that moved every byte returns its loans, admission
//     charges and segment user itself, counts its statistics, and
//     publishes itself finished, report and all: fold finds it complete.
//     One that came up short is replayed by fold through the locked
//     caller copy's own steps (enter, then finishCopyLocked with its
//     result: the retry of the rest, failover, the report to the hook),
//     and its submitter folds at once so that this happens now.
//   - A claimed copy's group is never touched by its submitter after it
//     leaves: a fold may apply it and a Free recycle it.

package engine

import (
	"fmt"
	"runtime"
	"time"
)

// claimState is a group's part in a claim.
type claimState struct {
	next  *group // the next on its shard's stack of finished claims
	short bool   // the copy did not move every byte; res is its result
	res   int32  // preadv's result: bytes moved or a negative errno
}

// claimable reports whether g may be claimed: a caller copy of one
// scalar request reading into host memory, far from its deadline (a
// claim never reads the clock).
func (g *group) claimable() bool {
	return g.n == 1 && g.op == OpRead && !g.vector && !g.nearDeadline && len(g.ops[0].Iov) == 1 && g.callerCopyEligible()
}

// claimCopy runs g, a one-request caller copy that reads into host
// memory, as a claimed copy if its batch's claims are open and have
// room, and reports whether it did. When the copy moved every byte, *out
// is its report (Done); otherwise *out is left alone and the report goes
// to the batch's hook once fold has replayed it. REQUIRES: not b.mu; g
// prepared, not entered.
func (b *Batch) claimCopy(g *group, out *Report) (TaskRange, bool) {
	at := g.adm.shard
	// The first look spares a closed batch's shard the add and take-back.
	if b.claiming.closing.Load() || !b.claiming.enter(at) {
		return TaskRange{}, false // a fold spins on the count: no wake-up owed
	}
	if acquireLoans(g) != nil {
		b.claiming.leave(at)
		return TaskRange{}, false // the locked path fences or reports it
	}
	if h := b.e.claimLoaned; h != nil {
		h() // tests: loans held, no task slot yet
	}
	first := int(b.claimNext.Add(1) - 1)
	if first >= b.capacity {
		releaseLoans(g, -1)
		b.claiming.leave(at)
		return TaskRange{}, false
	}
	g.first = first
	g.dispatched, g.caller = true, true
	g.ops[0].Token = uint64(first)
	g.routes[0] = routeCopy
	g.next, g.outstanding, g.lastSubmitted = 1, 1, 0
	e := b.e
	e.st.groupsSubmitted.Add(1)
	e.st.callerCopies.Add(1)
	if h := e.claimHeld; h != nil {
		h() // tests: the claimed copy is in flight here
	}
	res := copyOp(g, &g.ops[0])
	n := opBytes(&g.ops[0])
	short := res < 0 || uint64(res) != n
	if !short {
		releaseLoans(g, -1)
		g.unadmit()
		g.ent.done(at)
		e.st.tasksCompleted.Add(1)
		e.st.bytesRead.Add(n)
		g.settled, g.finished = true, true
		g.inline.final = Report{Tasks: TaskRange{First: first, Count: 1}, Op: g.op, Target: g.seg.uri, Done: true,
			CompletedRequests: 1, CompletedBytes: n, RequestIndex: -1, LocallyDrained: true}
		g.final = &g.inline.final
		*out = g.inline.final
	} else {
		g.claim.short, g.claim.res = true, res
	}
	done := &b.claimDone[at].head
	for {
		h := done.Load()
		g.claim.next = h
		if done.CompareAndSwap(h, g) {
			break
		}
	}
	b.claiming.leave(at)
	if h := e.claimLeft; h != nil {
		h() // tests: counted out; g may be another submission's now
	}
	if short {
		// g may be gone once it left: read nothing of it.
		b.lockFolded()
		b.mu.Unlock()
		b.deliver()
	}
	return TaskRange{First: first, Count: 1}, true
}

// openClaimsLocked opens claims after caller copy g, which asked for an
// inline report, entered by the locked path, when the batch holds
// nothing a claim would have to wait for (the invariant above).
// REQUIRES: b.mu; foldLocked ran in this hold; g entered.
func (b *Batch) openClaimsLocked() {
	if b.mu.sealed || b.mu.freed || len(b.mu.queue) > 0 || len(b.mu.parked) > 0 || b.mu.hazards > 0 ||
		b.mu.laneCopies > 0 || b.mu.deferred {
		return
	}
	for _, f := range b.mu.inflight {
		if !f.caller || f.op != OpRead {
			return
		}
	}
	if len(b.claimed) < b.capacity {
		b.claimed = make([]*group, b.capacity) // pooled with the lists (group.go)
	}
	b.claimNext.Store(int64(len(b.mu.tasks)))
	b.mu.claimsOpen = true
	b.claiming.closing.Store(false)
}

// foldLocked closes claims, waits for the claimed copies in flight and
// applies every claimed copy to the batch's lists, in task order. It
// returns at once when claims were not opened since the last fold.
// REQUIRES: b.mu.
func (b *Batch) foldLocked() {
	if !b.mu.claimsOpen {
		return
	}
	b.mu.claimsOpen = false
	b.claiming.closing.Store(true)
	for spin := 0; b.claiming.count() != 0; spin++ {
		// A claimed copy in flight is a preadv of at most
		// caller_fast_path_bytes from memory: microseconds.
		if spin < 50 {
			runtime.Gosched()
		} else {
			time.Sleep(10 * time.Microsecond)
		}
	}
	base := len(b.mu.tasks)
	end := min(int(b.claimNext.Load()), b.capacity)
	at := b.claimed[:end-base]
	for k := range b.claimDone {
		for g := b.claimDone[k].head.Swap(nil); g != nil; g = g.claim.next {
			at[g.first-base] = g
		}
	}
	replayed := false
	for i, g := range at {
		at[i] = nil
		if g == nil {
			panic(fmt.Sprintf("engine: %s: claimed task %d has no group (claims %d to %d)", b.name(), base+i, base, end))
		}
		g.claim.next = nil
		if g.claim.short {
			b.replayClaimLocked(g)
			replayed = true
			continue
		}
		b.mu.tasks = append(b.mu.tasks, task{state: TaskCompleted, length: g.final.CompletedBytes,
			transferred: g.final.CompletedBytes, submitted: true, g: g})
		b.mu.groups = append(b.mu.groups, g)
		b.mu.recyclable++
	}
	if replayed {
		b.changedLocked()
		b.pokeLocked()
	}
}

// replayClaimLocked applies claimed copy g that came up short as the
// locked path would have: entered and dispatched as a caller copy, then
// finished with its copy's result (the retry of the rest, failover, its
// report to the hook). REQUIRES: b.mu; g's slot is the next task.
func (b *Batch) replayClaimLocked(g *group) {
	b.mu.tasks = append(b.mu.tasks, task{state: TaskRunning, length: opBytes(&g.ops[0]), submitted: true, g: g})
	b.mu.groups = append(b.mu.groups, g)
	b.mu.active++
	b.mu.callerCopying++
	b.inflightLocked(g)
	b.finishCopyLocked(g, []int32{g.claim.res})
}
