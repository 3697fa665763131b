// pool_test.go checks PinnedPool's bookkeeping without a GPU, on a test
// slab of anonymous mmap'd memory (page-aligned like cuMemHostAlloc's).

package cuda

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

type mmapSlab struct {
	b     []byte
	freed *atomic.Int64
}

func (s *mmapSlab) Bytes() []byte { return s.b }
func (s *mmapSlab) Free() error {
	s.freed.Add(1)
	return unix.Munmap(s.b)
}

// testPool makes a pool over mmap'd memory; fail makes the next
// allocation fail.
func testPool(t *testing.T, keys *atomic.Uint64, count, size int) (*PinnedPool, *atomic.Int64, *atomic.Bool) {
	t.Helper()
	var allocs, freed atomic.Int64
	var fail atomic.Bool
	alloc := func(n int) (slab, error) {
		if fail.Load() {
			return nil, errors.New("injected allocation failure")
		}
		b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			return nil, err
		}
		allocs.Add(1)
		return &mmapSlab{b: b, freed: &freed}, nil
	}
	p, err := newPool(alloc, keys, "test pool", count, size)
	must(t, err)
	t.Cleanup(func() {
		_ = p.Close()
		if allocs.Load() != freed.Load() {
			t.Errorf("%d slabs allocated, %d freed", allocs.Load(), freed.Load())
		}
	})
	return p, &allocs, &fail
}

func TestPoolRefusesBadSizes(t *testing.T) {
	var keys atomic.Uint64
	alloc := func(int) (slab, error) { t.Fatal("allocated"); return nil, nil }
	for _, c := range []struct{ count, size int }{{0, 4096}, {-1, 4096}, {1, 0}, {1, 4095}, {1, 6000}, {1 << 30, 1 << 20}} {
		if _, err := newPool(alloc, &keys, "p", c.count, c.size); !errors.Is(err, ErrInvalid) {
			t.Errorf("newPool(%d, %d) = %v, want ErrInvalid", c.count, c.size, err)
		}
	}
}

func TestPoolAllocatesOnFirstUseAndRetriesFailure(t *testing.T) {
	var keys atomic.Uint64
	p, allocs, fail := testPool(t, &keys, 2, 8192)
	if allocs.Load() != 0 || p.Stats().Allocated {
		t.Fatal("pool allocated at construction")
	}
	fail.Store(true)
	if _, err := p.TryGet(); err == nil || errors.Is(err, ErrExhausted) {
		t.Fatalf("TryGet with failing allocation = %v", err)
	}
	fail.Store(false)
	c, err := p.TryGet()
	must(t, err)
	if allocs.Load() != 1 || !p.Stats().Allocated {
		t.Fatalf("allocations %d after first use", allocs.Load())
	}
	must(t, p.Put(c))
}

func TestPoolExhaustionReuseAndStats(t *testing.T) {
	var keys atomic.Uint64
	p, _, _ := testPool(t, &keys, 3, 2*PageSize)
	seen := map[uint64]bool{}
	var got []*Chunk
	for i := 0; i < 3; i++ {
		c, err := p.TryGet()
		must(t, err)
		if c.Addr()%PageSize != 0 || c.Len() != 2*PageSize || len(c.Bytes()) != c.Len() {
			t.Fatalf("chunk %d at %#x len %d", c.Index(), c.Addr(), c.Len())
		}
		if seen[c.Key()] {
			t.Fatalf("key %d twice", c.Key())
		}
		seen[c.Key()] = true
		c.Bytes()[0] = byte(i) // the memory is writable
		got = append(got, c)
	}
	if _, err := p.TryGet(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("TryGet on a full pool = %v, want ErrExhausted", err)
	}
	if st := p.Stats(); st.InUse != 3 || st.HighWater != 3 || st.Misses != 1 || st.Capacity != 3 || st.ChunkSize != 2*PageSize {
		t.Errorf("stats %+v", st)
	}
	must(t, p.Put(got[1]))
	c, err := p.TryGet()
	must(t, err)
	if c != got[1] {
		t.Errorf("reuse gave chunk %d, want the returned chunk 1", c.Index())
	}
	// Misuse is refused and changes nothing.
	if err := p.Put(got[0]); err != nil {
		t.Fatal(err)
	}
	if err := p.Put(got[0]); !errors.Is(err, ErrInvalid) {
		t.Errorf("double Put = %v, want ErrInvalid", err)
	}
	if err := p.Close(); err == nil {
		t.Error("Close with chunks out succeeded")
	}
	for _, c := range []*Chunk{got[1], got[2]} {
		must(t, p.Put(c))
	}
	if st := p.Stats(); st.InUse != 0 || st.HighWater != 3 {
		t.Errorf("stats after puts %+v", st)
	}
	chunks, err := p.Chunks()
	must(t, err)
	for i, c := range chunks {
		if c.Index() != i || c.Addr() != chunks[0].Addr()+uintptr(i*2*PageSize) {
			t.Errorf("chunk %d: index %d at %#x", i, c.Index(), c.Addr())
		}
	}
	must(t, p.Close())
	must(t, p.Close())
	if _, err := p.TryGet(); !errors.Is(err, ErrClosed) {
		t.Errorf("TryGet after Close = %v, want ErrClosed", err)
	}
}

func TestPoolKeysUniqueAcrossPools(t *testing.T) {
	var keys atomic.Uint64
	a, _, _ := testPool(t, &keys, 4, PageSize)
	b, _, _ := testPool(t, &keys, 4, PageSize)
	ca, err := a.Chunks()
	must(t, err)
	cb, err := b.Chunks()
	must(t, err)
	seen := map[uint64]bool{}
	for _, c := range append(ca, cb...) {
		if seen[c.Key()] {
			t.Fatalf("key %d in two chunks", c.Key())
		}
		seen[c.Key()] = true
	}
	c, err := a.TryGet()
	must(t, err)
	if err := b.Put(c); !errors.Is(err, ErrInvalid) {
		t.Errorf("Put into another pool = %v, want ErrInvalid", err)
	}
	must(t, a.Put(c))
}

func TestPoolGetWaitsForPut(t *testing.T) {
	var keys atomic.Uint64
	p, _, _ := testPool(t, &keys, 1, PageSize)
	c, err := p.TryGet()
	must(t, err)

	got := make(chan *Chunk)
	go func() {
		c, err := p.Get(context.Background())
		if err != nil {
			t.Error(err)
		}
		got <- c
	}()
	// Wait until the getter is counted as waiting, then release.
	for p.Stats().Waits == 0 {
		time.Sleep(time.Millisecond)
	}
	must(t, p.Put(c))
	if c2 := <-got; c2 != c {
		t.Fatalf("Get returned chunk %v, want the one put back", c2)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.Get(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Get with a cancelled context = %v", err)
	}
	must(t, p.Put(c))
}
