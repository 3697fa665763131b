// combine.go owns the batch's combiner: caller copies (callercopy.go)
// enter their batch, and those that moved every byte finish there,
// through whichever goroutine holds the batch's combining lock, which
// applies every waiting entry and finish in one hold of b.mu.
//
// Why: 32 goroutines submitting 4 KiB caller copies into one batch each
// took b.mu twice per request, once to enter and once to finish, and the
// batch moved 0.05x of a parallel pread loop on 16 cores
// (docs/performance.md, "One batch at queue depth 32"): the lock's
// critical sections are short, but each ran on a different core from the
// one before, with the batch's lines in another core's cache, and once a
// waiter had parked the lock went hand to hand, one wake-up per section.
// Combining turns the queue of waiters into a list that one goroutine
// applies with the batch's lines hot in its cache: a finishing submitter
// leaves its group on the list and goes, and an entering one waits only
// for its own decision, asleep (a spin measured no faster on 16 cores
// and cost 1.7x the CPU, docs/performance.md).
//
// Invariants:
//   - A group is on its batch's list at most once at a time: first to
//     enter, then, once its copy moved every byte, to finish. The
//     combiner reads a node's next link before it applies the node;
//     after it applies a finish it never touches the group again (a
//     freed batch may recycle it), and after it decides an entry it
//     touches the group only to wake its submitter, through the wake
//     channel it read while it held b.mu.
//   - Entries and finishes are applied under b.mu exactly as the direct
//     path applies them (enterLocked, finishCopyLocked), in the order
//     they were pushed. A submitter that finds the list empty and b.mu
//     free applies its own entry or finish directly (a batch with one
//     submitter never combines); a finish it left on the list may then
//     be applied after its next entry, as if it had finished a moment
//     later.
//   - No push is stranded: a pusher that fails to take the combining
//     lock (b.comb.mu) leaves its node to the holder, and the holder
//     looks at the list again after it lets the lock go, so either the
//     pusher's TryLock or the holder's second look sees the node.
//   - Nothing runs a report hook while holding b.comb.mu: a hook may
//     Submit, and its entry would wait on the combiner it is running on.
//     An entering submitter that combines runs no hook at all: its group
//     is dispatched by then, and its copy must not wait behind other
//     groups' hooks (a hook that resubmits would hold it indefinitely);
//     it delivers after its copy (SubmitWith). Its combining still lasts
//     as long as others keep pushing while it applies: nothing bounds
//     that yet, and a copy that then starts past a deadline within
//     deadlineSlack of its submission fails unstarted (callerCopy).
//   - A finish left on the list keeps its group active (b.mu.active), so
//     Close, Free and Wait see the batch busy until it is applied, as
//     they saw the submitter waiting for b.mu before.

package engine

import (
	"sync"
	"sync/atomic"
)

// combNode is a group's link in its batch's combining list.
type combNode struct {
	next   *group
	finish bool      // a finish (finishCopyLocked), not an entry
	reqs   []Request // an entry's requests, while it waits
	state  atomic.Uint32
	wake   chan struct{} // made by a submitter that sleeps, reused
	entry  entry         // the decision, written before state turns decided
}

// combNode.state of an entry.
const (
	combPending  uint32 = iota // pushed, not decided
	combSleeping               // its submitter sleeps on wake
	combDecided                // entry holds the decision
)

// combiner is a batch's list of pushed nodes and the lock of the
// goroutine applying them.
type combiner struct {
	mu   sync.Mutex // held by the goroutine applying the list
	head atomic.Pointer[group]
}

func (c *combiner) push(g *group) {
	for {
		h := c.head.Load()
		g.comb.next = h
		if c.head.CompareAndSwap(h, g) {
			return
		}
	}
}

// enterCombined is enterLocked for caller copy g, directly when nothing
// waits on the combining list and b.mu is free, through the combiner
// otherwise (a submitter does not pass the ones already waiting); it
// returns once g's entry is decided.
func (b *Batch) enterCombined(g *group, reqs []Request) entry {
	c := &b.comb
	if c.head.Load() == nil && b.mu.TryLock() { // nobody waiting: one submitter per batch
		en := b.enterLocked(g, reqs, true)
		b.mu.Unlock()
		return en
	}
	g.comb.finish = false
	g.comb.reqs = reqs
	g.comb.state.Store(combPending)
	c.push(g)
	if c.mu.TryLock() {
		// Without the reports: g is dispatched once its entry is applied
		// and its copy must not wait for other groups' hooks (which may
		// resubmit, and so on); SubmitWith delivers after the copy.
		b.combine(false)
	}
	if g.comb.state.Load() != combDecided {
		b.awaitEntry(g)
	}
	en := g.comb.entry
	g.comb.entry = entry{}
	return en
}

// awaitEntry returns once g's entry is decided: it sleeps until the
// combiner that decides it wakes it. It does not spin first: 32
// submitters on one batch on 16 cores moved as many requests with a
// 20 us spin as without (the combiner's pass, not the waiter's wake-up,
// bounds them) and spent 19.9 against 11.5 us of CPU per request.
func (b *Batch) awaitEntry(g *group) {
	if g.comb.wake == nil {
		g.comb.wake = make(chan struct{}, 1)
	}
	if g.comb.state.CompareAndSwap(combPending, combSleeping) {
		<-g.comb.wake // the combiner turned it decided before the send
	}
}

// finishCombined publishes the outcome of caller copy g, which moved
// every byte, directly when nothing waits on the combining list and
// b.mu is free, through the combiner otherwise. The submitter may
// return before it is applied: the combiner running now applies it.
func (b *Batch) finishCombined(g *group) {
	c := &b.comb
	if c.head.Load() == nil && b.mu.TryLock() {
		b.finishCopyLocked(g, nil)
		b.unlockAndDeliver(true, true)
		return
	}
	g.comb.finish = true
	c.push(g)
	if c.mu.TryLock() {
		b.combine(true)
	}
}

// combine applies the list until it stays empty, delivering the reports
// of the groups it finished when deliver is set. REQUIRES: b.comb.mu,
// which it releases.
func (b *Batch) combine(deliver bool) {
	c := &b.comb
	for {
		head := c.head.Swap(nil)
		if head == nil {
			c.mu.Unlock()
			// A node pushed after the Swap found its TryLock failing:
			// look again now that mu is free.
			if c.head.Load() == nil || !c.mu.TryLock() {
				return
			}
			continue
		}
		var fifo *group
		for g := head; g != nil; {
			next := g.comb.next
			g.comb.next = fifo
			fifo = g
			g = next
		}
		finished := false
		// The sleeping submitters whose entries this pass decides are
		// woken once b.mu and the combining lock are let go: a wake-up
		// (the scheduler readying a parked goroutine) inside the
		// critical section lengthened it for every submitter behind it.
		var wakeBuf [32]chan struct{}
		wakes := wakeBuf[:0]
		if h := b.e.combineTook; h != nil {
			h(b) // tests: the combiner has taken the list
		}
		b.mu.Lock()
		for g := fifo; g != nil; {
			next := g.comb.next
			if g.comb.finish {
				b.finishCopyLocked(g, nil)
				finished = true
			} else {
				g.comb.entry = b.enterLocked(g, g.comb.reqs, true)
				g.comb.reqs = nil
				if g.comb.state.Swap(combDecided) == combSleeping {
					wakes = append(wakes, g.comb.wake)
				}
			}
			g = next
		}
		if h := b.e.combineHeld; h != nil {
			h(b) // tests: a node pushed here must not be stranded
		}
		// Reports may run hooks that Submit: not under c.mu.
		c.mu.Unlock()
		reps, fn, ok := b.unlockTakingReports(finished, deliver)
		for _, w := range wakes {
			w <- struct{}{}
		}
		if ok {
			b.runReports(reps, fn)
		}
		if c.head.Load() == nil || !c.mu.TryLock() {
			return
		}
	}
}
