package engine_test

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

// failSubmitTransport fails the next failSubmit Submit calls with EIO
// (a persistent error), leaving the ops prepared as Queue documents.
type failSubmitTransport struct {
	engine.FileTransport
	failSubmit atomic.Int64
}

func (s *failSubmitTransport) Acquire() (engine.Queue, error) {
	q, err := s.FileTransport.Acquire()
	if q == nil {
		return q, err
	}
	return &failSubmitQueue{Queue: q, s: s}, err
}

func (s *failSubmitTransport) TryAcquire() (engine.Queue, error) {
	q, err := s.FileTransport.TryAcquire()
	if q == nil {
		return q, err
	}
	return &failSubmitQueue{Queue: q, s: s}, err
}

type failSubmitQueue struct {
	engine.Queue
	s *failSubmitTransport
}

func (q *failSubmitQueue) Submit() (int, error) {
	if q.s.failSubmit.Add(-1) >= 0 {
		return 0, unix.EIO
	}
	return q.Queue.Submit()
}

// TestStagedSubmitFailureReusesSlots: after a persistent Submit
// failure the lane frees the slots whose SQEs are still prepared on the
// ring and gives them new units; the next Submit sends the stale SQEs too.
func TestStagedSubmitFailureReusesSlots(t *testing.T) {
	needIOUring(t)
	cfg := config.DefaultEngine()
	cfg.StagingChunkCount = 2
	cfg.StagingChunkSize = 64 << 10
	cfg.StagingLanes = 1
	cfg.MappedFiles = false // staging, also where the temporary directory is tmpfs
	ft := &failSubmitTransport{FileTransport: realTransports(cfg)[0].(engine.FileTransport)}
	gpu := newFakeGPU(1)
	e := newEngineOver(t, cfg, ft, gpu)
	dir := t.TempDir()
	out, orig := randomFile(t, dir, "dst", 256<<10)
	dst := openSeg(t, e, out, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, 256<<10)
	src := bytes.Repeat([]byte{0xAB}, 256<<10)
	if _, err := d.WriteAt(src, 0); err != nil {
		t.Fatal(err)
	}
	ft.failSubmit.Store(1)
	rep, err := e.SubmitAndWait(engine.OpWrite, dst, []engine.Request{{Address: d.BaseAddress(), Length: 256 << 10}}, 10*time.Second)
	t.Logf("err %v report %+v", err, rep)
	if err == nil || rep.RemoteEffect != engine.EffectNone {
		t.Fatalf("want a failed WRITE that reached no kernel: %v %+v", err, rep)
	}
	// Before the fix the stale SQEs went out with the next submit (and
	// crashed the lane); give such a bug time to write before checking.
	time.Sleep(200 * time.Millisecond)
	back, _ := os.ReadFile(out)
	if !bytes.Equal(back, orig) {
		t.Fatal("a WRITE whose submit failed changed the file")
	}
}

// TestStagedStageOutPartialEnqueue: a WRITE unit with two device pieces
// whose second DtoH cannot be enqueued: the first copy is still running
// into the chunk when the lane ends clean and returns the chunk.
func TestStagedStageOutPartialEnqueue(t *testing.T) {
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) { c.StagingLanes = 1 })
	out, _ := randomFile(t, t.TempDir(), "dst", 64<<10)
	dst := openSeg(t, e, out, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, 1<<20)
	gpu.slowCopy.Store(int64(500 * time.Millisecond))
	gpu.failDtoHNth.Store(2)
	req := []engine.Request{{Elements: []engine.Element{{Address: d.BaseAddress(), Length: 4096}, {Address: d.BaseAddress() + 65536, Length: 4096}}}}
	rep, err := e.SubmitAndWait(engine.OpWrite, dst, req, 10*time.Second)
	st := e.Stats()
	busy := gpu.busyCopies.Load()
	t.Logf("err %v drained %v staging in use %d, copies still pending into staging: %d", err, rep.LocallyDrained, st.Staging.InUse, busy)
	if rep.LocallyDrained && busy > 0 {
		t.Fatalf("group reported locally drained and its chunk is back in the pool (in use %d) while %d device-to-host copy still writes into it", st.Staging.InUse, busy)
	}
	wantKind(t, err, engine.KindIO)
}

// TestStagedCopyHangPastDeadline: a READ whose device copy never completes:
// the lane blocks in retireCopies(true) -> Event.Wait with no deadline, so
// the group never reaches its deadline + quiesce_grace cutoff.
func TestStagedCopyHangPastDeadline(t *testing.T) {
	gpu := newFakeGPU(1)
	gpu.hang = make(chan struct{})
	t.Cleanup(func() { close(gpu.hang) })
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) { c.QuiesceGrace = config.Duration(100 * time.Millisecond) })
	path, _ := randomFile(t, t.TempDir(), "f", 64<<10)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 64 << 10}}, 300*time.Millisecond)
		t.Logf("returned: %v", err)
		if err != nil && strings.Contains(err.Error(), "not terminal") {
			t.Errorf("group never reached its deadline+grace cutoff: %v", err)
		}
		if !errors.Is(err, engine.ErrUnquiesced) {
			t.Errorf("a copy that never completed: %v, want unquiesced", err)
		}
	}()
	t.Cleanup(func() { wantKind(t, e.Close(ioTimeout), engine.KindUnquiesced) })
	select {
	case <-done:
	case <-time.After(3 * time.Second):
		<-done
		t.Fatal("a READ with timeout 300ms and quiesce_grace 100ms did not end after 3s: the lane waits on the copy event with no deadline")
	}
}

// TestStagedLanesExceedChunks: staging_lanes > staging_chunk_count on an
// idle engine: the extra lane finds no free chunk, its pageable fallback
// is refused, and failRest fails every unit the other lanes had not taken.
func TestStagedLanesExceedChunks(t *testing.T) {
	gpu := newFakeGPU(1)
	e := gpuEngine(t, gpu, nil, func(c *config.Engine) {
		c.StagingChunkCount = 2
		c.StagingLanes = 3
		c.MaxInflightBytes = 1 << 20
		c.MaxTransferBytes = 1 << 20
	})
	path, _ := randomFile(t, t.TempDir(), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	fails := 0
	for i := 0; i < 20; i++ {
		rep, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 1 << 20}}, 10*time.Second)
		if err != nil {
			fails++
			if fails == 1 {
				t.Logf("err %v completed %d", err, rep.CompletedBytes)
			}
		}
	}
	if fails > 0 {
		t.Fatalf("%d of 20 idle-engine 1 MiB staged READs failed", fails)
	}
}
