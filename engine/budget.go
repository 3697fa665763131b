// budget.go owns budget: an engine-wide in-flight count with a limit
// (max_inflight_batches counts groups, max_inflight_bytes bytes), which
// every submission takes from and every finished group gives back.
//
// Why: one atomic word per limit, changed with compare-and-swap by every
// request on every core, was a cache line that all cores fought over: on
// 16 cores, 32 jobs of 4 KiB caller copies spent 18 % of their CPU on
// the two admission words and the segment's user count (docs/
// performance.md, "Admission without shared cache lines"). A budget
// keeps a spare of already-taken room on padded shards: a take is served
// from the taking goroutine's shard when it holds enough, and a give
// goes back to the giving goroutine's shard, so most requests touch only
// a line their own core wrote last. The shard is picked by the
// goroutine's stack address (internal/affinity), as for counter.
//
// Invariants:
//   - taken is what groups hold plus every shard's spare, and more only
//     while room moves between them (below); it never exceeds limit (it
//     only grows by compare-and-swap within it), so what groups hold
//     never does either.
//   - Lock-free steps keep taken == held + spares at every instant: a
//     take from a spare (the spare falls as what is held rises), a give
//     to a spare, and a take or give of a quantum or more straight on
//     taken. The steps that move room between a spare and taken (a
//     refill, the return of a spare's excess, a reclaim) pass through a
//     state where the room is in neither; they run under moveMu, and so
//     does inUse, which therefore never counts that room as held. (A
//     waiter at a batch head that read too little free room in such a
//     state slept while the room was free: nothing returned it, so
//     nothing woke the waiter.)
//   - A spare is refilled, by one quantum, only when a take finds it
//     short of a request under a quantum (so it stays under two), and a
//     give that takes it past two quanta returns it to one; quantum is at
//     most limit/(8*budgetShards), so the spares together hold at most a
//     quarter of the limit (plus the gives under way).
//   - A take that taken refuses takes every spare back (reclaim) and
//     tries again under moveMu: it fails only when what groups hold,
//     less what gives return meanwhile, leaves no room.

package engine

import (
	"sync"
	"sync/atomic"

	"github.com/orbitefs/orbitefs/internal/affinity"
)

const (
	shardBits    = 4
	budgetShards = 1 << shardBits
	// The most a shard keeps of the engine's budgets: 8 groups, 1 MiB
	// (256 requests of 4 KiB between two takes from the global room).
	groupQuantum = 8
	byteQuantum  = 1 << 20
)

type budget struct {
	limit   uint64
	quantum uint64 // 0: no spares, every take and give is global
	_       [48]byte
	taken   atomic.Uint64
	_       [56]byte
	moveMu  sync.Mutex // refills, excess returns, reclaims, inUse
	_       [56]byte
	shards  [budgetShards]struct {
		spare atomic.Uint64
		_     [56]byte
	}
}

// newBudget returns a budget of limit whose spares hold at most maxQuantum
// each (and a small share of the limit).
func newBudget(limit, maxQuantum uint64) *budget {
	return &budget{limit: limit, quantum: min(maxQuantum, limit/(8*budgetShards))}
}

// shard picks a shard of a budget or of a segment's users (users.go).
// A group keeps the one of the goroutine that submitted it
// (groupAdm.shard) and gives back there what it took, so a goroutine
// that submits and finishes its own groups keeps writing one line.
type shard uint8

// shardHere is the calling goroutine's shard (internal/affinity).
func shardHere() shard { return shard(affinity.Hint() >> (64 - shardBits)) }

// take takes n of the budget, or nothing and reports false when n does
// not fit; at names the shard that serves it first.
func (b *budget) take(at shard, n uint64) bool {
	s := &b.shards[at].spare
	for v := s.Load(); v >= n; v = s.Load() {
		if s.CompareAndSwap(v, v-n) {
			return true
		}
	}
	if n >= b.quantum && b.takeGlobal(n) { // one step: nothing to refill
		return true
	}
	b.moveMu.Lock()
	defer b.moveMu.Unlock()
	if n < b.quantum {
		if b.takeGlobal(n + b.quantum) {
			s.Add(b.quantum)
			return true
		}
		if b.takeGlobal(n) {
			return true
		}
	}
	if !b.reclaimLocked() {
		return false
	}
	return b.takeGlobal(n)
}

// takeGlobal adds n to taken unless that would pass the limit.
func (b *budget) takeGlobal(n uint64) bool {
	for {
		cur := b.taken.Load()
		if cur+n > b.limit {
			return false
		}
		if b.taken.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// reclaimLocked moves every spare back to taken's room and reports
// whether there were any. REQUIRES: moveMu.
func (b *budget) reclaimLocked() bool {
	var got uint64
	for i := range b.shards {
		got += b.shards[i].spare.Swap(0)
	}
	if got == 0 {
		return false
	}
	b.taken.Add(-got)
	return true
}

// give returns n taken earlier (by any goroutine) to shard at.
func (b *budget) give(at shard, n uint64) {
	if n >= b.quantum { // one step (and with no quantum, always)
		b.taken.Add(-n)
		return
	}
	s := &b.shards[at].spare
	if s.Add(n) <= 2*b.quantum {
		return
	}
	// Keep one quantum; the rest goes back to taken's room.
	b.moveMu.Lock()
	defer b.moveMu.Unlock()
	for v := s.Load(); v > b.quantum; v = s.Load() {
		if s.CompareAndSwap(v, b.quantum) {
			b.taken.Add(-(v - b.quantum))
			return
		}
	}
}

// inUse is what groups hold: taken less the spares. It reads them under
// moveMu, so no room on its way between a spare and taken is counted;
// a lock-free take or give running meanwhile may or may not be in it.
func (b *budget) inUse() uint64 {
	b.moveMu.Lock()
	defer b.moveMu.Unlock()
	var spare uint64
	for i := range b.shards {
		spare += b.shards[i].spare.Load()
	}
	taken := b.taken.Load()
	if spare > taken { // read at different instants
		return 0
	}
	return taken - spare
}
