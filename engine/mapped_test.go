package engine_test

// mapped_test.go: device memory <-> tmpfs files through the file's own
// pages, mapped and registered once (mappedexec.go), over the fake GPU,
// whose copies are CPU copies between the same addresses.

import (
	"bytes"
	"crypto/rand"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

// shmDir is a fresh directory on tmpfs, or the test skips.
func shmDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("/dev/shm", "orbitefs-mapped-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func mappedEngine(t *testing.T, gpu *fakeGPU, mut func(*config.Engine)) *engine.Engine {
	return gpuEngine(t, gpu, nil, func(c *config.Engine) {
		c.MappedFiles = true
		if mut != nil {
			mut(c)
		}
	})
}

// units128 is eight 128 KiB requests: file unit i into device unit 7-i.
func units128(d *engine.Region) []engine.Request {
	var rs []engine.Request
	for i := range 8 {
		rs = append(rs, engine.Request{Address: d.BaseAddress() + uint64((7-i)<<17), TargetOffset: uint64(i << 17), Length: 1 << 17})
	}
	return rs
}

// checkUnits fails unless device unit 7-i holds file unit i of want.
func checkUnits(t *testing.T, d *engine.Region, want []byte) {
	t.Helper()
	got := make([]byte, 1<<20)
	if _, err := d.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 8 {
		if !bytes.Equal(got[(7-i)<<17:(8-i)<<17], want[i<<17:(i+1)<<17]) {
			t.Fatalf("device unit %d differs from file unit %d", 7-i, i)
		}
	}
}

// TestMappedRoundTrip: READ and WRITE between device memory and a tmpfs
// file report transport mapped, move the right bytes, and map the file
// once; with mapped_files off, or a file past max_mapped_bytes, or
// another filesystem, the same requests take staging.
func TestMappedRoundTrip(t *testing.T) {
	cases := []struct {
		name   string
		mut    func(*config.Engine)
		ext4   bool
		mapped bool
	}{
		{"mapped", nil, false, true},
		{"mapped_files off", func(c *config.Engine) { c.MappedFiles = false }, false, false},
		{"past max_mapped_bytes", func(c *config.Engine) { c.MaxMappedBytes = 512 << 10 }, false, false},
		{"ext4", nil, true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gpu := newFakeGPU(1)
			e := mappedEngine(t, gpu, c.mut)
			dir := shmDir(t)
			if c.ext4 {
				d, ok := filesystems(t)["ext4"]
				if !ok {
					t.Skip("no ext4 directory")
				}
				dir = d
			}
			path, orig := randomFile(t, dir, "f", 1<<20)
			seg := openSeg(t, e, path, engine.PermReadWrite)
			d := deviceRegion(t, e, 0, 1<<20)
			want := engine.TransportIOUring
			if c.mapped {
				want = engine.TransportMapped
			}
			b, err := e.SubmitAsync(engine.OpRead, seg, units128(d), nil, ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
				t.Fatalf("read: %v %+v", err, st)
			}
			for i := range 8 {
				if ts, _ := b.TaskStatus(i); ts.Transport != want || ts.Transferred != 1<<17 {
					t.Fatalf("task %d: %+v, want transport %v and 128 KiB", i, ts, want)
				}
			}
			b.Free()
			checkUnits(t, d, orig)
			// WRITE the device back with the same map: the file is restored
			// from new device bytes.
			fresh := make([]byte, 1<<20)
			rand.Read(fresh)
			if _, err := d.WriteAt(fresh, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := e.SubmitAndWait(engine.OpWrite, seg, units128(d), ioTimeout); err != nil {
				t.Fatal(err)
			}
			file, _ := os.ReadFile(path)
			for i := range 8 {
				if !bytes.Equal(file[i<<17:(i+1)<<17], fresh[(7-i)<<17:(8-i)<<17]) {
					t.Fatalf("file unit %d differs from device unit %d", i, 7-i)
				}
			}
			st := e.Stats().Mapped
			if c.mapped && (st.Files != 1 || st.Bytes != 1<<20 || st.Units != 16 || st.Takes > 4) {
				t.Fatalf("stats %+v: want one 1 MiB file mapped, 16 units in at most 4 takes", st)
			}
			if !c.mapped && (st.Files != 0 || st.Units != 0) {
				t.Fatalf("stats %+v: want nothing mapped", st)
			}
			if err := e.CloseFileSegment(seg, ioTimeout); err != nil {
				t.Fatal(err)
			}
			if st := e.Stats().Mapped; st.Files != 0 || st.Bytes != 0 {
				t.Fatalf("after close: %+v, want the mapping gone", st)
			}
		})
	}
}

// TestMappedFileRewritten: a file truncated and rewritten under its
// mapping. Registration pinned the old pages, which the truncation took
// from the file: a READ through the old mapping would move stale bytes
// on a real GPU. The lane sees the file changed (ctime) and a page gone
// from the mapping, and maps it again; a file that only grew is mapped
// again to cover the new bytes; one that shrank ends READs past its end
// short (KindRange) with the bytes before it.
func TestMappedFileRewritten(t *testing.T) {
	gpu := newFakeGPU(1)
	e := mappedEngine(t, gpu, nil)
	path, orig := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, 2<<20)
	read := func(want []byte) {
		t.Helper()
		if _, err := e.SubmitAndWait(engine.OpRead, seg, units128(d), ioTimeout); err != nil {
			t.Fatal(err)
		}
		checkUnits(t, d, want)
	}
	read(orig)
	// Written in place through the file: the same pages, no new mapping.
	patch := make([]byte, 4096)
	rand.Read(patch)
	if f, err := os.OpenFile(path, os.O_WRONLY, 0); err != nil {
		t.Fatal(err)
	} else {
		f.WriteAt(patch, 1000)
		f.Close()
	}
	copy(orig[1000:], patch)
	read(orig)
	if n := e.Stats().Mapped.Remaps; n != 0 {
		t.Fatalf("%d remaps after a write in place, want 0", n)
	}
	// Truncated and rewritten (os.WriteFile truncates first).
	next := make([]byte, 1<<20)
	rand.Read(next)
	if err := os.WriteFile(path, next, 0o644); err != nil {
		t.Fatal(err)
	}
	read(next)
	if n := e.Stats().Mapped.Remaps; n != 1 {
		t.Fatalf("%d remaps after a truncate and rewrite, want 1", n)
	}
	// Grown: a READ past the old end is served by a larger mapping.
	more := make([]byte, 1<<20)
	rand.Read(more)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(more)
	f.Close()
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), TargetOffset: 1 << 20, Length: 1 << 20}}, ioTimeout); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 1<<20)
	d.ReadAt(got, 0)
	if !bytes.Equal(got, more) {
		t.Fatal("the grown part differs")
	}
	if st := e.Stats().Mapped; st.Remaps != 2 || st.Bytes != 2<<20 {
		t.Fatalf("stats %+v: want 2 remaps and 2 MiB mapped", st)
	}
	// Shrunk to 640 KiB after the engine last saw its size: the first 5
	// units complete, the rest end short.
	if err := os.Truncate(path, 640<<10); err != nil {
		t.Fatal(err)
	}
	b, err := e.SubmitAsync(engine.OpRead, seg, units128(d), nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	b.Wait(ioTimeout)
	for i := range 8 {
		ts, _ := b.TaskStatus(i)
		if i < 5 && (ts.Err != nil || ts.Transferred != 1<<17) {
			t.Fatalf("task %d inside the file: %+v", i, ts)
		}
		if i >= 5 && (ts.Transferred != 0 || engine.KindOf(ts.Err) != engine.KindRange) {
			t.Fatalf("task %d past the end: %+v, want range and 0 bytes", i, ts)
		}
	}
}

// TestMappedUncertainCopyRetains: a copy whose event fails has an unknown
// outcome: the READ fails undrained, the mapping is never unregistered
// (it stays counted and retained), and the close reports unquiesced.
func TestMappedUncertainCopyRetains(t *testing.T) {
	gpu := newFakeGPU(1)
	e := mappedEngine(t, gpu, nil)
	path, _ := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	gpu.failEvent.Store(true)
	rep, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 256 << 10}}, ioTimeout)
	if err == nil || rep.LocallyDrained {
		t.Fatalf("err %v report %+v: want a failure that is not locally drained", err, rep)
	}
	t.Logf("%v", err)
	wantKind(t, e.Unregister(d), engine.KindBusy)
	if st := e.Stats().Mapped; st.Retained != 1 || st.Bytes != 1<<20 {
		t.Fatalf("stats %+v: want the mapping retained", st)
	}
	pinned := gpu.pinnedCount()
	wantKind(t, e.Close(ioTimeout), engine.KindUnquiesced)
	if n := gpu.pinnedCount(); n != pinned {
		t.Fatalf("pinned ranges %d -> %d across Close: the retained mapping was unregistered", pinned, n)
	}
}

// TestMappedRefusedFallsBack: a mapping the driver refuses fails its
// take's units Unavailable before any copy; an unspec READ fails over to
// staging and completes there, and later requests go to staging at once.
func TestMappedRefusedFallsBack(t *testing.T) {
	gpu := newFakeGPU(1)
	e := mappedEngine(t, gpu, nil)
	path, orig := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	// Staging first, so its pool is pinned before pins start failing.
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Transport: engine.TransportIOUring, Address: d.BaseAddress(), Length: 4096}}, ioTimeout); err != nil {
		t.Fatal(err)
	}
	for round := range 2 {
		// Only the mapping's pin fails (the device reads below pin a copy
		// stage of their own).
		gpu.failPin.Store(round == 0)
		b, err := e.SubmitAsync(engine.OpRead, seg, units128(d), nil, ioTimeout)
		if err != nil {
			t.Fatal(err)
		}
		if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
			t.Fatalf("round %d: %v %+v", round, err, st)
		}
		ts, _ := b.TaskStatus(0)
		if ts.Transport != engine.TransportIOUring || ts.FailoverCount != 1-round {
			t.Fatalf("round %d: task %+v, want io_uring after %d failovers", round, ts, 1-round)
		}
		b.Free()
		gpu.failPin.Store(false)
		checkUnits(t, d, orig)
	}
	if st := e.Stats().Mapped; st.Refused != 1 || st.Files != 0 {
		t.Fatalf("stats %+v: want one refusal and nothing mapped", st)
	}
}

// TestMappedWriteOnlySegment: a segment opened write-only has an fd that
// mmap refuses (a shared mapping needs a readable fd), so its requests
// never take the mapped route: a vector WRITE, which cannot fail over,
// and a plain one with failover off both complete through staging.
func TestMappedWriteOnlySegment(t *testing.T) {
	gpu := newFakeGPU(1)
	e := mappedEngine(t, gpu, func(c *config.Engine) { c.MaxFailoverAttempts = 0 })
	path, _ := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermWrite)
	d := deviceRegion(t, e, 0, 1<<20)
	fresh := make([]byte, 1<<20)
	rand.Read(fresh)
	if _, err := d.WriteAt(fresh, 0); err != nil {
		t.Fatal(err)
	}
	reqs := []engine.Request{
		{Address: d.BaseAddress(), Length: 512 << 10},
		{TargetOffset: 512 << 10, Elements: []engine.Element{
			{Address: d.BaseAddress() + 512<<10, Length: 256 << 10},
			{Address: d.BaseAddress() + 768<<10, Length: 256 << 10},
		}},
	}
	b, err := e.SubmitAsync(engine.OpWrite, seg, reqs, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	b.Wait(ioTimeout)
	for i := range reqs {
		if ts, _ := b.TaskStatus(i); ts.Err != nil || ts.Transferred != 512<<10 || ts.Transport != engine.TransportIOUring {
			t.Fatalf("task %d: %+v, want 512 KiB through staging", i, ts)
		}
	}
	if file, _ := os.ReadFile(path); !bytes.Equal(file, fresh) {
		t.Fatal("the file differs from the device bytes")
	}
	if st := e.Stats().Mapped; st.Refused != 0 || st.Files != 0 {
		t.Fatalf("stats %+v: want no mapping tried", st)
	}
}

// TestMappedTwoDevices: one READ and one vector READ whose elements lie
// on cuda:0 and cuda:1, on one tmpfs file. A take gathers units of one
// job, which here span both devices; each device's units are copied on
// that device's stream, none fails for sharing a take with the other.
func TestMappedTwoDevices(t *testing.T) {
	gpu := newFakeGPU(2)
	e := mappedEngine(t, gpu, func(c *config.Engine) { c.MaxFailoverAttempts = 0 })
	path, orig := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d0 := deviceRegion(t, e, 0, 512<<10)
	d1 := deviceRegion(t, e, 1, 512<<10)
	reqs := []engine.Request{
		{Address: d0.BaseAddress(), Length: 256 << 10},
		{Address: d1.BaseAddress(), TargetOffset: 256 << 10, Length: 256 << 10},
		{TargetOffset: 512 << 10, Elements: []engine.Element{
			{Address: d0.BaseAddress() + 256<<10, Length: 128 << 10},
			{Address: d1.BaseAddress() + 256<<10, Length: 128 << 10},
			{Address: d0.BaseAddress() + 384<<10, Length: 128 << 10},
			{Address: d1.BaseAddress() + 384<<10, Length: 128 << 10},
		}},
	}
	b, err := e.SubmitAsync(engine.OpRead, seg, reqs, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	b.Wait(ioTimeout)
	for i, want := range []uint64{256 << 10, 256 << 10, 512 << 10} {
		if ts, _ := b.TaskStatus(i); ts.Err != nil || ts.Transferred != want || ts.Transport != engine.TransportMapped {
			t.Fatalf("task %d: %+v, want %d bytes mapped", i, ts, want)
		}
	}
	got0, got1 := make([]byte, 512<<10), make([]byte, 512<<10)
	d0.ReadAt(got0, 0)
	d1.ReadAt(got1, 0)
	const k = 128 << 10
	for _, c := range []struct {
		got  []byte
		file int
	}{{got0[:2*k], 0}, {got1[:2*k], 2 * k}, {got0[2*k : 3*k], 4 * k}, {got1[2*k : 3*k], 5 * k}, {got0[3*k:], 6 * k}, {got1[3*k:], 7 * k}} {
		if !bytes.Equal(c.got, orig[c.file:c.file+len(c.got)]) {
			t.Fatalf("device bytes of file offset %d differ", c.file)
		}
	}
}

// plainGPU is the fake GPU without PinReadOnly: a backend that cannot
// register memory mapped read-only.
type plainGPU struct{ engine.GPU }

// TestMappedReadOnlyWithoutPinner: on a backend without ReadOnlyPinner a
// segment opened for reading stays on staging from its first request
// (with failover off, a first take on the mapped route would fail).
func TestMappedReadOnlyWithoutPinner(t *testing.T) {
	needIOUring(t)
	cfg := config.DefaultEngine()
	cfg.MaxFailoverAttempts = 0
	var bs []engine.Backend
	for _, tr := range realTransports(cfg) {
		bs = append(bs, tr)
	}
	e := newEngineOver(t, cfg, append(bs, plainGPU{newFakeGPU(1)})...)
	path, orig := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	b, err := e.SubmitAsync(engine.OpRead, seg, units128(d), nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	b.Wait(ioTimeout)
	for i := range 8 {
		if ts, _ := b.TaskStatus(i); ts.Err != nil || ts.Transport != engine.TransportIOUring {
			t.Fatalf("task %d: %+v, want staging", i, ts)
		}
	}
	checkUnits(t, d, orig)
}

// TestMappedStatsDuringRegistration: Stats while a lane registers a
// file (about 160 ms per GiB on the H200, held under the file's mapping
// lock) answers at once: it must not wait for the registration while
// holding the engine lock every open and submission needs.
func TestMappedStatsDuringRegistration(t *testing.T) {
	gpu := newFakeGPU(1)
	gpu.pinHeld, gpu.pinning = make(chan struct{}), make(chan struct{}, 1)
	e := mappedEngine(t, gpu, nil)
	d := deviceRegion(t, e, 0, 1<<20) // pins nothing: device memory
	dir := shmDir(t)
	path, orig := randomFile(t, dir, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	b, err := e.SubmitAsync(engine.OpRead, seg, units128(d), nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	other, _ := randomFile(t, dir, "f2", 4096)
	<-gpu.pinning // the lane holds the file's mapping lock, registering
	done := make(chan engine.Stats)
	var openErr error
	go func() {
		done <- e.Stats()
		_, openErr = e.OpenFileSegment("file://"+other, engine.PermRead) // needs the engine lock too
		close(done)
	}()
	select {
	case st := <-done:
		<-done
		if st.Mapped.Files != 0 {
			t.Errorf("stats %+v: the mapping is not made yet", st.Mapped)
		}
		if openErr != nil {
			t.Error(openErr)
		}
	case <-time.After(5 * time.Second):
		t.Error("Stats waits for a registration in progress")
	}
	close(gpu.pinHeld)
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("read: %v %+v", err, st)
	}
	checkUnits(t, d, orig)
}

// TestMappedHolePunched: a hole punched into a mapped file (its size
// unchanged) moves its ctime and unmaps the punched pages from every
// mapping, as a truncation does: the lane sees a page gone and maps the
// file again, and the READ returns the hole's zeros. (The fake GPU's CPU
// copies would fault the zeros in through the old mapping too; on a GPU
// the old pinned pages would be read: the remap count is the check.)
func TestMappedHolePunched(t *testing.T) {
	gpu := newFakeGPU(1)
	e := mappedEngine(t, gpu, nil)
	path, orig := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, 1<<20)
	if _, err := e.SubmitAndWait(engine.OpRead, seg, units128(d), ioTimeout); err != nil {
		t.Fatal(err)
	}
	checkUnits(t, d, orig)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	err = unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 256<<10, 64<<10)
	f.Close()
	if err != nil {
		t.Skipf("no hole punching here: %v", err)
	}
	clear(orig[256<<10 : 320<<10])
	if _, err := e.SubmitAndWait(engine.OpRead, seg, units128(d), ioTimeout); err != nil {
		t.Fatal(err)
	}
	checkUnits(t, d, orig)
	if st := e.Stats().Mapped; st.Remaps != 1 {
		t.Fatalf("stats %+v: want the mapping retired once for the hole", st)
	}
}

// TestMappedWriteNoStream: a WRITE whose lane cannot get a stream
// enqueued nothing: it fails with remote effect none (the file is
// untouched), so an unspec one may fail over.
func TestMappedWriteNoStream(t *testing.T) {
	gpu := newFakeGPU(1)
	e := mappedEngine(t, gpu, func(c *config.Engine) { c.MaxFailoverAttempts = 0 })
	path, orig := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, 1<<20)
	gpu.failStream.Store(true)
	b, err := e.SubmitAsync(engine.OpWrite, seg, []engine.Request{{Address: d.BaseAddress(), Length: 128 << 10}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	b.Wait(ioTimeout)
	ts, _ := b.TaskStatus(0)
	if ts.Transport != engine.TransportMapped || ts.Err == nil || ts.RemoteEffect != engine.EffectNone {
		t.Fatalf("task %+v: want a mapped failure with remote effect none", ts)
	}
	if file, _ := os.ReadFile(path); !bytes.Equal(file, orig) {
		t.Fatal("the file changed")
	}
}

// pagemapFDs counts this process's open file descriptors on a
// pagemap file.
func pagemapFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	n := 0
	for _, ent := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + ent.Name()); strings.HasSuffix(l, "/pagemap") {
			n++
		}
	}
	return n
}

// TestMappedCloseReleasesFDs: an engine that checked a mapping's pages
// (/proc/self/pagemap) closes that file at Close, as it closes the rest.
func TestMappedCloseReleasesFDs(t *testing.T) {
	needIOUring(t)
	gpu := newFakeGPU(1)
	dir := shmDir(t)
	path, _ := randomFile(t, dir, "f", 1<<20)
	before := pagemapFDs(t)
	var closed []*engine.Engine // kept reachable: no finalizer closes a leaked file
	for range 3 {
		cfg := config.DefaultEngine()
		var bs []engine.Backend
		for _, tr := range realTransports(cfg) {
			bs = append(bs, tr)
		}
		e, err := engine.New(cfg, append(bs, gpu)...)
		if err != nil {
			t.Fatal(err)
		}
		seg := openSeg(t, e, path, engine.PermReadWrite)
		d := deviceRegion(t, e, 0, 1<<20)
		for range 2 { // the second READ follows a write(2): a pagemap check
			if _, err := e.SubmitAndWait(engine.OpRead, seg, units128(d), ioTimeout); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, make([]byte, 1<<20), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := e.Close(ioTimeout); err != nil {
			t.Fatal(err)
		}
		if st := e.Stats().Mapped; st.Remaps != 1 {
			t.Fatalf("stats %+v: want one pagemap check that remapped", st)
		}
		closed = append(closed, e)
	}
	runtime.KeepAlive(closed)
	if after := pagemapFDs(t); after != before {
		t.Fatalf("%d pagemap files open before three engines, %d after their Close", before, after)
	}
}

// TestMappedReleasedBeforeReport: once a group reports, its takes let
// go of the file's mapping, so closing the segment then unmaps it at
// once (its bytes no longer count against max_mapped_bytes). The report
// is taken on the lane that finished the group (OnGroupDone), the
// moment it still held the mapping before.
func TestMappedReleasedBeforeReport(t *testing.T) {
	gpu := newFakeGPU(1)
	e := mappedEngine(t, gpu, nil)
	path, _ := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	b, err := e.AllocateBatch(4)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	got := make(chan engine.MappedStats, 1)
	b.OnGroupDone(func(r engine.Report) {
		if err := e.CloseFileSegment(seg, ioTimeout); err != nil {
			t.Error(err)
		}
		got <- e.Stats().Mapped
	})
	if _, err := b.Submit(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 1 << 20}}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if st := <-got; st.Units == 0 || st.Files != 0 || st.Bytes != 0 {
		t.Fatalf("stats %+v at the report, the segment closed: want the mapping gone", st)
	}
}

// TestMappedDeadlineDuringRegistration: units whose deadline passes
// while their lane registers the file (seconds for a large one) never
// start: they fail KindTimeout with nothing copied, as a unit that found
// its deadline passed before it was taken does.
func TestMappedDeadlineDuringRegistration(t *testing.T) {
	gpu := newFakeGPU(1)
	gpu.pinHeld, gpu.pinning = make(chan struct{}), make(chan struct{}, 1)
	e := mappedEngine(t, gpu, nil)
	path, _ := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	const timeout = 200 * time.Millisecond
	b, err := e.SubmitAsync(engine.OpRead, seg, units128(d), nil, timeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	waited := make(chan struct{})
	go func() { b.Wait(ioTimeout); close(waited) }()
	select {
	case <-gpu.pinning:
		time.Sleep(2 * timeout) // the registration outlasts the deadline
	case <-waited: // a loaded machine: the lane came after the deadline
	}
	copies := gpu.copies.Load()
	close(gpu.pinHeld)
	<-waited
	for i := range 8 {
		if ts, _ := b.TaskStatus(i); ts.Transferred != 0 || engine.KindOf(ts.Err) != engine.KindTimeout {
			t.Fatalf("task %d: %+v, want a timeout with nothing moved", i, ts)
		}
	}
	if n := gpu.copies.Load() - copies; n != 0 {
		t.Fatalf("%d copies after the deadline", n)
	}
}

// TestMappedNoPagemap: where /proc/self/pagemap cannot be read, a file
// that changed under its mapping is mapped again (always right), rather
// than failing every take from then on.
func TestMappedNoPagemap(t *testing.T) {
	gpu := newFakeGPU(1)
	e := mappedEngine(t, gpu, func(c *config.Engine) { c.MaxFailoverAttempts = 0 })
	dir := shmDir(t)
	e.SetPagemapPath(dir + "/no-pagemap")
	path, orig := randomFile(t, dir, "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermReadWrite)
	d := deviceRegion(t, e, 0, 1<<20)
	for round := range 2 {
		b, err := e.SubmitAsync(engine.OpRead, seg, units128(d), nil, ioTimeout)
		if err != nil {
			t.Fatal(err)
		}
		b.Wait(ioTimeout)
		for i := range 8 {
			if ts, _ := b.TaskStatus(i); ts.Err != nil || ts.Transport != engine.TransportMapped {
				t.Fatalf("round %d task %d: %+v", round, i, ts)
			}
		}
		b.Free()
		checkUnits(t, d, orig)
		rand.Read(orig)
		if err := os.WriteFile(path, orig, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if st := e.Stats().Mapped; st.Remaps != 1 {
		t.Fatalf("stats %+v: want one remap", st)
	}
}

// TestMappedHungCopyRetains: a copy that never completes is waited for
// no later than deadline + quiesce_grace; its units then end
// unquiesced, and the mapping stays registered and counted for good.
func TestMappedHungCopyRetains(t *testing.T) {
	gpu := newFakeGPU(1)
	gpu.hang = make(chan struct{})
	t.Cleanup(func() { close(gpu.hang) })
	e := mappedEngine(t, gpu, func(c *config.Engine) { c.QuiesceGrace = config.Duration(100 * time.Millisecond) })
	// The deadline leaves a loaded machine's lane time to start the copy.
	path, _ := randomFile(t, shmDir(t), "f", 1<<20)
	seg := openSeg(t, e, path, engine.PermRead)
	d := deviceRegion(t, e, 0, 1<<20)
	b, err := e.SubmitAsync(engine.OpRead, seg, []engine.Request{{Address: d.BaseAddress(), Length: 256 << 10}}, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	b.Wait(ioTimeout)
	if ts, _ := b.TaskStatus(0); engine.KindOf(ts.Err) != engine.KindUnquiesced || ts.Transferred != 0 {
		t.Fatalf("task %+v: want unquiesced", ts)
	}
	if st := e.Stats().Mapped; st.Retained != 1 || st.Bytes != 1<<20 {
		t.Fatalf("stats %+v: want the mapping retained", st)
	}
	pinned := gpu.pinnedCount()
	wantKind(t, e.Close(ioTimeout), engine.KindUnquiesced)
	if n := gpu.pinnedCount(); n != pinned {
		t.Fatalf("pinned ranges %d -> %d across Close: the retained mapping was unregistered", pinned, n)
	}
}

// TestMappedFileEmptied: a file emptied after the submission's range
// check, before any mapping: a READ ends short (KindRange, nothing
// moved) and a WRITE fails KindRange, as past the end of a mapped file;
// an empty file is not a refusal.
func TestMappedFileEmptied(t *testing.T) {
	for _, op := range []engine.Op{engine.OpRead, engine.OpWrite} {
		t.Run(op.String(), func(t *testing.T) {
			gpu := newFakeGPU(1)
			e := mappedEngine(t, gpu, func(c *config.Engine) { c.MaxFailoverAttempts = 0 })
			path, _ := randomFile(t, shmDir(t), "f", 1<<20)
			seg := openSeg(t, e, path, engine.PermReadWrite)
			d := deviceRegion(t, e, 0, 1<<20)
			var once sync.Once
			e.HoldUnits(func(int) {
				once.Do(func() {
					if err := os.Truncate(path, 0); err != nil {
						t.Error(err)
					}
				})
			})
			b, err := e.SubmitAsync(op, seg, []engine.Request{{Address: d.BaseAddress(), Length: 256 << 10}}, nil, ioTimeout)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Free()
			b.Wait(ioTimeout)
			if ts, _ := b.TaskStatus(0); ts.Transferred != 0 || engine.KindOf(ts.Err) != engine.KindRange || ts.Transport != engine.TransportMapped {
				t.Fatalf("task %+v: want a mapped range failure", ts)
			}
			if st := e.Stats().Mapped; st.Refused != 0 {
				t.Fatalf("stats %+v: want no refusal", st)
			}
			if fi, _ := os.Stat(path); fi.Size() != 0 {
				t.Fatalf("the file is %d bytes, want it left empty", fi.Size())
			}
		})
	}
}
