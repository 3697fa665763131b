// loans.go owns a region's loans: a group's exclusive hold on the host
// bytes [lo, hi) of a region while its I/O may touch them (spec: an
// overlapping host loan fails the group before I/O), and the region's
// closed flag, which a loan must never be granted past.
//
// The table is sharded by 4 KiB page: a loan is recorded in the shard of
// every page it covers (in every shard once it covers more pages than
// there are shards), so two overlapping loans always meet in at least one
// shard, and groups using different pages of one region (many clients
// slicing one registered buffer) take different locks. One region-wide
// lock, taken twice per request, was with the segment entry's the
// busiest lock on 16 cores (docs/performance.md).
//
// Invariants:
//   - Shard locks are taken in ascending index order, never while
//     Region.mu or Batch.mu of another batch is waited for.
//   - closed changes only while every shard is locked (closeIfIdle), so
//     a check under any one shard's lock is exact.

package engine

import "sync"

const (
	loanShards = 64
	loanShift  = 12 // 4 KiB pages
)

type loanTable struct {
	shards [loanShards]loanShard
	closed bool // guarded by every shard: read under any, written under all
}

type loanShard struct {
	mu    sync.Mutex
	loans []loan
	_     [32]byte // one shard per cache line
}

// span returns the shards [first, first+n) (mod loanShards) covering
// [lo, hi); an empty range counts as its first byte's page.
func span(lo, hi uint64) (first, n int) {
	hi = max(hi, lo+1)
	pages := (hi-1)>>loanShift - lo>>loanShift + 1
	return int(lo >> loanShift % loanShards), int(min(pages, loanShards))
}

// lock locks the shards covering [lo, hi) in ascending index order (a
// wrapping span: the low indices first); unlock undoes it.
func (t *loanTable) lock(lo, hi uint64) {
	first, n := span(lo, hi)
	for i := 0; i < first+n-loanShards; i++ {
		t.shards[i].mu.Lock()
	}
	for i := first; i < min(first+n, loanShards); i++ {
		t.shards[i].mu.Lock()
	}
}

func (t *loanTable) unlock(lo, hi uint64) {
	t.each(lo, hi, func(s *loanShard) { s.mu.Unlock() })
}

// each calls fn for the shards covering [lo, hi); REQUIRES: t.lock(lo, hi).
func (t *loanTable) each(lo, hi uint64, fn func(s *loanShard)) {
	first, n := span(lo, hi)
	for k := 0; k < n; k++ {
		fn(&t.shards[(first+k)%loanShards])
	}
}

// conflict returns a loan overlapping [lo, hi) not owned by g, if any.
// REQUIRES: t.lock(lo, hi).
func (t *loanTable) conflict(lo, hi uint64, g *group) (loan, bool) {
	var hit loan
	found := false
	t.each(lo, hi, func(s *loanShard) {
		for _, l := range s.loans {
			if !found && l.owner != g && l.lo < hi && lo < l.hi {
				hit, found = l, true
			}
		}
	})
	return hit, found
}

// take grants g the loan [lo, hi) unless the region is closed or another
// group holds an overlapping one.
func (t *loanTable) take(lo, hi uint64, g *group) (closed bool, held loan, ok bool) {
	t.lock(lo, hi)
	defer t.unlock(lo, hi)
	if t.closed {
		return true, loan{}, false
	}
	if l, busy := t.conflict(lo, hi, g); busy {
		return false, l, false
	}
	t.each(lo, hi, func(s *loanShard) { s.loans = append(s.loans, loan{lo: lo, hi: hi, owner: g}) })
	return false, loan{}, true
}

// drop removes g's loans of [lo, hi).
func (t *loanTable) drop(lo, hi uint64, g *group) {
	t.lock(lo, hi)
	defer t.unlock(lo, hi)
	t.each(lo, hi, func(s *loanShard) {
		ls := s.loans[:0]
		for _, l := range s.loans {
			if l.owner != g {
				ls = append(ls, l)
			}
		}
		clear(s.loans[len(ls):]) // no owner kept alive by the spare capacity
		s.loans = ls
	})
}

// lockAll locks every shard; the returned count and first loan describe
// what is held.
func (t *loanTable) lockAll() (n int, first loan) {
	for i := range t.shards {
		t.shards[i].mu.Lock()
	}
	seen := map[*group]bool{}
	for i := range t.shards {
		for _, l := range t.shards[i].loans {
			if n == 0 {
				first = l
			}
			if !seen[l.owner] {
				seen[l.owner] = true
				n++
			}
		}
	}
	return n, first
}

func (t *loanTable) unlockAll() {
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
