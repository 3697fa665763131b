// claim.go owns claimed copies: a caller copy that reads an in-memory
// file into host memory and asks for its report back from Submit
// (SubmitOptions.Inline) enters its batch with one compare-and-swap
// instead of the batch's lock, copies, and returns its report itself,
// with no hook and no other goroutine involved. The batch's lists learn
// of it later, when someone needs them (fold).
//
// Why: every caller copy took b.mu (directly or through the combiner,
// combine.go) to enter and again to finish, and its report reached its
// submitter through the one goroutine running the batch's hooks. 32
// submitters on one batch on 16 cores were bound by those hand-offs at
// 0.08x a parallel pread loop (docs/performance.md, "One batch at queue
// depth 32"). A claim touches one word per batch, twice.
//
// The word (Batch.claims): an open bit, the number of claimed copies in
// flight and the number of task slots used, counting claimed ones.
//
// Invariants:
//   - Claims are open only while the batch holds nothing a read must
//     wait for: not sealed or freed, nothing queued or parked, no lane
//     copy, no group in flight but caller copies that read, and nobody
//     waiting on Changed (openClaimsLocked checks each under b.mu). Every
//     path that could change one of these, and every reader of the
//     batch's lists, folds first (foldLocked): it closes the word, waits
//     for the claimed copies in flight (which never take b.mu before
//     they are counted out) and applies every claimed copy to the lists,
//     in task order. Only the locked entry of a caller copy that asks for
//     an inline report opens the word again, with the slots it counted.
//     So while the word is open, the lists lag by the claimed copies
//     alone, and whoever looks at them sees them whole.
//   - A claim takes its loans before its slots (loans need no batch
//     lock): a copy whose memory is in use goes the locked way, which
//     fences or reports it.
//   - A claimed copy that moved every byte returns its loans, admission
//     charges and segment user itself, counts its statistics, and
//     publishes itself finished, report and all, at its first task slot
//     before it leaves the word: fold finds it complete. One that came
//     up short is replayed by fold through the locked caller copy's own
//     steps (enter, then finishCopyLocked with its results: the retry of
//     the rest, failover and the report to the hook), and its submitter
//     folds at once so that this happens now.
//   - A claimed copy's group is never touched by its submitter after it
//     leaves the word: a fold may apply it and a Free recycle it.
//   - Claims never read past the batch's capacity: the word refuses a
//     claim whose slots would not fit, and the locked path then reports
//     the batch full as before.

package engine

import (
	"runtime"
	"sync/atomic"
	"time"
)

const (
	claimOpen     = uint64(1) << 63
	claimInflight = uint64(1) << 32 // one claimed copy in flight
	claimSlots    = claimInflight - 1
	claimCopies   = (claimOpen - 1) &^ claimSlots
)

// claimState is a group's part in a claim: what fold needs of a copy
// that came up short.
type claimState struct {
	short bool  // the copy did not move every byte; res is its result
	res   int32 // preadv's result: bytes moved or a negative errno
}

// claimable reports whether g may be claimed: a caller copy of one
// scalar request reading into host memory, far from its deadline (a
// claim never reads the clock).
func (g *group) claimable() bool {
	return g.n == 1 && g.op == OpRead && !g.vector && !g.nearDeadline && len(g.ops[0].Iov) == 1 && g.callerCopyEligible()
}

// claimCopy runs g, a one-request caller copy that reads into host
// memory, as a claimed copy if its batch's word is open and has room,
// and reports whether it did. When the copy moved every byte, *out is
// its report (Done); otherwise *out is left alone and the report goes to
// the batch's hook once fold has replayed it. REQUIRES: not b.mu; g
// prepared, not entered.
func (b *Batch) claimCopy(g *group, out *Report) (TaskRange, bool) {
	w := b.claims.Load()
	if w&claimOpen == 0 || int(w&claimSlots)+1 > b.capacity {
		return TaskRange{}, false
	}
	if acquireLoans(g) != nil {
		return TaskRange{}, false // the locked path fences or reports it
	}
	for !b.claims.CompareAndSwap(w, w+1+claimInflight) {
		w = b.claims.Load()
		if w&claimOpen == 0 || int(w&claimSlots)+1 > b.capacity {
			releaseLoans(g, -1)
			return TaskRange{}, false
		}
	}
	first := int(w & claimSlots)
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
	if res >= 0 && uint64(res) == n {
		releaseLoans(g, -1)
		g.unadmit()
		g.ent.done(g.adm.shard)
		e.st.tasksCompleted.Add(1)
		e.st.bytesRead.Add(n)
		g.settled, g.finished = true, true
		g.inline.final = Report{Tasks: TaskRange{First: first, Count: 1}, Op: g.op, Target: g.seg.uri, Done: true,
			CompletedRequests: 1, CompletedBytes: n, RequestIndex: -1, LocallyDrained: true}
		g.final = &g.inline.final
		*out = g.inline.final
	} else {
		g.claim = claimState{short: true, res: res}
	}
	b.claimed[first].Store(g)
	b.claims.Add(^(claimInflight - 1)) // minus one in flight
	if g.claim.short {
		// g may be gone once counted out: read nothing of it.
		b.mu.Lock()
		b.foldLocked()
		b.mu.Unlock()
		b.deliver()
	}
	return TaskRange{First: first, Count: 1}, true
}

// openClaimsLocked opens the word after caller copy g, which asked for
// an inline report, entered by the locked path, when the batch holds
// nothing a claim would have to wait for (the invariant above).
// REQUIRES: b.mu; foldLocked ran in this hold; g entered.
func (b *Batch) openClaimsLocked() {
	if b.mu.sealed || b.mu.freed || len(b.mu.queue) > 0 || len(b.mu.parked) > 0 || b.mu.hazards > 0 ||
		b.mu.laneCopies > 0 || b.mu.changed != nil || b.mu.deferred {
		return
	}
	for _, f := range b.mu.inflight {
		if !f.caller || f.op != OpRead {
			return
		}
	}
	if len(b.claimed) < b.capacity {
		b.claimed = make([]atomic.Pointer[group], b.capacity) // pooled with the lists (group.go)
	}
	b.claims.Store(claimOpen | uint64(len(b.mu.tasks)))
}

// foldLocked closes the word, waits for the claimed copies in flight and
// applies every claimed copy to the batch's lists. It returns at once
// when nothing was claimed since the last fold. REQUIRES: b.mu.
func (b *Batch) foldLocked() {
	w := b.claims.Load()
	if w&(claimOpen|claimCopies) == 0 {
		return // closed, and every claim applied by the fold that closed it
	}
	w = b.claims.And(^claimOpen)
	for spin := 0; w&claimCopies != 0; spin++ {
		// A claimed copy in flight is a preadv of at most
		// caller_fast_path_bytes from memory: microseconds.
		if spin < 50 {
			runtime.Gosched()
		} else {
			time.Sleep(10 * time.Microsecond)
		}
		w = b.claims.Load()
	}
	replayed := false
	end := int(w & claimSlots)
	for len(b.mu.tasks) < end {
		i := len(b.mu.tasks)
		g := b.claimed[i].Swap(nil)
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
