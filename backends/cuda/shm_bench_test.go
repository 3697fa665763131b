package cuda

// shm_bench_test.go measures copies between device memory and a tmpfs
// file's own pages, mapped and registered (cuMemHostRegister) instead of
// read into a staging buffer first: KV groups of 128 KiB, 16 per sync,
// from many streams, both directions.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

func BenchmarkShmMappedCopy(b *testing.B) {
	dev := gpu(b)
	const size = 256 << 20
	const piece, pieces = 128 << 10, 16
	f, err := os.CreateTemp("/dev/shm", "orbitefs-shmbench-")
	if err != nil {
		b.Skipf("no /dev/shm: %v", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 1<<20)
	for off := 0; off < size; off += len(buf) {
		if _, err := f.WriteAt(buf, int64(off)); err != nil {
			b.Fatal(err)
		}
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	must(b, err)
	defer unix.Munmap(m)
	addr := uintptr(unsafe.Pointer(&m[0]))
	t0 := time.Now()
	must(b, dev.HostRegister(addr, size))
	b.Logf("cuMemHostRegister of a %d MiB tmpfs mapping: %v", size>>20, time.Since(t0))
	defer func() { must(b, dev.HostUnregister(addr)) }()
	for _, streams := range []int{1, 16} {
		for _, dir := range []string{"htod", "dtoh"} {
			for _, mode := range []string{"per-copy", "batch"} {
				if mode == "batch" && !dev.Driver().Batched() {
					continue
				}
				b.Run(fmt.Sprintf("%s/%s/streams=%d", dir, mode, streams), func(b *testing.B) {
					type lane struct {
						s *Stream
						p DevicePtr
					}
					lanes := make([]lane, streams)
					for i := range lanes {
						s, err := dev.NewStream(true)
						must(b, err)
						p, err := dev.Alloc(piece * pieces)
						must(b, err)
						lanes[i] = lane{s, p}
					}
					defer func() {
						for _, l := range lanes {
							must(b, l.s.Destroy())
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
							for next.Add(1) <= int64(b.N) {
								for j := range pieces {
									host := uint64(addr) + uint64(rand.IntN(size/piece))*piece
									d := uint64(l.p) + uint64(j*piece)
									dsts[j], srcs[j], sizes[j] = d, host, piece
									if dir == "dtoh" {
										dsts[j], srcs[j] = host, d
									}
								}
								var err error
								switch mode {
								case "per-copy":
									for j := range pieces {
										if dir == "htod" {
											err = l.s.HtoDAsync(DevicePtr(dsts[j]), m[srcs[j]-uint64(addr):][:piece])
										} else {
											err = l.s.DtoHAsync(m[dsts[j]-uint64(addr):][:piece], DevicePtr(srcs[j]))
										}
										if err != nil {
											break
										}
									}
								case "batch":
									err = l.s.CopyBatchAsync(dsts, srcs, sizes)
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
}
