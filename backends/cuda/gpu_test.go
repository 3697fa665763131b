// gpu_test.go checks device memory, copies, streams, events and host
// registration on a real GPU (skipped with the reason where there is
// none).

package cuda

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 1})
	_, _ = r.Read(b)
	return b
}

func TestDeviceInfo(t *testing.T) {
	dev := gpu(t)
	n, err := dev.Driver().DeviceCount()
	must(t, err)
	if n < 1 || dev.Name() == "" || dev.Ordinal() != 0 {
		t.Fatalf("count %d, name %q, ordinal %d", n, dev.Name(), dev.Ordinal())
	}
	again, err := dev.Driver().Device(0)
	must(t, err)
	if again != dev {
		t.Error("Device(0) twice gave two devices")
	}
	free, total, err := dev.MemGetInfo()
	must(t, err)
	if total == 0 || free > total {
		t.Errorf("MemGetInfo = %d free of %d", free, total)
	}
	t.Logf("%s %s, driver %d from %s, %d devices, %.1f of %.1f GiB free",
		dev, dev.Name(), dev.Driver().Version(), dev.Driver().Path(), n, float64(free)/(1<<30), float64(total)/(1<<30))
}

func TestNoDevice(t *testing.T) {
	dev := gpu(t)
	n, _ := dev.Driver().DeviceCount()
	_, err := dev.Driver().Device(99)
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Device(99) = %v, want ErrNoDevice", err)
	}
	if want := fmt.Sprintf("cuda:99 requested, %d device(s) present", n); !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
}

func TestErrorsNameTheResult(t *testing.T) {
	dev := gpu(t)
	err := dev.Free(0xdead0000)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("Free(bogus) = %v, want *Error", err)
	}
	if !strings.HasPrefix(err.Error(), "cuMemFree(0xdead0000 on cuda:0): CUDA_ERROR_") || ce.Name == "" {
		t.Errorf("Free(bogus) error %q does not name the call and result", err)
	}
	t.Logf("Free(bogus): %v", err)

	_, err = dev.Alloc(1 << 50)
	if !errors.Is(err, ErrorOutOfMemory) {
		t.Fatalf("Alloc(1 PiB) = %v, want CUDA_ERROR_OUT_OF_MEMORY", err)
	}
	if want := "cuMemAlloc(1125899906842624 bytes on cuda:0): CUDA_ERROR_OUT_OF_MEMORY (2)"; err.Error() != want {
		t.Errorf("Alloc(1 PiB) error %q, want %q", err, want)
	}
	for _, n := range []int{0, -1} {
		if _, err := dev.Alloc(n); !errors.Is(err, ErrInvalid) {
			t.Errorf("Alloc(%d) = %v, want ErrInvalid", n, err)
		}
	}
	// The context is still usable after the failures.
	p, err := dev.Alloc(4096)
	must(t, err)
	must(t, dev.Free(p))
}

func TestRoundTrip(t *testing.T) {
	dev := gpu(t)
	for _, n := range []int{4 << 10, 4<<10 + 1, 1 << 20, 16 << 20, 256 << 20} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			src := randomBytes(n, uint64(n))
			p, err := dev.Alloc(n + 4096)
			must(t, err)
			defer func() { must(t, dev.Free(p)) }()
			// An unaligned device offset too.
			dst := p + 17
			must(t, dev.CopyHtoD(dst, src))
			got := make([]byte, n)
			must(t, dev.CopyDtoH(got, dst))
			if !bytes.Equal(got, src) {
				t.Fatalf("%d bytes changed on the round trip", n)
			}
			// Device to device, then memset a prefix.
			q, err := dev.Alloc(n)
			must(t, err)
			defer func() { must(t, dev.Free(q)) }()
			must(t, dev.CopyDtoD(q, dst, n))
			must(t, dev.Memset(q, 0xa5, n/2))
			must(t, dev.CopyDtoH(got, q))
			for i := 0; i < n/2; i++ {
				if got[i] != 0xa5 {
					t.Fatalf("byte %d = %#x after memset", i, got[i])
				}
			}
			if !bytes.Equal(got[n/2:], src[n/2:]) {
				t.Fatal("device-to-device copy changed bytes")
			}
			if ord, err := dev.PointerOrdinal(q); err != nil || ord != 0 {
				t.Errorf("PointerOrdinal = %d, %v", ord, err)
			}
		})
	}
}

// TestAsyncCopiesGatedByEvents: a pinned upload on one stream, an event
// after it, a second stream that waits for the event and downloads. Query
// is polled meanwhile: it may say done only once the data is there, and
// never goes back to not done.
func TestAsyncCopiesGatedByEvents(t *testing.T) {
	dev := gpu(t)
	const n = 256 << 20
	src, err := dev.HostAlloc(n)
	must(t, err)
	defer func() { must(t, src.Free()) }()
	dst, err := dev.HostAlloc(n)
	must(t, err)
	defer func() { must(t, dst.Free()) }()
	if src.Addr()%PageSize != 0 || len(src.Bytes()) != n {
		t.Fatalf("pinned buffer at %#x, %d bytes", src.Addr(), len(src.Bytes()))
	}
	copy(src.Bytes(), randomBytes(n, 7))
	p, err := dev.Alloc(n)
	must(t, err)
	defer func() { must(t, dev.Free(p)) }()
	must(t, dev.Memset(p, 0, n))
	must(t, dev.Synchronize())

	up, err := dev.NewStream(true)
	must(t, err)
	defer func() { must(t, up.Destroy()) }()
	down, err := dev.NewStream(true)
	must(t, err)
	defer func() { must(t, down.Destroy()) }()
	uploaded, err := dev.NewEvent(true)
	must(t, err)
	defer func() { must(t, uploaded.Destroy()) }()
	downloaded, err := dev.NewEvent(true)
	must(t, err)
	defer func() { must(t, downloaded.Destroy()) }()

	if done, err := uploaded.Query(); err != nil || !done {
		t.Fatalf("unrecorded event Query = %v, %v; want done", done, err)
	}
	for off := 0; off < n; off += 4 << 20 {
		must(t, up.HtoDAsync(p+DevicePtr(off), src.Bytes()[off:off+4<<20]))
	}
	must(t, uploaded.Record(up))
	must(t, down.WaitEvent(uploaded))
	must(t, down.DtoHAsync(dst.Bytes(), p))
	must(t, downloaded.Record(down))

	notReady := 0
	for {
		done, err := downloaded.Query()
		must(t, err)
		if done {
			break
		}
		notReady++
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("downloaded bytes differ although the event said done")
	}
	if done, err := downloaded.Query(); err != nil || !done {
		t.Fatalf("Query after done = %v, %v", done, err)
	}
	must(t, downloaded.Sync())
	must(t, down.Sync())
	t.Logf("event polled not-ready %d times before done", notReady)

	if err := up.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := up.HtoDAsync(p, src.Bytes()[:1]); !errors.Is(err, ErrClosed) {
		t.Errorf("HtoDAsync on a destroyed stream = %v, want ErrClosed", err)
	}
}

// TestConcurrentGoroutines copies from 32 goroutines that never lock
// their threads: the package's binding alone keeps the context right.
func TestConcurrentGoroutines(t *testing.T) {
	dev := gpu(t)
	const workers, rounds, n = 32, 20, 1 << 20
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				src := randomBytes(n, uint64(w))
				got := make([]byte, n)
				for r := 0; r < rounds; r++ {
					p, err := dev.Alloc(n)
					if err != nil {
						return err
					}
					src[r] = byte(w + r)
					if err := dev.CopyHtoD(p, src); err != nil {
						return err
					}
					if err := dev.CopyDtoH(got, p); err != nil {
						return err
					}
					if err := dev.Free(p); err != nil {
						return err
					}
					if !bytes.Equal(got, src) {
						return fmt.Errorf("worker %d round %d: data differ", w, r)
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func TestHostRegisterMmap(t *testing.T) {
	dev := gpu(t)
	const n = 16 << 20
	m, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	must(t, err)
	defer func() { must(t, unix.Munmap(m)) }()
	copy(m, randomBytes(n, 3))
	addr := uintptr(unsafeAddr(m))
	must(t, dev.HostRegister(addr, n))
	registered := true
	defer func() {
		if registered {
			must(t, dev.HostUnregister(addr))
		}
	}()
	p, err := dev.Alloc(n)
	must(t, err)
	defer func() { must(t, dev.Free(p)) }()
	s, err := dev.NewStream(true)
	must(t, err)
	defer func() { must(t, s.Destroy()) }()
	must(t, s.HtoDAsync(p, m))
	must(t, s.Sync())
	got := make([]byte, n)
	must(t, dev.CopyDtoH(got, p))
	if !bytes.Equal(got, m) {
		t.Fatal("copy from registered mmap differs")
	}
	// Registering the same range again is refused with a named result.
	if err := dev.HostRegister(addr, n); !errors.Is(err, ErrorHostMemAlreadyR) {
		t.Errorf("second HostRegister = %v, want CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", err)
	}
	must(t, dev.HostUnregister(addr))
	registered = false
	if err := dev.HostUnregister(addr); !errors.Is(err, ErrorHostMemNotReg) {
		t.Errorf("second HostUnregister = %v, want CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", err)
	}
	if err := dev.HostRegister(0, n); !errors.Is(err, ErrInvalid) {
		t.Errorf("HostRegister(0) = %v, want ErrInvalid", err)
	}
}

func TestPinnedPoolOnDevice(t *testing.T) {
	dev := gpu(t)
	pool, err := NewPinnedPool(dev, 4, 1<<20)
	must(t, err)
	if pool.Stats().Allocated {
		t.Fatal("pool allocated at construction")
	}
	var got []*Chunk
	for i := 0; i < 4; i++ {
		c, err := pool.TryGet()
		must(t, err)
		if c.Addr()%PageSize != 0 || c.Len() != 1<<20 {
			t.Fatalf("chunk %d at %#x, %d bytes", c.Index(), c.Addr(), c.Len())
		}
		got = append(got, c)
	}
	if _, err := pool.TryGet(); !errors.Is(err, ErrExhausted) {
		t.Fatalf("5th TryGet = %v, want ErrExhausted", err)
	}
	// A chunk is DMA-able: an async upload from it.
	p, err := dev.Alloc(1 << 20)
	must(t, err)
	defer func() { must(t, dev.Free(p)) }()
	copy(got[0].Bytes(), randomBytes(1<<20, 9))
	s, err := dev.NewStream(true)
	must(t, err)
	defer func() { must(t, s.Destroy()) }()
	must(t, s.HtoDAsync(p, got[0].Bytes()))
	must(t, s.Sync())
	back := make([]byte, 1<<20)
	must(t, dev.CopyDtoH(back, p))
	if !bytes.Equal(back, got[0].Bytes()) {
		t.Fatal("upload from a pool chunk differs")
	}
	for _, c := range got {
		must(t, pool.Put(c))
	}
	if st := pool.Stats(); st.InUse != 0 || st.HighWater != 4 || st.Misses != 1 {
		t.Errorf("stats %+v", st)
	}
	must(t, pool.Close())
}
