// result.go owns what a run reports: the JSON object printed by
// `orbitefs bench file --json` and its one-line text form.
//
// Invariants:
//   - Ops and Bytes count only operations that completed within the
//     measured Seconds; BytesPerSec = Bytes/Seconds, IOPS = Ops/Seconds.
//   - Latencies are in microseconds, taken from the run's Histogram.

package bench

import (
	"fmt"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// Result is one run's measurement.
type Result struct {
	Impl       string  `json:"impl"` // engine or pread
	File       string  `json:"file"`
	Op         string  `json:"op"`
	Pattern    string  `json:"pattern"`
	BlockSize  uint64  `json:"bs"`
	QueueDepth int     `json:"qd"`
	Jobs       int     `json:"jobs"`
	Size       uint64  `json:"size"`
	Direct     bool    `json:"direct"`
	Seconds    float64 `json:"seconds"`
	Ops        uint64  `json:"ops"`
	Bytes      uint64  `json:"bytes"`

	BytesPerSec float64 `json:"bytes_per_sec"`
	IOPS        float64 `json:"iops"`
	MeanUs      float64 `json:"mean_us"`
	P50Us       float64 `json:"p50_us"`
	P99Us       float64 `json:"p99_us"`
	P999Us      float64 `json:"p999_us"`
	MaxUs       float64 `json:"max_us"`

	// CPU is the whole process's CPU time over the measured interval
	// (user and system, every thread: the driver, the engine's workers
	// and the Go runtime), per operation, to compare with fio's usr/sys.
	UserCPUUsPerOp float64 `json:"user_cpu_us_per_op"`
	SysCPUUsPerOp  float64 `json:"sys_cpu_us_per_op"`
	// AllocsPerOp is Go heap allocations per operation over the run.
	AllocsPerOp float64 `json:"allocs_per_op"`

	// Engine holds engine counters over the run (engine runs only).
	Engine *EngineCounters `json:"engine,omitempty"`

	hist Histogram
}

// EngineCounters are engine and io_uring counters accumulated by one run,
// showing which path the requests took.
type EngineCounters struct {
	Batches          int    `json:"batches"`
	GroupsSubmitted  uint64 `json:"groups_submitted"`
	FastPathHits     uint64 `json:"fast_path_hits"`
	FastPathHandoffs uint64 `json:"fast_path_handoffs"`
	SubmitThrough    uint64 `json:"submit_through"`
	WorkersStarted   uint64 `json:"workers_started"`
	SQEsSubmitted    uint64 `json:"sqes_submitted"`
	FixedBufferOps   uint64 `json:"fixed_buffer_ops"`
	FixedFileOps     uint64 `json:"fixed_file_ops"`
	Rings            int    `json:"rings"`
}

func countersSince(before, after engine.Stats, batches int) *EngineCounters {
	c := &EngineCounters{
		Batches:          batches,
		GroupsSubmitted:  after.GroupsSubmitted - before.GroupsSubmitted,
		FastPathHits:     after.FastPathHits - before.FastPathHits,
		FastPathHandoffs: after.FastPathHandoffs - before.FastPathHandoffs,
		SubmitThrough:    after.SubmitThrough - before.SubmitThrough,
		WorkersStarted:   after.WorkersStarted - before.WorkersStarted,
	}
	if a, b := after.IOUring, before.IOUring; a != nil && b != nil {
		c.SQEsSubmitted = a.Submitted - b.Submitted
		c.FixedBufferOps = a.FixedOps - b.FixedOps
		c.FixedFileOps = a.FixedFileOps - b.FixedFileOps
		c.Rings = a.Rings
	}
	return c
}

// Histogram returns the run's latency histogram.
func (r *Result) Histogram() *Histogram { return &r.hist }

// finish fills the derived fields from the counts, the histogram and the
// measured interval.
func (r *Result) finish(o *Options, impl Impl, elapsed time.Duration, cpu cpuSpan, allocs uint64) {
	r.Impl, r.File, r.Op, r.Pattern = impl.String(), o.File, o.Op.String(), o.Pattern.String()
	r.BlockSize, r.QueueDepth, r.Size, r.Direct = o.BlockSize, o.QueueDepth, o.Size, o.Direct
	r.Jobs = o.jobs()
	r.Seconds = elapsed.Seconds()
	if r.Seconds > 0 {
		r.BytesPerSec = float64(r.Bytes) / r.Seconds
		r.IOPS = float64(r.Ops) / r.Seconds
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	r.MeanUs = us(r.hist.Mean())
	r.P50Us = us(r.hist.Quantile(0.50))
	r.P99Us = us(r.hist.Quantile(0.99))
	r.P999Us = us(r.hist.Quantile(0.999))
	r.MaxUs = us(r.hist.Max())
	if r.Ops > 0 {
		r.UserCPUUsPerOp = us(cpu.user) / float64(r.Ops)
		r.SysCPUUsPerOp = us(cpu.sys) / float64(r.Ops)
		r.AllocsPerOp = float64(allocs) / float64(r.Ops)
	}
}

// String is the one-line human summary.
func (r *Result) String() string {
	mode := "page cache"
	if r.Direct {
		mode = "direct"
	}
	return fmt.Sprintf("%s %s %s bs=%s qd=%d size=%s %s: %.1f MB/s, %.0f IOPS, lat p50 %.0fus p99 %.0fus max %.0fus (%d ops in %.2fs; cpu/op %.1fus usr %.1fus sys)",
		r.Impl, r.Op, r.Pattern, config.Size(r.BlockSize), r.QueueDepth, config.Size(r.Size), mode,
		r.BytesPerSec/1e6, r.IOPS, r.P50Us, r.P99Us, r.MaxUs, r.Ops, r.Seconds, r.UserCPUUsPerOp, r.SysCPUUsPerOp)
}
