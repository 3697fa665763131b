//go:build linux && !noiouring

package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestKVSwapRuns: the kvswap workload runs on a real filesystem (ext4
// with O_DIRECT, tmpfs through the page cache) with several clients and
// swap-out batches, counts batches and bytes, and leaves nothing behind.
func TestKVSwapRuns(t *testing.T) {
	needIOUring(t)
	dirs := map[string]string{"tmpdir": t.TempDir()}
	if shm, err := os.MkdirTemp("/dev/shm", "orbitefs-kv-"); err == nil {
		t.Cleanup(func() { os.RemoveAll(shm) })
		dirs["shm"] = shm
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			o := KVOptions{Dir: dir, Layers: 2, GroupsPerLay: 16, GroupBytes: 64 << 10, BatchGroups: 4,
				Concurrency: 3, WritePct: 25, Memory: engine.LocationCPU, Runtime: 200 * time.Millisecond, Seed: 1}
			if err := PrepareKVFiles(o); err != nil {
				t.Fatal(err)
			}
			cfg := config.DefaultEngine()
			e, err := engine.New(cfg, iouring.New(cfg.IOUring))
			if err != nil {
				t.Fatal(err)
			}
			res, err := RunKV(context.Background(), e, o)
			if err != nil {
				t.Fatal(err)
			}
			t.Log(res)
			if res.Batches == 0 || res.Bytes != res.Batches*4*(64<<10) || res.GBps <= 0 || res.P99Us < res.P50Us || res.WarmupMaxUs <= 0 {
				t.Fatalf("result %+v", res)
			}
			if s := e.Stats(); s.Batches != 0 || s.Segments != 0 || s.Regions != 0 {
				t.Errorf("leaked: %d batches, %d segments, %d regions", s.Batches, s.Segments, s.Regions)
			}
			if err := e.Close(5 * time.Second); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestKVSwapRejectsBadOptions: every bad option is named, all at once.
func TestKVSwapRejectsBadOptions(t *testing.T) {
	err := KVOptions{Layers: 0, GroupsPerLay: 4, GroupBytes: 1000, BatchGroups: 5, Concurrency: 0, WritePct: 101}.Validate()
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"--layers 0", "--group-bytes 1000", "--batch 5", "--clients 0", "--write-pct 101", "--runtime 0s"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}
