// loans.go owns a region's loans: a group's exclusive hold on the host
// bytes [lo, hi) of a region while its I/O may touch them (spec: an
// overlapping host loan fails the group before I/O), and the region's
// closed flag, which a loan must never be granted past.
//
// The table is sharded by 4 KiB page: a small loan (at most smallPages
// pages) is recorded in the shard of every page it covers, so two
// overlapping small loans always meet in at least one shard, and groups
// using different pages of one region (many clients slicing one
// registered buffer) take different locks. One region-wide lock, taken
// twice per request, was with the segment entry's the busiest lock on 16
// cores (docs/performance.md). A large loan goes to one list (big) and
// takes every shard's lock to be granted; recording it in every shard
// instead made each 4 MiB request scan and rewrite 64 lists, 48 % of the
// worker's time on 16 cores.
//
// Invariants:
//   - Locks are taken in ascending shard order, then bigMu; never while
//     Region.mu or Batch.mu of another batch is waited for.
//   - A grant holds the locks of every shard its range covers (all of
//     them for a large range) and bigMu, so any two overlapping grants
//     are serialized and the second sees the first.
//   - closed changes only while every shard is locked (closeIfIdle), so
//     a check under any one shard's lock is exact.

package engine

import (
	"sync"
	"sync/atomic"
)

const (
	loanShards = 64
	loanShift  = 12 // 4 KiB pages
	smallPages = 16 // larger loans go to loanTable.big
)

type loanTable struct {
	shards [loanShards]loanShard
	closed bool // guarded by every shard: read under any, written under all

	bigMu sync.Mutex
	big   []loan
	// bigN is len(big), readable without bigMu: a small grant holding a
	// shard lock skips bigMu when it is 0 (a large grant, which needs
	// every shard, cannot be adding one meanwhile).
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

// conflict returns a loan overlapping [lo, hi) not owned by g, if any.
// REQUIRES: bigHeld := t.lock(lo, hi).
func (t *loanTable) conflict(lo, hi uint64, g *group, bigHeld bool) (loan, bool) {
	hit := func(l loan) bool { return l.owner != g && l.lo < hi && lo < l.hi }
	if bigHeld {
		for _, l := range t.big {
			if hit(l) {
				return l, true
			}
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
	bigHeld := t.lock(lo, hi)
	defer t.unlock(lo, hi, bigHeld)
	if t.closed {
		return true, loan{}, false
	}
	if l, busy := t.conflict(lo, hi, g, bigHeld); busy {
		return false, l, false
	}
	if t.granting != nil {
		t.granting()
	}
	l := loan{lo: lo, hi: hi, owner: g}
	first, n, big := span(lo, hi)
	if big {
		t.big = append(t.big, l)
		t.bigN.Store(int64(len(t.big)))
		return false, loan{}, true
	}
	for k := 0; k < n; k++ {
		s := &t.shards[(first+k)%loanShards]
		s.loans = append(s.loans, l)
	}
	return false, loan{}, true
}

// drop removes g's loans of [lo, hi).
func (t *loanTable) drop(lo, hi uint64, g *group) {
	first, n, big := span(lo, hi)
	if big {
		t.bigMu.Lock()
		t.big = without(t.big, g)
		t.bigN.Store(int64(len(t.big)))
		t.bigMu.Unlock()
		return
	}
	for k := 0; k < n; k++ {
		s := &t.shards[(first+k)%loanShards]
		s.mu.Lock()
		s.loans = without(s.loans, g)
		s.mu.Unlock()
	}
}

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
// describe what is held.
func (t *loanTable) lockAll() (n int, first loan) {
	for i := range t.shards {
		t.shards[i].mu.Lock()
	}
	t.bigMu.Lock()
	seen := map[*group]bool{}
	count := func(ls []loan) {
		for _, l := range ls {
			if n == 0 {
				first = l
			}
			if !seen[l.owner] {
				seen[l.owner] = true
				n++
			}
		}
	}
	count(t.big)
	for i := range t.shards {
		count(t.shards[i].loans)
	}
	return n, first
}

func (t *loanTable) unlockAll() {
	t.bigMu.Unlock()
	for i := range t.shards {
		t.shards[i].mu.Unlock()
	}
}

// closeIfIdle closes the table if no loan is held (or always, with
// force) and reports how many groups hold loans and the first of them.
func (t *loanTable) closeIfIdle(force bool) (held int, first loan) {
	held, first = t.lockAll()
	if held == 0 || force {
		t.closed = true
	}
	t.unlockAll()
	return held, first
}
