// failover.go owns transport attempts: when a task's attempt fails on
// one route, whether and when it runs again on the next eligible route
// of its original policy (spec "Transport attempts").
//
// The only candidate chain in this build is GDS -> pinned staging over
// io_uring, for a request that asked for no transport (unspec) and
// touches device memory. Host requests have one route (the ring), and an
// explicit transport pins its route.
//
// A failed attempt is parked (the task stays running, its group stays
// active) when all of these hold:
//   - failovers so far < max_failover_attempts (0 pins the first route),
//     and a next candidate exists;
//   - the attempt drained: every cuFile call returned (a READ's last
//     possible write into the destination is done);
//   - the deadline has not passed and the task was not cancelled;
//   - a READ: a vectored READ only if it exposed no byte yet;
//   - a WRITE: not vectored (one attempt), and nothing of it may have
//     reached the target (remote effect none: a clean rejection before
//     any cuFile call). A WRITE that may have posted never retries.
//
// A parked attempt is decided under the batch lock by whoever observes
// it next: a status poll (Status, TaskStatus, TaskStatuses, Submissions)
// starts the next attempt when enable_auto_failover_on_poll is set and
// otherwise makes the failure terminal; Wait, Progress and SubmitAndWait
// always start it; a batch with an OnGroupDone hook, or freed while busy
// (deferfree.go), has no poller and starts it at once. Cancel through the task (or cancel_all, or engine close)
// fences it: the task ends cancelled and no attempt follows.
//
// The next attempt keeps the group's deadline, loans, admission charge
// and segment user (nothing is returned between attempts), and runs on
// the off-ring executor of its new route. The task's transport and
// failover_count follow it.

package engine

import "time"

// reqPolicy is what route selection needs to know again at failover.
type reqPolicy struct {
	asked  TransportKind // the request's transport (unspec lets the engine choose)
	vector bool          // the request carried Elements
}

// parked is a failed attempt waiting for a decision.
type parked struct {
	g           *group
	i           int // group-relative request
	transferred uint64
	err         error
	effect      RemoteEffect
}

// retryableLocked reports whether a failed attempt of request i may run
// again. REQUIRES: b.mu.
func (b *Batch) retryableLocked(g *group, i int, t *task, transferred uint64, effect RemoteEffect, drained bool) bool {
	if !drained || t.state != TaskRunning || t.failovers >= b.e.cfg.MaxFailoverAttempts {
		return false
	}
	if _, ok := g.nextRoute(i); !ok {
		return false
	}
	if !time.Now().Before(g.deadline) || b.e.isClosed() {
		return false
	}
	p := g.policy[i]
	if g.op == OpRead {
		return !p.vector || transferred == 0
	}
	return !p.vector && effect == EffectNone && transferred == 0
}

// parkLocked records a failed attempt for a later decision. REQUIRES: b.mu.
func (b *Batch) parkLocked(p parked) {
	t := &b.mu.tasks[p.g.first+p.i]
	t.parked = true
	b.mu.parked = append(b.mu.parked, p)
	if b.mu.onDone != nil || b.mu.freed {
		// A hook user or a deferred (freed) batch has nobody polling:
		// decide now.
		b.advanceLocked(1, true)
	}
	b.changedLocked()
}

// advanceLocked decides up to n parked attempts (n < 0: all): retry
// starts the next attempt, otherwise the failure becomes terminal.
// It returns how many it decided. REQUIRES: b.mu.
func (b *Batch) advanceLocked(n int, retry bool) int {
	done := 0
	for len(b.mu.parked) > 0 && n != 0 {
		p := b.mu.parked[0]
		b.mu.parked = b.mu.parked[1:]
		t := &b.mu.tasks[p.g.first+p.i]
		if !t.parked {
			continue // fenced by a cancel meanwhile
		}
		t.parked = false
		done++
		n--
		next, ok := p.g.nextRoute(p.i)
		if !retry || !ok || !time.Now().Before(p.g.deadline) || b.e.isClosed() {
			b.endTaskLocked(p.g, p.i, outcome{p.transferred, p.err, p.effect, true})
			continue
		}
		t.failovers++
		from := p.g.bwKey(p.i)
		p.g.routes[p.i] = next
		b.e.adm.rerouted(p.g, p.i, from) // its window bytes follow it (admission.go)
		b.e.st.failovers.Add(1)
		b.e.log.Info("transport failover", "batch", b.id, "task", p.g.first+p.i, "to", b.e.executor(next).transport(), "after", p.err)
		g, i := p.g, p.i
		b.e.runOffRing(g, i, i+1, func(int) bool { return true })
	}
	if done > 0 {
		b.changedLocked()
		b.pokeLocked()
	}
	return done
}

// pollLocked is what a status poll does to parked attempts: advance one
// (enable_auto_failover_on_poll) or make the observed ones terminal.
// REQUIRES: b.mu.
func (b *Batch) pollLocked() {
	if len(b.mu.parked) == 0 {
		return
	}
	if b.e.cfg.EnableAutoFailoverOnPoll {
		b.advanceLocked(1, true)
	} else {
		b.advanceLocked(-1, false)
	}
}

// fenceParkedLocked ends parked attempt of task idx (absolute) as
// cancelled: an accepted cancel ends retry. REQUIRES: b.mu.
func (b *Batch) fenceParkedLocked(idx int) {
	t := &b.mu.tasks[idx]
	if !t.parked {
		return
	}
	t.parked = false
	g := t.g
	for _, p := range b.mu.parked {
		if p.g == g && p.g.first+p.i == idx {
			t.transferred, t.effect = p.transferred, p.effect
		}
	}
	t.state = TaskCancelled
	t.err = errCancelledRetry
	b.e.st.tasksCancelled.Add(1)
	g.outstanding--
	if g.outstanding == 0 && g.next == g.n {
		b.endGroupLocked(g)
	}
	b.pokeLocked()
}

// pokeLocked wakes the batch worker, which may wait for off-ring work
// that a decision here just ended, or for admission (a cancelled task of
// a dispatched group is then skipped at once). REQUIRES: b.mu.
func (b *Batch) pokeLocked() {
	if w := b.mu.w; w != nil {
		w.poke()
	}
}
