package cuda

import (
	"bytes"
	"testing"
	"unsafe"
)

// TestBatchABI: the signature asked for follows the driver's version,
// and the attributes have CUmemcpyAttributes' layout.
func TestBatchABI(t *testing.T) {
	for _, c := range []struct{ driver, want int }{
		{12000, 0}, {12070, 0}, {12080, 12080}, {12090, 12080}, {13000, 13000}, {13020, 13000},
	} {
		if got := batchABI(c.driver); got != c.want {
			t.Errorf("batchABI(%d) = %d, want %d", c.driver, got, c.want)
		}
	}
	var a memcpyAttributes
	if s := unsafe.Sizeof(a); s != 24 {
		t.Errorf("memcpyAttributes is %d bytes, CUmemcpyAttributes 24", s)
	}
	if o := unsafe.Offsetof(a.flags); o != 20 {
		t.Errorf("flags at %d, want 20", o)
	}
}

// TestCopyBatchAsync: on a driver with cuMemcpyBatchAsync, one call
// moves scattered pinned chunks to scattered device places and back,
// byte for byte; without it the call is refused and says so.
func TestCopyBatchAsync(t *testing.T) {
	dev := gpu(t)
	drv := dev.Driver()
	t.Logf("driver %d: batch ABI %d", drv.Version(), drv.BatchABI())
	s, err := dev.NewStream(true)
	must(t, err)
	defer func() { must(t, s.Destroy()) }()
	if !drv.Batched() {
		if batchABI(drv.Version()) != 0 {
			t.Fatalf("driver %d should have cuMemcpyBatchAsync", drv.Version())
		}
		if err := s.CopyBatchAsync([]uint64{1}, []uint64{1}, []uintptr{1}); err == nil {
			t.Fatal("CopyBatchAsync without the entry point succeeded")
		}
		t.Skip("no cuMemcpyBatchAsync in this driver")
	}
	const n, piece = 64, 128 << 10
	host, err := dev.HostAlloc(n * piece)
	must(t, err)
	defer func() { must(t, host.Free()) }()
	back, err := dev.HostAlloc(n * piece)
	must(t, err)
	defer func() { must(t, back.Free()) }()
	copy(host.Bytes(), randomBytes(n*piece, 11))
	p, err := dev.Alloc(n * piece)
	must(t, err)
	defer func() { must(t, dev.Free(p)) }()
	// Host piece i goes to device slot n-1-i, unaligned sizes included.
	var dsts, srcs, back1, back2 []uint64
	var sizes []uintptr
	for i := range n {
		sz := piece - i
		dsts = append(dsts, uint64(p)+uint64((n-1-i)*piece))
		srcs = append(srcs, uint64(host.Addr())+uint64(i*piece))
		sizes = append(sizes, uintptr(sz))
		back1 = append(back1, uint64(back.Addr())+uint64(i*piece))
		back2 = append(back2, uint64(p)+uint64((n-1-i)*piece))
	}
	must(t, s.CopyBatchAsync(dsts, srcs, sizes))
	must(t, s.CopyBatchAsync(back1, back2, sizes))
	must(t, s.Sync())
	for i := range n {
		sz := piece - i
		if !bytes.Equal(back.Bytes()[i*piece:i*piece+sz], host.Bytes()[i*piece:i*piece+sz]) {
			t.Fatalf("piece %d differs after the batched round trip", i)
		}
	}
}

// TestNoBatchFromEnvironment: ORBITEFS_CUDA_NOBATCH=1 turns the batched
// copies off for a backend made afterwards; anything else leaves them on.
func TestNoBatchFromEnvironment(t *testing.T) {
	for _, c := range []struct {
		env  string
		want bool
	}{{"1", true}, {"", false}, {"0", false}} {
		t.Setenv(EnvNoBatch, c.env)
		if got := NewBackend(Options{}).opts.NoBatch; got != c.want {
			t.Errorf("%s=%q: NoBatch %v, want %v", EnvNoBatch, c.env, got, c.want)
		}
	}
	t.Setenv(EnvNoBatch, "")
	if !NewBackend(Options{NoBatch: true}).opts.NoBatch {
		t.Error("Options.NoBatch was overridden by an empty environment")
	}
}
