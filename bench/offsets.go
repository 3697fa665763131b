// offsets.go owns the order in which a workload visits its blocks.
//
// Invariants:
//   - Every offset is a multiple of the block size and offset+bs <= Size.
//   - seq visits blocks 0, 1, 2, ... and wraps to 0 after the last whole
//     block; rand draws blocks uniformly (with repeats) from a PCG seeded
//     with Options.Seed, so a seed fixes the sequence.

package bench

import "math/rand/v2"

// offsets yields file offsets. Not safe for concurrent use.
type offsets struct {
	pattern Pattern
	bs      uint64
	blocks  uint64
	next    uint64
	rng     *rand.Rand
}

func newOffsets(o *Options, stream uint64) *offsets {
	return &offsets{pattern: o.Pattern, bs: o.BlockSize, blocks: o.blocks(),
		rng: rand.New(rand.NewPCG(o.Seed, stream))}
}

// Next returns the next offset.
func (g *offsets) Next() uint64 {
	if g.pattern == Rand {
		return g.rng.Uint64N(g.blocks) * g.bs
	}
	b := g.next
	g.next++
	if g.next == g.blocks {
		g.next = 0
	}
	return b * g.bs
}
