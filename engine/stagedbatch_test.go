package engine_test

// stagedbatch_test.go: the staged lanes enqueue a reap pass's (or a
// fill's) device copies together: merged where host and device sides are
// both contiguous, in one CopyBatch call where the stream has it, copy by
// copy where it does not or where the batch was refused.

import (
	"bytes"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// gatherTransport hands out queues whose Reap delivers completions only
// once want of them arrived (or 2 s passed), all in one call: the lane
// then sees them in one reap pass, so the test decides what one pass
// holds instead of the kernel's timing.
type gatherTransport struct {
	engine.FileTransport
	want atomic.Int64
}

func (t *gatherTransport) Acquire() (engine.Queue, error) {
	q, err := t.FileTransport.Acquire()
	if q == nil {
		return q, err
	}
	return &gatherQueue{Queue: q, t: t}, err
}

func (t *gatherTransport) TryAcquire() (engine.Queue, error) {
	q, err := t.FileTransport.TryAcquire()
	if q == nil {
		return q, err
	}
	return &gatherQueue{Queue: q, t: t}, err
}

type gatherQueue struct {
	engine.Queue
	t   *gatherTransport
	got []engine.Completion
}

func (q *gatherQueue) Reap(wait time.Duration, fn func(engine.Completion)) (int, error) {
	end := time.Now().Add(2 * time.Second)
	for len(q.got) < int(q.t.want.Load()) && time.Now().Before(end) {
		if _, err := q.Queue.Reap(10*time.Millisecond, func(c engine.Completion) { q.got = append(q.got, c) }); err != nil {
			return 0, err
		}
	}
	n := len(q.got)
	for _, c := range q.got {
		fn(c)
	}
	q.got = q.got[:0]
	return n, nil
}

// batchRig is an engine with one staging lane of eight 64 KiB chunks
// (taken from the pool in order, so they lie back to back) whose reap
// passes each hold all eight units, over the fake GPU.
type batchRig struct {
	gpu  *fakeGPU
	ft   *gatherTransport
	e    *engine.Engine
	seg  *engine.Segment
	path string
	orig []byte
	dev  *engine.Region
}

const batchUnits, batchUnit = 8, 64 << 10

func newBatchRig(t *testing.T, batch bool) *batchRig {
	needIOUring(t)
	cfg := config.DefaultEngine()
	cfg.StagingChunkCount = batchUnits
	cfg.StagingChunkSize = batchUnit
	cfg.StagingLanes = 1
	cfg.MappedFiles = false // staging, also where the temporary directory is tmpfs
	gpu := newFakeGPU(1)
	gpu.batch.Store(batch)
	ft := &gatherTransport{FileTransport: realTransports(cfg)[0].(engine.FileTransport)}
	ft.want.Store(batchUnits)
	r := &batchRig{gpu: gpu, ft: ft, e: newEngineOver(t, cfg, ft, gpu)}
	r.path, r.orig = randomFile(t, t.TempDir(), "f", batchUnits*batchUnit)
	r.seg = openSeg(t, r.e, r.path, engine.PermReadWrite)
	r.dev = deviceRegion(t, r.e, 0, batchUnits*batchUnit)
	return r
}

// reqs are one request per unit: request i moves file unit i and device
// unit slot(i).
func (r *batchRig) reqs(slot func(i int) int) []engine.Request {
	var rs []engine.Request
	for i := range batchUnits {
		rs = append(rs, engine.Request{Address: r.dev.BaseAddress() + uint64(slot(i)*batchUnit), TargetOffset: uint64(i * batchUnit), Length: batchUnit})
	}
	return rs
}

// file reads the segment's file.
func (r *batchRig) file(t *testing.T) []byte {
	b, err := os.ReadFile(r.path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// calls is how many copy calls the fake saw: per-copy HtoD and DtoH and
// batches.
func (r *batchRig) calls() int64 {
	return r.gpu.htods.Load() + r.gpu.dtohCalls.Load() + r.gpu.batches.Load()
}

var (
	inOrder  = func(i int) int { return i }
	reversed = func(i int) int { return batchUnits - 1 - i }
)

// TestStagedCopiesMergedAndBatched: eight units of one reap pass (READ)
// or one fill (WRITE) in back-to-back chunks. Device-contiguous in the
// chunks' order, they merge into one copy call; reversed, they cannot
// merge and go as one batch where the driver has it, as eight calls
// where it does not. The bytes are right every way.
func TestStagedCopiesMergedAndBatched(t *testing.T) {
	cases := []struct {
		name   string
		slot   func(int) int
		batch  bool
		calls  int64 // copy calls per transfer
		copies int64 // copies carried by batches
	}{
		{"merged", inOrder, true, 1, 0},
		{"merged, no batch", inOrder, false, 1, 0},
		{"batched", reversed, true, 1, batchUnits},
		{"no batch", reversed, false, batchUnits, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := newBatchRig(t, c.batch)
			// READ: file unit i lands in device unit slot(i).
			if _, err := r.e.SubmitAndWait(engine.OpRead, r.seg, r.reqs(c.slot), ioTimeout); err != nil {
				t.Fatal(err)
			}
			// Counted before reading back: Region.ReadAt on device
			// memory copies through streams too.
			if n, b := r.calls(), r.gpu.batched.Load(); n != c.calls || b != c.copies {
				t.Fatalf("READ: %d copy calls carrying %d batched copies, want %d and %d", n, b, c.calls, c.copies)
			}
			got := make([]byte, batchUnits*batchUnit)
			if _, err := r.dev.ReadAt(got, 0); err != nil {
				t.Fatal(err)
			}
			for i := range batchUnits {
				s := c.slot(i)
				if !bytes.Equal(got[s*batchUnit:(s+1)*batchUnit], r.orig[i*batchUnit:(i+1)*batchUnit]) {
					t.Fatalf("READ: device unit %d differs from file unit %d", s, i)
				}
			}
			// WRITE back with the inverse map: file unit i from device
			// unit slot(i) restores the file.
			want := bytes.Repeat([]byte{0xC3}, len(r.orig))
			if _, err := r.dev.WriteAt(want, 0); err != nil {
				t.Fatal(err)
			}
			r.gpu.htods.Store(0)
			r.gpu.dtohCalls.Store(0)
			r.gpu.batches.Store(0)
			r.gpu.batched.Store(0)
			if _, err := r.e.SubmitAndWait(engine.OpWrite, r.seg, r.reqs(c.slot), ioTimeout); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(r.file(t), want) {
				t.Fatal("WRITE: the file differs from the device bytes")
			}
			if n, b := r.calls(), r.gpu.batched.Load(); n != c.calls || b != c.copies {
				t.Fatalf("WRITE: %d copy calls carrying %d batched copies, want %d and %d", n, b, c.calls, c.copies)
			}
		})
	}
}

// TestStagedBatchRefused: a batch the driver refuses after enqueueing
// part of it. Each copy is then enqueued alone: a unit whose own copy is
// refused fails (KindIO, nothing counted), every other unit completes
// with its bytes, and every unit resolves once.
func TestStagedBatchRefused(t *testing.T) {
	for _, op := range []engine.Op{engine.OpRead, engine.OpWrite} {
		for _, bad := range []int{-1, 0, 3, batchUnits - 1} {
			t.Run(fmt.Sprintf("%s/bad=%d", op, bad), func(t *testing.T) {
				r := newBatchRig(t, true)
				reqs := r.reqs(reversed) // no merging: one batch of eight
				want := r.orig
				if op == engine.OpWrite {
					want = bytes.Repeat([]byte{0x3C}, len(r.orig))
					if _, err := r.dev.WriteAt(want, 0); err != nil {
						t.Fatal(err)
					}
				}
				r.gpu.failBatchNth.Store(r.gpu.batches.Load() + 1)
				if bad >= 0 {
					// The copy of request bad is refused, alone or batched.
					r.gpu.failBatchNth.Store(0)
					if op == engine.OpRead {
						r.gpu.failHtoDAt.Store(reqs[bad].Address)
					}
				}
				if op == engine.OpWrite && bad >= 0 {
					// Sorted by device address, request bad's copy is the
					// (batchUnits-bad)-th device-to-host copy from now.
					r.gpu.failDtoHNth.Store(r.gpu.dtohs.Load() + int64(batchUnits-bad))
					r.ft.want.Store(batchUnits - 1) // its SQE is never written
				}
				b, err := r.e.SubmitAsync(op, r.seg, reqs, nil, ioTimeout)
				if err != nil {
					t.Fatal(err)
				}
				defer b.Free()
				if st, err := b.Wait(ioTimeout); err != nil || !st.Terminal() {
					t.Fatalf("batch %v %v", st, err)
				}
				if r.gpu.batches.Load() == 0 {
					t.Fatal("no batch call: the case did not reach the batched path")
				}
				dev := make([]byte, len(want))
				if op == engine.OpRead {
					// (After a WRITE the fake refuses the bad copy's source
					// again, so the device is not read back.)
					if _, err := r.dev.ReadAt(dev, 0); err != nil {
						t.Fatal(err)
					}
				}
				file := r.file(t)
				for i := range batchUnits {
					ts, _ := b.TaskStatus(i)
					s := reversed(i)
					if i == bad {
						wantKind(t, ts.Err, engine.KindIO)
						if ts.Transferred != 0 {
							t.Fatalf("request %d: %d bytes counted for a refused copy", i, ts.Transferred)
						}
						continue
					}
					if ts.Err != nil || ts.Transferred != batchUnit {
						t.Fatalf("request %d: %+v, want it complete", i, ts)
					}
					var got, exp []byte
					if op == engine.OpRead {
						got, exp = dev[s*batchUnit:(s+1)*batchUnit], want[i*batchUnit:(i+1)*batchUnit]
					} else {
						got, exp = file[i*batchUnit:(i+1)*batchUnit], want[s*batchUnit:(s+1)*batchUnit]
					}
					if !bytes.Equal(got, exp) {
						t.Fatalf("request %d: bytes differ", i)
					}
				}
				if n := r.e.Stats().Staging.InUse; n != 0 {
					t.Fatalf("%d staging chunks still in use: a unit's slot was never freed", n)
				}
			})
		}
	}
}
