package engine_test

// stagedexec_test.go: the staged executor is one engine-wide service
// whose lanes serve every batch's units in turn.

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestStagedFairAcrossBatches: one large READ into the device holds the
// only lane for hundreds of units; small READs from other batches,
// submitted after it started, complete while it is still running. With
// units served in job order the small ones waited for the whole load
// (one 4 GiB load starved 63 clients' KV groups on the GPU machine).
func TestStagedFairAcrossBatches(t *testing.T) {
	const smalls = 6
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) {
		c.StagingChunkCount, c.StagingLanes = 2, 1
	})
	dir := t.TempDir()
	bigPath, _ := randomFile(t, dir, "big", 16<<20) // 256 units of 64 KiB
	big := openSeg(t, e, bigPath, engine.PermRead)
	path, orig := randomFile(t, dir, "small", 64<<10)
	small := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 16<<20+smalls<<20)
	gpu.slowCopy.Store(int64(2 * time.Millisecond)) // the big READ lasts >= 512 ms
	b, err := e.SubmitAsync(engine.OpRead, big, []engine.Request{{Address: d.BaseAddress(), Length: 16 << 20}}, nil, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the large READ to move bytes", func() bool { return gpu.copies.Load() > 0 })
	concurrently(t, smalls, func(i int) error {
		return oneBatch(e, submission{engine.OpRead, small, engine.Request{Address: d.BaseAddress() + 16<<20 + uint64(i)<<20, Length: 64 << 10}})
	})
	if st := b.Status(); st != engine.StateOpen {
		ts, _ := b.TaskStatus(0)
		t.Fatalf("the large READ was %v (%d of %d bytes) before the small ones completed: they waited for it", st, ts.Transferred, 16<<20)
	}
	gpu.slowCopy.Store(0)
	if st, err := b.Wait(30 * time.Second); err != nil || st != engine.StateCompleted {
		t.Fatalf("large READ: %v %v", st, err)
	}
	got := make([]byte, 64<<10)
	for i := range smalls {
		d.ReadAt(got, 16<<20+int64(i)<<20)
		if string(got) != string(orig) {
			t.Fatalf("small READ %d: bytes differ from the file", i)
		}
	}
}

// TestStagedMixedGroup: a group with a device request and a host-only
// request: the host request rides with the group through staging and
// completes. It had no pieces (only off-ring routes recorded them), so it
// got no unit and its task never ended.
func TestStagedMixedGroup(t *testing.T) {
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, nil)
	path, orig := randomFile(t, t.TempDir(), "f", 256<<10)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 128<<10)
	h := register(t, e, 128<<10)
	b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{
		{Address: d.BaseAddress(), Length: 128 << 10},
		{Address: h.BaseAddress(), TargetOffset: 128 << 10, Length: 128 << 10},
	}, nil, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := b.Wait(15 * time.Second); err != nil || st != engine.StateCompleted {
		t.Fatalf("mixed group: %v %v", st, err)
	}
	got := make([]byte, 128<<10)
	d.ReadAt(got, 0)
	if string(got) != string(orig[:128<<10]) || string(regionBytes(t, h)) != string(orig[128<<10:]) {
		t.Fatal("bytes differ from the file")
	}
}

// TestStagedManyClients: the KV-cache swap shape, many clients each
// moving small groups between one file and the device at once, through a
// small ring pool, on every filesystem here (O_DIRECT on ext4): every
// group completes with its bytes, and the executor's lanes and chunks are
// all that ran (no pageable fallback, no more chunks than the pool).
// Each group used to start lanes of its own; at 64 clients on the GPU
// machine they fought over rings and chunks until the engine all but
// stopped.
func TestStagedManyClients(t *testing.T) {
	const clients, groups, size = 32, 4, 128 << 10
	for fs, dir := range filesystems(t) {
		t.Run(fs, func(t *testing.T) {
			gpu := newFakeGPU(1)
			e := gpuEngine(t, gpu, nil, func(c *config.Engine) {
				c.IOUring.MaxRings = 4
				c.StagingChunkSize = 64 << 10
			})
			path, orig := randomFile(t, dir, "kv", clients*groups*size)
			seg := openSeg(t, e, path, engine.PermReadWrite)
			d := deviceRegion(t, e, 0, clients*groups*size)
			concurrently(t, clients, func(i int) error {
				b, err := e.AllocateBatch(groups)
				if err != nil {
					return err
				}
				defer b.Free()
				for j := range groups {
					off := uint64((i*groups + j) * size)
					if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress() + off, TargetOffset: off, Length: size}}, nil, 30*time.Second); err != nil {
						return err
					}
				}
				b.Seal()
				if st, err := b.Wait(30 * time.Second); err != nil || st != engine.StateCompleted {
					return fmt.Errorf("batch %d: %v %v", b.ID(), st, err)
				}
				return nil
			})
			got := make([]byte, clients*groups*size)
			d.ReadAt(got, 0)
			if !bytes.Equal(got, orig) {
				t.Fatal("device bytes differ from the file")
			}
			st := e.Stats()
			if st.Staging.Fallbacks != 0 || st.Staging.HighWater > e.Config().StagingChunkCount || st.Staging.InUse != 0 || st.Staging.Lanes != 3 {
				t.Fatalf("staging %+v: want no fallback, at most the pool's chunks, none left in use, the 3 configured lanes", st.Staging)
			}
		})
	}
}

// TestStagedPollsOldestCopyFirst: a lane with several device copies in
// flight queries the oldest one's event and no younger one while it is
// pending (a stream completes in order). Each query is a driver call
// that the CUDA driver serializes across lanes; querying every slot each
// turn capped 128 KiB units into cuda:0 on the H200.
func TestStagedPollsOldestCopyFirst(t *testing.T) {
	gpu := newFakeGPU(1)
	gpu.latency.Store(int64(3 * time.Millisecond))
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) { c.StagingLanes = 1 })
	const n = 8 << 16 // 8 units of one 64 KiB chunk each
	path, orig := randomFile(t, t.TempDir(), "f", n)
	src := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, n)
	for range 3 {
		rep, err := e.SubmitAndWait(engine.OpRead, src, []engine.Request{{Address: d.BaseAddress(), Length: n}}, ioTimeout)
		if err != nil || rep.CompletedBytes != n {
			t.Fatalf("read: %v %+v", err, rep)
		}
	}
	got := make([]byte, n)
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, orig) {
		t.Fatal("device bytes differ from the file")
	}
	if q := gpu.youngQueries.Load(); q != 0 {
		t.Fatalf("%d queries of a copy event while an older one on its stream was pending", q)
	}
}

// TestStagedOneEventPerReapPass: one lane of 8 slots submits 8 READ
// units of a tmpfs file at once, so their CQEs come back in one reap
// pass (tmpfs reads complete in the submit); their copies share one
// event per stream instead of one each, since every record, query and
// release is a driver call the driver serializes across lanes. Each
// event is closed exactly once, by the last slot of its pass, and the
// bytes arrive.
func TestStagedOneEventPerReapPass(t *testing.T) {
	gpu := newFakeGPU(1)
	// Events complete 2 ms after their record, later than the CQEs (as
	// a copy engine's do): slots are polled while their event pends.
	gpu.latency.Store(int64(2 * time.Millisecond))
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) { c.StagingLanes = 1 })
	const units, rounds = 8, 4
	const n = units << 16 // 64 KiB chunks
	// tmpfs: its reads complete in the submit, never in a worker thread.
	dir, err := os.MkdirTemp("/dev/shm", "orbitefs-reappass-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	path, orig := randomFile(t, dir, "f", n)
	src := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, n)
	if _, err := e.SubmitAndWait(engine.OpRead, src, []engine.Request{{Address: d.BaseAddress(), Length: n}}, ioTimeout); err != nil {
		t.Fatal(err) // warms the lane, its stream and the page cache
	}
	rec0, rel0 := gpu.records.Load(), gpu.releases.Load()
	for range rounds {
		rep, err := e.SubmitAndWait(engine.OpRead, src, []engine.Request{{Address: d.BaseAddress(), Length: n}}, ioTimeout)
		if err != nil || rep.CompletedBytes != n {
			t.Fatalf("read: %v %+v", err, rep)
		}
	}
	// Counted before ReadAt, whose own copies record events of their own.
	recs, rels := gpu.records.Load()-rec0, gpu.releases.Load()-rel0
	got := make([]byte, n)
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, orig) {
		t.Fatal("device bytes differ from the file")
	}
	t.Logf("%d units, %d events recorded, %d released", units*rounds, recs, rels)
	// One event per unit would be 32; a loaded machine may split a pass
	// in two now and then, so up to 3/4 of that still shows sharing.
	if recs*4 > units*rounds*3 {
		t.Errorf("%d events recorded for %d units arriving %d at a time: want about one per reap pass", recs, units*rounds, units)
	}
	if rels != recs {
		t.Errorf("%d events recorded, %d released: each must be released once, by the last slot sharing it", recs, rels)
	}
}

// TestStagedOneEventPerFill: the WRITE units one lane takes in one fill
// (8 slots, one job of 8 units) have their device-to-chunk copies
// confirmed by one event per stream behind them all, not one each, and
// the file gets the device's bytes.
func TestStagedOneEventPerFill(t *testing.T) {
	gpu := newFakeGPU(1)
	gpu.latency.Store(int64(time.Millisecond))
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) { c.StagingLanes = 1 })
	const units, rounds = 8, 4
	const n = units << 16 // 64 KiB chunks
	path, _ := randomFile(t, t.TempDir(), "f", n)
	dst := openSeg(t, e, path, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, n)
	want := make([]byte, n)
	rand.Read(want)
	if _, err := d.WriteAt(want, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SubmitAndWait(engine.OpWrite, dst, []engine.Request{{Address: d.BaseAddress(), Length: n}}, ioTimeout); err != nil {
		t.Fatal(err) // warms the lane and its stream
	}
	rec0, rel0 := gpu.records.Load(), gpu.releases.Load()
	for range rounds {
		rep, err := e.SubmitAndWait(engine.OpWrite, dst, []engine.Request{{Address: d.BaseAddress(), Length: n}}, ioTimeout)
		if err != nil || rep.CompletedBytes != n {
			t.Fatalf("write: %v %+v", err, rep)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("file bytes differ from the device")
	}
	recs, rels := gpu.records.Load()-rec0, gpu.releases.Load()-rel0
	t.Logf("%d units, %d events recorded, %d released", units*rounds, recs, rels)
	if recs*2 > units*rounds {
		t.Errorf("%d events recorded for %d units taken %d at a time: want one per fill", recs, units*rounds, units)
	}
	if rels != recs {
		t.Errorf("%d events recorded, %d released", recs, rels)
	}
}
