package engine

import (
	"testing"

	"github.com/orbitefs/orbitefs/config"
)

// TestStagedWake: a job on an O_DIRECT file wakes only enough parked
// lanes for its units to fill their slots, every lane when fewer are
// parked; a job read through the page cache wakes every lane; a lane
// wakes once per pause.
func TestStagedWake(t *testing.T) {
	const lanes, chunks = 4, 64 // 16 slots per lane
	job := func(fd, units int) *offRing {
		return &offRing{g: &group{ent: &segEntry{direct: FileRef{FD: fd}}}, units: make([]unit, units)}
	}
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
