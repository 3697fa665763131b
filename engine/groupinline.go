// groupinline.go owns the inline storage of a single-request group.
//
// Most groups carry one request (a client streaming 4 KiB reads submits
// one per group), and each per-request slice used to be its own heap
// allocation: ops, iovs, routes, ranges, bounds and the final report made
// six allocations beside the group itself (docs/performance.md, "Memory
// speed"). A group of one request slices them out of its own struct.
//
// Invariants:
//   - The slices point into the group they belong to and live exactly as
//     long as it; append beyond the inline capacity moves to the heap
//     (a vector request with several ranges), which is always safe.
//   - Groups of more than one request allocate as before.
//   - A one-request group may come from its batch's free list or the
//     engine's pool of recycled groups (group.go states when a group is
//     recycled); it is zeroed before it is handed out, so it carries
//     nothing of its last use. A free list entry is handed out once.

package engine

// groupInline backs the per-request slices of a one-request group.
type groupInline struct {
	op     [1]FileOp
	iov    [1]IOVec
	route  [1]route
	policy [1]reqPolicy
	ranges [1]hostRange
	bounds [1]hostRange
	final  Report
}

// newGroup returns a group for b with its per-request slices sized for
// n requests, inline when n is 1. A one-request group is recycled when
// b's free list (group.go, recycle) or else the engine's pool has one:
// 4 KiB clients allocated an 864-byte group per request, 10-22 % of
// their CPU in the allocator and the first touch.
func (e *Engine) newGroup(b *Batch, n int) *group {
	if n == 1 {
		g := b.takeFree()
		if g == nil {
			g, _ = e.groups.Get().(*group)
		}
		if g != nil {
			*g = group{}
			return g.init(1)
		}
	}
	return newGroup(n)
}

// takeFree takes a group of b's free list, or nil: from the part of the
// calling goroutine's shard first, then from the others. Each index of a
// part is claimed by one atomic add on that part's own cache line (one
// index for all, which every submitter added to, was 8 % of the CPU of
// 32 submitters on one batch on 16 cores, docs/performance.md), so
// concurrent submissions never share a group; Free claims the rest at
// once (detachGroupsLocked). The taker clears its entry, so the list
// keeps no group it handed out; that write may land after Free, which is
// why recycle never reuses a free list's array.
func (b *Batch) takeFree() *group {
	if len(b.free) == 0 {
		return nil
	}
	at := int(shardHere())
	for k := range b.freeNext {
		part := (at + k) % len(b.freeNext)
		lo, hi := b.freePart(part)
		next := &b.freeNext[part]
		if next.Load() >= int64(hi-lo) {
			continue // used up: no add on another submitter's line
		}
		i := next.Add(1) - 1
		if i >= int64(hi-lo) {
			continue
		}
		g := b.free[lo+int(i)]
		b.free[lo+int(i)] = nil
		if h := b.e.groupTaken; h != nil {
			h(g) // tests: the submission holds its group here
		}
		return g
	}
	return nil
}

// freePart is the range [lo, hi) of b.free that part k hands out.
func (b *Batch) freePart(k int) (lo, hi int) {
	n, parts := len(b.free), len(b.freeNext)
	return k * n / parts, (k + 1) * n / parts
}

// newGroup allocates a group for n requests.
func newGroup(n int) *group { return new(group).init(n) }

// init sizes a zero group's per-request slices for n requests.
func (g *group) init(n int) *group {
	g.n = n
	if n == 1 {
		g.ops, g.iovs, g.routes, g.policy = g.inline.op[:], g.inline.iov[:], g.inline.route[:], g.inline.policy[:]
		g.ranges, g.bounds = g.inline.ranges[:0], g.inline.bounds[:0]
		return g
	}
	g.ops, g.iovs, g.routes, g.policy = make([]FileOp, n), make([]IOVec, n), make([]route, n), make([]reqPolicy, n)
	return g
}
