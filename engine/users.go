// users.go owns users: the count of groups admitted to a file segment's
// entry, which a close shuts to new users and then waits to drain.
//
// Why: every client of a file shares its entry, and one counter word,
// written twice per request by every core, was one of the shared cache
// lines that held 32 jobs of 4 KiB caller copies on 16 cores below the
// pread loop (docs/performance.md, "Admission without shared cache
// lines"). The count is spread over padded shards (a group's shard,
// budget.go), with one flag that a close sets; a shard alone may go
// negative, only the sum counts.
//
// Invariants (every operation is a sequentially consistent atomic):
//   - enter adds to its shard, then reads closing; if set, it takes its
//     add back (from the same shard) and fails. A group that entered
//     before closing was set is in the sum of any read that starts after
//     it; one that enters after sees closing and leaves.
//   - So a sum read after closing was set is never 0 while an entered
//     group has not left: a leave read earlier only makes it larger, and
//     adds of late enterers are taken back. Every leave (and every
//     take-back) made while closing is set looks at the sum, so the last
//     one sees 0 and wakes the close (segEntry.wakeIfIdle).

package engine

import "sync/atomic"

type users struct {
	closing atomic.Bool
	_       [63]byte
	shards  [1 << shardBits]struct {
		n atomic.Int64
		_ [56]byte
	}
}

// enter counts one user on shard at (budget.go) unless closing is set.
// After a false return the caller must look whether a close waits
// (segEntry.wakeIfIdle): its add was visible for an instant.
func (u *users) enter(at shard) bool {
	s := &u.shards[at].n
	s.Add(1)
	if !u.closing.Load() {
		return true
	}
	s.Add(-1)
	return false
}

// leave drops one user and reports whether closing was set, when the
// caller must look whether it was the last.
func (u *users) leave(at shard) bool {
	u.shards[at].n.Add(-1)
	return u.closing.Load()
}

// count is the number of users: exact when nothing enters or leaves,
// and, while closing is set, 0 only once every user left.
func (u *users) count() int64 {
	var n int64
	for i := range u.shards {
		n += u.shards[i].n.Load()
	}
	return max(n, 0)
}
