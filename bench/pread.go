// pread.go owns the naive baseline (RunPread): QueueDepth goroutines, each
// looping over pread(2)/pwrite(2) on its own slot of one page-aligned
// mapping. It is what a Go program gets without an engine or io_uring,
// and it shares Run's workload, counting rule and result.
//
// Invariants:
//   - Goroutine i only touches slot i; seq offsets come from one shared
//     generator under a mutex, rand offsets from one PCG stream per
//     goroutine.
//   - An op counts only if it completed before the cutoff (the runtime's
//     end, or the moment ctx was cancelled).

package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/internal/hostmem"
	"golang.org/x/sys/unix"
)

// RunPread runs the workload o with plain positional reads or writes from
// QueueDepth goroutines, O_DIRECT when o.Direct. Like Run, it never
// creates or extends the file, blocks for o.Runtime, and treats a
// cancelled ctx as an early end of the measurement.
func RunPread(ctx context.Context, o Options) (Result, error) {
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	path, err := checkFile(&o)
	if err != nil {
		return Result{}, err
	}
	flags := os.O_RDONLY
	if o.Op == engine.OpWrite {
		flags = os.O_WRONLY
	}
	if o.Direct {
		flags |= unix.O_DIRECT
	}
	f, err := os.OpenFile(path, flags, 0)
	if err != nil {
		if o.Direct {
			return Result{}, fmt.Errorf("--direct: %w", err)
		}
		return Result{}, err
	}
	defer f.Close()
	mem, err := hostmem.Anonymous(o.bufferBytes())
	if err != nil {
		return Result{}, err
	}
	defer mem.Close()
	if o.Op == engine.OpWrite {
		var key [32]byte
		key[0] = byte(o.Seed)
		rand.NewChaCha8(key).Read(mem.Bytes())
	}

	type worker struct {
		hist       Histogram
		ops, bytes uint64
		err        error
	}
	workers := make([]worker, o.jobs()*o.QueueDepth)
	var seqMu sync.Mutex
	seq := newOffsets(&o, 0)
	var stop atomic.Bool
	var cutoff atomic.Int64 // UnixNano; ops ending after it are not counted

	t0 := time.Now()
	cpu0, allocs0 := cpuNow(), allocsNow()
	cutoff.Store(t0.Add(o.Runtime).UnixNano())
	var wg sync.WaitGroup
	for i := range workers {
		w := &workers[i]
		buf := mem.Bytes()[uint64(i)*o.BlockSize : uint64(i+1)*o.BlockSize]
		gen := newOffsets(&o, uint64(i))
		wg.Go(func() {
			for !stop.Load() {
				var off uint64
				if o.Pattern == Seq {
					seqMu.Lock()
					off = seq.Next()
					seqMu.Unlock()
				} else {
					off = gen.Next()
				}
				start := time.Now()
				var n int
				var err error
				if o.Op == engine.OpWrite {
					n, err = f.WriteAt(buf, int64(off))
				} else {
					n, err = f.ReadAt(buf, int64(off))
				}
				end := time.Now()
				if err != nil || n != len(buf) {
					if err == nil || err == io.EOF {
						err = fmt.Errorf("short %s: %d of %d bytes at offset %d", o.Op, n, len(buf), off)
					}
					w.err = err
					stop.Store(true)
					return
				}
				if end.UnixNano() <= cutoff.Load() {
					w.hist.Record(end.Sub(start))
					w.ops++
					w.bytes += uint64(n)
				}
			}
		})
	}

	timer := time.NewTimer(o.Runtime)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
		cutoff.Store(time.Now().UnixNano())
	}
	end := time.Unix(0, cutoff.Load())
	cpu, allocs := cpuNow().sub(cpu0), allocsNow()-allocs0
	stop.Store(true)
	wg.Wait()

	var res Result
	for i := range workers {
		w := &workers[i]
		if w.err != nil {
			return Result{}, fmt.Errorf("%s %s: %w", o.Op, path, w.err)
		}
		res.hist.Merge(&w.hist)
		res.Ops += w.ops
		res.Bytes += w.bytes
	}
	res.finish(&o, ImplPread, end.Sub(t0), cpu, allocs)
	return res, nil
}
