// load.go owns the whole-file workload: load a file into registered
// memory (cpu, pinned or cuda:N) or store memory into a file, the way an
// inference server loads weights or swaps a KV-cache tier, and time each
// pass. It is what the GPU gate compares with torch and numpy peers.
//
// A file of any size loads: a pass is cut into submissions that fit the
// engine's limits (PlanLoad): requests no larger than max_transfer_bytes,
// submissions of at most max_batch_requests requests and half of
// max_inflight_bytes, and as many submissions in flight as the byte,
// batch and request budgets allow, the next submitted as the oldest ends.
//
// Invariants:
//   - A file up to half of max_inflight_bytes, in at most
//     max_batch_requests requests, is one group of --request requests,
//     so the engine's lanes pull units across request boundaries with no
//     bubble between requests.
//   - The submissions in flight never exceed any engine limit together,
//     so the engine never refuses one for the budget this pass holds.
//   - Verification (--verify) runs outside the timed pass.
//   - With cold, each read pass first drops the file's page cache
//     (POSIX_FADV_DONTNEED on the file, no root needed).

package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

// LoadOptions describe a whole-file load or store.
type LoadOptions struct {
	File      string
	Op        engine.Op
	Memory    engine.Location
	Transport engine.TransportKind
	Size      uint64 // bytes from offset 0; 0 = the whole file
	Request   uint64 // bytes per request
	Runs      int
	Cold      bool
	Verify    bool
}

// LoadResult is the outcome of RunLoad.
type LoadResult struct {
	File       string               `json:"file"`
	Filesystem string               `json:"filesystem"`
	Op         string               `json:"op"`
	Memory     string               `json:"memory"`
	Transport  string               `json:"transport"` // what the tasks reported
	Bytes      uint64               `json:"bytes"`
	Request    uint64               `json:"request_bytes"` // after PlanLoad
	Plan       LoadPlan             `json:"plan"`
	Cold       bool                 `json:"cold"`
	Seconds    []float64            `json:"seconds"`
	MedianGBps float64              `json:"median_gb_per_sec"`
	BestGBps   float64              `json:"best_gb_per_sec"`
	Verified   bool                 `json:"verified"`
	Staging    *engine.StagingStats `json:"staging,omitempty"`
	GDS        engine.GDSStats      `json:"gds"`
}

func (r LoadResult) String() string {
	return fmt.Sprintf("%s %s %s -> %s via %s: %d bytes in %s, median %.2f GB/s, best %.2f GB/s over %d runs (cold=%v verified=%v)",
		r.Op, r.Filesystem, r.File, r.Memory, r.Transport, r.Bytes, r.Plan, r.MedianGBps, r.BestGBps, len(r.Seconds), r.Cold, r.Verified)
}

// LoadPlan is how one pass is cut to fit an engine's limits.
type LoadPlan struct {
	Request     uint64 `json:"request_bytes"`           // bytes per request (the last may be shorter)
	PerSubmit   int    `json:"requests_per_submission"` // requests per submission (the last may have fewer)
	Submissions int    `json:"submissions"`
	InFlight    int    `json:"submissions_in_flight"` // at most, at once
}

func (p LoadPlan) String() string {
	return fmt.Sprintf("%d submission(s) of up to %d x %d B, %d in flight", p.Submissions, p.PerSubmit, p.Request, p.InFlight)
}

// PlanLoad cuts size bytes, asked for in requests of request bytes, into
// submissions that fit cfg. A submission holds at most half of
// max_inflight_bytes, so the next one is admitted while one runs; a file
// within that half stays one submission. Requests are cut to
// max_transfer_bytes and to the submission cap (rounded down to 4 KiB
// where that leaves any, for O_DIRECT).
func PlanLoad(size, request uint64, cfg config.Engine) (LoadPlan, error) {
	if size == 0 || request == 0 {
		return LoadPlan{}, fmt.Errorf("plan: size %d and request %d must be positive", size, request)
	}
	budget := uint64(cfg.MaxInflightBytes)
	subCap := max(budget/2, 1)
	req := min(request, uint64(cfg.MaxTransferBytes), subCap)
	if req >= 4096 {
		req &^= 4095
	}
	reqs := (size + req - 1) / req
	per := min(uint64(cfg.MaxBatchRequests), subCap/req, reqs)
	subBytes := per * req
	subs := (reqs + per - 1) / per
	inflight := min(budget/subBytes, uint64(cfg.MaxInflightBatches), uint64(cfg.MaxAllocatedBatches),
		uint64(cfg.MaxAllocatedRequests)/per, subs)
	// req <= subCap <= budget and per <= max_batch_requests <=
	// max_allocated_requests (config validates it): per and inflight >= 1.
	return LoadPlan{Request: req, PerSubmit: int(per), Submissions: int(subs), InFlight: int(inflight)}, nil
}

// RunLoad runs o.Runs passes on e.
func RunLoad(ctx context.Context, e *engine.Engine, o LoadOptions) (LoadResult, error) {
	res := LoadResult{File: o.File, Op: o.Op.String(), Memory: string(o.Memory), Cold: o.Cold}
	if o.Request == 0 || o.Runs <= 0 {
		return res, fmt.Errorf("request size and runs must be positive")
	}
	st, err := os.Stat(o.File)
	if err != nil {
		return res, err
	}
	if o.Size == 0 {
		o.Size = uint64(st.Size())
	}
	if o.Size == 0 || o.Size > uint64(st.Size()) {
		return res, fmt.Errorf("--size %d: the file has %d bytes", o.Size, st.Size())
	}
	res.Bytes = o.Size
	plan, err := PlanLoad(o.Size, o.Request, e.Config())
	if err != nil {
		return res, err
	}
	res.Plan, res.Request = plan, plan.Request
	perm := engine.PermRead
	if o.Op == engine.OpWrite {
		perm = engine.PermReadWrite
	}
	seg, err := e.OpenFileSegment("file://"+o.File, perm)
	if err != nil {
		return res, err
	}
	defer e.CloseFileSegment(seg, time.Minute)
	if info, err := e.FileSegmentInfo(seg); err == nil {
		res.Filesystem = info.Filesystem
	}
	mem, err := register(e, o.Memory, o.Size)
	if err != nil {
		return res, err
	}
	defer e.Unregister(mem)
	if o.Op == engine.OpWrite {
		if err := fillRegion(mem); err != nil {
			return res, err
		}
	}
	var reqs []engine.Request
	for off := uint64(0); off < o.Size; off += plan.Request {
		reqs = append(reqs, engine.Request{Transport: o.Transport, Address: mem.BaseAddress() + off, TargetOffset: off, Length: min(plan.Request, o.Size-off)})
	}
	for run := 0; run < o.Runs; run++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		if o.Cold {
			if err := dropCache(o.File); err != nil {
				return res, err
			}
		}
		start := time.Now()
		transport, err := loadPass(e, o.Op, seg, reqs, plan)
		secs := time.Since(start).Seconds()
		res.Transport = transport
		if err != nil {
			return res, fmt.Errorf("run %d: %w", run, err)
		}
		res.Seconds = append(res.Seconds, secs)
	}
	if o.Verify {
		if err := verify(mem, o.File, o.Size); err != nil {
			return res, err
		}
		res.Verified = true
	}
	s := slices.Clone(res.Seconds)
	slices.Sort(s)
	res.MedianGBps = float64(o.Size) / s[len(s)/2] / 1e9
	res.BestGBps = float64(o.Size) / s[0] / 1e9
	stats := e.Stats()
	res.Staging, res.GDS = stats.Staging, stats.GDS
	return res, nil
}

// loadPass runs reqs as plan's submissions, plan.InFlight at a time, the
// next submitted as the oldest ends; it returns the transport task 0
// reported. On failure the submissions still in flight are cancelled,
// waited for and freed before it returns.
func loadPass(e *engine.Engine, op engine.Op, seg *engine.Segment, reqs []engine.Request, plan LoadPlan) (string, error) {
	var inflight []*engine.Batch
	transport := ""
	finish := func(b *engine.Batch) error {
		defer b.Free()
		state, err := b.Wait(10 * time.Minute)
		if transport == "" {
			ts, _ := b.TaskStatus(0)
			transport = ts.Transport.String()
		}
		if err != nil {
			return err
		}
		if state != engine.StateCompleted {
			for _, t := range b.TaskStatuses() {
				if t.Err != nil {
					return t.Err
				}
			}
			return fmt.Errorf("batch %d ended %s", b.ID(), state)
		}
		return nil
	}
	defer func() { // a failed pass: end what is still in flight
		for _, b := range inflight {
			b.CancelAll()
			b.Wait(10 * time.Minute)
			b.Free()
		}
	}()
	for i := 0; i < len(reqs); i += plan.PerSubmit {
		if len(inflight) == plan.InFlight {
			b := inflight[0]
			inflight = inflight[1:]
			if err := finish(b); err != nil {
				return transport, err
			}
		}
		b, err := e.SubmitAsync(op, seg, reqs[i:min(i+plan.PerSubmit, len(reqs))], nil, 10*time.Minute)
		if err != nil {
			return transport, fmt.Errorf("submission %d of %d: %w", i/plan.PerSubmit+1, plan.Submissions, err)
		}
		inflight = append(inflight, b)
	}
	for len(inflight) > 0 {
		b := inflight[0]
		inflight = inflight[1:]
		if err := finish(b); err != nil {
			return transport, err
		}
	}
	return transport, nil
}

// ParseLocation reads --mem.
func ParseLocation(s string) (engine.Location, error) {
	l, err := engine.ParseLocation(s)
	if err != nil {
		return "", fmt.Errorf("--mem: %w", err)
	}
	return l, nil
}

// ParseTransport reads --transport.
func ParseTransport(s string) (engine.TransportKind, error) {
	for _, k := range []engine.TransportKind{engine.TransportUnspec, engine.TransportIOUring, engine.TransportGDS} {
		if k.String() == s {
			return k, nil
		}
	}
	return 0, fmt.Errorf("--transport %q: want unspec, io_uring or gds", s)
}

func register(e *engine.Engine, loc engine.Location, n uint64) (*engine.Region, error) {
	if dev, ok := loc.Device(); ok {
		return e.RegisterDevice(dev, n)
	}
	if loc == engine.LocationPinned {
		return e.RegisterPinned(n)
	}
	return e.RegisterMemory(n)
}

// fillRegion writes random bytes through the region's data path.
func fillRegion(r *engine.Region) error {
	buf := make([]byte, 16<<20)
	for off := uint64(0); off < r.Len(); off += uint64(len(buf)) {
		n := min(uint64(len(buf)), r.Len()-off)
		rand.Read(buf[:n])
		if _, err := r.WriteAt(buf[:n], int64(off)); err != nil {
			return err
		}
	}
	return nil
}

// verify compares the region with the file's first n bytes.
func verify(r *engine.Region, path string, n uint64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	a, b := make([]byte, 16<<20), make([]byte, 16<<20)
	for off := uint64(0); off < n; off += uint64(len(a)) {
		k := min(uint64(len(a)), n-off)
		if _, err := r.ReadAt(a[:k], int64(off)); err != nil {
			return err
		}
		if _, err := io.ReadFull(io.NewSectionReader(f, int64(off), int64(k)), b[:k]); err != nil {
			return err
		}
		if !bytes.Equal(a[:k], b[:k]) {
			i := 0
			for a[i] == b[i] {
				i++
			}
			return fmt.Errorf("verify: memory and %s differ at byte %d", path, off+uint64(i))
		}
	}
	return nil
}

// dropCache evicts the file's pages from the page cache.
func dropCache(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	unix.Fdatasync(int(f.Fd()))
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("fadvise %s: %w", path, err)
	}
	return nil
}
