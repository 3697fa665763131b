// runqueue.go owns the dispatch-time half of admission: the gates a
// batch worker passes before it dispatches a group (headGate) and each of
// its owners (ownerGate), the order in which waiters across batches get
// freed capacity, and the deadline-infeasible drop.
//
// Order (better first): an owner whose deadline is in the future but
// strictly inside promotion_slack; then one that has waited at least
// priority_aging for capacity in its current wait (oldest first among
// those); then higher priority; then, with deadline_aware, the earlier
// deadline (EDF); then admission order (FIFO). Within a batch, groups dispatch FIFO
// regardless (the worker only ever offers its head), so the order decides
// between batches. Aging is what keeps a low priority from starving:
// once it has waited priority_aging, only promoted deadlines and older
// waiters still go before it.
//
// Who competes with whom: the order only matters under scarcity, so a
// waiter h holds back a later-ordered g only when h is short of capacity
// g would take: h lacks it already, or would once g took its share.
// Window waiters compete for the one dispatch window. At the batch head,
// h and g compete for a contract when both need that same contract, and
// for the engine-wide max_inflight_bytes when both need them and h's own
// contract has room (a waiter on a full contract cannot use the bytes, so
// it never holds back another contract's waiter). A waiter that would fit
// beside g, typically one poked but not yet re-run, holds back nothing.
//
// Invariants:
//   - A gate that says "wait" has registered g as a waiter (with the
//     worker to poke) under admission.mu; every return of capacity pokes
//     every waiter, which re-runs its gate. A gate that says "go" has
//     removed g from the waiters for that resource.
//   - A waiter never waits past its deadline: the worker bounds its sleep
//     by the deadline, and a gate lets a group past its deadline through
//     so dispatch fails it (KindTimeout), charging nothing. It also
//     bounds the sleep by the moment the waiter ages or is promoted, the
//     only times its place in the order changes without a poke.
//   - Everything here runs under Batch.mu (the worker's), then
//     admission.mu; a head that waits for engine-wide bytes also holds
//     Engine.mu between the two, so its charges are taken all at once.

package engine

import (
	"fmt"
	"time"
)

type waitKind uint8

const (
	waitNone   waitKind = iota
	waitSlot            // contract capacity at the batch head
	waitWindow          // a dispatch window share
	waitBytes           // engine-wide max_inflight_bytes (and its contract) at the batch head
)

// need is what a group asks for at the gate that evaluates it; a waiter
// keeps the need it waits with (groupAdm.asks).
type need struct {
	window bool   // a dispatch window share ...
	owners uint64 // ... of this many owners
	size   uint64 // ... and bytes
	slot   bool   // its contract's capacity (at the batch head)
	bytes  bool   // engine-wide max_inflight_bytes (at the batch head) ...
	free   uint64 // ... of which this much is not charged now
}

// better reports whether g goes before h at now.
func (a *admission) better(g, h *group, now time.Time) bool {
	if slack := a.rq.PromotionSlack.D(); slack > 0 {
		pg, ph := promoted(g, now, slack), promoted(h, now, slack)
		if pg != ph {
			return pg
		}
		if pg && !g.deadline.Equal(h.deadline) {
			return g.deadline.Before(h.deadline) // EDF within the promoted set
		}
	}
	if age := a.rq.PriorityAging.D(); age > 0 {
		ag, ah := aged(g, now, age), aged(h, now, age)
		if ag != ah {
			return ag
		}
		if ag {
			return g.adm.seq < h.adm.seq // oldest first among the aged
		}
	}
	if pg, ph := g.adm.pol.priority, h.adm.pol.priority; pg != ph {
		return pg < ph
	}
	if a.rq.DeadlineAware && !g.deadline.Equal(h.deadline) {
		return g.deadline.Before(h.deadline)
	}
	return g.adm.seq < h.adm.seq
}

func promoted(g *group, now time.Time, slack time.Duration) bool {
	left := g.deadline.Sub(now)
	return left > 0 && left < slack
}

// aged reports whether g has waited age for capacity, without getting
// it, by now. Aging counts the current wait, not g's age: a group that
// spent that long running its earlier owners, or behind its own batch's
// earlier groups, has not been held back by anyone, and counting that
// time let any long transfer outrank every newer one, whatever its
// priority.
func aged(g *group, now time.Time, age time.Duration) bool {
	return g.adm.wait != waitNone && now.Sub(g.adm.since) >= age
}

// first reports whether no waiter that competes with g for what g needs
// goes before g. REQUIRES: a.mu.
func (a *admission) first(g *group, n need, now time.Time) bool {
	for _, h := range a.waiters {
		if h != g && a.competes(h, g, n) && a.better(h, g, now) {
			return false
		}
	}
	return true
}

// competes reports whether waiter h is short of capacity that g, needing
// n, would take: h already lacks it, or would once g took its share
// (see the file comment). A waiter that fits even after g's charge, or
// that waits for its own full contract, loses nothing to g. REQUIRES:
// a.mu.
func (a *admission) competes(h, g *group, n need) bool {
	hn := h.adm.asks
	if n.window {
		return h.adm.wait == waitWindow && !a.windowFits(hn.owners+n.owners, hn.size+n.size)
	}
	if h.adm.wait != waitSlot && h.adm.wait != waitBytes {
		return false
	}
	hc := a.contract(h)
	if n.slot && hn.slot && hc == a.contract(g) && !a.fits(hc, h.adm.owners+g.adm.owners, h.adm.bytes+g.adm.bytes) {
		return true
	}
	return n.bytes && hn.bytes && (!hn.slot || a.fits(hc, h.adm.owners, h.adm.bytes)) && h.adm.bytes+g.adm.bytes > n.free
}

// waitFor registers g as a waiter for n. REQUIRES: a.mu, w's Batch.mu.
func (a *admission) waitFor(g *group, kind waitKind, n need, w *worker, now time.Time) {
	if g.adm.wait == waitNone {
		a.waiters = append(a.waiters, g)
		g.adm.since = now
		if kind != waitWindow {
			a.st.delayed++
		}
	}
	g.adm.wait, g.adm.w, g.adm.asks = kind, w, n
	w.admWait = true
	until := g.deadline
	// The order changes without a poke when g ages or is promoted: wake
	// then, or g could sleep behind a waiter that now waits behind it.
	if age := a.rq.PriorityAging.D(); age > 0 {
		if t := g.adm.since.Add(age); t.After(now) && t.Before(until) {
			until = t
		}
	}
	if slack := a.rq.PromotionSlack.D(); slack > 0 {
		if t := g.deadline.Add(-slack); t.After(now) && t.Before(until) {
			until = t
		}
	}
	if w.admUntil.IsZero() || until.Before(w.admUntil) {
		w.admUntil = until
	}
}

// unwait removes g from the waiters. REQUIRES: a.mu.
func (a *admission) unwait(g *group) {
	if g.adm.wait == waitNone {
		return
	}
	g.adm.wait, g.adm.w = waitNone, nil
	for k, h := range a.waiters {
		if h == g {
			a.waiters = append(a.waiters[:k], a.waiters[k+1:]...)
			break
		}
	}
	a.wakeLocked() // the next in order may now be first
}

// wakeLocked pokes every waiter's worker. REQUIRES: a.mu.
func (a *admission) wakeLocked() {
	if a.quiet {
		return
	}
	for _, h := range a.waiters {
		if h.adm.w != nil {
			h.adm.w.poke()
		}
	}
}

// headGate decides whether the worker may dispatch its head group g now.
// It returns go=false to wait, or an error that fails the whole group
// before any I/O. REQUIRES: b.mu.
func (w *worker) headGate(g *group, now time.Time) (bool, error) {
	if now.After(g.deadline) {
		return true, nil // a late group fails in dispatchLocked
	}
	// Receiver credit first: a starved head holds neither a contract
	// charge nor the dispatch window while it waits (credit.go); and a
	// head that then waits for those gives its credit back, so nothing
	// is charged partially while it waits.
	if ok, err := w.creditGate(g, now); !ok || err != nil {
		return ok, err
	}
	ok, err := w.admissionGate(g, now)
	if !ok || err != nil {
		w.creditUnreserve(g)
	}
	return ok, err
}

// admissionGate is headGate's contract, engine-wide bytes and dispatch
// window part. REQUIRES: b.mu.
func (w *worker) admissionGate(g *group, now time.Time) (bool, error) {
	e := w.b.e
	a := e.adm
	if !a.gates() {
		return true, nil
	}
	needBytes := g.adm.bytesDeferred && !g.adm.bytesHeld
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.contract(g)
	needSlot := g.adm.atHead && !g.adm.qosHeld
	if needSlot || needBytes {
		kind := waitSlot
		if needBytes {
			kind = waitBytes
		}
		n := need{slot: needSlot, bytes: needBytes}
		if in, limit := e.inflightBytes.inUse(), uint64(e.cfg.MaxInflightBytes); in < limit {
			n.free = limit - in
		}
		fits := (!needSlot || a.fits(c, g.adm.owners, g.adm.bytes)) &&
			(!needBytes || g.charge <= n.free)
		fits = fits && a.first(g, n, now)
		// The bytes are charged atomically (no engine-wide lock): a
		// concurrent charge may have taken the room since the check.
		if fits && needBytes {
			fits = e.tryChargeBytes(g.adm.shard, g.charge)
			g.adm.bytesHeld = fits
		}
		if !fits {
			if !c.delay {
				a.st.dispatchRejected++
				a.unwait(g)
				u := a.slots[c.slot]
				return false, errorf(KindExhausted, g.op.String(), w.b.name(), "qos contract %q filled after enqueue (%s; in use: %d requests, %d bytes); nothing was sent", c.name(), c.caps(), u.Owners, u.Bytes)
			}
			a.waitFor(g, kind, n, w, now)
			return false, nil
		}
		if needSlot {
			a.charge(c, g)
		}
		a.unwait(g)
	}
	if a.rq.Enabled && g.offRing && g.mem == nil {
		// Device-memory groups run whole on their executors: they take
		// the window for all their live owners at once. First each owner
		// faces the deadline prediction, as a ring owner does at its
		// dispatch, counting the bytes of this group's owners before it.
		var owners, bytes uint64
		ahead := map[bwKey]uint64{}
		for i := 0; i < g.n; i++ {
			t := &w.b.mu.tasks[g.first+i]
			if t.state != TaskPending {
				continue
			}
			k := g.bwKey(i)
			if a.infeasible(g, i, ahead[k]+t.length, now) {
				w.dropInfeasibleLocked(g, i, now)
				continue
			}
			ahead[k] += t.length
			owners++
			bytes += t.length
		}
		n := need{window: true, owners: owners, size: bytes}
		if !a.windowFits(owners, bytes) || !a.first(g, n, now) {
			a.waitFor(g, waitWindow, n, w, now)
			return false, nil
		}
		a.unwait(g)
		for i := 0; i < g.n; i++ {
			if t := &w.b.mu.tasks[g.first+i]; t.state == TaskPending {
				a.take(g, i, t.length, now)
			}
		}
	}
	return true, nil
}

func (a *admission) windowFits(owners, bytes uint64) bool {
	return a.win.owners+owners <= uint64(a.rq.MaxDispatchOwners) && a.win.bytes+bytes <= uint64(a.rq.MaxDispatchBytes)
}

// take grants owner i a window share. REQUIRES: a.mu.
func (a *admission) take(g *group, i int, n uint64, now time.Time) {
	g.adm.win[i] = n
	a.win.owners++
	a.win.bytes += n
	a.peak.owners = max(a.peak.owners, a.win.owners)
	a.peak.bytes = max(a.peak.bytes, a.win.bytes)
	a.st.granted++
	a.bw.start(g.bwKey(i), n, now)
	if a.onGrant != nil {
		a.onGrant(g, i)
	}
}

type ownerVerdict uint8

const (
	ownerGo ownerVerdict = iota
	ownerWait
	ownerDrop
)

// ownerGate decides whether ring owner i of g (pending, deadline not
// passed) may go on the ring now. A dropped owner is already failed.
// REQUIRES: b.mu.
func (w *worker) ownerGate(g *group, i int, now time.Time) ownerVerdict {
	a := w.b.e.adm
	if !a.rq.Enabled {
		return ownerGo
	}
	t := &w.b.mu.tasks[g.first+i]
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.infeasible(g, i, t.length, now) {
		w.dropInfeasibleLocked(g, i, now)
		return ownerDrop
	}
	n := need{window: true, owners: 1, size: t.length}
	if !a.windowFits(1, t.length) || !a.first(g, n, now) {
		a.waitFor(g, waitWindow, n, w, now)
		return ownerWait
	}
	a.unwait(g)
	a.take(g, i, t.length, now)
	return ownerGo
}

// dropInfeasibleLocked fails pending owner i of g with
// ErrDeadlineInfeasible before any I/O. REQUIRES: b.mu, a.mu.
func (w *worker) dropInfeasibleLocked(g *group, i int, now time.Time) {
	a := w.b.e.adm
	t := &w.b.mu.tasks[g.first+i]
	a.st.infeasible++
	t.state = TaskFailed
	t.err = &Error{Op: g.op.String(), Name: w.b.name(), Kind: KindTimeout,
		Err: fmt.Errorf("requests[%d]: %w: %d bytes at the measured %.0f B/s with %d bytes ahead would take longer than %.3g of the %s left", i, ErrDeadlineInfeasible, t.length, a.bw.rate(g.bwKey(i)), a.bw.entry(g.bwKey(i)).inflight, a.rq.MLULocalThreshold, g.deadline.Sub(now).Round(time.Microsecond))}
	w.b.e.st.tasksFailed.Add(1)
}

// infeasible: EDF with a positive mlu_local_threshold, a known rate, and
// (bytes already dispatched on that path + this owner) / rate over the
// remaining time reaching the threshold. An unknown rate never drops.
// REQUIRES: a.mu.
func (a *admission) infeasible(g *group, i int, n uint64, now time.Time) bool {
	if !a.rq.DeadlineAware || a.rq.MLULocalThreshold <= 0 {
		return false
	}
	k := g.bwKey(i)
	r := a.bw.rate(k)
	if r == 0 {
		return false
	}
	left := g.deadline.Sub(now).Seconds()
	if left <= 0 {
		return true
	}
	predicted := float64(a.bw.entry(k).inflight+n) / r
	return predicted/left >= a.rq.MLULocalThreshold
}
