// bench_test.go measures pinned host-to-device throughput (1 GiB in 4 MiB
// copies) and the cost of the context binding every driver call pays.

package cuda

import (
	"runtime"
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
