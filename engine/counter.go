// counter.go owns counter: a statistics counter that many goroutines
// add to at once, for the engine's per-request counters.
//
// One atomic word, added to by every request on every core, is a cache
// line that all cores fight over (on 16 cores the engine's per-request
// counters were part of the lock traffic that held 32 clients to 0.3x a
// pread loop, docs/performance.md). A counter spreads its adds over
// padded shards and sums them when read. The shard is picked by the
// adding goroutine's stack address (internal/affinity: the engine does
// not import unsafe), so one goroutine keeps adding to one shard, whose
// cache line stays on the core the goroutine runs on. A random shard
// per add (the runtime's per-thread generator) moved every shard's line
// between the cores that added, and the generator itself cost a quarter
// of each add (32 jobs at QD 1 on dev, 2026-12-02, docs/performance.md).
//
// Invariants: Load is the exact sum of every Add that happened before it;
// concurrent adds may or may not be included.

package engine

import (
	"sync/atomic"

	"github.com/orbitefs/orbitefs/internal/affinity"
)

const (
	counterShardBits = 4
	counterShards    = 1 << counterShardBits
)

type counter struct {
	shards [counterShards]struct {
		v atomic.Uint64
		_ [56]byte
	}
}

// Add adds n.
func (c *counter) Add(n uint64) { c.shards[counterShard(affinity.Hint())].v.Add(n) }

// counterShard maps a goroutine's hint (internal/affinity) to a shard.
func counterShard(hint uint64) uint32 { return uint32(hint >> (64 - counterShardBits)) }

// Load returns the sum.
func (c *counter) Load() uint64 {
	var sum uint64
	for i := range c.shards {
		sum += c.shards[i].v.Load()
	}
	return sum
}
