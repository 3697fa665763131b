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

// newGroup returns a group with its per-request slices sized for n
// requests, inline when n is 1.
func newGroup(n int) *group {
	g := &group{n: n}
	if n == 1 {
		g.ops, g.iovs, g.routes, g.policy = g.inline.op[:], g.inline.iov[:], g.inline.route[:], g.inline.policy[:]
		g.ranges, g.bounds = g.inline.ranges[:0], g.inline.bounds[:0]
		return g
	}
	g.ops, g.iovs, g.routes, g.policy = make([]FileOp, n), make([]IOVec, n), make([]route, n), make([]reqPolicy, n)
	return g
}
