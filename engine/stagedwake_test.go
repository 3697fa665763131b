package engine

import (
	"testing"

	"github.com/orbitefs/orbitefs/config"
)

// TestStagedWake: a job on an O_DIRECT file wakes only enough parked
// lanes for its units to fill their slots, every lane when fewer are
// parked; a job read through the page cache wakes every lane; a lane
// wakes once per pause; a job whose units the page cache serves (no
// O_DIRECT fd, or unaligned) wakes every lane.
func TestStagedWake(t *testing.T) {
	const lanes, chunks = 4, 64 // 16 slots per lane
	job := func(fd, units int) *offRing {
		return &offRing{g: &group{ent: &segEntry{direct: FileRef{FD: fd}, dioOff: 4096}}, units: make([]unit, units)}
	}
	unaligned := job(3, 1)
	unaligned.units[0].n = 512 // fileFor sends it through the page cache
	cases := []struct {
		name   string
		parked []bool
		x      *offRing
		want   []bool // lanes with a wake-up pending
	}{
		{"direct, one lane's worth", []bool{false, true, true, true}, job(3, 16), []bool{false, true, false, false}},
		{"direct, two lanes' worth", []bool{true, true, true, true}, job(3, 17), []bool{true, true, false, false}},
		{"direct, too few parked", []bool{false, false, true, false}, job(3, 40), []bool{true, true, true, true}},
		{"buffered", []bool{true, true, true, true}, job(-1, 1), []bool{true, true, true, true}},
		{"unaligned on an O_DIRECT file", []bool{true, true, true, true}, unaligned, []bool{true, true, true, true}},
		{"no job", []bool{false, true, false, true}, nil, []bool{true, true, true, true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &stagedExec{e: &Engine{cfg: config.Engine{StagingChunkCount: chunks}}}
			for i := range lanes {
				s.lanes = append(s.lanes, &lane{s: s, wake: make(chan struct{}, 1), parked: c.parked[i]})
			}
			s.wakeLocked(c.x)
			for i, l := range s.lanes {
				if got := len(l.wake) == 1; got != c.want[i] {
					t.Errorf("lane %d woken %v, want %v", i, got, c.want[i])
				}
			}
			// A lane woken from its pause is parked no more: a second job
			// wakes the next parked one.
			if c.name == "direct, one lane's worth" {
				s.wakeLocked(job(3, 1))
				if len(s.lanes[2].wake) != 1 || len(s.lanes[3].wake) != 0 {
					t.Errorf("second job woke lanes 2/3: %d/%d, want 1/0", len(s.lanes[2].wake), len(s.lanes[3].wake))
				}
			}
		})
	}
}

// TestStagedLanePark: an idle lane parks only with a live slot, looked
// at when it parks: slots that died after its last fill (an unconfirmed
// WRITE copy, a poisoned ring) leave live stale, and a lane parked on
// it would be woken for units it cannot take while the lanes that can
// stay asleep.
func TestStagedLanePark(t *testing.T) {
	s := &stagedExec{}
	dead := &lane{s: s, slots: []slot{{state: slotDead}, {state: slotDead}}, live: true}
	s.live = 1
	dead.park()
	if dead.parked || dead.live || s.live != 0 {
		t.Fatalf("a lane whose slots all died: parked %v, live %v, executor's live count %d; want false, false, 0", dead.parked, dead.live, s.live)
	}
	ok := &lane{s: s, slots: []slot{{state: slotDead}, {state: slotFree}}, live: true}
	s.live = 1
	ok.park()
	if !ok.parked {
		t.Fatal("a lane with a free slot did not park")
	}
}
