// pool.go owns PinnedPool, the fixed set of page-aligned pinned staging
// chunks the engine reads files into before copying them to a device (and
// back), registered by the engine as io_uring fixed buffers.
//
// Invariants:
//   - Nothing is allocated at construction; the first TryGet, Get or
//     Chunks allocates one slab of count*size bytes and cuts it into
//     chunks. A failed allocation is returned and retried on next use.
//   - A chunk is either in the free channel or owned by exactly one
//     caller; Put of a chunk not owned (twice, or from another pool) is
//     refused and changes nothing.
//   - Key is unique among every pool of one Driver, Index is the chunk's
//     place in Chunks (its fixed-buffer slot).
//   - Close frees the slab only when every chunk is back.

package cuda

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// PageSize is the alignment and size granule of pool chunks.
const PageSize = 4096

// slab is the pool's backing memory: a HostBuffer in production.
type slab interface {
	Bytes() []byte
	Free() error
}

// PinnedPool is a fixed pool of pinned staging chunks. Safe for
// concurrent use.
type PinnedPool struct {
	alloc   func(n int) (slab, error)
	keys    *atomic.Uint64
	count   int
	size    int
	name    string
	free    chan *Chunk
	inUse   atomic.Int64
	high    atomic.Int64
	misses  atomic.Int64
	waits   atomic.Int64
	mu      sync.Mutex
	slab    slab     // REQUIRES mu to change
	chunks  []*Chunk // REQUIRES mu to change; read-only once set
	ready   atomic.Bool
	closed  bool // REQUIRES mu
	keyBase uint64
}

// Chunk is one staging buffer of a pool.
type Chunk struct {
	pool  *PinnedPool
	index int
	key   uint64
	b     []byte
	owned atomic.Bool
}

// Addr is the chunk's start address (PageSize-aligned).
func (c *Chunk) Addr() uintptr { return uintptr(unsafe.Pointer(&c.b[0])) }

// Len is the chunk's size.
func (c *Chunk) Len() int { return len(c.b) }

// Bytes views the chunk; valid while the pool is open.
func (c *Chunk) Bytes() []byte { return c.b }

// Key is unique among all chunks of one Driver's pools.
func (c *Chunk) Key() uint64 { return c.key }

// Index is the chunk's position in its pool's Chunks.
func (c *Chunk) Index() int { return c.index }

// PoolStats are a pool's figures.
type PoolStats struct {
	Capacity  int   // chunks in the pool
	ChunkSize int   // bytes per chunk
	Allocated bool  // whether the slab exists yet
	InUse     int   // chunks handed out now
	HighWater int   // most chunks ever handed out at once
	Misses    int64 // TryGet calls that found no free chunk
	Waits     int64 // Get calls that had to wait
}

// NewPinnedPool makes a pool of count chunks of size bytes (a multiple of
// PageSize) of portable pinned memory on dev. Memory is allocated on first
// use.
func NewPinnedPool(dev *Device, count, size int) (*PinnedPool, error) {
	alloc := func(n int) (slab, error) { return dev.HostAlloc(n) }
	return newPool(alloc, &dev.drv.keys, fmt.Sprintf("pinned pool on %s", dev), count, size)
}

func newPool(alloc func(int) (slab, error), keys *atomic.Uint64, name string, count, size int) (*PinnedPool, error) {
	if count <= 0 {
		return nil, fmt.Errorf("%w: %s: chunk count %d, want > 0", ErrInvalid, name, count)
	}
	if size <= 0 || size%PageSize != 0 {
		return nil, fmt.Errorf("%w: %s: chunk size %d, want a positive multiple of %d", ErrInvalid, name, size, PageSize)
	}
	if uint64(count)*uint64(size) > 1<<46 {
		return nil, fmt.Errorf("%w: %s: %d chunks of %d bytes is too large", ErrInvalid, name, count, size)
	}
	p := &PinnedPool{alloc: alloc, keys: keys, name: name, count: count, size: size, free: make(chan *Chunk, count)}
	return p, nil
}

// ensure allocates the slab on first use.
func (p *PinnedPool) ensure() error {
	if p.ready.Load() {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return fmt.Errorf("%w: %s", ErrClosed, p.name)
	}
	if p.ready.Load() {
		return nil
	}
	s, err := p.alloc(p.count * p.size)
	if err != nil {
		return fmt.Errorf("%s: %d chunks of %d bytes: %w", p.name, p.count, p.size, err)
	}
	mem := s.Bytes()
	if uintptr(unsafe.Pointer(&mem[0]))%PageSize != 0 {
		_ = s.Free()
		return fmt.Errorf("%w: %s: slab at %p is not page-aligned", ErrInvalid, p.name, &mem[0])
	}
	p.keyBase = p.keys.Add(uint64(p.count)) - uint64(p.count)
	p.slab = s
	p.chunks = make([]*Chunk, p.count)
	for i := range p.chunks {
		c := &Chunk{pool: p, index: i, key: p.keyBase + uint64(i), b: mem[i*p.size : (i+1)*p.size : (i+1)*p.size]}
		p.chunks[i] = c
		p.free <- c
	}
	p.ready.Store(true)
	return nil
}

func (p *PinnedPool) take(c *Chunk) *Chunk {
	c.owned.Store(true)
	n := p.inUse.Add(1)
	for {
		h := p.high.Load()
		if n <= h || p.high.CompareAndSwap(h, n) {
			break
		}
	}
	return c
}

// TryGet returns a free chunk at once, or an error matching ErrExhausted
// when none is free (or the allocation error on first use).
func (p *PinnedPool) TryGet() (*Chunk, error) {
	if err := p.ensure(); err != nil {
		return nil, err
	}
	select {
	case c := <-p.free:
		return p.take(c), nil
	default:
		p.misses.Add(1)
		return nil, fmt.Errorf("%w: %s: all %d chunks in use", ErrExhausted, p.name, p.count)
	}
}

// Get returns a free chunk, waiting for one until ctx is done.
func (p *PinnedPool) Get(ctx context.Context) (*Chunk, error) {
	if err := p.ensure(); err != nil {
		return nil, err
	}
	select {
	case c := <-p.free:
		return p.take(c), nil
	default:
	}
	p.waits.Add(1)
	select {
	case c := <-p.free:
		return p.take(c), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s: waiting for a chunk: %w", p.name, ctx.Err())
	}
}

// Put returns a chunk taken from this pool. The caller must be done with
// it, including any async copy that reads or writes it.
func (p *PinnedPool) Put(c *Chunk) error {
	if c == nil || c.pool != p {
		return fmt.Errorf("%w: %s: Put of a chunk from another pool", ErrInvalid, p.name)
	}
	if !c.owned.CompareAndSwap(true, false) {
		return fmt.Errorf("%w: %s: Put of chunk %d, which is not handed out", ErrInvalid, p.name, c.index)
	}
	p.inUse.Add(-1)
	p.free <- c
	return nil
}

// Chunks allocates the pool if needed and returns every chunk in index
// order, for fixed-buffer registration. It hands out no chunk.
func (p *PinnedPool) Chunks() ([]*Chunk, error) {
	if err := p.ensure(); err != nil {
		return nil, err
	}
	return append([]*Chunk(nil), p.chunks...), nil
}

// Stats returns the pool's figures.
func (p *PinnedPool) Stats() PoolStats {
	return PoolStats{
		Capacity: p.count, ChunkSize: p.size, Allocated: p.ready.Load(),
		InUse: int(p.inUse.Load()), HighWater: int(p.high.Load()),
		Misses: p.misses.Load(), Waits: p.waits.Load(),
	}
}

// Close frees the slab. It refuses while chunks are handed out; a second
// Close does nothing. Callers stop getting chunks before Close.
func (p *PinnedPool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if n := p.inUse.Load(); n > 0 {
		return fmt.Errorf("%s: close with %d of %d chunks in use", p.name, n, p.count)
	}
	p.closed = true
	if p.slab == nil {
		return nil
	}
	p.ready.Store(false)
	// Drain so a racing TryGet finds nothing rather than a freed chunk.
	for len(p.free) > 0 {
		<-p.free
	}
	err := p.slab.Free()
	p.slab, p.chunks = nil, nil
	return err
}
