// bench_test.go measures pinned host-to-device throughput (1 GiB in 4 MiB
// copies; 128 KiB pieces from many streams, KV-swap sized) and the cost
// of the context binding every driver call pays.

package cuda

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"
)

func BenchmarkPinnedHtoD(b *testing.B) {
	dev := gpu(b)
	const total, chunk = 1 << 30, 4 << 20
	src, err := dev.HostAlloc(total)
	must(b, err)
	defer func() { must(b, src.Free()) }()
	copy(src.Bytes(), randomBytes(chunk, 1))
	p, err := dev.Alloc(total)
	must(b, err)
	defer func() { must(b, dev.Free(p)) }()
	s, err := dev.NewStream(true)
	must(b, err)
	defer func() { must(b, s.Destroy()) }()
	mem := src.Bytes()

	b.Run("sync-4MiB", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			for off := 0; off < total; off += chunk {
				must(b, dev.CopyHtoD(p+DevicePtr(off), mem[off:off+chunk]))
			}
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	})
	b.Run("async-4MiB", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			for off := 0; off < total; off += chunk {
				must(b, s.HtoDAsync(p+DevicePtr(off), mem[off:off+chunk]))
			}
			must(b, s.Sync())
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	})
	b.Run("async-1GiB", func(b *testing.B) {
		b.SetBytes(total)
		for b.Loop() {
			must(b, s.HtoDAsync(p, mem))
			must(b, s.Sync())
		}
		b.ReportMetric(float64(total)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
	})
}

// BenchmarkBind separates the binding's parts: a bare driver call (the
// purego cgocall), LockOSThread alone, bind+unbind (lock + a
// cuCtxSetCurrent call), and a whole bound method (Event.Query on a done
// event: bind, one driver call, unbind).
func BenchmarkBind(b *testing.B) {
	dev := gpu(b)
	b.Run("driver-call", func(b *testing.B) {
		var v int32
		for b.Loop() {
			dev.drv.call(dev.drv.fn.driverGetVersion, uintptr(unsafe.Pointer(&v)))
		}
	})
	b.Run("lock-unlock", func(b *testing.B) {
		for b.Loop() {
			runtime.LockOSThread()
			runtime.UnlockOSThread()
		}
	})
	b.Run("bind-unbind", func(b *testing.B) {
		for b.Loop() {
			if err := dev.bind(); err != nil {
				b.Fatal(err)
			}
			dev.unbind()
		}
	})
	b.Run("event-query", func(b *testing.B) {
		ev, err := dev.NewEvent(true)
		must(b, err)
		defer func() { must(b, ev.Destroy()) }()
		for b.Loop() {
			if _, err := ev.Query(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("event-query-parallel", func(b *testing.B) {
		ev, err := dev.NewEvent(true)
		must(b, err)
		defer func() { must(b, ev.Destroy()) }()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := ev.Query(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkSmallHtoD measures what the KV-swap pattern asks of the copy
// engine: goroutines, each with its own stream, moving 16 pinned pieces
// of 128 KiB to scattered device places and waiting for them (a Sync per
// 16), as one call per piece, one cuMemcpyBatchAsync per 16, or one
// merged 2 MiB copy (the bound merging would reach).
func BenchmarkSmallHtoD(b *testing.B) {
	dev := gpu(b)
	const piece, pieces = 128 << 10, 16
	for _, streams := range []int{1, 16} {
		for _, mode := range []string{"per-copy", "batch", "merged"} {
			if mode == "batch" && !dev.Driver().Batched() {
				continue
			}
			b.Run(fmt.Sprintf("%s/streams=%d", mode, streams), func(b *testing.B) {
				type lane struct {
					s   *Stream
					src *HostBuffer
					p   DevicePtr
				}
				lanes := make([]lane, streams)
				for i := range lanes {
					s, err := dev.NewStream(true)
					must(b, err)
					src, err := dev.HostAlloc(piece * pieces)
					must(b, err)
					p, err := dev.Alloc(piece * pieces)
					must(b, err)
					lanes[i] = lane{s, src, p}
				}
				defer func() {
					for _, l := range lanes {
						must(b, l.s.Destroy())
						must(b, l.src.Free())
						must(b, dev.Free(l.p))
					}
				}()
				b.SetBytes(piece * pieces)
				var next atomic.Int64
				b.ResetTimer()
				var wg sync.WaitGroup
				for _, l := range lanes {
					wg.Add(1)
					go func() {
						defer wg.Done()
						dsts, srcs, sizes := make([]uint64, pieces), make([]uint64, pieces), make([]uintptr, pieces)
						for j := range pieces {
							dsts[j] = uint64(l.p) + uint64((pieces-1-j)*piece)
							srcs[j] = uint64(l.src.Addr()) + uint64(j*piece)
							sizes[j] = piece
						}
						mem := l.src.Bytes()
						for next.Add(1) <= int64(b.N) {
							var err error
							switch mode {
							case "per-copy":
								for j := range pieces {
									if err = l.s.HtoDAsync(DevicePtr(dsts[j]), mem[j*piece:(j+1)*piece]); err != nil {
										break
									}
								}
							case "batch":
								err = l.s.CopyBatchAsync(dsts, srcs, sizes)
							case "merged":
								err = l.s.HtoDAsync(l.p, mem)
							}
							if err == nil {
								err = l.s.Sync()
							}
							if err != nil {
								b.Error(err)
								return
							}
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(piece*pieces)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GB/s")
			})
		}
	}
}
