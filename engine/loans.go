// loans.go owns a region's loans: a group's exclusive hold on the host
// bytes [lo, hi) of a region while its I/O may touch them (spec: an
// overlapping host loan fails the group before I/O), and the region's
// closed flag, which a loan must never be granted past.
//
// A copy of ReadAt/WriteAt pins its range: a loan with no owner, taken
// and dropped under the same locks as a group's but held across the
// copy with no lock held. Pins never conflict with each other (copies of
// one region run side by side); a group's grant over a pin fails with
// ErrBusy, as over another group's loan, and a copy over a group's loan
// likewise. An unregister answers ErrBusy while a pin is held: the
// mapping stays until the copy returned.
//
// The table is sharded by 4 KiB page: a small loan (at most smallPages
// pages) is recorded in the shard of every page it covers, so two
// overlapping small loans always meet in at least one shard, and groups
// using different pages of one region (many clients slicing one
// registered buffer) take different locks. One region-wide lock, taken
// twice per request, was with the segment entry's the busiest lock on 16
// cores (docs/performance.md). A large loan goes to the big index and
// takes every shard's lock to be granted; recording it in every shard
// instead made each 4 MiB request scan and rewrite 64 lists, 48 % of the
// worker's time on 16 cores. The big index files each large loan under
// the 1 MiB granules it covers (one list for loans over more than
// bigSpread granules), so a grant or a drop looks at the loans near its
// range only: one list of every large loan made a grant and a drop cost
// 7.1 us with 64 KV-swap clients holding 1024 loans of 128 KiB (0.56 us
// with one client), all of it under the locks every large grant takes,
// which capped 64 clients at about 140k requests/s (BenchmarkLoansKVSwap).
//
// Invariants:
//   - Locks are taken in ascending shard order, then bigMu; never while
//     Region.mu or Batch.mu of another batch is waited for.
//   - A grant holds the locks of every shard its range covers (all of
//     them for a large range) and bigMu, so any two overlapping grants
//     are serialized and the second sees the first.
//   - closed changes only while every shard is locked (closeIfIdle), so
//     a check under any one shard's lock is exact; no pin is taken once
//     it is set.

package engine

import (
	"sync"
	"sync/atomic"
)

const (
	loanShards = 64
	loanShift  = 12 // 4 KiB pages
	smallPages = 16 // larger loans go to loanTable.big

	bigShift  = 20 // the big index files loans by 1 MiB granule
	bigSpread = 64 // loans over more granules go to bigLoans.wide
)

type loanTable struct {
	shards [loanShards]loanShard
	closed bool // guarded by every shard: read under any, written under all

	bigMu sync.Mutex
	big   bigLoans // guarded by bigMu
	// bigN is the number of large loans, readable without bigMu: a small
	// grant holding a shard lock skips bigMu when it is 0 (a large grant,
	// which needs every shard, cannot be adding one meanwhile).
	bigN atomic.Int64

	// granting, nil outside tests, runs in take between the conflict
	// check and the insert, with take's locks held: a test holds one
	// grant there to show that an overlapping grant cannot pass it.
	granting func()
}

type loanShard struct {
	mu    sync.Mutex
	loans []loan
	_     [32]byte // one shard per cache line
}

// span returns the shards [first, first+n) (mod loanShards) covering
// [lo, hi), every shard for a large range; an empty range counts as its
// first byte's page.
func span(lo, hi uint64) (first, n int, big bool) {
	hi = max(hi, lo+1)
	pages := (hi-1)>>loanShift - lo>>loanShift + 1
	if pages > smallPages {
		return 0, loanShards, true
	}
	return int(lo >> loanShift % loanShards), int(pages), false
}

// lock locks the shards covering [lo, hi) in ascending index order (a
// wrapping span: the low indices first), then bigMu when a large loan
// may exist (bigHeld); unlock undoes it.
func (t *loanTable) lock(lo, hi uint64) (bigHeld bool) {
	first, n, big := span(lo, hi)
	for i := 0; i < first+n-loanShards; i++ {
		t.shards[i].mu.Lock()
	}
	for i := first; i < min(first+n, loanShards); i++ {
		t.shards[i].mu.Lock()
	}
	if big || t.bigN.Load() > 0 {
		t.bigMu.Lock()
		return true
	}
	return false
}

func (t *loanTable) unlock(lo, hi uint64, bigHeld bool) {
	if bigHeld {
		t.bigMu.Unlock()
	}
	first, n, _ := span(lo, hi)
	for k := 0; k < n; k++ {
		t.shards[(first+k)%loanShards].mu.Unlock()
	}
}

// conflict returns a loan overlapping [lo, hi) not owned by g, if any;
// pins share the nil owner, so for a pin (g nil) only a group's loan
// conflicts.
// REQUIRES: bigHeld := t.lock(lo, hi).
func (t *loanTable) conflict(lo, hi uint64, g *group, bigHeld bool) (loan, bool) {
	hit := func(l loan) bool { return l.owner != g && l.lo < hi && lo < l.hi }
	if bigHeld {
		if l, ok := t.big.find(lo, hi, hit); ok {
			return l, true
		}
	}
	first, n, _ := span(lo, hi)
	for k := 0; k < n; k++ {
		for _, l := range t.shards[(first+k)%loanShards].loans {
			if hit(l) {
				return l, true
			}
		}
	}
	return loan{}, false
}

// take grants g the loan [lo, hi) unless the region is closed or another
// group holds an overlapping one.
func (t *loanTable) take(lo, hi uint64, g *group) (closed bool, held loan, ok bool) {
	closed, held, _, ok = t.takeAll([]hostRange{{lo: lo, hi: hi}}, g)
	return closed, held, ok
}

// takeAll grants g the loans of rs, all of them or none: unless the
// region is closed, or another group holds a loan overlapping rs[at]
// (held). It holds the locks covering the bounding range of rs once for
// the whole set: a KV group of 16 requests of 128 KiB took every shard's
// lock and bigMu once per request, and at 64 clients those 65 locks per
// request were where the batch workers queued (docs/performance.md).
func (t *loanTable) takeAll(rs []hostRange, g *group) (closed bool, held loan, at int, ok bool) {
	lo, hi := rs[0].lo, rs[0].hi
	for _, r := range rs[1:] {
		lo, hi = min(lo, r.lo), max(hi, r.hi)
	}
	bigHeld := t.lock(lo, hi)
	defer t.unlock(lo, hi, bigHeld)
	if t.closed {
		return true, loan{}, 0, false
	}
	for k, r := range rs {
		if l, busy := t.conflict(r.lo, r.hi, g, bigHeld); busy {
			return false, l, k, false
		}
	}
	if t.granting != nil {
		t.granting()
	}
	for _, r := range rs {
		l := loan{lo: r.lo, hi: r.hi, owner: g}
		first, n, big := span(r.lo, r.hi)
		if big {
			t.big.add(l)
			t.bigN.Add(1)
			continue
		}
		for k := 0; k < n; k++ {
			s := &t.shards[(first+k)%loanShards]
			s.loans = append(s.loans, l)
		}
	}
	return false, loan{}, 0, true
}

// drop removes g's loans of [lo, hi), or one pin of it when g is nil.
func (t *loanTable) drop(lo, hi uint64, g *group) {
	t.dropAll([]hostRange{{lo: lo, hi: hi}}, g)
}

// dropAll removes g's loans of rs (pins when g is nil): the small ones
// shard by shard, then the large ones in one hold of bigMu, which is
// never held while a shard's lock is taken (the order is shards, then
// bigMu: a drop holding bigMu while it waited for a shard deadlocked
// against a grant holding that shard and waiting for bigMu).
func (t *loanTable) dropAll(rs []hostRange, g *group) {
	big := false
	for _, r := range rs {
		first, n, large := span(r.lo, r.hi)
		if large {
			big = true
			continue
		}
		for k := 0; k < n; k++ {
			s := &t.shards[(first+k)%loanShards]
			s.mu.Lock()
			if g == nil {
				s.loans, _ = removeLoan(s.loans, loan{lo: r.lo, hi: r.hi})
			} else {
				s.loans = without(s.loans, g)
			}
			s.mu.Unlock()
		}
	}
	if !big {
		return
	}
	t.bigMu.Lock()
	defer t.bigMu.Unlock()
	for _, r := range rs {
		if _, _, large := span(r.lo, r.hi); large && t.big.drop(r.lo, r.hi, g) {
			t.bigN.Add(-1)
		}
	}
}

// pin records a copy of [lo, hi) unless the region is closed or a
// group's loan overlaps it (held: that loan). The caller copies with no
// lock held, then calls unpin(lo, hi).
func (t *loanTable) pin(lo, hi uint64) (closed bool, held loan, ok bool) {
	return t.take(lo, hi, nil)
}

// unpin drops a pin of [lo, hi).
func (t *loanTable) unpin(lo, hi uint64) { t.drop(lo, hi, nil) }

// without removes g's loans from ls in place.
func without(ls []loan, g *group) []loan {
	kept := ls[:0]
	for _, l := range ls {
		if l.owner != g {
			kept = append(kept, l)
		}
	}
	clear(ls[len(kept):]) // no owner kept alive by the spare capacity
	return kept
}

// lockAll locks every shard and bigMu; the returned count and first loan
// describe the groups' loans, pins the copies' pins (each counted once).
func (t *loanTable) lockAll() (n int, first loan, pins int) {
	for i := range t.shards {
		t.shards[i].mu.Lock()
	}
	t.bigMu.Lock()
	seen := map[*group]bool{}
	count := func(ls []loan) {
		for _, l := range ls {
			if l.owner == nil {
				continue
			}
			if n == 0 {
				first = l
			}
			if !seen[l.owner] {
				seen[l.owner] = true
				n++
			}
		}
	}
	for _, ls := range t.big.byGranule {
		count(ls)
	}
	count(t.big.wide)
	for i := range t.shards {
		count(t.shards[i].loans)
	}
	// A pin is filed under every shard (or granule) it covers: count each
	// once, by the shard or granule of its first byte (or in wide).
	for _, l := range t.big.wide {
		if l.owner == nil {
			pins++
		}
	}
	for k, ls := range t.big.byGranule {
		for _, l := range ls {
			if l.owner == nil && l.lo>>bigShift == k {
				pins++
			}
		}
	}
	for i := range t.shards {
		for _, l := range t.shards[i].loans {
			if first, _, _ := span(l.lo, l.hi); l.owner == nil && first == i {
				pins++
			}
		}
	}
	return n, first, pins
}

func (t *loanTable) unlockAll() {
	t.bigMu.Unlock()
	for i := range t.shards {
		t.shards[i].mu.Unlock()
	}
}

// closeIfIdle closes the table if no loan or pin is held (or always,
// with force) and reports how many groups hold loans, the first of them,
// and how many copies hold pins.
func (t *loanTable) closeIfIdle(force bool) (held int, first loan, pins int) {
	held, first, pins = t.lockAll()
	if held+pins == 0 || force {
		t.closed = true
	}
	t.unlockAll()
	return held, first, pins
}

// bigLoans indexes the large loans: each under every 1 MiB granule it
// covers, or in wide when that is more than bigSpread granules. A loan
// overlapping a range is filed under one of the range's granules, or is
// wide. Guarded by loanTable.bigMu.
type bigLoans struct {
	byGranule map[uint64][]loan
	wide      []loan
}

// granules returns the granules [first, last] covering [lo, hi) and
// whether a loan of that range is wide.
func granules(lo, hi uint64) (first, last uint64, wide bool) {
	first, last = lo>>bigShift, (max(hi, lo+1)-1)>>bigShift
	return first, last, last-first >= bigSpread
}

// find returns a loan overlapping [lo, hi) for which hit holds.
func (b *bigLoans) find(lo, hi uint64, hit func(loan) bool) (loan, bool) {
	for _, l := range b.wide {
		if hit(l) {
			return l, true
		}
	}
	first, last, _ := granules(lo, hi)
	if last-first >= uint64(len(b.byGranule)) {
		// Fewer lists than granules covered: look at every list.
		for _, ls := range b.byGranule {
			for _, l := range ls {
				if hit(l) {
					return l, true
				}
			}
		}
		return loan{}, false
	}
	for k := first; k <= last; k++ {
		for _, l := range b.byGranule[k] {
			if hit(l) {
				return l, true
			}
		}
	}
	return loan{}, false
}

func (b *bigLoans) add(l loan) {
	first, last, wide := granules(l.lo, l.hi)
	if wide {
		b.wide = append(b.wide, l)
		return
	}
	if b.byGranule == nil {
		b.byGranule = make(map[uint64][]loan)
	}
	for k := first; k <= last; k++ {
		b.byGranule[k] = append(b.byGranule[k], l)
	}
}

// drop removes g's loan of [lo, hi), one of them if g took that range
// more than once, and reports whether there was one.
func (b *bigLoans) drop(lo, hi uint64, g *group) bool {
	l := loan{lo: lo, hi: hi, owner: g}
	first, last, wide := granules(lo, hi)
	if wide {
		var found bool
		b.wide, found = removeLoan(b.wide, l)
		return found
	}
	found := false
	for k := first; k <= last; k++ {
		ls, ok := removeLoan(b.byGranule[k], l)
		found = found || ok
		if len(ls) == 0 {
			delete(b.byGranule, k)
		} else {
			b.byGranule[k] = ls
		}
	}
	return found
}

// removeLoan removes one copy of l from ls (order is not kept).
func removeLoan(ls []loan, l loan) ([]loan, bool) {
	for i := range ls {
		if ls[i] == l {
			end := len(ls) - 1
			ls[i], ls[end] = ls[end], loan{} // no owner kept alive by the spare capacity
			return ls[:end], true
		}
	}
	return ls, false
}
