// staging.go owns the pinned staging pool that CUDA transfers pass
// through: staging_chunk_count chunks of staging_chunk_size bytes, cut
// from one page-locked slab that is also one io_uring fixed buffer (one
// registration serves every chunk on every ring).
//
// Invariants:
//   - The slab is allocated on the first staged transfer, never at New.
//   - The staging lanes (staged.go) take every chunk when they start and
//     hold them for the engine's life; at Engine.Close they put back the
//     chunks of live slots. A dead slot's chunk (the kernel or the GPU
//     may still touch it) is never put back, and the slab then stays.
//   - in_use counts chunks serving a unit plus dead ones; leases counts
//     units staged.
//   - A lane whose chunks all died falls back to one aligned pageable
//     buffer charged against max_inflight_bytes, returned when the lane
//     goes idle; with that charge refused, the unit fails
//     ResourceExhausted before any I/O.

package engine

import (
	"fmt"
	"sync"

	"github.com/orbitefs/orbitefs/internal/hostmem"
)

type stagingPool struct {
	slab  *hostmem.Mapping
	unpin func() error
	buf   Buffer // the slab as one fixed buffer
	size  uint64
	count int

	mu        sync.Mutex
	free      []int // chunk indices not held by a lane
	inUse     int   // chunks serving a unit, or retained (dead)
	highWater int
	hits      uint64
	fallbacks uint64
	pageable  uint64 // bytes of fallback buffers outstanding
}

// chunk is one staging buffer: a pool chunk or a pageable fallback.
type chunk struct {
	b        []byte
	fixed    Buffer // zero for a fallback
	idx      int    // pool index, -1 for a fallback
	fallback *hostmem.Mapping
}

func (c *chunk) addr() uint64 { return hostmem.AddrOf(c.b) }

// StagingStats describe the pinned staging pool.
type StagingStats struct {
	ChunkSize     uint64 `json:"chunk_size"`
	Chunks        int    `json:"chunks"`
	Allocated     bool   `json:"allocated"`
	Lanes         int    `json:"lanes"`  // staging lanes running
	InUse         int    `json:"in_use"` // chunks serving a unit, or retained
	HighWater     int    `json:"high_water"`
	Leases        uint64 `json:"leases"` // units staged
	Fallbacks     uint64 `json:"pageable_fallbacks"`
	PageableBytes uint64 `json:"pageable_bytes"`
}

// staging returns the pool, creating it on first use.
func (e *Engine) staging() (*stagingPool, error) {
	g := &e.gpu
	g.stagingOnce.Do(func() {
		n := uint64(e.cfg.StagingChunkCount) * uint64(e.cfg.StagingChunkSize)
		m, err := hostmem.Anonymous(n)
		if err != nil {
			g.stagingErr = wrap(KindExhausted, "staging", "pool", err)
			return
		}
		unpin, err := g.b.Pin(uintptr(m.Addr()), m.Len())
		if err != nil {
			m.Close()
			g.stagingErr = wrap(KindExhausted, "staging", "pool", fmt.Errorf("pinning %d bytes of staging: %w", n, err))
			return
		}
		e.mu.Lock()
		e.mu.nextKey++
		key := e.mu.nextKey
		e.mu.Unlock()
		p := &stagingPool{slab: m, unpin: unpin, size: uint64(e.cfg.StagingChunkSize), count: e.cfg.StagingChunkCount,
			buf: Buffer{Key: key, Base: m.Addr(), Len: m.Len()}}
		for i := e.cfg.StagingChunkCount - 1; i >= 0; i-- {
			p.free = append(p.free, i)
		}
		g.staging.Store(p)
	})
	return g.staging.Load(), g.stagingErr
}

// getChunks leases up to want chunks without waiting. When the pool is
// empty it returns one pageable fallback charged against
// max_inflight_bytes, or, without fallback, nothing (nil, nil).
func (e *Engine) getChunks(p *stagingPool, want int, fallback bool) ([]*chunk, error) {
	p.mu.Lock()
	var out []*chunk
	for len(out) < want && len(p.free) > 0 {
		i := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		lo := uint64(i) * p.size
		out = append(out, &chunk{b: p.slab.Bytes()[lo : lo+p.size : lo+p.size], fixed: p.buf, idx: i})
	}
	p.mu.Unlock()
	if len(out) > 0 || !fallback {
		return out, nil
	}
	if !e.tryChargeBytes(shardHere(), p.size) {
		n := e.inflightBytes.inUse()
		return nil, errorf(KindExhausted, "staging", "pool", "all %d staging chunks are leased and a %d-byte pageable buffer would exceed max_inflight_bytes (%d in flight)", e.cfg.StagingChunkCount, p.size, n)
	}
	m, err := hostmem.Anonymous(p.size)
	if err != nil {
		e.uncharge(p.size)
		return nil, wrap(KindExhausted, "staging", "pool", err)
	}
	p.mu.Lock()
	p.fallbacks++
	p.pageable += p.size
	p.mu.Unlock()
	return []*chunk{{b: m.Bytes(), idx: -1, fallback: m}}, nil
}

// putChunks returns chunks after their I/O and copies completed.
func (e *Engine) putChunks(p *stagingPool, cs []*chunk) {
	for _, c := range cs {
		if c.idx < 0 {
			c.fallback.Close()
			e.uncharge(p.size)
			p.mu.Lock()
			p.pageable -= p.size
			p.mu.Unlock()
			continue
		}
		p.mu.Lock()
		p.free = append(p.free, c.idx)
		p.mu.Unlock()
	}
}

func (e *Engine) uncharge(n uint64) {
	e.inflightBytes.give(shardHere(), n)
	e.adm.bytesFreed()
}

// leased counts a chunk taking a unit; returned counts it free again.
// A chunk whose slot died is never returned: it stays in use for good.
func (p *stagingPool) leased() {
	p.mu.Lock()
	p.hits++
	p.inUse++
	p.highWater = max(p.highWater, p.inUse)
	p.mu.Unlock()
}

func (p *stagingPool) returned() {
	p.mu.Lock()
	p.inUse--
	p.mu.Unlock()
}

func (p *stagingPool) stats() StagingStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return StagingStats{ChunkSize: p.size, Chunks: p.count, Allocated: true, InUse: p.inUse,
		HighWater: p.highWater, Leases: p.hits, Fallbacks: p.fallbacks, PageableBytes: p.pageable}
}

// closeStaging frees the pool at engine close, unless a lane still holds
// chunks (then the slab stays: the kernel or GPU may still use it).
func (e *Engine) closeStaging() {
	p := e.gpu.staging.Load()
	if p == nil {
		return
	}
	p.mu.Lock()
	busy := len(p.free) != p.count
	p.mu.Unlock()
	if busy {
		return
	}
	if e.file != nil {
		e.file.ForgetBuffer(p.buf.Key)
	}
	if p.unpin != nil {
		p.unpin()
	}
	p.slab.Close()
}
