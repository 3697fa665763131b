package engine_test

// stagedbench_test.go measures the KV-swap pattern through the staged
// executor against the same groups into host memory: many clients, each
// a batch of 16 groups of 128 KiB at a time, from a file, on real
// io_uring and the fake GPU with a per-copy latency.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// BenchmarkKVSwap: GB/s of READ (and 50 % WRITE) batches of 16 x
// 128 KiB groups, on tmpfs and on the disk behind TMPDIR (O_DIRECT where
// it allows), into cpu and into the fake cuda:0 (copies cost no host
// CPU, as a copy engine's DMA, and complete 20 µs after their event is
// recorded).
func BenchmarkKVSwap(b *testing.B) {
	if !haveIOUring {
		b.Skip("io_uring backend not built")
	}
	const group, perBatch, fileSize = 128 << 10, 16, 256 << 20
	files := map[string]string{}
	for fs, dir := range map[string]string{"tmpfs": "/dev/shm", "disk": os.TempDir()} {
		f, err := os.CreateTemp(dir, "kvswap-bench-")
		if err != nil {
			b.Logf("no %s file: %v", fs, err)
			continue
		}
		defer os.Remove(f.Name())
		// Real blocks, not holes: a hole reads without touching the disk.
		blk := make([]byte, 1<<20)
		for i := 0; i < fileSize>>20 && err == nil; i++ {
			blk[0] = byte(i)
			_, err = f.Write(blk)
		}
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		files[fs] = f.Name()
	}
	for _, fs := range []string{"tmpfs", "disk"} {
		path, ok := files[fs]
		if !ok {
			continue
		}
		for _, writePct := range []int{0, 50} {
			for _, dst := range []string{"cpu", "cuda:0"} {
				for _, clients := range []int{1, 4, 16} {
					b.Run(fmt.Sprintf("%s/write=%d/%s/clients=%d", fs, writePct, dst, clients), func(b *testing.B) {
						gpu := newFakeGPU(1)
						gpu.latency.Store(int64(20 * time.Microsecond))
						gpu.dma.Store(true)
						cfg := config.DefaultEngine()
						bs := []engine.Backend{gpu}
						for _, tr := range realTransports(cfg) {
							bs = append(bs, tr)
						}
						e, err := engine.New(cfg, bs...)
						if err != nil {
							b.Fatal(err)
						}
						defer e.Close(5 * time.Second)
						seg, err := e.OpenFileSegment("file://"+path, engine.PermReadWrite)
						if err != nil {
							b.Fatal(err)
						}
						n := uint64(clients * perBatch * group)
						var r *engine.Region
						if dst == "cpu" {
							r, err = e.RegisterMemory(n)
						} else {
							r, err = e.RegisterDevice(0, n)
						}
						if err != nil {
							b.Fatal(err)
						}
						// The first staged transfer allocates the staging slab.
						if err := kvBatch(e, seg, r, rand.New(rand.NewPCG(0, 0)), 0, writePct); err != nil {
							b.Fatal(err)
						}
						b.SetBytes(perBatch * group)
						gpu.calls.Store(0)
						var next sync.Mutex
						left := b.N
						var wg sync.WaitGroup
						errs := make(chan error, clients)
						b.ResetTimer()
						for c := range clients {
							wg.Add(1)
							go func() {
								defer wg.Done()
								rng := rand.New(rand.NewPCG(uint64(c), 1))
								for {
									next.Lock()
									if left == 0 {
										next.Unlock()
										return
									}
									left--
									next.Unlock()
									if err := kvBatch(e, seg, r, rng, c, writePct); err != nil {
										errs <- err
										return
									}
								}
							}()
						}
						wg.Wait()
						b.StopTimer()
						if dst != "cpu" {
							b.ReportMetric(float64(gpu.calls.Load())/float64(b.N*perBatch), "gpu-calls/group")
						}
						close(errs)
						for err := range errs {
							b.Fatal(err)
						}
					})
				}
			}
		}
	}
}

// kvBatch moves one batch of 16 groups between client c's slice of r
// and random group-aligned offsets of seg.
func kvBatch(e *engine.Engine, seg *engine.Segment, r *engine.Region, rng *rand.Rand, c, writePct int) error {
	const group, perBatch, groups = 128 << 10, 16, (256 << 20) / (128 << 10)
	bt, err := e.AllocateBatch(perBatch)
	if err != nil {
		return err
	}
	defer bt.Free()
	for i := range perBatch {
		op := engine.OpRead
		if rng.IntN(100) < writePct {
			op = engine.OpWrite
		}
		req := engine.Request{Address: r.BaseAddress() + uint64((c*perBatch+i)*group),
			TargetOffset: uint64(rng.IntN(groups)) * group, Length: group}
		if _, err := bt.Submit(op, seg, []engine.Request{req}, nil, 0); err != nil {
			return err
		}
	}
	bt.Seal()
	if st, err := bt.Wait(10 * time.Second); err != nil || st != engine.StateCompleted {
		return fmt.Errorf("batch %d: %v %v", bt.ID(), st, err)
	}
	return nil
}
