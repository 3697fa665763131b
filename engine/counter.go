// counter.go owns counter: a statistics counter that many goroutines
// add to at once, for the engine's per-request counters.
//
// One atomic word, added to by every request on every core, is a cache
// line that all cores fight over (on 16 cores the engine's per-request
// counters were part of the lock traffic that held 32 clients to 0.3x a
// pread loop, docs/performance.md). A counter spreads its adds over
// padded shards picked at random (the runtime's per-thread generator:
// no shared state) and sums them when read.
//
// Invariants: Load is the exact sum of every Add that happened before it;
// concurrent adds may or may not be included.

package engine

import (
	"math/rand/v2"
	"sync/atomic"
)

const counterShards = 16

type counter struct {
	shards [counterShards]struct {
		v atomic.Uint64
		_ [56]byte
	}
}

// Add adds n.
func (c *counter) Add(n uint64) { c.shards[rand.Uint32()%counterShards].v.Add(n) }

// Load returns the sum.
func (c *counter) Load() uint64 {
	var sum uint64
	for i := range c.shards {
		sum += c.shards[i].v.Load()
	}
	return sum
}
