package engine_test

import (
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

// BenchmarkQD32: 4 KiB random reads from a tmpfs file with 32 requests
// in flight, each slot on a goroutine of its own that submits one
// single-request group and waits for its completion hook before the next
// (the shape of `bench file` at queue depth 32). one-batch puts all 32
// slots on one batch, batches gives each slot a batch of its own, pread
// is the parallel pread loop they are measured against. The gap between
// one-batch and batches is what a batch serializes among its submitters;
// run with -cpu 2,8,16 to see it grow with the submitters running at
// once. waits/op is the share of requests whose report another goroutine
// delivered after their Submit returned, so that their slot had to be
// woken: the hooks of one batch run one at a time. Batches hold
// max_batch_requests tasks and are replaced when full.
func BenchmarkQD32(b *testing.B) {
	if !haveIOUring {
		b.Skip("io_uring backend not built")
	}
	const slots = 32
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
	f, err := os.CreateTemp("/dev/shm", "qd32-bench-")
	if err != nil {
		b.Skipf("no tmpfs file: %v", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	err = f.Truncate(size)
	if err == nil {
		_, err = f.WriteAt(make([]byte, size), 0) // pages, not holes
	}
	if err != nil {
		b.Fatal(err)
	}
	seg, err := e.OpenFileSegment("file://"+f.Name(), engine.PermRead)
	if err != nil {
		b.Fatal(err)
	}
	defer e.CloseFileSegment(seg, ioTimeout)
	r, err := e.RegisterMemory(slots * 4096)
	if err != nil {
		b.Fatal(err)
	}
	capacity := e.Config().MaxBatchRequests

	// run drives b.N requests through nb batches (slot i on batch
	// i%nb), one round of fresh batches per capacity requests each.
	run := func(b *testing.B, nb int) {
		b.ReportAllocs()
		per := slots / nb // slots per batch
		var waits atomic.Int64
		defer func() { b.ReportMetric(float64(waits.Load())/float64(b.N), "waits/op") }()
		left := b.N
		for left > 0 {
			quota := min(left, nb*capacity)
			left -= quota
			var wg sync.WaitGroup
			var live []*engine.Batch
			for k := 0; k < nb; k++ {
				n := quota / nb
				if k < quota%nb {
					n++
				}
				batch, err := e.AllocateBatch(capacity)
				if err != nil {
					b.Fatal(err)
				}
				live = append(live, batch)
				// state[t]: 0 running, 1 finished before its slot waited,
				// 2 its slot waits on wake[owner[t]]. Exactly one side
				// of the CAS race signals.
				state := make([]atomic.Int32, capacity)
				owner := make([]int32, capacity)
				wake := make([]chan struct{}, per)
				for i := range wake {
					wake[i] = make(chan struct{}, 1)
				}
				batch.OnGroupDone(func(rep engine.Report) {
					t := rep.Tasks.First
					if rep.CompletedRequests != 1 {
						b.Errorf("task %d: %v", t, rep.Err)
					}
					if !state[t].CompareAndSwap(0, 1) {
						wake[owner[t]] <- struct{}{}
					}
				})
				var reserved atomic.Int64
				for s := 0; s < per; s++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						req := []engine.Request{{Address: r.BaseAddress() + uint64(k*per+s)*4096, Length: 4096}}
						for reserved.Add(1) <= int64(n) {
							req[0].TargetOffset = rand.Uint64N(size/4096) * 4096
							tr, err := batch.Submit(engine.OpRead, seg, req, nil, ioTimeout)
							if err != nil {
								b.Error(err)
								return
							}
							owner[tr.First] = int32(s)
							if state[tr.First].CompareAndSwap(0, 2) {
								waits.Add(1)
								<-wake[s]
							}
						}
					}()
				}
			}
			wg.Wait()
			for _, batch := range live {
				if err := batch.Free(); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	b.Run("one-batch", func(b *testing.B) { run(b, 1) })
	b.Run("batches", func(b *testing.B) { run(b, slots) })
	b.Run("pread", func(b *testing.B) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for s := 0; s < slots; s++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, 4096)
				for next.Add(1) <= int64(b.N) {
					if _, err := unix.Pread(int(f.Fd()), buf, int64(rand.Uint64N(size/4096)*4096)); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
	})
}
