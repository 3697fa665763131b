package engine

import (
	"sync"
	"testing"

	"github.com/orbitefs/orbitefs/internal/affinity"
)

// TestCounterShardSpread: goroutine stacks a few KiB apart (the
// runtime's smallest are 2 KiB) land on different shards, and every
// shard is reachable, so adds of different goroutines rarely share a
// cache line.
func TestCounterShardSpread(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stride uintptr // distance between consecutive stacks
		n      int     // stacks
		min    int     // distinct shards wanted
	}{
		{"2KiB stacks", 2 << 10, 32, 12},
		{"8KiB stacks", 8 << 10, 32, 12},
		{"64KiB stacks", 64 << 10, 64, counterShards},
		{"frames 16 B apart", 16, 64, counterShards},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[uint32]bool{}
			base := uintptr(0xc000_0000_00)
			for i := 0; i < tc.n; i++ {
				s := counterShard(affinity.Mix(base + uintptr(i)*tc.stride))
				if s >= counterShards {
					t.Fatalf("shard %d of %d", s, counterShards)
				}
				seen[s] = true
			}
			if len(seen) < tc.min {
				t.Fatalf("%d stacks reached %d shards, want at least %d", tc.n, len(seen), tc.min)
			}
		})
	}
}

// TestCounterExact: Load after the adders are done is their exact sum.
func TestCounterExact(t *testing.T) {
	var c counter
	var wg sync.WaitGroup
	const goroutines, adds = 16, 1000
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < adds; i++ {
				c.Add(uint64(g + 1))
			}
		}()
	}
	wg.Wait()
	want := uint64(adds * goroutines * (goroutines + 1) / 2)
	if got := c.Load(); got != want {
		t.Fatalf("Load %d, want %d", got, want)
	}
}
