// kvswap.go owns the KV-cache swap workload (`orbitefs bench kvswap`):
// one file per model layer, each an array of fixed-size KV groups; a
// batch swaps a random set of groups of one layer in (file -> memory) or
// out (memory -> file), as an inference server paging a KV-cache tier
// does (per-layer files, fixed-buffer group reads).
//
// Design. Each of Concurrency clients owns BatchGroups slots of
// GroupBytes in one registered region (cpu, pinned or cuda:N) and loops:
// draw a layer and BatchGroups distinct group indices, submit them as one
// group of requests, wait for its terminal state, free the batch. A batch
// is a write (swap-out) with probability WritePct/100. The same loop with
// N clients is the concurrency-scaling measurement (docs/performance.md).
//
// Invariants:
//   - Files are never created or extended here (PrepareKVFiles does that
//     before the run); a write batch only rewrites whole groups.
//   - Only batches that finished within the measured interval count;
//     latency is from just before Submit to the terminal state seen.
//   - Before the clock starts, every client swaps one batch in at once
//     (the warm-up): what the engine does once, on first use, at this
//     concurrency (loading cuFile, the staging pool, rings) is paid
//     there, and reported apart (WarmupMaxUs), not in the figures. The
//     warm-up only reads: a first swap-out's own first-use costs (if
//     any) still fall in the measured interval.
//   - Every batch allocated is freed, on every path.

package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

// KVOptions describe a kvswap run.
type KVOptions struct {
	Dir          string // holds layer-000.kv ... (PrepareKVFiles)
	Layers       int
	GroupsPerLay int    // groups per layer file
	GroupBytes   uint64 // bytes per KV group
	BatchGroups  int    // groups per batch
	Concurrency  int    // clients, one batch in flight each
	WritePct     int    // percent of batches that swap out
	Memory       engine.Location
	Runtime      time.Duration
	Seed         uint64
}

// Validate reports every bad option at once.
func (o KVOptions) Validate() error {
	var errs []error
	if o.Layers < 1 {
		errs = append(errs, fmt.Errorf("--layers %d: want at least 1", o.Layers))
	}
	if o.GroupsPerLay < 1 {
		errs = append(errs, fmt.Errorf("--groups %d: want at least 1", o.GroupsPerLay))
	}
	if o.GroupBytes == 0 || o.GroupBytes%4096 != 0 {
		errs = append(errs, fmt.Errorf("--group-bytes %d: want a positive multiple of 4096 (O_DIRECT)", o.GroupBytes))
	}
	if o.BatchGroups < 1 || o.BatchGroups > o.GroupsPerLay {
		errs = append(errs, fmt.Errorf("--batch %d: want 1 to --groups (%d)", o.BatchGroups, o.GroupsPerLay))
	}
	if o.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("--clients %d: want at least 1", o.Concurrency))
	}
	if o.WritePct < 0 || o.WritePct > 100 {
		errs = append(errs, fmt.Errorf("--write-pct %d: want 0-100", o.WritePct))
	}
	if o.Runtime <= 0 {
		errs = append(errs, fmt.Errorf("--runtime %s: want a positive duration", o.Runtime))
	}
	return errors.Join(errs...)
}

// LayerPath is layer l's file.
func (o KVOptions) LayerPath(l int) string {
	return filepath.Join(o.Dir, fmt.Sprintf("layer-%03d.kv", l))
}

// LayerBytes is the size of one layer file.
func (o KVOptions) LayerBytes() uint64 { return uint64(o.GroupsPerLay) * o.GroupBytes }

// PrepareKVFiles creates (or grows) every layer file with random data, so
// reads reach real pages or blocks rather than holes.
func PrepareKVFiles(o KVOptions) error {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	buf := make([]byte, 4<<20)
	for l := range o.Layers {
		p := o.LayerPath(l)
		if st, err := os.Stat(p); err == nil && uint64(st.Size()) >= o.LayerBytes() {
			continue
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		for off := uint64(0); off < o.LayerBytes(); off += uint64(len(buf)) {
			n := min(uint64(len(buf)), o.LayerBytes()-off)
			rand.Read(buf[:n])
			if _, err := f.WriteAt(buf[:n], int64(off)); err != nil {
				f.Close()
				return err
			}
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// KVResult is a kvswap run's measurement.
type KVResult struct {
	Dir         string  `json:"dir"`
	Filesystem  string  `json:"filesystem"`
	Memory      string  `json:"memory"`
	DirectIO    bool    `json:"direct_io"`
	Layers      int     `json:"layers"`
	GroupBytes  uint64  `json:"group_bytes"`
	BatchGroups int     `json:"batch_groups"`
	Clients     int     `json:"clients"`
	WritePct    int     `json:"write_pct"`
	Seconds     float64 `json:"seconds"`
	Batches     uint64  `json:"batches"`
	Bytes       uint64  `json:"bytes"`
	GBps        float64 `json:"gb_per_sec"`
	BatchesPerS float64 `json:"batches_per_sec"`
	P50Us       float64 `json:"batch_p50_us"`
	P99Us       float64 `json:"batch_p99_us"`
	// WarmupMaxUs is the slowest warm-up batch: the first-use cost.
	WarmupMaxUs float64 `json:"warmup_max_us"`
}

func (r KVResult) String() string {
	return fmt.Sprintf("kvswap %s (%s, direct %v) -> %s: %d layers, %d x %d B per batch, %d clients, %d%% writes: %.2f GB/s, %.0f batches/s, batch p50 %.0fus p99 %.0fus (%d batches in %.2fs; slowest warm-up batch %.0fus)",
		r.Dir, r.Filesystem, r.DirectIO, r.Memory, r.Layers, r.BatchGroups, r.GroupBytes, r.Clients, r.WritePct, r.GBps, r.BatchesPerS, r.P50Us, r.P99Us, r.Batches, r.Seconds, r.WarmupMaxUs)
}

// RunKV runs the kvswap workload on e. The layer files must exist
// (PrepareKVFiles).
func RunKV(ctx context.Context, e *engine.Engine, o KVOptions) (KVResult, error) {
	res := KVResult{Dir: o.Dir, Memory: string(o.Memory), Layers: o.Layers, GroupBytes: o.GroupBytes,
		BatchGroups: o.BatchGroups, Clients: o.Concurrency, WritePct: o.WritePct}
	if err := o.Validate(); err != nil {
		return res, err
	}
	perm := engine.PermRead
	if o.WritePct > 0 {
		perm = engine.PermReadWrite
	}
	segs := make([]*engine.Segment, o.Layers)
	for l := range segs {
		s, err := e.OpenFileSegment("file://"+o.LayerPath(l), perm)
		if err != nil {
			return res, err
		}
		defer e.CloseFileSegment(s, closeTimeout(e))
		info, err := e.FileSegmentInfo(s)
		if err != nil {
			return res, err
		}
		if info.Size < o.LayerBytes() {
			return res, fmt.Errorf("%s: %d bytes, want %d (--groups x --group-bytes); create it with --create", o.LayerPath(l), info.Size, o.LayerBytes())
		}
		res.Filesystem, res.DirectIO = info.Filesystem, info.DirectIO
		segs[l] = s
	}
	slot := o.GroupBytes * uint64(o.BatchGroups)
	mem, err := register(e, o.Memory, slot*uint64(o.Concurrency))
	if err != nil {
		return res, err
	}
	defer e.Unregister(mem)

	type clientOut struct {
		hist    Histogram
		batches uint64
		bytes   uint64
		err     error
	}
	outs := make([]clientOut, o.Concurrency)
	warm, err := warmUp(e, segs, mem.BaseAddress(), o)
	if err != nil {
		return res, err
	}
	res.WarmupMaxUs = float64(warm) / 1e3
	ctx, cancel := context.WithTimeout(ctx, o.Runtime) // the clock starts after the warm-up
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for c := range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := &outs[c]
			rng := mrand.New(mrand.NewPCG(o.Seed, uint64(c)))
			base := mem.BaseAddress() + uint64(c)*slot
			reqs := make([]engine.Request, o.BatchGroups)
			for ctx.Err() == nil {
				layer := rng.IntN(o.Layers)
				picks := rng.Perm(o.GroupsPerLay)[:o.BatchGroups]
				for i, g := range picks {
					reqs[i] = engine.Request{Address: base + uint64(i)*o.GroupBytes, TargetOffset: uint64(g) * o.GroupBytes, Length: o.GroupBytes}
				}
				op := engine.OpRead
				if rng.IntN(100) < o.WritePct {
					op = engine.OpWrite
				}
				t0 := time.Now()
				if err := swapBatch(e, op, segs[layer], reqs); err != nil {
					out.err = err
					return
				}
				if time.Since(start) > o.Runtime {
					return // finished after the interval: not counted
				}
				out.hist.Record(time.Since(t0))
				out.batches++
				out.bytes += slot
			}
		}()
	}
	wg.Wait()
	res.Seconds = min(time.Since(start), o.Runtime).Seconds()
	var h Histogram
	for i := range outs {
		if outs[i].err != nil {
			return res, fmt.Errorf("client %d: %w", i, outs[i].err)
		}
		h.Merge(&outs[i].hist)
		res.Batches += outs[i].batches
		res.Bytes += outs[i].bytes
	}
	res.GBps = float64(res.Bytes) / res.Seconds / 1e9
	res.BatchesPerS = float64(res.Batches) / res.Seconds
	res.P50Us = float64(h.Quantile(0.5)) / 1e3
	res.P99Us = float64(h.Quantile(0.99)) / 1e3
	return res, nil
}

// warmUp swaps one batch into every client's slots at once (groups
// 0..BatchGroups-1 of a layer per client) and returns the slowest
// batch's latency.
func warmUp(e *engine.Engine, segs []*engine.Segment, base uint64, o KVOptions) (time.Duration, error) {
	slot := o.GroupBytes * uint64(o.BatchGroups)
	took := make([]time.Duration, o.Concurrency)
	errs := make([]error, o.Concurrency)
	var wg sync.WaitGroup
	for c := range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]engine.Request, o.BatchGroups)
			for i := range reqs {
				reqs[i] = engine.Request{Address: base + uint64(c)*slot + uint64(i)*o.GroupBytes, TargetOffset: uint64(i) * o.GroupBytes, Length: o.GroupBytes}
			}
			t0 := time.Now()
			errs[c] = swapBatch(e, engine.OpRead, segs[c%len(segs)], reqs)
			took[c] = time.Since(t0)
		}()
	}
	wg.Wait()
	var worst time.Duration
	for c := range took {
		if errs[c] != nil {
			return 0, fmt.Errorf("client %d warm-up: %w", c, errs[c])
		}
		worst = max(worst, took[c])
	}
	return worst, nil
}

// swapBatch runs one batch to its terminal state and frees it.
func swapBatch(e *engine.Engine, op engine.Op, s *engine.Segment, reqs []engine.Request) error {
	b, err := e.SubmitAsync(op, s, reqs, nil, 0)
	if err != nil {
		return err
	}
	defer b.Free()
	state, err := b.Wait(time.Minute)
	if err != nil {
		return err
	}
	if state != engine.StateCompleted {
		for i := range reqs {
			if t, _ := b.TaskStatus(i); t.Err != nil {
				return t.Err
			}
		}
		return fmt.Errorf("batch ended %s", state)
	}
	return nil
}
