package engine

// lanepool_test.go: the order in which lanes take lane copies and host
// copy units, and that only a lane that found nothing is woken.

import (
	"sync/atomic"
	"testing"
)

// TestLanePoolTakesInTurn: with lane copies and units both waiting, a
// lane takes one of each in turn, so a stream of small copies never
// starves a large load, nor it them; once one kind runs out the other is
// taken back to back; a take that finds nothing marks the lane idle, and
// new work claims it (one wake-up) exactly once.
func TestLanePoolTakesInTurn(t *testing.T) {
	p := newLanePool(1, nil)
	b := &Batch{}
	x := &offRing{g: &group{b: b}, units: make([]unit, 3), skip: make([]atomic.Bool, 1)}
	x.avail.Store(3)
	p.q.push(x)
	copies := []*group{{b: b}, {b: b}}
	p.copies = append(p.copies, copies...)

	var got []string
	for {
		g, y, k := p.take()
		switch {
		case g != nil:
			got = append(got, "copy")
		case k >= 0 && y == x:
			got = append(got, "unit")
		default:
			got = append(got, "none")
		}
		if got[len(got)-1] == "none" {
			break
		}
	}
	want := []string{"copy", "unit", "copy", "unit", "unit", "none"}
	if len(got) != len(want) {
		t.Fatalf("takes %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("takes %v, want %v", got, want)
		}
	}
	if p.idle != 1 {
		t.Fatalf("idle %d after a take found nothing, want 1", p.idle)
	}
	if k := p.wakeLocked(5); k != 1 || p.idle != 0 {
		t.Fatalf("wakeLocked(5) = %d, idle %d; want 1 wake-up for the one idle lane, 0 left", k, p.idle)
	}
	if k := p.wakeLocked(1); k != 0 {
		t.Fatalf("a second wakeLocked = %d, want 0: the lane was claimed already", k)
	}
}
