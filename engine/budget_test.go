package engine

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestBudgetExact: one goroutine, then another, can take exactly the
// limit, whatever spares the other left on its shard; nothing more fits
// until something is given back.
func TestBudgetExact(t *testing.T) {
	for _, tc := range []struct {
		name         string
		limit, quant uint64
	}{
		{"spares", 1024, 8},
		{"no spares (small limit)", 64, 8}, // 64/(8*16) rounds to 0
		{"bytes", 4 << 20, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBudget(tc.limit, tc.quant)
			step := max(tc.limit/512, 1)
			// Another goroutine takes and gives back on shard 1, which
			// keeps a spare; this one then takes on shard 2.
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < 100; i++ {
					if !b.take(1, step) {
						t.Error("the first take failed")
						return
					}
					b.give(1, step)
				}
			}()
			<-done
			var got uint64
			for b.take(2, step) {
				got += step
				if got > tc.limit {
					t.Fatalf("took %d of a budget of %d", got, tc.limit)
				}
			}
			if got != tc.limit/step*step {
				t.Fatalf("took %d of %d, want all of it", got, tc.limit)
			}
			if n := b.inUse(); n != got {
				t.Fatalf("inUse %d, want %d", n, got)
			}
			b.give(2, step)
			if !b.take(2, step) {
				t.Fatal("a take after a give failed")
			}
			if b.take(2, step) {
				t.Fatal("a take past the limit succeeded")
			}
		})
	}
}

// TestBudgetNeverOver: many goroutines taking and giving at once never
// hold more than the limit together, and everything comes back.
func TestBudgetNeverOver(t *testing.T) {
	const limit = 512
	b := newBudget(limit, 8)
	var held atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 2000; i++ {
				n := uint64(1 + (g+i)%7)
				at := shard((g + i) % budgetShards) // gives land on other shards than takes too
				if !b.take(at, n) {
					continue
				}
				if h := held.Add(int64(n)); h > limit {
					t.Errorf("%d held, limit %d", h, limit)
				}
				held.Add(-int64(n))
				b.give(shard((g+i+1)%budgetShards), n)
			}
		}()
	}
	wg.Wait()
	if n := b.inUse(); n != 0 {
		t.Fatalf("inUse %d after every give", n)
	}
	b.moveMu.Lock()
	b.reclaimLocked()
	b.moveMu.Unlock()
	if n := b.taken.Load(); n != 0 {
		t.Fatalf("taken %d after every give and a reclaim", n)
	}
}

// TestBudgetInUseSkipsMovingRoom: while a reclaim is half done (the
// spares swapped out, taken not yet lowered), inUse waits for it rather
// than count the room in between as held; a waiter for bytes at a batch
// head that read such a figure slept while the bytes were free.
func TestBudgetInUseSkipsMovingRoom(t *testing.T) {
	b := newBudget(16<<10, 1<<20) // quantum 128
	if !b.take(1, 100) {          // refills shard 1: a spare of 128
		t.Fatal("take")
	}
	if got := b.inUse(); got != 100 {
		t.Fatalf("inUse %d, want 100", got)
	}
	b.moveMu.Lock() // a reclaim, stepped by hand: its first half
	var got uint64
	for i := range b.shards {
		got += b.shards[i].spare.Swap(0)
	}
	read := make(chan uint64)
	go func() { read <- b.inUse() }()
	select {
	case v := <-read:
		t.Fatalf("inUse read %d in the middle of a reclaim", v)
	case <-time.After(50 * time.Millisecond):
	}
	b.taken.Add(-got) // its second half
	b.moveMu.Unlock()
	if v := <-read; v != 100 {
		t.Fatalf("inUse %d after the reclaim, want 100", v)
	}
}

// TestBudgetSpareBound: takes of a quantum or more never refill a spare,
// and small ones keep each spare under two quanta, so the spares hold at
// most a quarter of the limit whatever the mix of sizes.
func TestBudgetSpareBound(t *testing.T) {
	b := newBudget(4<<30, byteQuantum)
	perShard := int(b.limit/budgetShards/(16<<20)) - 1 // leaves room for the small takes
	for at := shard(0); at < budgetShards; at++ {
		for i := 0; i < perShard; i++ {
			if !b.take(at, 16<<20) {
				t.Fatalf("take %d on shard %d", i, at)
			}
			for j := 0; j < 3; j++ {
				if !b.take(at, 4<<10) {
					t.Fatal("small take")
				}
			}
		}
	}
	var spare uint64
	for i := range b.shards {
		v := b.shards[i].spare.Load()
		if v > 2*b.quantum {
			t.Fatalf("shard %d keeps %d, over two quanta (%d)", i, v, 2*b.quantum)
		}
		spare += v
	}
	if spare > b.limit/4 {
		t.Fatalf("spares hold %d of a %d limit", spare, b.limit)
	}
}
