//go:build linux && !noiouring

package bench

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestPlanLoad: every plan fits the limits it was made for, covers the
// file, and a file within half of max_inflight_bytes stays one
// submission.
func TestPlanLoad(t *testing.T) {
	small := config.DefaultEngine()
	small.MaxInflightBytes, small.MaxTransferBytes, small.MaxBatchRequests = 1<<20, 256<<10, 3
	tight := small
	tight.MaxInflightBatches = 1
	fewReqs := small
	fewReqs.MaxBatchRequests, fewReqs.MaxAllocatedRequests = 2, 3
	const gib = 1 << 30
	for _, c := range []struct {
		name          string
		size, request uint64
		cfg           config.Engine
		want          LoadPlan
	}{
		// The safetensors file on the default limits.
		{"4GiB+5KiB default", 4*gib + 5<<10, 256 << 20, config.DefaultEngine(), LoadPlan{Request: 256 << 20, PerSubmit: 8, Submissions: 3, InFlight: 2}},
		{"1GiB default: one group", gib, 256 << 20, config.DefaultEngine(), LoadPlan{Request: 256 << 20, PerSubmit: 4, Submissions: 1, InFlight: 1}},
		{"4MiB requests default", 4*gib + 5<<10, 4 << 20, config.DefaultEngine(), LoadPlan{Request: 4 << 20, PerSubmit: 512, Submissions: 3, InFlight: 2}},
		{"request over max_transfer_bytes", 5<<20 + 5<<10, 1 << 20, small, LoadPlan{Request: 256 << 10, PerSubmit: 2, Submissions: 11, InFlight: 2}},
		{"max_batch_requests", 5 << 20, 64 << 10, small, LoadPlan{Request: 64 << 10, PerSubmit: 3, Submissions: 27, InFlight: 5}},
		{"max_inflight_batches", 5 << 20, 64 << 10, tight, LoadPlan{Request: 64 << 10, PerSubmit: 3, Submissions: 27, InFlight: 1}},
		{"max_allocated_requests", 5 << 20, 64 << 10, fewReqs, LoadPlan{Request: 64 << 10, PerSubmit: 2, Submissions: 40, InFlight: 1}},
		{"unaligned budget", 100 << 10, 1 << 20, func() config.Engine { c := small; c.MaxInflightBytes = 10000; c.MaxTransferBytes = 10000; return c }(),
			LoadPlan{Request: 4096, PerSubmit: 1, Submissions: 25, InFlight: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := PlanLoad(c.size, c.request, c.cfg)
			if err != nil {
				t.Fatal(err)
			}
			if p != c.want {
				t.Errorf("PlanLoad(%d, %d) = %+v, want %+v", c.size, c.request, p, c.want)
			}
			sub := uint64(p.PerSubmit) * p.Request
			if p.Request > uint64(c.cfg.MaxTransferBytes) || p.PerSubmit > c.cfg.MaxBatchRequests ||
				uint64(p.InFlight)*sub > uint64(c.cfg.MaxInflightBytes) || p.InFlight > c.cfg.MaxInflightBatches ||
				p.InFlight*p.PerSubmit > c.cfg.MaxAllocatedRequests || uint64(p.Submissions)*sub < c.size {
				t.Errorf("%+v breaks a limit or misses bytes of %d", p, c.size)
			}
		})
	}
	if _, err := PlanLoad(0, 4096, small); err == nil {
		t.Error("an empty load was planned")
	}
}

// TestRunLoadSplits: a file larger than max_inflight_bytes loads whole
// (and stores whole), read back byte for byte, on tmpfs and on the test
// directory's filesystem (O_DIRECT where it has it), and the engine is
// left with nothing in flight. Without the split the engine refuses the
// one submission ("exceed max_inflight_bytes ... on their own").
func TestRunLoadSplits(t *testing.T) {
	needIOUring(t)
	dirs := map[string]string{"tmpdir": t.TempDir()}
	if shm, err := os.MkdirTemp("/dev/shm", "orbitefs-load-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(shm) })
		dirs["shm"] = shm
	}
	const size = 5<<20 + 5<<10 // past the budget by a partial page
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			p := tempFile(t, dir, size)
			cfg := config.DefaultEngine()
			cfg.MaxInflightBytes, cfg.MaxTransferBytes, cfg.MaxBatchRequests = 1<<20, 256<<10, 3
			e, err := engine.New(cfg, iouring.New(cfg.IOUring))
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				s := e.Stats()
				if s.Batches != 0 || s.Segments != 0 || s.Regions != 0 || s.InflightGroups != 0 {
					t.Errorf("leaked: %d batches, %d segments, %d regions, %d groups in flight", s.Batches, s.Segments, s.Regions, s.InflightGroups)
				}
				e.Close(5 * time.Second)
			}()
			res, err := RunLoad(context.Background(), e, LoadOptions{File: p, Op: engine.OpRead, Memory: engine.LocationCPU, Request: 1 << 20, Runs: 2, Verify: true})
			if err != nil {
				t.Fatal(err)
			}
			if !res.Verified || res.Bytes != size || len(res.Seconds) != 2 || res.Plan.Submissions < 2 || res.Plan.InFlight < 2 {
				t.Errorf("read: %+v", res)
			}
			// Store: memory (random bytes) -> file, then the file must
			// hold what the region holds (RunLoad's verify).
			before, _ := os.ReadFile(p)
			res, err = RunLoad(context.Background(), e, LoadOptions{File: p, Op: engine.OpWrite, Memory: engine.LocationCPU, Request: 1 << 20, Runs: 1, Verify: true})
			if err != nil {
				t.Fatal(err)
			}
			after, _ := os.ReadFile(p)
			if !res.Verified || len(after) != size || bytes.Equal(before, after) {
				t.Errorf("write: verified %v, %d bytes, changed %v", res.Verified, len(after), !bytes.Equal(before, after))
			}
		})
	}
}
