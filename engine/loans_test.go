package engine

import "testing"

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
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var lt loanTable
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
			if n, _ := lt.closeIfIdle(false); n != 0 {
				t.Fatalf("%d owners still hold loans after the drops", n)
			}
			if closed, _, _ := lt.take(0, 1, a); !closed {
				t.Fatal("a closed table granted a loan")
			}
		})
	}
}
