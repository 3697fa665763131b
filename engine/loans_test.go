package engine

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestLoanShards: overlapping loans meet whatever their sizes and shard
// positions (wrapping spans, spans of every shard); disjoint ones on the
// same shard do not conflict; a drop frees exactly its owner's loans.
func TestLoanShards(t *testing.T) {
	const page = 1 << loanShift
	a, b := &group{}, &group{}
	cases := []struct {
		name         string
		alo, ahi     uint64
		blo, bhi     uint64
		wantConflict bool
	}{
		{"same page", 0, 100, 50, 60, true},
		{"adjacent pages", 0, page, page, 2 * page, false},
		{"same shard, pages apart", 0, page, loanShards * page, (loanShards + 1) * page, false},
		{"wrapping span overlaps its tail", (loanShards - 1) * page, (loanShards + 2) * page, (loanShards + 1) * page, (loanShards+1)*page + 8, true},
		{"large loan covers every shard", 0, 1 << 30, 12345 * page, 12345*page + 1, true},
		{"large loan, byte past its end", 0, 1 << 30, 1 << 30, 1<<30 + 1, false},
		{"small loan, then a large one over it", 5000 * page, 5000*page + 8, 0, 1 << 30, true},
		{"two large loans overlapping", 0, 64 * page, 63 * page, 200 * page, true},
		{"two large loans disjoint", 0, 64 * page, 64 * page, 200 * page, false},
		// The big index files a large loan under each 1 MiB granule it
		// covers, or as wide past bigSpread granules.
		{"large loans meeting in the second granule", 1<<20 - 128<<10, 1<<20 + 128<<10, 1<<20 + 64<<10, 1<<20 + 200<<10, true},
		{"large loan, then one over its granule and the one before", 1<<20 + 64<<10, 1<<20 + 200<<10, 1<<20 - 128<<10, 1<<20 + 128<<10, true},
		{"large loans in neighbouring granules", 1<<20 - 128<<10, 1 << 20, 1 << 20, 1<<20 + 128<<10, false},
		{"wide loan, then a large one inside it", 0, 100 << 20, 50 << 20, 50<<20 + 128<<10, true},
		{"large loan, then a wide one over it", 50 << 20, 50<<20 + 128<<10, 0, 100 << 20, true},
		{"large loan, then a wide one past it", 50 << 20, 50<<20 + 128<<10, 60 << 20, 200 << 20, false},
		{"large loan, then a small one inside it", 3 << 20, 3<<20 + 128<<10, 3<<20 + page, 3<<20 + page + 8, true},
		{"large loan, then a small one past it", 3 << 20, 3<<20 + 128<<10, 3<<20 + 128<<10, 3<<20 + 129<<10, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var lt loanTable
			// Large loans of a third group far away: the big index has
			// more granules than a case's loans cover.
			far := &group{}
			for k := uint64(0); k < 8; k++ {
				lt.take(4<<30+k<<20, 4<<30+k<<20+128<<10, far)
			}
			if closed, _, ok := lt.take(c.alo, c.ahi, a); closed || !ok {
				t.Fatal("first loan refused")
			}
			closed, held, ok := lt.take(c.blo, c.bhi, b)
			if closed || ok == c.wantConflict {
				t.Fatalf("second loan granted=%v, want conflict=%v", ok, c.wantConflict)
			}
			if c.wantConflict && held.owner != a {
				t.Fatalf("conflict names %p, want %p", held.owner, a)
			}
			lt.drop(c.alo, c.ahi, a)
			if !c.wantConflict {
				lt.drop(c.blo, c.bhi, b)
			}
			for k := uint64(0); k < 8; k++ {
				lt.drop(4<<30+k<<20, 4<<30+k<<20+128<<10, far)
			}
			if n, _, _ := lt.closeIfIdle(false); n != 0 {
				t.Fatalf("%d owners still hold loans after the drops", n)
			}
			if closed, _, _ := lt.take(0, 1, a); !closed {
				t.Fatal("a closed table granted a loan")
			}
		})
	}
}

// TestLoanDropOne: a drop frees exactly the range it names: the owner's
// other large loans in the same granules stay held, and a range taken
// twice stays held until dropped twice.
func TestLoanDropOne(t *testing.T) {
	a, b := &group{}, &group{}
	var lt loanTable
	const unit = 128 << 10
	for _, lo := range []uint64{0, unit, unit} {
		if _, _, ok := lt.take(lo, lo+unit, a); !ok {
			t.Fatalf("own loan at %d refused", lo)
		}
	}
	lt.drop(0, unit, a)
	if _, _, ok := lt.take(0, unit, b); !ok {
		t.Fatal("the dropped range is still held")
	}
	lt.drop(unit, 2*unit, a)
	if _, _, ok := lt.take(unit, 2*unit, b); ok {
		t.Fatal("a range taken twice and dropped once was granted to another group")
	}
	lt.drop(unit, 2*unit, a)
	if _, _, ok := lt.take(unit, 2*unit, b); !ok {
		t.Fatal("a range dropped as often as taken is still held")
	}
	if got := lt.bigN.Load(); got != 2 {
		t.Fatalf("bigN = %d, want 2 (b's two loans)", got)
	}
}

// TestLoanTableConcurrent: many goroutines taking and dropping random
// small and large ranges; no two granted loans ever overlap.
func TestLoanTableConcurrent(t *testing.T) {
	var lt loanTable
	var mu sync.Mutex
	held := map[*group][2]uint64{}
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range 2000 {
				g := &group{}
				lo := rng.Uint64N(1 << 22)
				n := uint64(1 + rng.IntN(4096))
				if rng.IntN(8) == 0 {
					n = uint64(1 + rng.IntN(1<<20))
				}
				if _, _, ok := lt.take(lo, lo+n, g); !ok {
					continue
				}
				mu.Lock()
				for o, r := range held {
					if r[0] < lo+n && lo < r[1] {
						mu.Unlock()
						t.Errorf("granted [%d, %d) over [%d, %d) of %p", lo, lo+n, r[0], r[1], o)
						return
					}
				}
				held[g] = [2]uint64{lo, lo + n}
				mu.Unlock()
				mu.Lock()
				delete(held, g)
				mu.Unlock()
				lt.drop(lo, lo+n, g)
			}
		}()
	}
	wg.Wait()
	if n, _, _ := lt.closeIfIdle(false); n != 0 {
		t.Fatalf("%d owners hold loans after every drop", n)
	}
}

// TestLoanCheckThenInsert holds one grant between its conflict check and
// its insert (the granting hook) while an overlapping grant runs: the
// second must wait for the first and then see it. Were the check and the
// insert not under one hold of the covering locks, the second would be
// granted while the first is held, and both would own the bytes.
func TestLoanCheckThenInsert(t *testing.T) {
	const page = 1 << loanShift
	cases := []struct {
		name     string
		alo, ahi uint64
		blo, bhi uint64
	}{
		{"same page", 0, 100, 50, 60},
		{"spans meet in one shard", 0, 3 * page, 2*page + 8, 2*page + 16},
		{"small over a large one", 0, 1 << 30, 5000 * page, 5000*page + 8},
		{"large over a small one", 5000 * page, 5000*page + 8, 0, 1 << 30},
		{"two large ones", 0, 64 * page, 63 * page, 200 * page},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var lt loanTable
			a, b := &group{}, &group{}
			bDone := make(chan bool, 1)
			var passedA bool // b's grant finished while a was held
			lt.granting = func() {
				lt.granting = nil // b runs unhooked
				go func() {
					_, _, ok := lt.take(c.blo, c.bhi, b)
					bDone <- ok
				}()
				// A correct table blocks b on a's locks; give a broken
				// one ample time to let b through.
				select {
				case okB := <-bDone:
					passedA = true
					bDone <- okB
				case <-time.After(200 * time.Millisecond):
				}
			}
			_, _, okA := lt.take(c.alo, c.ahi, a)
			okB := <-bDone
			if passedA || !okA || okB {
				t.Fatalf("a granted %v, b granted %v, b finished while a was between check and insert: %v; want only a, b waiting for it", okA, okB, passedA)
			}
		})
	}
}

// BenchmarkLoansKVSwap: the loans of the KV swap workload, each client
// holding its batch's 16 loans of 128 KiB in its own 2 MiB slot of one
// region: the cost of a grant and a drop as the clients (and so the loans
// held) grow, either one request at a time (the client keeps 15 more
// held) or a whole group at once, again over the group's own loans
// (takeAll and dropAll, as acquireLoans and releaseLoans do).
func BenchmarkLoansKVSwap(b *testing.B) {
	const (
		perBatch = 16
		unit     = 128 << 10
	)
	for _, clients := range []int{1, 16, 64} {
		b.Run(fmt.Sprintf("request/clients=%d", clients), func(b *testing.B) {
			var t loanTable
			owners := make([]*group, clients)
			for c := range owners {
				owners[c] = &group{}
				for k := range perBatch - 1 {
					lo := uint64(c*perBatch+k) * unit
					t.take(lo, lo+unit, owners[c])
				}
			}
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				c := int(next.Add(1)-1) % clients
				lo := uint64(c*perBatch+perBatch-1) * unit
				for pb.Next() {
					if _, _, ok := t.take(lo, lo+unit, owners[c]); !ok {
						panic("own slot refused")
					}
					t.drop(lo, lo+unit, owners[c])
				}
			})
		})
		b.Run(fmt.Sprintf("group/clients=%d", clients), func(b *testing.B) {
			var t loanTable
			owners := make([]*group, clients)
			sets := make([][]hostRange, clients)
			for c := range owners {
				owners[c] = &group{}
				for k := range perBatch {
					lo := uint64(c*perBatch+k) * unit
					sets[c] = append(sets[c], hostRange{lo: lo, hi: lo + unit})
				}
				t.takeAll(sets[c], owners[c]) // the loans the others hold
			}
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				c := int(next.Add(1)-1) % clients
				g, rs := owners[c], sets[c]
				for pb.Next() {
					if _, _, _, ok := t.takeAll(rs, g); !ok {
						panic("own slot refused")
					}
					t.dropAll(rs, g)
				}
			})
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/perBatch, "ns/request")
		})
	}
}

// TestLoanTakeAll: a pass grants every range or none, names the range
// that met another group's loan, and its drop frees them all, large and
// small alike.
func TestLoanTakeAll(t *testing.T) {
	const page = 1 << loanShift
	var lt loanTable
	a, b := &group{}, &group{}
	rs := []hostRange{
		{lo: 0, hi: page},                  // small
		{lo: 1 << 20, hi: 1<<20 + 128<<10}, // large
		{lo: 10 * page, hi: 10*page + 8},   // small, meets b below
		{lo: 4 << 20, hi: 4<<20 + 64*page}, // large
	}
	if _, _, ok := lt.take(10*page+4, 10*page+6, b); !ok {
		t.Fatal("b's loan refused on an empty table")
	}
	closed, held, at, ok := lt.takeAll(rs, a)
	if closed || ok || at != 2 || held.owner != b {
		t.Fatalf("takeAll over b's loan: closed %v ok %v at %d held by b %v; want refused at 2 by b", closed, ok, at, held.owner == b)
	}
	for _, r := range []hostRange{rs[0], rs[1], rs[3]} {
		if _, _, ok := lt.take(r.lo, r.hi, b); !ok {
			t.Fatalf("[%#x, %#x) refused after a refused pass: the pass granted part of its ranges", r.lo, r.hi)
		}
		lt.drop(r.lo, r.hi, b)
	}
	lt.drop(10*page+4, 10*page+6, b)
	if _, _, _, ok := lt.takeAll(rs, a); !ok {
		t.Fatal("takeAll refused on an empty table")
	}
	for _, r := range rs {
		if _, _, ok := lt.take(r.lo, r.hi, b); ok {
			t.Fatalf("[%#x, %#x) granted to b over a's pass", r.lo, r.hi)
		}
	}
	lt.dropAll(rs, a)
	if n, _, pins := lt.lockAll(); n+pins != 0 {
		t.Fatalf("%d loans and %d pins left after dropAll", n, pins)
	}
	lt.unlockAll()
	if lt.bigN.Load() != 0 {
		t.Fatalf("bigN %d after dropAll, want 0", lt.bigN.Load())
	}
}

// TestLoanDropAllOrder: a drop of a group's large and small loans never
// holds bigMu while it waits for a shard's lock. A grant or a pin holds
// its shards and then waits for bigMu (while any large loan exists), so
// a drop that held bigMu and then waited for one of those shards
// deadlocked the two (and the region with them). Here a shard the drop
// needs is held; while the drop waits for it, bigMu must be free.
func TestLoanDropAllOrder(t *testing.T) {
	const page = 1 << loanShift
	var lt loanTable
	g := &group{}
	rs := []hostRange{
		{lo: 1 << 20, hi: 1<<20 + 128<<10}, // large, first: a drop in order takes bigMu first
		{lo: 5 * page, hi: 5*page + 8},     // small, in shard 5
	}
	if _, _, _, ok := lt.takeAll(rs, g); !ok {
		t.Fatal("takeAll refused on an empty table")
	}
	s := &lt.shards[5]
	s.mu.Lock() // a grant or pin holding shard 5
	done := make(chan struct{})
	go func() {
		lt.dropAll(rs, g)
		close(done)
	}()
	time.Sleep(50 * time.Millisecond) // the drop reaches shard 5 and waits
	free := lt.bigMu.TryLock()
	if free {
		lt.bigMu.Unlock()
	}
	s.mu.Unlock()
	<-done
	if !free {
		t.Fatal("dropAll held bigMu while it waited for a shard's lock")
	}
	if lt.bigN.Load() != 0 || len(s.loans) != 0 {
		t.Fatalf("after dropAll: %d large and %d small loans left", lt.bigN.Load(), len(s.loans))
	}
}

// TestLoanRun: a region's run is granted in one pass where that takes no
// more locks than its ranges one at a time; scattered small ranges go
// one by one; a run ends at the next region.
func TestLoanRun(t *testing.T) {
	const page = 1 << loanShift
	r1, r2 := &Region{}, &Region{}
	cases := []struct {
		name string
		rs   []hostRange
		want int
	}{
		{"small, close together", []hostRange{{r1, 0, page, 0}, {r1, 2 * page, 3 * page, 1}}, 2},
		{"small, scattered", []hostRange{{r1, 0, page, 0}, {r1, 100 * page, 101 * page, 1}}, 1},
		{"one large among small", []hostRange{{r1, 0, page, 0}, {r1, 100 * page, 200 * page, 1}, {r1, 500 * page, 501 * page, 2}}, 3},
		{"ends at the next region", []hostRange{{r1, 0, page, 0}, {r1, page, 2 * page, 1}, {r2, 0, page, 2}}, 2},
	}
	for _, c := range cases {
		if got := len(loanRun(c.rs)); got != c.want {
			t.Errorf("%s: a pass of %d ranges, want %d", c.name, got, c.want)
		}
	}
}

// TestLoanPins: a copy's pin (no owner) never conflicts with another pin,
// conflicts with a group's loan either way round, and is counted once by
// closeIfIdle whatever its size (small: in several shards; large: under
// several granules; wide), so an unregister sees every copy running and
// none that ended.
func TestLoanPins(t *testing.T) {
	const page = 1 << loanShift
	cases := []struct {
		name   string
		lo, hi uint64
	}{
		{"small, over a wrapping span", (loanShards - 1) * page, (loanShards + 2) * page},
		{"large, over granules", 1<<20 - 128<<10, 4<<20 + 1},
		{"wide", 0, 100 << 20},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var lt loanTable
			g := &group{}
			for i := 1; i <= 2; i++ { // the same range twice: two copies
				if closed, _, ok := lt.pin(c.lo, c.hi); closed || !ok {
					t.Fatalf("pin %d refused beside another pin", i)
				}
			}
			if _, _, ok := lt.pin(c.lo+1, c.lo+2); !ok {
				t.Fatal("an overlapping pin refused")
			}
			if _, _, pins := lt.closeIfIdle(false); pins != 3 || lt.closed {
				t.Fatalf("closeIfIdle counted %d pins (closed %v), want 3 and open", pins, lt.closed)
			}
			if _, _, ok := lt.take(c.lo, c.lo+1, g); ok {
				t.Fatal("a group's loan granted over a pin")
			}
			lt.unpin(c.lo+1, c.lo+2)
			lt.unpin(c.lo, c.hi)
			if _, _, pins := lt.closeIfIdle(false); pins != 1 {
				t.Fatalf("after two unpins closeIfIdle counted %d pins, want 1", pins)
			}
			lt.unpin(c.lo, c.hi)
			if _, _, ok := lt.take(c.lo, c.hi, g); !ok {
				t.Fatal("a group's loan refused once every pin was dropped")
			}
			if _, held, ok := lt.pin(c.hi-1, c.hi); ok || held.owner != g {
				t.Fatalf("a pin over a group's loan: granted %v, held by %p", ok, held.owner)
			}
			lt.drop(c.lo, c.hi, g)
			if n, _, pins := lt.closeIfIdle(false); n != 0 || pins != 0 || !lt.closed {
				t.Fatalf("idle table: %d loans, %d pins, closed %v", n, pins, lt.closed)
			}
			if closed, _, _ := lt.pin(c.lo, c.hi); !closed {
				t.Fatal("a pin granted on a closed table")
			}
		})
	}
}
