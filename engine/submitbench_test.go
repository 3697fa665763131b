package engine_test

import (
	"math/rand/v2"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// BenchmarkSubmitCallerCopy: the CPU and allocations of one 4 KiB random
// read from tmpfs submitted as its own group (a caller copy), the shape
// of `bench file` clients: batches of max_batch_requests, freed when
// full. serial is one client; parallel one client per GOMAXPROCS.
func BenchmarkSubmitCallerCopy(b *testing.B) {
	if !haveIOUring {
		b.Skip("io_uring backend not built")
	}
	cfg := config.DefaultEngine()
	var backends []engine.Backend
	for _, t := range realTransports(cfg) {
		backends = append(backends, t)
	}
	e, err := engine.New(cfg, backends...)
	if err != nil {
		b.Fatal(err)
	}
	defer e.Close(5 * time.Second)
	const size = 64 << 20
	f, err := os.CreateTemp("/dev/shm", "submit-bench-")
	if err != nil {
		b.Skipf("no tmpfs file: %v", err)
	}
	defer os.Remove(f.Name())
	err = f.Truncate(size)
	if err == nil {
		_, err = f.WriteAt(make([]byte, size), 0) // pages, not holes
	}
	f.Close()
	if err != nil {
		b.Fatal(err)
	}
	seg, err := e.OpenFileSegment("file://"+f.Name(), engine.PermRead)
	if err != nil {
		b.Fatal(err)
	}
	defer e.CloseFileSegment(seg, ioTimeout)
	r, err := e.RegisterMemory(1 << 20)
	if err != nil {
		b.Fatal(err)
	}
	capacity := e.Config().MaxBatchRequests
	// client submits one request at a time (queue depth 1), each its own
	// group, and waits for it: most finish inside Submit (caller
	// copies); one in 64 goes to a host copy lane (lanecopy.go).
	client := func(b *testing.B, slot uint64, next func() bool) {
		var done atomic.Int64
		wake := make(chan struct{}, 1)
		alloc := func() *engine.Batch {
			batch, err := e.AllocateBatch(capacity)
			if err != nil {
				b.Fatal(err)
			}
			batch.OnGroupDone(func(engine.Report) {
				done.Add(1)
				select {
				case wake <- struct{}{}:
				default:
				}
			})
			return batch
		}
		batch := alloc()
		req := []engine.Request{{Address: r.BaseAddress() + slot%256*4096, Length: 4096}}
		submitted := int64(0)
		for used := 0; next(); used++ {
			if used == capacity {
				if err := batch.Free(); err != nil {
					b.Fatal(err)
				}
				batch, used = alloc(), 0
			}
			req[0].TargetOffset = rand.Uint64N(size/4096) * 4096
			if _, err := batch.Submit(engine.OpRead, seg, req, nil, ioTimeout); err != nil {
				b.Fatal(err)
			}
			submitted++
			for done.Load() < submitted {
				<-wake
			}
		}
		batch.Free()
	}
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		client(b, 0, func() bool { n++; return n <= b.N })
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		var slots atomic.Uint64
		b.RunParallel(func(pb *testing.PB) { client(b, slots.Add(1), pb.Next) })
	})
}
