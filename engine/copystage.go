// copystage.go owns the copies of device memory that no file I/O
// carries: a peer transfer of GPU memory (the peer executor on the
// sending or receiving side, peerexec.go) and ReadAt/WriteAt on a cuda:N
// region (what a daemon's peer server and the mount's data file use).
// Each goes through a small pool of pinned chunks of its own: the file
// staging pool (staging.go) belongs to the staging lanes for the
// engine's life, and these copies must not wait for a file unit.
//
// A copy is one chunk at a time: host bytes into the chunk, an
// asynchronous copy on a pooled stream (HtoD or DtoH), an event recorded
// behind it, and the event waited for (polled, never past the caller's
// cut) before anything else reads or reuses the chunk. A write into
// device memory therefore returns only after its copy event completed.
//
// Invariants:
//   - The pool holds min(staging_chunk_count, 2*peerLanes) chunks of
//     staging_chunk_size, cut from one page-locked slab allocated on the
//     first copy, never at New; a lease waits for a free chunk no longer
//     than the caller's context or cut.
//   - A chunk (and the stream and event) behind a copy whose outcome is
//     unknown (the event reported an error, or did not complete by the
//     cut) is never returned or reused: the GPU may still write it. The
//     error then wraps ErrUncertain, and the slab stays mapped at Close.
//   - A failed enqueue moved nothing (every earlier copy on that stream
//     was confirmed), so its chunk and stream go back.

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/internal/hostmem"
)

// copyStage is the engine's pool of pinned chunks for device copies
// outside the staging lanes.
type copyStage struct {
	once  sync.Once
	err   error
	ready atomic.Bool // the slab exists (set once, after it is built)

	slab  *hostmem.Mapping
	unpin func() error
	size  uint64
	count int
	free  chan []byte // chunks not leased
	dead  atomic.Int64
	// copies counts chunk copies confirmed by their event (stats).
	copies atomic.Uint64
}

// CopyStageStats describe the pool of pinned chunks for device copies
// outside the staging lanes.
type CopyStageStats struct {
	ChunkSize uint64 `json:"chunk_size"`
	Chunks    int    `json:"chunks"`
	Allocated bool   `json:"allocated"`
	Free      int    `json:"free"`
	Retained  int64  `json:"retained"` // chunks behind a copy of unknown outcome
	Copies    uint64 `json:"copies"`
}

// copyStageChunks is how many chunks the pool holds: one per lane of the
// peer executor (a lane holds one while its unit crosses the network),
// as many again for ReadAt/WriteAt (a peer server's requests), so an
// engine whose peer is itself never waits on its own lanes; never more
// than the file staging pool, so both together stay within what the
// engine pins.
func (e *Engine) copyStageChunks() int { return min(e.cfg.StagingChunkCount, 2*peerLanes) }

// stage returns the pool, creating it on first use.
func (e *Engine) stage() (*copyStage, error) {
	s := &e.gpu.copy
	s.once.Do(func() {
		if err := e.gpuReady("staging", "copy"); err != nil {
			s.err = err
			return
		}
		n, size := e.copyStageChunks(), uint64(e.cfg.StagingChunkSize)
		m, err := hostmem.Anonymous(uint64(n) * size)
		if err != nil {
			s.err = wrap(KindExhausted, "staging", "copy", err)
			return
		}
		unpin, err := e.gpu.b.Pin(uintptr(m.Addr()), m.Len())
		if err != nil {
			m.Close()
			s.err = wrap(KindExhausted, "staging", "copy", fmt.Errorf("pinning %d bytes of copy staging: %w", m.Len(), err))
			return
		}
		s.slab, s.unpin, s.size, s.count = m, unpin, size, n
		s.free = make(chan []byte, n)
		for i := range n {
			lo := uint64(i) * size
			s.free <- m.Bytes()[lo : lo+size : lo+size]
		}
		s.ready.Store(true)
	})
	return s, s.err
}

// lease takes a free chunk, waiting until ctx ends or cut passes.
func (s *copyStage) lease(ctx context.Context, cut time.Time) ([]byte, error) {
	select {
	case c := <-s.free:
		return c, nil
	default:
	}
	t := time.NewTimer(time.Until(cut))
	defer t.Stop()
	select {
	case c := <-s.free:
		return c, nil
	case <-ctx.Done():
		return nil, wrap(KindTimeout, "staging", "copy", fmt.Errorf("no pinned chunk free before the transfer ended: %w", ctx.Err()))
	case <-t.C:
		return nil, errorf(KindExhausted, "staging", "copy", "no pinned chunk of %d free within the deadline (%d retained after copies of unknown outcome)", s.count, s.dead.Load())
	}
}

// release returns a chunk whose copies completed.
func (s *copyStage) release(c []byte) { s.free <- c[:s.size] }

// retain keeps a chunk behind a copy of unknown outcome for good.
func (s *copyStage) retain() { s.dead.Add(1) }

// errCopyUncertain is the outcome of a device copy whose event failed or
// did not complete in time.
var errCopyUncertain = fmt.Errorf("device copy: %w", ErrUncertain)

// copyChunk moves len(c) bytes between pinned chunk c and device memory
// at daddr on device dev (toDevice: chunk -> device), and waits for the
// copy's event, never past cut. On an error wrapping ErrUncertain the
// copy may still run: the caller must retain c. Any other error moved
// nothing and c may be released.
func (e *Engine) copyChunk(c []byte, dev int, daddr uint64, toDevice bool, cut time.Time) error {
	st, err := e.getStream(dev)
	if err != nil {
		return fmt.Errorf("stream on device %d: %w", dev, err)
	}
	host := uintptr(hostmem.AddrOf(c))
	if toDevice {
		err = st.HtoD(daddr, host, uint64(len(c)))
	} else {
		err = st.DtoH(host, daddr, uint64(len(c)))
	}
	if err != nil {
		e.putStream(dev, st) // nothing was enqueued: the stream is clean
		return fmt.Errorf("%s copy of %d bytes: %w", direction(toDevice), len(c), err)
	}
	ev, err := st.Record()
	if err != nil {
		// The copy is enqueued and nothing can tell when it ends: the
		// stream and the chunk stay out of use for good.
		return fmt.Errorf("%s copy of %d bytes: recording its event: %v: %w", direction(toDevice), len(c), err, errCopyUncertain)
	}
	done, err := waitEvent(ev, cut)
	switch {
	case err != nil:
		return fmt.Errorf("%s copy of %d bytes: %v: %w", direction(toDevice), len(c), err, errCopyUncertain)
	case !done:
		return fmt.Errorf("%s copy of %d bytes: not complete by the deadline: %w", direction(toDevice), len(c), errCopyUncertain)
	}
	ev.Close()
	e.putStream(dev, st)
	e.gpu.copy.copies.Add(1)
	return nil
}

func direction(toDevice bool) string {
	if toDevice {
		return "host-to-device"
	}
	return "device-to-host"
}

// stagedDeviceCopy copies between host bytes p and device memory d at
// off through the pool, one chunk at a time (write: p -> device). It
// returns the bytes whose copy was confirmed; an error wrapping
// ErrUncertain means bytes past that count may have changed (on a
// write) and the chunk was retained.
func (e *Engine) stagedDeviceCopy(ctx context.Context, d DeviceMemory, off uint64, p []byte, write bool, cut time.Time) (uint64, error) {
	s, err := e.stage()
	if err != nil {
		return 0, err
	}
	var done uint64
	for done < uint64(len(p)) {
		n := min(uint64(len(p))-done, s.size)
		c, err := s.lease(ctx, cut)
		if err != nil {
			return done, err
		}
		c = c[:n]
		if write {
			copy(c, p[done:done+n])
		}
		if err := e.copyChunk(c, d.Device(), d.Ptr()+off+done, write, cut); err != nil {
			if errors.Is(err, ErrUncertain) {
				s.retain()
			} else {
				s.release(c)
			}
			return done, err
		}
		if !write {
			copy(p[done:done+n], c)
		}
		s.release(c)
		done += n
	}
	return done, nil
}

// closeCopyStage frees the pool at engine close, unless a chunk is still
// out or retained (the GPU may still use it; the slab then stays).
func (e *Engine) closeCopyStage() {
	s := &e.gpu.copy
	if !s.ready.Load() || s.slab == nil || len(s.free) != s.count {
		return
	}
	s.unpin()
	s.slab.Close()
	s.slab = nil
}

// copyStats describes the pool.
func (e *Engine) copyStats() CopyStageStats {
	s := &e.gpu.copy
	st := CopyStageStats{ChunkSize: uint64(e.cfg.StagingChunkSize), Chunks: e.copyStageChunks()}
	if s.ready.Load() {
		st.Allocated, st.Free = true, len(s.free)
	}
	st.Retained, st.Copies = s.dead.Load(), s.copies.Load()
	return st
}
