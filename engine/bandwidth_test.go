package engine

import (
	"testing"
	"time"
)

// The estimate is bytes over busy time: overlapping owners share their
// wall time, idle gaps do not count, and too little busy time is unknown.
func TestBandwidthBusyTime(t *testing.T) {
	m := bandwidth{}
	k := bwKey{path: ringPath, dev: 1}
	t0 := time.Unix(1000, 0)
	m.start(k, 100, t0)
	if m.rate(k) != 0 {
		t.Fatal("a rate before any completion")
	}
	m.start(k, 100, t0.Add(10*time.Millisecond))
	m.done(k, 100, 100, t0.Add(20*time.Millisecond))
	m.done(k, 100, 100, t0.Add(40*time.Millisecond))
	// Idle for a second: not busy time.
	m.start(k, 200, t0.Add(time.Second+40*time.Millisecond))
	m.done(k, 200, 200, t0.Add(time.Second+50*time.Millisecond))
	// 400 bytes over 40 ms + 10 ms busy.
	if got, want := m.rate(k), 400/0.050; got < want*0.999 || got > want*1.001 {
		t.Fatalf("rate %.1f B/s, want %.1f", got, want)
	}
	if x := m.entry(k); x.active != 0 || x.inflight != 0 {
		t.Fatalf("entry after drain: %+v", x)
	}
	short := bwKey{path: "gds", dev: 1}
	m.start(short, 1, t0)
	m.done(short, 1, 1, t0.Add(minBusy/2))
	if m.rate(short) != 0 {
		t.Fatal("a rate from less than minBusy of busy time")
	}
	if s := m.stats(); len(s) != 2 || s[0].Path != "file_dram" || s[1].Path != "gds" {
		t.Fatalf("stats %+v", s)
	}
}
