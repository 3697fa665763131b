package affinity

import (
	"sync"
	"testing"
)

// TestMixSpread: addresses a stack apart reach every value of the top
// bits, which is what a counter with 2^bits shards uses.
func TestMixSpread(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stride uintptr
		n      int
		bits   uint
		min    int // distinct top-bit values wanted
	}{
		{"2KiB stacks, 16 shards", 2 << 10, 32, 4, 12},
		{"8KiB stacks, 16 shards", 8 << 10, 32, 4, 12},
		{"64KiB stacks, 16 shards", 64 << 10, 64, 4, 16},
		{"frames 16 B apart, 16 shards", 16, 64, 4, 16},
		{"2KiB stacks, 64 shards", 2 << 10, 256, 6, 48},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[uint64]bool{}
			for i := 0; i < tc.n; i++ {
				seen[Mix(0xc000_0000_00+uintptr(i)*tc.stride)>>(64-tc.bits)] = true
			}
			if len(seen) < tc.min {
				t.Fatalf("%d addresses reached %d of %d values, want at least %d", tc.n, len(seen), 1<<tc.bits, tc.min)
			}
		})
	}
}

// TestHintStable: one goroutine gets one hint from one call site, and
// goroutines get different ones.
func TestHintStable(t *testing.T) {
	const goroutines = 8
	hints := make([]uint64, goroutines)
	var wg sync.WaitGroup
	for g := range hints {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := Hint()
			for i := 0; i < 100; i++ {
				if Hint() != h {
					t.Errorf("goroutine %d: hint changed between calls", g)
					return
				}
			}
			hints[g] = h
		}()
	}
	wg.Wait()
	seen := map[uint64]bool{}
	for _, h := range hints {
		seen[h] = true
	}
	if len(seen) != goroutines {
		t.Fatalf("%d goroutines got %d distinct hints", goroutines, len(seen))
	}
}
