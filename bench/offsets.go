// offsets.go owns the order in which a workload visits its blocks.
//
// Invariants:
//   - Every offset is a multiple of the block size and offset+bs <= Size.
//   - seq visits blocks 0, 1, 2, ... and wraps to 0 after the last whole
//     block; rand draws blocks uniformly (with repeats) from a PCG seeded
//     with Options.Seed, so a seed fixes the sequence.
//   - A seq generator may be shared by goroutines (each block still
//     comes once per pass); a rand one belongs to one goroutine.

package bench

import (
	"math/rand/v2"
	"sync/atomic"
)

// offsets yields file offsets.
type offsets struct {
	pattern Pattern
	bs      uint64
	blocks  uint64
	next    atomic.Uint64 // seq: blocks handed out
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
	return (g.next.Add(1) - 1) % g.blocks * g.bs
}
