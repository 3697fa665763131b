package engine

import (
	"sync"
	"sync/atomic"
	"testing"
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
			// Another goroutine takes and gives back: its shard keeps a spare.
			done := make(chan struct{})
			go func() {
				defer close(done)
				for i := 0; i < 100; i++ {
					if !b.take(step) {
						t.Error("the first take failed")
						return
					}
					b.give(step)
				}
			}()
			<-done
			var got uint64
			for b.take(step) {
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
			b.give(step)
			if !b.take(step) {
				t.Fatal("a take after a give failed")
			}
			if b.take(step) {
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
				if !b.take(n) {
					continue
				}
				if h := held.Add(int64(n)); h > limit {
					t.Errorf("%d held, limit %d", h, limit)
				}
				held.Add(-int64(n))
				b.give(n)
			}
		}()
	}
	wg.Wait()
	if n := b.inUse(); n != 0 {
		t.Fatalf("inUse %d after every give", n)
	}
	b.reclaim()
	if n := b.taken.Load(); n != 0 {
		t.Fatalf("taken %d after every give and a reclaim", n)
	}
}

// TestUsersCloseDrains: a close sees every user that entered before it,
// refuses later ones, and the count reaches 0 only when the last leaves,
// whichever goroutine and shard it leaves from.
func TestUsersCloseDrains(t *testing.T) {
	var u users
	const n = 8
	left := make(chan bool, n)
	ready := make(chan struct{}, n)
	release := make(chan struct{})
	for i := 0; i < n; i++ {
		if !u.enter() {
			t.Fatal("enter failed while open")
		}
		go func() { // leave from other goroutines (other shards)
			ready <- struct{}{}
			<-release
			left <- u.leave()
		}()
	}
	for i := 0; i < n; i++ {
		<-ready
	}
	u.closing.Store(true)
	if c := u.count(); c != n {
		t.Fatalf("count %d after closing, want %d", c, n)
	}
	if u.enter() {
		t.Fatal("enter succeeded while closing")
	}
	if c := u.count(); c != n {
		t.Fatalf("count %d after a refused enter, want %d", c, n)
	}
	close(release)
	for i := 0; i < n; i++ {
		if !<-left {
			t.Fatal("leave did not see closing")
		}
	}
	if c := u.count(); c != 0 {
		t.Fatalf("count %d after every leave", c)
	}
}
