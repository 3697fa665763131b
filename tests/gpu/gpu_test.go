package gpu

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/backends/cuda"
	"github.com/orbitefs/orbitefs/backends/gds"
	"github.com/orbitefs/orbitefs/backends/iouring"
	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

const timeout = 5 * time.Minute

// env: where the gate puts its files.
func ext4Dir(t *testing.T) string {
	if d := os.Getenv("ORBITEFS_GPU_EXT4"); d != "" {
		return d
	}
	return t.TempDir()
}

func newEngine(t *testing.T, mut func(*config.Engine)) *engine.Engine {
	t.Helper()
	e, _ := newEngineGDS(t, mut)
	return e
}

// newEngineGDS is newEngine, also returning its cuFile backend.
func newEngineGDS(t *testing.T, mut func(*config.Engine)) (*engine.Engine, *gds.Backend) {
	t.Helper()
	cfg := config.DefaultEngine()
	cfg.MaxTransferBytes = 1 << 30
	cfg.MaxInflightBytes = 8 << 30
	if mut != nil {
		mut(&cfg)
	}
	c := cuda.NewBackend(cuda.Options{})
	if err := c.Probe(); err != nil {
		if os.Getenv("ORBITEFS_REQUIRE") == "gpu" {
			t.Fatalf("no GPU, and ORBITEFS_REQUIRE=gpu: %v", err)
		}
		t.Skipf("no GPU: %v", err)
	}
	g := gds.NewBackend(c.Bind)
	e, err := engine.New(cfg, iouring.New(cfg.IOUring), c, g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(time.Minute); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	return e, g
}

func randomFile(t *testing.T, dir string, n int) (string, []byte) {
	t.Helper()
	b := make([]byte, n)
	rand.Read(b)
	f, err := os.CreateTemp(dir, "gpu-*.bin")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	f.Close()
	return f.Name(), b
}

func fsType(t *testing.T, dir string) string {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		t.Fatal(err)
	}
	switch s.Type {
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	}
	return fmt.Sprintf("%#x", s.Type)
}

func deviceBytes(t *testing.T, r *engine.Region, off, n uint64) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := r.ReadAt(b, int64(off)); err != nil {
		t.Fatal(err)
	}
	return b
}

func submit(e *engine.Engine, op engine.Op, seg *engine.Segment, reqs []engine.Request) ([]engine.TaskStatus, error) {
	b, err := e.SubmitAsync(op, seg, reqs, nil, timeout)
	if err != nil {
		return nil, err
	}
	defer b.Free()
	st, err := b.Wait(timeout)
	ts := b.TaskStatuses()
	if err == nil && st != engine.StateCompleted {
		for _, s := range ts {
			if s.Err != nil {
				return ts, s.Err
			}
		}
		err = fmt.Errorf("batch %v", st)
	}
	return ts, err
}

// TestRoundTrips: file -> GPU -> file on ext4 and tmpfs, 4 KiB to 1 GiB,
// aligned and not, through staging (io_uring) and cuFile, every byte
// checked. An unspecified transport on ext4 takes cuFile where it moves
// bytes by DMA, and the staging where cuFile would run its POSIX
// fallback.
func TestRoundTrips(t *testing.T) {
	e, g := newEngineGDS(t, nil)
	dma := g.Probe() == nil && g.DMA()
	t.Logf("cuFile mode %q, DMA %v", g.Mode(), dma)
	dirs := map[string]string{"ext4": ext4Dir(t), "tmpfs": "/dev/shm"}
	sizes := []struct {
		name        string
		fileOff, n  uint64
		devOff      uint64
		aligned     bool
		onlyOneFile bool
	}{
		{"4KiB", 0, 4096, 0, true, false},
		{"1MiB", 1 << 20, 1 << 20, 4096, true, false},
		{"64MiB+unaligned", 12345, 64<<20 + 4099, 7, false, false},
		{"1GiB", 0, 1 << 30, 0, true, true},
	}
	for fs, dir := range dirs {
		if got := fsType(t, dir); got != fs {
			t.Fatalf("%s is %s, not %s", dir, got, fs)
		}
		t.Run(fs, func(t *testing.T) {
			path, orig := randomFile(t, dir, 1<<30+(2<<20))
			outPath, _ := randomFile(t, dir, 1<<30+(2<<20))
			src, err := e.OpenFileSegment("file://"+path, engine.PermRead)
			if err != nil {
				t.Fatal(err)
			}
			dst, err := e.OpenFileSegment("file://"+outPath, engine.PermReadWrite)
			if err != nil {
				t.Fatal(err)
			}
			d, err := e.RegisterDevice(0, 1<<30+(1<<20))
			if err != nil {
				t.Fatal(err)
			}
			defer e.Unregister(d)
			transports := []engine.TransportKind{engine.TransportIOUring, engine.TransportUnspec}
			if fs == "ext4" {
				transports = append(transports, engine.TransportGDS)
			}
			for _, c := range sizes {
				for _, tr := range transports {
					if tr == engine.TransportGDS && !c.aligned {
						continue
					}
					t.Run(c.name+"/"+tr.String(), func(t *testing.T) {
						// Scribble first, so stale device bytes cannot pass.
						if _, err := d.WriteAt(bytes.Repeat([]byte{0xA5}, 4096), int64(c.devOff)); err != nil {
							t.Fatal(err)
						}
						req := []engine.Request{{Transport: tr, Address: d.BaseAddress() + c.devOff, TargetOffset: c.fileOff, Length: c.n}}
						start := time.Now()
						ts, err := submit(e, engine.OpRead, src, req)
						if err != nil {
							t.Fatalf("read: %v", err)
						}
						readTook := time.Since(start)
						want := tr
						if tr == engine.TransportUnspec {
							want = engine.TransportIOUring
							if fs == "tmpfs" {
								want = engine.TransportMapped
							}
							if fs == "ext4" && c.aligned && dma {
								want = engine.TransportGDS
							}
						}
						if ts[0].Transport != want || ts[0].Transferred != c.n {
							t.Fatalf("read task %+v, want %v and %d bytes", ts[0], want, c.n)
						}
						if !bytes.Equal(deviceBytes(t, d, c.devOff, c.n), orig[c.fileOff:c.fileOff+c.n]) {
							t.Fatal("GPU bytes differ from the file")
						}
						start = time.Now()
						if _, err := submit(e, engine.OpWrite, dst, req); err != nil {
							t.Fatalf("write: %v", err)
						}
						writeTook := time.Since(start)
						back := make([]byte, c.n)
						f, _ := os.Open(outPath)
						f.ReadAt(back, int64(c.fileOff))
						f.Close()
						if !bytes.Equal(back, orig[c.fileOff:c.fileOff+c.n]) {
							t.Fatal("file bytes written from the GPU differ")
						}
						t.Logf("%s %s via %v: read %v, write %v", fs, c.name, want, readTook, writeTook)
					})
				}
			}
			e.CloseFileSegment(src, time.Minute)
			e.CloseFileSegment(dst, time.Minute)
		})
	}
	st := e.Stats()
	t.Logf("staging %+v gds %+v", st.Staging, st.GDS)
	if st.Staging == nil || st.Staging.Leases == 0 || st.Staging.InUse != 0 {
		t.Fatalf("staging stats %+v", st.Staging)
	}
	if st.GDS.Reads == 0 || st.GDS.Writes == 0 {
		t.Fatalf("gds stats %+v: cuFile never ran", st.GDS)
	}
}

// TestVectorsWithPadding: one vector mixing two GPU ranges, pinned host
// memory and padding, both directions, on ext4 and tmpfs.
func TestVectorsWithPadding(t *testing.T) {
	e := newEngine(t, func(c *config.Engine) { c.StagingChunkSize = 64 << 10 })
	for fs, dir := range map[string]string{"ext4": ext4Dir(t), "tmpfs": "/dev/shm"} {
		t.Run(fs, func(t *testing.T) {
			path, orig := randomFile(t, dir, 4<<20)
			seg, err := e.OpenFileSegment("file://"+path, engine.PermReadWrite)
			if err != nil {
				t.Fatal(err)
			}
			defer e.CloseFileSegment(seg, time.Minute)
			d, _ := e.RegisterDevice(0, 2<<20)
			defer e.Unregister(d)
			p, err := e.RegisterPinned(1 << 20)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Unregister(p)
			elems := []engine.Element{
				engine.Pad(4096),
				engine.Range(d.BaseAddress(), 300000),
				engine.Pad(512),
				engine.Range(p.BaseAddress()+3, 200000),
				engine.Range(d.BaseAddress()+1<<20, 500001),
				engine.Pad(7),
			}
			const off = 8192
			ts, err := submit(e, engine.OpRead, seg, []engine.Request{engine.Vector(engine.TransportUnspec, off, elems...)})
			if err != nil || ts[0].Transferred != 1004616 {
				t.Fatalf("read: %v %+v", err, ts)
			}
			if !bytes.Equal(deviceBytes(t, d, 0, 300000), orig[off+4096:off+304096]) ||
				!bytes.Equal(deviceBytes(t, p, 3, 200000), orig[off+304608:off+504608]) ||
				!bytes.Equal(deviceBytes(t, d, 1<<20, 500001), orig[off+504608:off+1004609]) {
				t.Fatal("vector READ put wrong bytes")
			}
			// WRITE back changed contents; padding becomes zeros.
			fresh := make([]byte, 1004616)
			rand.Read(fresh)
			d.WriteAt(fresh[4096:304096], 0)
			p.WriteAt(fresh[304608:504608], 3)
			d.WriteAt(fresh[504608:1004609], 1<<20)
			clear(fresh[:4096])
			clear(fresh[304096:304608])
			clear(fresh[1004609:])
			if _, err := submit(e, engine.OpWrite, seg, []engine.Request{engine.Vector(engine.TransportUnspec, off, elems...)}); err != nil {
				t.Fatalf("write: %v", err)
			}
			back, _ := os.ReadFile(path)
			copy(orig[off:], fresh)
			if !bytes.Equal(back, orig) {
				t.Fatal("file after vector WRITE differs")
			}
			// Explicit GDS refuses padding.
			_, err = submit(e, engine.OpRead, seg, []engine.Request{engine.Vector(engine.TransportGDS, off, elems...)})
			if !errors.Is(err, engine.ErrUnavailable) {
				t.Fatalf("gds with padding: %v", err)
			}
		})
	}
}

// TestShortRead: the file shrinks after the range check; the READ into the
// GPU reports its exact prefix and the prefix is on the device.
func TestShortRead(t *testing.T) {
	e := newEngine(t, nil)
	for fs, dir := range map[string]string{"ext4": ext4Dir(t), "tmpfs": "/dev/shm"} {
		t.Run(fs, func(t *testing.T) {
			const half = 256 << 20
			path, orig := randomFile(t, dir, 2*half)
			seg, _ := e.OpenFileSegment("file://"+path, engine.PermRead)
			defer e.CloseFileSegment(seg, time.Minute)
			d, _ := e.RegisterDevice(0, 2*half)
			defer e.Unregister(d)
			b, _ := e.AllocateBatch(2)
			// Group 1 fills the device's first half; group 2 (fenced
			// behind it: same device bytes) reads the file's second half,
			// which is cut to 5000 bytes before group 2 starts.
			if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Transport: engine.TransportIOUring, Address: d.BaseAddress(), Length: half}}, nil, timeout); err != nil {
				t.Fatal(err)
			}
			if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Transport: engine.TransportIOUring, Address: d.BaseAddress(), TargetOffset: half, Length: half}}, nil, timeout); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, half+5000); err != nil {
				t.Fatal(err)
			}
			b.Seal()
			b.Wait(timeout)
			t0, _ := b.TaskStatus(0)
			t1, _ := b.TaskStatus(1)
			if t0.State != engine.TaskCompleted {
				t.Skipf("group 1 did not complete before the truncate took effect (%v); rerun", t0.Err)
			}
			if t1.State != engine.TaskFailed || t1.Transferred != 5000 || !errors.Is(t1.Err, engine.ErrRange) {
				t.Fatalf("short task: %v %d bytes %v, want failed with 5000", t1.State, t1.Transferred, t1.Err)
			}
			if !bytes.Equal(deviceBytes(t, d, 0, 5000), orig[half:half+5000]) {
				t.Fatal("the returned prefix is not on the device")
			}
			b.Free()
		})
	}
}

// TestConcurrentBatches: many batches moving file bytes to one GPU at
// once, each checked.
func TestConcurrentBatches(t *testing.T) {
	e := newEngine(t, nil)
	path, orig := randomFile(t, "/dev/shm", 256<<20)
	seg, _ := e.OpenFileSegment("file://"+path, engine.PermRead)
	defer e.CloseFileSegment(seg, time.Minute)
	d, _ := e.RegisterDevice(0, 256<<20)
	defer e.Unregister(d)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			off := uint64(i) * 16 << 20
			_, err := submit(e, engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress() + off, TargetOffset: off, Length: 16 << 20}})
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(deviceBytes(t, d, 0, 256<<20), orig) {
		t.Fatal("bytes differ")
	}
}

// TestIPCImport: a region exported by another process (this binary as a
// child, through backends/cuda) is imported from its handle and filled
// from a file; the child checks the bytes on its side.
func TestIPCImport(t *testing.T) {
	if os.Getenv("ORBITEFS_IPC_CHILD") != "" {
		t.Skip("child mode")
	}
	e := newEngine(t, nil)
	path, orig := randomFile(t, "/dev/shm", 1<<20)
	exe, _ := os.Executable()
	dir := t.TempDir()
	want := filepath.Join(dir, "want")
	os.WriteFile(want, orig, 0o600)
	handleFile := filepath.Join(dir, "handle")
	done := filepath.Join(dir, "done")
	child := startChild(t, exe, handleFile, done, want)
	h := waitFile(t, handleFile)
	r, err := e.ImportDevice(0, mustHex(t, strings.TrimSpace(string(h))), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	seg, _ := e.OpenFileSegment("file://"+path, engine.PermRead)
	if _, err := submit(e, engine.OpRead, seg, []engine.Request{{Address: r.BaseAddress(), Length: 1 << 20}}); err != nil {
		t.Fatal(err)
	}
	e.CloseFileSegment(seg, time.Minute)
	if err := e.Unregister(r); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(done, nil, 0o600)
	if err := child.Wait(); err != nil {
		t.Fatalf("the exporting process saw wrong bytes or failed: %v", err)
	}
}

// TestProducerEvent: a WRITE from GPU memory that an asynchronous copy is
// still filling waits for the copy's event (Request.Producer), so the file
// gets the produced bytes, not what was there before.
func TestProducerEvent(t *testing.T) {
	e := newEngine(t, nil)
	drv, err := cuda.Open(cuda.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dev, err := drv.Device(0)
	if err != nil {
		t.Fatal(err)
	}
	const n = 256 << 20
	path, _ := randomFile(t, ext4Dir(t), n)
	seg, _ := e.OpenFileSegment("file://"+path, engine.PermReadWrite)
	defer e.CloseFileSegment(seg, time.Minute)
	d, err := e.RegisterDevice(0, n)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Unregister(d)
	host, err := dev.HostAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Free()
	rand.Read(host.Bytes())
	s, err := dev.NewStream(true)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	ev, err := dev.NewEvent(true)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	if err := s.HtoDAsync(cuda.DevicePtr(d.BaseAddress()), host.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := ev.Record(s); err != nil {
		t.Fatal(err)
	}
	if _, err := submit(e, engine.OpWrite, seg, []engine.Request{{Transport: engine.TransportIOUring, Address: d.BaseAddress(), Length: n, Producer: cuda.EngineEvent(ev)}}); err != nil {
		t.Fatal(err)
	}
	back, _ := os.ReadFile(path)
	if !bytes.Equal(back, host.Bytes()) {
		t.Fatal("the file does not hold the produced bytes")
	}
}

// flakyGDS is the real cuFile backend whose first read calls fail (a
// test-only fault injector around real I/O), so the failover to staging
// runs on the real GPU.
type flakyGDS struct {
	*gds.Backend
	fail atomic.Int64 // read calls left to fail
}

// DMA says yes, whatever the driver runs: an unspecified transport then
// tries cuFile first (in its POSIX fallback where nvidia-fs is absent),
// so the injected failure meets the failover.
func (f *flakyGDS) DMA() bool { return true }

func (f *flakyGDS) OpenFile(fd int) (engine.GDSFile, error) {
	h, err := f.Backend.OpenFile(fd)
	if err != nil {
		return nil, err
	}
	return flakyFile{h, f}, nil
}

type flakyFile struct {
	engine.GDSFile
	f *flakyGDS
}

func (x flakyFile) Read(dev int, ptr, n, off uint64) (int, error) {
	if x.f.fail.Add(-1) >= 0 {
		return 0, errors.New("injected: cuFileRead failed")
	}
	return x.GDSFile.Read(dev, ptr, n, off)
}

// TestFailoverToStaging: an unspec READ into GPU memory whose cuFile
// attempt fails moves to pinned staging and completes with the file's
// bytes, failover_count 1, transport io_uring.
func TestFailoverToStaging(t *testing.T) {
	c := cuda.NewBackend(cuda.Options{})
	if err := c.Probe(); err != nil {
		if os.Getenv("ORBITEFS_REQUIRE") == "gpu" {
			t.Fatalf("no GPU, and ORBITEFS_REQUIRE=gpu: %v", err)
		}
		t.Skipf("no GPU: %v", err)
	}
	cfg := config.DefaultEngine()
	g := &flakyGDS{Backend: gds.NewBackend(c.Bind)}
	g.fail.Store(1)
	e, err := engine.New(cfg, iouring.New(cfg.IOUring), c, g)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(time.Minute)
	path, orig := randomFile(t, ext4Dir(t), 64<<20)
	seg, _ := e.OpenFileSegment("file://"+path, engine.PermRead)
	defer e.CloseFileSegment(seg, time.Minute)
	d, err := e.RegisterDevice(0, 64<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Unregister(d)
	ts, err := submit(e, engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if ts[0].Transport != engine.TransportIOUring || ts[0].FailoverCount != 1 {
		t.Fatalf("task %+v: want io_uring after one failover", ts[0])
	}
	if !bytes.Equal(deviceBytes(t, d, 0, 64<<20), orig) {
		t.Fatal("bytes differ after failover")
	}
	if e.Stats().Failovers != 1 {
		t.Fatalf("stats failovers %d", e.Stats().Failovers)
	}
}

// TestMappedFileRewritten: a tmpfs file read into the GPU through its
// own registered pages (transport mapped), then truncated and rewritten
// under the mapping. The GPU copies from the pages registration pinned,
// which the truncation took from the file: without the engine's check
// the second READ would move the old bytes. A file opened for reading is
// registered read-only. The device bytes are compared both times.
func TestMappedFileRewritten(t *testing.T) {
	e := newEngine(t, nil)
	for _, perm := range []engine.Permission{engine.PermRead, engine.PermReadWrite} {
		t.Run(perm.String(), func(t *testing.T) {
			path, orig := randomFile(t, "/dev/shm", 8<<20)
			seg, err := e.OpenFileSegment("file://"+path, perm)
			if err != nil {
				t.Fatal(err)
			}
			defer e.CloseFileSegment(seg, time.Minute)
			d, err := e.RegisterDevice(0, 8<<20)
			if err != nil {
				t.Fatal(err)
			}
			defer e.Unregister(d)
			for round, want := range [][]byte{orig, nil} {
				if want == nil {
					want = make([]byte, len(orig))
					rand.Read(want)
					if err := os.WriteFile(path, want, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				ts, err := submit(e, engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 8 << 20}})
				if err != nil {
					t.Fatalf("round %d: %v", round, err)
				}
				if ts[0].Transport != engine.TransportMapped {
					t.Fatalf("round %d: task %+v, want transport mapped", round, ts[0])
				}
				if !bytes.Equal(deviceBytes(t, d, 0, 8<<20), want) {
					t.Fatalf("round %d: GPU bytes differ from the file", round)
				}
			}
			if st := e.Stats().Mapped; st.Remaps == 0 {
				t.Fatalf("stats %+v: the rewritten file was not mapped again", st)
			}
		})
	}
}
