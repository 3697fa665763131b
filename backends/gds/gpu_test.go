// gpu_test.go tests cuFile on a real GPU: driver open and mode, reads and
// writes between an O_DIRECT ext4 file and device memory checked byte for
// byte, the refusals, and batch I/O. Without libcuda or libcufile every
// test skips with the reason (fails under ORBITEFS_REQUIRE=gpu).

package gds

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var (
	gpuOnce sync.Once
	gpuDrv  *Driver
	gpuErr  error
)

// gpuDriver returns the test binary's one Driver, bound to device 0's
// primary context. It stays open across tests (TestMain closes it), so the
// tests do not depend on cuFile reopening its driver in one process.
func gpuDriver(t testing.TB) (*Driver, *testCUDA) {
	t.Helper()
	c, err := loadCUDA()
	if err != nil {
		need(t, err.Error())
	}
	gpuOnce.Do(func() { gpuDrv, gpuErr = Open(Options{Binder: c}) })
	if errors.Is(gpuErr, ErrUnavailable) {
		need(t, gpuErr.Error())
	}
	if gpuErr != nil {
		t.Fatal(gpuErr)
	}
	return gpuDrv, c
}

func TestMain(m *testing.M) {
	code := m.Run()
	if gpuDrv != nil {
		if err := gpuDrv.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "gds: driver close: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func devAlloc(t testing.TB, c *testCUDA, n int) uintptr {
	t.Helper()
	p, err := c.alloc(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.free(p); err != nil {
			t.Errorf("free: %v", err)
		}
	})
	return p
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), 7})
	r.Read(b)
	return b
}

func registerFile(t testing.TB, d *Driver, path string, flags int) *Handle {
	t.Helper()
	h, err := d.RegisterFile(openFile(t, path, flags|unix.O_DIRECT))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("handle close: %v", err)
		}
	})
	return h
}

func TestGPUDriverOpenAndMode(t *testing.T) {
	d, c := gpuDriver(t)
	p := d.Properties()
	t.Logf("properties: %+v", p)
	switch d.Mode() {
	case ModeNative, ModeCompatPermitted, ModeCompatForced, ModeDisabled:
	default:
		t.Fatalf("mode %q", d.Mode())
	}
	if p.MaxDirectIOSize <= 0 {
		t.Fatalf("max_direct_io_size %d", p.MaxDirectIOSize)
	}
	d2, err := Open(Options{Binder: c})
	if err != nil {
		t.Fatalf("second Open: %v", err)
	}
	if err := d2.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	pb, err := d.NewParallelBatch(1, 1)
	if err != nil {
		t.Fatalf("first driver unusable after another reference closed: %v", err)
	}
	if err := pb.Destroy(); err != nil {
		t.Fatal(err)
	}
}

func TestGPUReadWrite(t *testing.T) {
	d, c := gpuDriver(t)
	dir := blockDir(t)
	const fileSize = 64<<20 + 8192
	data := randomBytes(fileSize, 1)
	src := filepath.Join(dir, "src")
	if err := os.WriteFile(src, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h := registerFile(t, d, src, unix.O_RDONLY)
	devSize := 64<<20 + 4096
	dev := devAlloc(t, c, devSize)
	if err := d.RegisterBuffer(dev, int64(devSize)); err != nil {
		if !errors.Is(err, ErrBufferRegistration) {
			t.Fatalf("buffer registration failure not typed: %v", err)
		}
		t.Logf("buffer registration refused (region left to other paths): %v", err)
	} else {
		t.Cleanup(func() {
			if err := d.DeregisterBuffer(dev); err != nil {
				t.Errorf("deregister: %v", err)
			}
		})
	}
	got := make([]byte, 64<<20)
	for i, size := range []int{4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20} {
		fileOff := int64(4096 * (i%2 + 1))
		devOff := int64(4096 * (i % 2))
		if err := c.memset(dev, 0, devSize); err != nil {
			t.Fatal(err)
		}
		n, err := h.Read(dev, size, fileOff, devOff)
		if err != nil || n != size {
			t.Fatalf("read %d at %d into +%d: n %d, %v", size, fileOff, devOff, n, err)
		}
		if err := c.fromDevice(got[:size], dev+uintptr(devOff)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[:size], data[fileOff:fileOff+int64(size)]) {
			t.Fatalf("read %d bytes at %d: device bytes differ from the file", size, fileOff)
		}
		t.Logf("read %8d bytes at file offset %d into device offset %d: ok", size, fileOff, devOff)
	}
	// Short read at the end of the file.
	n, err := h.Read(dev, 16<<10, fileSize-4096, 0)
	if err != nil || n != 4096 {
		t.Fatalf("read of 16 KiB 4 KiB before EOF: n %d, %v; want 4096", n, err)
	}

	// Device -> file, then the file checked.
	out := randomBytes(16<<20+4096, 2)
	if err := c.toDevice(dev, out); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "dst")
	wh := registerFile(t, d, dst, unix.O_RDWR|unix.O_CREAT)
	for _, w := range []struct {
		size            int
		fileOff, devOff int64
	}{{4 << 10, 0, 4096}, {1 << 20, 1 << 20, 0}, {16 << 20, 4 << 20, 4096}} {
		n, err := wh.Write(dev, w.size, w.fileOff, w.devOff)
		if err != nil || n != w.size {
			t.Fatalf("write %d at %d: n %d, %v", w.size, w.fileOff, n, err)
		}
	}
	if err := unix.Fsync(wh.Fd()); err != nil {
		t.Fatal(err)
	}
	back, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(back) != 20<<20 {
		t.Fatalf("written file is %d bytes, want %d", len(back), 20<<20)
	}
	if !bytes.Equal(back[:4096], out[4096:8192]) || !bytes.Equal(back[1<<20:2<<20], out[:1<<20]) ||
		!bytes.Equal(back[4<<20:20<<20], out[4096:4096+16<<20]) {
		t.Fatal("file bytes differ from the device bytes written")
	}
	t.Logf("wrote 4 KiB, 1 MiB, 16 MiB from device memory: file matches")
}

func TestGPURefusals(t *testing.T) {
	d, _ := gpuDriver(t)
	dir := blockDir(t)
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	fd := openFile(t, p, unix.O_RDONLY)
	if _, err := d.RegisterFile(fd); !errors.Is(err, ErrNotDirect) {
		t.Fatalf("buffered fd = %v, want ErrNotDirect", err)
	}
	if h, err := d.registerRaw(fd); err != nil {
		t.Logf("cuFile itself on a buffered fd: %v", err)
	} else {
		t.Logf("cuFile itself accepted a buffered fd (the local check refuses it)")
		h.Close()
	}

	shm, err := os.MkdirTemp("/dev/shm", "gds-test-")
	if err != nil {
		need(t, "/dev/shm: "+err.Error())
	}
	defer os.RemoveAll(shm)
	sp := filepath.Join(shm, "f")
	if err := os.WriteFile(sp, make([]byte, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	sfd, err := unix.Open(sp, unix.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		need(t, "tmpfs O_DIRECT: "+err.Error())
	}
	defer unix.Close(sfd)
	if _, err := d.RegisterFile(sfd); !errors.Is(err, ErrIneligible) {
		t.Fatalf("tmpfs fd = %v, want ErrIneligible", err)
	} else {
		t.Logf("tmpfs refused: %v", err)
	}
	if h, err := d.registerRaw(sfd); err != nil {
		t.Logf("cuFile itself on a tmpfs O_DIRECT fd: %v", err)
	} else {
		t.Logf("cuFile itself accepted a tmpfs fd (the local check refuses it)")
		h.Close()
	}
}

// pump keeps up to Depth slices in flight until every slice has a
// receipt; it returns the receipts by cookie.
func pump(b Batcher, ios []IO) (map[uint64]Result, error) {
	got := make(map[uint64]Result, len(ios))
	next := 0
	last := time.Now()
	for len(got) < len(ios) {
		if room := b.Depth() - b.InFlight(); room > 0 && next < len(ios) {
			n := min(room, len(ios)-next)
			if err := b.Submit(ios[next : next+n]); err != nil {
				return got, err
			}
			next += n
		}
		rs, err := b.Poll(1, 30*time.Second)
		if err != nil {
			return got, err
		}
		if len(rs) == 0 {
			if time.Since(last) > 30*time.Second {
				return got, errors.New("no receipt within 30 s")
			}
			continue
		}
		last = time.Now()
		for _, r := range rs {
			if r.Err != nil {
				return got, r.Err
			}
			got[r.Cookie] = r
		}
	}
	return got, nil
}

func TestGPUBatch(t *testing.T) {
	d, c := gpuDriver(t)
	dir := blockDir(t)
	const slices, slice = 32, 4 << 20
	data := randomBytes(slices*slice, 3)
	p := filepath.Join(dir, "batch")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	h := registerFile(t, d, p, unix.O_RDONLY)
	dev := devAlloc(t, c, len(data))
	check := func(name string) {
		got := make([]byte, len(data))
		if err := c.fromDevice(got, dev); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%s: device bytes differ from the file", name)
		}
	}
	ios := Split(Read, h, dev, 0, 0, int64(len(data)), slice, 0)

	nb, err := d.NewBatch(slices)
	if err != nil {
		t.Logf("native batch: NewBatch(%d): %v", slices, err)
	} else {
		c.memset(dev, 0, len(data))
		if _, err := pump(nb, ios); err != nil {
			t.Logf("native batch in mode %s: %v", d.Mode(), err)
			nb.Cancel()
			for nb.InFlight() > 0 {
				if rs, err := nb.Poll(nb.InFlight(), 30*time.Second); err != nil || len(rs) == 0 {
					break
				}
			}
		} else {
			check("native batch")
			t.Logf("native batch: %d x %d bytes read and checked", slices, slice)
		}
		if err := nb.Destroy(); err != nil {
			t.Logf("native destroy: %v", err)
		}
	}

	pb, err := d.NewParallelBatch(slices, slices)
	if err != nil {
		t.Fatal(err)
	}
	c.memset(dev, 0, len(data))
	if _, err := pump(pb, ios); err != nil {
		t.Fatalf("parallel batch: %v", err)
	}
	check("parallel batch")
	t.Logf("parallel batch: %d x %d bytes read and checked", slices, slice)
	if err := pb.Destroy(); err != nil {
		t.Fatal(err)
	}
}
