// bench_test.go measures a cold 1 GiB ext4 file -> GPU: cuFile reads of
// 16 MiB slices at depth 32 through the native batch and through
// ParallelBatch, beside the disk's own rate (32 parallel O_DIRECT preads
// of 4 MiB into host memory) on the same file in the same run.

package gds

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const benchFileSize = 1 << 30

// benchFile writes a 1 GiB file of random bytes in a block-device folder.
func benchFile(b *testing.B) string {
	dir := blockDir(b)
	p := filepath.Join(dir, "bench-1g")
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	chunk := randomBytes(16<<20, 9)
	for off := 0; off < benchFileSize; off += len(chunk) {
		chunk[0], chunk[1] = byte(off>>24), byte(off>>32)
		if _, err := f.Write(chunk); err != nil {
			b.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		b.Fatal(err)
	}
	return p
}

// dropCache evicts the file from the page cache (fadvise, and the global
// drop when running as root), so each read is cold.
func dropCache(b *testing.B, path string) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	unix.Fdatasync(fd)
	unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
	unix.Close(fd)
	unix.Sync()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0) // fails harmlessly when not root
}

func report(b *testing.B, name string, bytes int64, d time.Duration) {
	gbps := float64(bytes) / d.Seconds() / 1e9
	b.ReportMetric(gbps, "GB/s")
	fmt.Printf("gds-bench %s: %d bytes in %v = %.2f GB/s (%s)\n", name, bytes, d.Round(time.Millisecond), gbps, time.Now().UTC().Format(time.RFC3339))
}

func BenchmarkColdExt4ToGPU(b *testing.B) {
	d, c := gpuDriver(b)
	path := benchFile(b)
	dev := devAlloc(b, c, benchFileSize)

	b.Run("disk-odirect-4MiB-x32", func(b *testing.B) {
		for range b.N {
			dropCache(b, path)
			fd := openFile(b, path, unix.O_RDONLY|unix.O_DIRECT)
			var next atomic.Int64
			var wg sync.WaitGroup
			var failed atomic.Value
			start := time.Now()
			for range 32 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					buf, err := unix.Mmap(-1, 0, 4<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
					if err != nil {
						failed.Store(err)
						return
					}
					defer unix.Munmap(buf)
					for {
						off := next.Add(4<<20) - 4<<20
						if off >= benchFileSize {
							return
						}
						if _, err := unix.Pread(fd, buf, off); err != nil {
							failed.Store(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			if err := failed.Load(); err != nil {
				b.Fatal(err)
			}
			report(b, "disk O_DIRECT pread 4MiB x32 -> host", benchFileSize, time.Since(start))
		}
	})

	run := func(name string, mk func() (Batcher, error)) {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				dropCache(b, path)
				h := registerFile(b, d, path, unix.O_RDONLY)
				bt, err := mk()
				if err != nil {
					b.Skipf("%s: %v", name, err)
				}
				ios := Split(Read, h, dev, 0, 0, benchFileSize, MaxSlice, 0)
				start := time.Now()
				got, err := pump(bt, ios)
				el := time.Since(start)
				if err != nil {
					bt.Cancel()
					b.Fatalf("%s in mode %s: %v", name, d.Mode(), err)
				}
				var total int64
				for _, r := range got {
					total += int64(r.N)
				}
				if total != benchFileSize {
					b.Fatalf("%s read %d bytes, want %d", name, total, benchFileSize)
				}
				if err := bt.Destroy(); err != nil {
					b.Fatal(err)
				}
				report(b, "cuFile "+name+" -> GPU", total, el)
			}
		})
	}
	run("native-batch-16MiB-d32", func() (Batcher, error) { return d.NewBatch(32) })
	run("parallel-16MiB-d32", func() (Batcher, error) { return d.NewParallelBatch(32, 32) })
}
