// bandwidth.go owns the measured bandwidth estimate the runtime queue's
// deadline prediction uses: one estimate per (path, device), where path
// names the data path (file_dram for the ring; an off-ring executor
// names its own, executor.path: staged_gpu, gds, ...) and device is the
// file's st_dev.
//
// The estimate is bytes completed divided by busy time: the wall time
// during which at least one owner on that key was dispatched and not yet
// complete. Unlike a per-op rate this measures what the device delivers
// at the queue depth the engine actually runs, which is what "how long
// will these queued bytes take" needs.
//
// Invariants:
//   - A key with less than minBusy of busy time or no completed byte has
//     no rate (0): an unknown rate never makes an owner infeasible.
//   - Every start is matched by exactly one done (admission.go returns
//     window shares exactly once); active and inflight never underflow.
//   - Guarded by admission.mu; no lock of its own.

package engine

import (
	"fmt"
	"sort"
	"time"

	"golang.org/x/sys/unix"
)

// minBusy is the busy time below which a rate is not trusted.
const minBusy = time.Millisecond

// decayBusy: past this much busy time both sums halve, so the estimate
// follows a device whose speed changes (page cache warm, contention).
const decayBusy = 4 * time.Second

type bwKey struct {
	path string
	dev  uint64
}

type bwEntry struct {
	active   int
	inflight uint64 // payload bytes dispatched and not complete
	last     time.Time
	busy     time.Duration
	bytes    float64
}

type bandwidth map[bwKey]*bwEntry

func (m bandwidth) entry(k bwKey) *bwEntry {
	x := m[k]
	if x == nil {
		x = &bwEntry{}
		m[k] = x
	}
	return x
}

func (x *bwEntry) advance(now time.Time) {
	if x.active > 0 {
		x.busy += now.Sub(x.last)
	}
	x.last = now
	if x.busy > decayBusy {
		x.busy /= 2
		x.bytes /= 2
	}
}

func (m bandwidth) start(k bwKey, n uint64, now time.Time) {
	x := m.entry(k)
	x.advance(now)
	x.active++
	x.inflight += n
}

func (m bandwidth) done(k bwKey, n, got uint64, now time.Time) {
	x := m.entry(k)
	x.advance(now)
	x.active--
	x.inflight -= n
	x.bytes += float64(got)
}

// rate is bytes per second, or 0 when unknown.
func (m bandwidth) rate(k bwKey) float64 {
	x := m[k]
	if x == nil || x.busy < minBusy || x.bytes == 0 {
		return 0
	}
	return x.bytes / x.busy.Seconds()
}

// BandwidthStat is one measured estimate.
type BandwidthStat struct {
	Path           string  `json:"path"`
	Device         string  `json:"device"`
	BytesPerSecond float64 `json:"bytes_per_second"` // 0: not yet known
	InflightBytes  uint64  `json:"inflight_bytes"`
}

func (m bandwidth) stats() []BandwidthStat {
	out := make([]BandwidthStat, 0, len(m))
	for k, x := range m {
		out = append(out, BandwidthStat{Path: k.path, Device: fmt.Sprintf("%d:%d", unix.Major(k.dev), unix.Minor(k.dev)),
			BytesPerSecond: m.rate(k), InflightBytes: x.inflight})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Device < out[j].Device
	})
	return out
}

// ringPath is the ring's data path in the estimate.
const ringPath = "file_dram"
