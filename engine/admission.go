// admission.go owns admission in front of dispatch: QoS contract budgets
// (qos.go), the runtime queue's outstanding budget and dispatch window,
// and the submit options that carry a policy and a deadline.
//
// Where each charge is taken (a physical owner is one request: file
// segments never merge requests):
//   - prepare (admit): the runtime queue's outstanding owners/bytes, and a
//     reject-mode contract's owners/bytes. A group over either returns
//     ResourceExhausted and keeps nothing. A single owner larger than the
//     dispatch window or its contract's byte cap is refused here too.
//   - the batch head (headGate, worker): when some contract delays, every
//     capped contract charges here instead, all of the group at once, or
//     not at all: a delay contract waits (never past the deadline), a
//     reject-only one fails the group at dispatch, before any I/O.
//     A group under a delay contract also takes its engine-wide
//     max_inflight_bytes charge here (together with its contract's), so
//     it waits for that budget too instead of failing at submit.
//   - each owner's dispatch (ownerGate, worker): one dispatch window share
//     (1 owner, its bytes); an owner that does not fit waits, and so does
//     everything behind it in its batch (a later group only starts after
//     the earlier one dispatched all its owners).
//
// Invariants:
//   - Every charge a group holds is in its groupAdm, guarded by
//     admission.mu, and is returned exactly once: per owner when it
//     completes (window), or by release when the group is released (all
//     that is left). An unquiesced group is never released: it keeps its
//     charges, as the spec requires.
//   - Window and outstanding totals never exceed their limits (the peaks
//     in QueueStats prove it); contract usage never exceeds a cap.
//   - Waiters for one resource are served in dispatch order (runqueue.go):
//     a waiter takes capacity only when no better-ordered waiter that
//     competes with it for that capacity is waiting, so freed capacity
//     goes where the order says, across batches, and a waiter on a full
//     contract never holds back one whose contract has room.
//   - Lock order: Batch.mu, then admission.mu. admission.mu is never held
//     while taking any other lock; pokes are nonblocking sends.

package engine

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orbitefs/orbitefs/config"
)

// ErrDeadlineInfeasible is wrapped (kind timeout) by an owner the runtime
// queue dropped because its predicted transfer time would not fit its
// remaining time (the spec's Error::DeadlineInfeasible).
var ErrDeadlineInfeasible = errors.New("deadline infeasible")

// SubmitOptions are a submission's optional settings.
type SubmitOptions struct {
	// Timeout <= 0 uses default_timeout; the deadline starts at submit.
	Timeout time.Duration
	// Deadline, when set and earlier, shortens the absolute deadline
	// (the spec's with_deadline); it never lengthens it.
	Deadline time.Time
	// QoS is a policy from this engine's ResolveQoS; nil uses the
	// default contract.
	QoS *QoSPolicy
	// Regions, when non-nil, are the only regions the submission's local
	// addresses may lie in: those its submitter was found to own when it
	// named them. An address that lies in any other region by the time
	// the engine resolves it (the named one was unregistered and another
	// user's was mapped at the same address) fails with KindPermission.
	Regions []*Region
	// SizeNow range-checks reads against the file's size read for this
	// submission (an fstat) rather than the size the engine last saw
	// (segment.go): for a client that cannot know the file changed since,
	// such as a shell script through the mount, where the fstat costs
	// nothing next to the rest of the submission.
	SizeNow bool
	// Inline, when set, asks for the group's report from Submit itself.
	// When the group finished before Submit returned, Submit stores its
	// report in *Inline (Done is true) and the batch's OnGroupDone hook
	// does not receive it. Otherwise *Inline is left as it was and the
	// report reaches the hook, Submissions and status as for any group.
	// Today a read of one request of at most caller_fast_path_bytes from
	// an in-memory file into host memory can finish this way (a claimed
	// copy: it enters the batch without taking its lock).
	Inline *Report
}

// deadline is a submission's absolute deadline: timeout from now, or
// o.Deadline when that is earlier (with_deadline only shortens).
func (o SubmitOptions) deadline(now time.Time, timeout time.Duration) time.Time {
	d := now.Add(timeout)
	if !o.Deadline.IsZero() && o.Deadline.Before(d) {
		return o.Deadline
	}
	return d
}

// deadlineOf is o's deadline with default_timeout for a Timeout <= 0.
func (e *Engine) deadlineOf(o SubmitOptions) time.Time { return e.deadlineAt(o, time.Now()) }

// deadlineAt is deadlineOf for a submission that read the clock at now.
func (e *Engine) deadlineAt(o SubmitOptions, now time.Time) time.Time {
	if o.Timeout <= 0 {
		return o.deadline(now, e.cfg.DefaultTimeout.D())
	}
	return o.deadline(now, o.Timeout)
}

// groupAdm is a group's admission record. Guarded by admission.mu.
type groupAdm struct {
	pol     *QoSPolicy
	seq     uint64    // admission order (FIFO)
	since   time.Time // when its current wait for capacity began (priority aging counts from it)
	owners  uint64
	bytes   uint64
	maxOwn  uint64 // largest single owner
	outHeld bool
	qosHeld bool
	atHead  bool     // the contract charge is taken at the batch head
	win     []uint64 // per request: window bytes held (0: none)
	wait    waitKind // what it waits for, when it is a waiter
	asks    need     // and how much of it
	w       *worker  // the worker to poke when it may go on
	// bytesDeferred: the engine-wide max_inflight_bytes charge is taken
	// at the batch head (a delay contract), bytesHeld once it is. Set
	// before the group is shared, or under Batch.mu and Engine.mu.
	bytesDeferred, bytesHeld bool
	// shard is the submitting goroutine's (budget.go): the group's
	// budget and segment-user charges are taken and given back there.
	shard shard
}

type admission struct {
	rq  config.RuntimeQueue
	qos *qosTable

	mu      sync.Mutex
	seq     uint64
	slots   []Usage // per contract slot
	out     struct{ owners, bytes uint64 }
	win     struct{ owners, bytes uint64 }
	peak    struct{ owners, bytes uint64 }
	waiters []*group
	bw      bandwidth
	st      struct {
		admitted, qosRejected, queueRejected, delayed, dispatchRejected, infeasible, granted uint64
	}
	// onGrant, when set (tests), sees every window grant in order.
	onGrant func(g *group, i int)
	// quiet (tests) stops returned capacity from poking waiters, so a
	// waiter stays where its last gate left it.
	quiet bool
}

func newAdmission(cfg config.Engine) *admission {
	a := &admission{rq: cfg.RuntimeQueue, qos: compileQoS(cfg.QoS), bw: bandwidth{}}
	if a.qos != nil {
		a.slots = make([]Usage, len(a.qos.contracts))
	}
	return a
}

// active reports whether admission does anything at all; when not, the
// submit and release paths take no lock (the 4 KiB IOPS path).
func (a *admission) active() bool { return a.rq.Enabled || a.qos != nil }

// defersBytes reports whether a group under pol takes its engine-wide
// max_inflight_bytes charge at its batch head, waiting for it, instead of
// failing at submit: its contract delays (which needs the runtime queue).
func (a *admission) defersBytes(pol *QoSPolicy) bool {
	return a.rq.Enabled && a.qos != nil && pol != nil && pol.slot >= 0 && a.qos.contracts[pol.slot].delay
}

// gates reports whether dispatch may wait for admission (so a group
// must not run on the submitting caller's fast path).
func (a *admission) gates() bool { return a.rq.Enabled || (a.qos != nil && a.qos.delay) }

func (a *admission) contract(g *group) *contract {
	if a.qos == nil || g.adm.pol == nil || g.adm.pol.slot < 0 {
		return nil
	}
	return &a.qos.contracts[g.adm.pol.slot]
}

func (c *contract) capped() bool { return c != nil && (c.maxBytes != nil || c.maxReqs != nil) }

// fits reports whether owners/bytes more fit c's caps now.
func (a *admission) fits(c *contract, owners, bytes uint64) bool {
	u := a.slots[c.slot]
	return (c.maxReqs == nil || u.Owners+owners <= *c.maxReqs) && (c.maxBytes == nil || u.Bytes+bytes <= *c.maxBytes)
}

func (c *contract) name() string {
	if c.slot == 0 {
		return DefaultTenant
	}
	if c.intent == UnspecIntent {
		return c.tenant
	}
	return c.tenant + "/" + c.intent
}

// admit takes the prepare-time charges for g (see the file comment). On
// error g holds nothing.
func (a *admission) admit(g *group, pol *QoSPolicy) error {
	const verb = "submit"
	g.adm.pol = pol
	if !a.active() {
		return nil // no QoS, no runtime queue: nothing to charge, no lock
	}
	name := g.b.name()
	g.adm.owners = uint64(g.n)
	g.adm.bytes = g.charge
	if g.mem != nil {
		// A memory group's physical owners may merge several requests.
		g.adm.owners = uint64(len(g.mem.owners))
		for _, o := range g.mem.owners {
			g.adm.maxOwn = max(g.adm.maxOwn, o.n)
		}
	} else {
		for i := 0; i < g.n; i++ {
			g.adm.maxOwn = max(g.adm.maxOwn, opBytes(&g.ops[i]))
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c := a.contract(g)
	if c.capped() {
		switch {
		case c.maxReqs != nil && *c.maxReqs == 0:
			a.st.qosRejected++
			return errorf(KindExhausted, verb, name, "qos contract %q allows no requests (max_inflight_requests 0)", c.name())
		case c.maxBytes != nil && g.adm.maxOwn > *c.maxBytes:
			a.st.qosRejected++
			return errorf(KindExhausted, verb, name, "a physical owner of %d bytes exceeds qos contract %q max_inflight_bytes (%d)", g.adm.maxOwn, c.name(), *c.maxBytes)
		case c.maxReqs != nil && g.adm.owners > *c.maxReqs, c.maxBytes != nil && g.adm.bytes > *c.maxBytes:
			// Even alone it would never fit: waiting could not help.
			a.st.qosRejected++
			return errorf(KindExhausted, verb, name, "%d requests of %d bytes exceed qos contract %q caps (%s); split the submission", g.adm.owners, g.adm.bytes, c.name(), c.caps())
		case !c.delay && !a.fits(c, g.adm.owners, g.adm.bytes):
			a.st.qosRejected++
			u := a.slots[c.slot]
			return errorf(KindExhausted, verb, name, "%d requests of %d bytes over qos contract %q caps (%s; in use: %d requests, %d bytes)", g.adm.owners, g.adm.bytes, c.name(), c.caps(), u.Owners, u.Bytes)
		}
	}
	if a.rq.Enabled {
		q := a.rq
		if g.adm.maxOwn > uint64(q.MaxDispatchBytes) {
			a.st.queueRejected++
			return errorf(KindExhausted, verb, name, "a physical owner of %d bytes exceeds runtime_queue.max_dispatch_bytes (%d)", g.adm.maxOwn, uint64(q.MaxDispatchBytes))
		}
		// Device-memory groups take the window whole at their batch head
		// (runqueue.go); memory-segment groups take no window share.
		if g.offRing && g.mem == nil && (g.adm.owners > uint64(q.MaxDispatchOwners) || g.adm.bytes > uint64(q.MaxDispatchBytes)) {
			a.st.queueRejected++
			return errorf(KindExhausted, verb, name, "a device-memory submission of %d requests and %d bytes exceeds the dispatch window (%d owners, %d bytes); it dispatches whole", g.adm.owners, g.adm.bytes, q.MaxDispatchOwners, uint64(q.MaxDispatchBytes))
		}
		maxOwners := uint64(q.MaxOutstandingOwners - q.StagingOwnerReserve)
		maxBytes := uint64(q.MaxOutstandingBytes - q.StagingByteReserve)
		if a.out.owners+g.adm.owners > maxOwners || a.out.bytes+g.adm.bytes > maxBytes {
			a.st.queueRejected++
			return errorf(KindExhausted, verb, name, "%d requests of %d bytes over the runtime queue's outstanding budget (%d requests, %d bytes free of %d, %d)", g.adm.owners, g.adm.bytes, maxOwners-a.out.owners, maxBytes-a.out.bytes, maxOwners, maxBytes)
		}
		a.out.owners += g.adm.owners
		a.out.bytes += g.adm.bytes
		g.adm.outHeld = true
		g.adm.win = make([]uint64, g.n)
	}
	if c.capped() {
		if a.qos.delay {
			g.adm.atHead = true
		} else {
			a.charge(c, g)
		}
	}
	a.seq++
	g.adm.seq = a.seq
	a.st.admitted++
	return nil
}

func (c *contract) caps() string {
	s := "max_inflight_requests "
	if c.maxReqs != nil {
		s += fmt.Sprint(*c.maxReqs)
	} else {
		s += "none"
	}
	s += ", max_inflight_bytes "
	if c.maxBytes != nil {
		s += fmt.Sprint(*c.maxBytes)
	} else {
		s += "none"
	}
	return s
}

func (a *admission) charge(c *contract, g *group) {
	a.slots[c.slot].Owners += g.adm.owners
	a.slots[c.slot].Bytes += g.adm.bytes
	g.adm.qosHeld = true
}

// release returns everything g still holds and wakes waiters. Called
// once, when g is released (drained or never queued).
func (a *admission) release(g *group) {
	if !a.active() {
		return
	}
	a.mu.Lock()
	freed := false
	if g.adm.outHeld {
		a.out.owners -= g.adm.owners
		a.out.bytes -= g.adm.bytes
		g.adm.outHeld = false
		freed = true
	}
	if g.adm.qosHeld {
		c := a.contract(g)
		a.slots[c.slot].Owners -= g.adm.owners
		a.slots[c.slot].Bytes -= g.adm.bytes
		g.adm.qosHeld = false
		freed = true
	}
	now := time.Now()
	for i := range g.adm.win {
		if g.adm.win[i] > 0 {
			a.returnShare(g, i, 0, now)
			freed = true
		}
	}
	a.unwait(g)
	if freed || len(a.waiters) > 0 {
		// Engine-wide bytes this group returned (unadmit) may be what a
		// waiter needs.
		a.wakeLocked()
	}
	a.mu.Unlock()
}

// bytesFreed wakes the groups waiting at their batch heads after
// engine-wide in-flight bytes were returned outside a group's release (a
// pageable staging buffer): without it they slept until the next
// release or progress_fallback_interval.
func (a *admission) bytesFreed() {
	if !a.active() {
		return
	}
	a.mu.Lock()
	if len(a.waiters) > 0 {
		a.wakeLocked()
	}
	a.mu.Unlock()
}

// returnShare gives back owner i's window share. REQUIRES: a.mu.
func (a *admission) returnShare(g *group, i int, got uint64, now time.Time) {
	n := g.adm.win[i]
	g.adm.win[i] = 0
	a.win.owners--
	a.win.bytes -= n
	a.bw.done(g.bwKey(i), n, got, now)
}

// rerouted moves owner i's window bytes from the estimate of its old
// route (from) to its new one's (a failover): the failed attempt counts
// on its path with nothing moved, and the bytes go back, with what the
// next attempt moved, where they are now (returnShare). REQUIRES: b.mu.
func (a *admission) rerouted(g *group, i int, from bwKey) {
	if !a.rq.Enabled {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if i >= len(g.adm.win) || g.adm.win[i] == 0 {
		return
	}
	now := time.Now()
	a.bw.done(from, g.adm.win[i], 0, now)
	a.bw.start(g.bwKey(i), g.adm.win[i], now)
}

// ownerDone returns owner i's window share as it completes, feeding the
// bandwidth estimate with the bytes it moved. Safe for any owner; does
// nothing for one that holds no share.
func (a *admission) ownerDone(g *group, i int, got uint64) {
	if !a.rq.Enabled {
		return
	}
	a.mu.Lock()
	if i < len(g.adm.win) && g.adm.win[i] > 0 {
		a.returnShare(g, i, got, time.Now())
		a.wakeLocked()
	}
	a.mu.Unlock()
}

// bwKey is request i's estimate: the one its route's executor names.
func (g *group) bwKey(i int) bwKey {
	k := bwKey{path: g.b.e.executor(g.routes[i]).path()}
	if g.ent != nil {
		k.dev = g.ent.dev
	}
	return k
}

func (a *admission) usage(slot int) Usage {
	a.mu.Lock()
	defer a.mu.Unlock()
	u := a.slots[slot]
	for _, h := range a.waiters {
		if h.adm.wait != waitWindow && h.adm.pol.slot == slot {
			u.Waiting++
		}
	}
	return u
}

// QueueStats reports the runtime admission queue.
type QueueStats struct {
	Enabled            bool   `json:"enabled"`
	DeadlineAware      bool   `json:"deadline_aware"`
	OutstandingOwners  uint64 `json:"outstanding_owners"`
	OutstandingBytes   uint64 `json:"outstanding_bytes"`
	DispatchOwners     uint64 `json:"dispatch_owners"`
	DispatchBytes      uint64 `json:"dispatch_bytes"`
	PeakDispatchOwners uint64 `json:"peak_dispatch_owners"`
	PeakDispatchBytes  uint64 `json:"peak_dispatch_bytes"`
	// Waiting counts groups waiting at their batch head or for a window
	// share right now.
	Waiting int `json:"waiting"`
	// Admitted counts groups past prepare-time admission; Rejected those
	// refused by the outstanding budget or the window's owner size.
	Admitted uint64 `json:"admitted"`
	Rejected uint64 `json:"rejected"`
	// Granted counts dispatch window shares handed out (one per owner).
	Granted                 uint64          `json:"granted"`
	DeadlineInfeasibleDrops uint64          `json:"deadline_infeasible_drops"`
	Bandwidth               []BandwidthStat `json:"bandwidth"`
}

// QoSStats reports QoS admission.
type QoSStats struct {
	Enabled   bool `json:"enabled"`
	Contracts int  `json:"contracts"`
	Delay     bool `json:"delay"`
	// Rejected counts groups refused by a contract cap at submit;
	// DispatchRejected those a reject-only contract failed at their
	// batch head; Delayed the times a head waited for contract capacity.
	Rejected         uint64 `json:"rejected"`
	DispatchRejected uint64 `json:"dispatch_rejected"`
	Delayed          uint64 `json:"delayed"`
}

func (a *admission) stats() (QueueStats, QoSStats) {
	a.mu.Lock()
	defer a.mu.Unlock()
	q := QueueStats{Enabled: a.rq.Enabled, DeadlineAware: a.rq.DeadlineAware,
		OutstandingOwners: a.out.owners, OutstandingBytes: a.out.bytes,
		DispatchOwners: a.win.owners, DispatchBytes: a.win.bytes,
		PeakDispatchOwners: a.peak.owners, PeakDispatchBytes: a.peak.bytes,
		Waiting: len(a.waiters), Admitted: a.st.admitted, Rejected: a.st.queueRejected,
		Granted: a.st.granted, DeadlineInfeasibleDrops: a.st.infeasible, Bandwidth: a.bw.stats()}
	s := QoSStats{Enabled: a.qos != nil, Rejected: a.st.qosRejected, DispatchRejected: a.st.dispatchRejected, Delayed: a.st.delayed}
	if a.qos != nil {
		s.Contracts, s.Delay = len(a.qos.contracts), a.qos.delay
	}
	return q, s
}

// opBytes is a prepared op's extent in the file.
func opBytes(op *FileOp) uint64 {
	var n uint64
	for _, v := range op.Iov {
		n += v.Len
	}
	return n
}
