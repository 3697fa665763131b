package engine_test

// hardening_test.go: faults and exhaustion the engine must survive and
// report, on real kernel objects: a shared region truncated under its
// mapping, the registered-memory bound, and a full filesystem.

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// TestTruncatedSharedRegion: another process truncates the file behind a
// MAP_SHARED region. Go-side copies return KindIO naming the region and
// offset instead of killing the process with SIGBUS; io_uring transfers
// into or out of the truncated range fail per task; the engine keeps
// serving.
func TestTruncatedSharedRegion(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "orbitefs-trunc-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	dir := t.TempDir()
	e := newEngine(t, func(c *config.Engine) { c.AllowedRoots = []string{shm, dir} })
	shared := filepath.Join(shm, "x")
	if err := os.WriteFile(shared, bytes.Repeat([]byte{7}, 64<<10), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := e.RegisterSharedFile(shared, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	// Truncated by another process, as a user would with truncate(1).
	if out, err := exec.Command("truncate", "-s", "16384", shared).CombinedOutput(); err != nil {
		t.Fatalf("truncate: %v %s", err, out)
	}
	name := fmt.Sprintf("memory/%#x", r.BaseAddress())

	buf := make([]byte, 8192)
	if n, err := r.ReadAt(buf, 0); err != nil || n != 8192 || buf[0] != 7 {
		t.Fatalf("read before the cut: %d %v", n, err)
	}
	for _, c := range []struct {
		op  string
		do  func() (int, error)
		n   int
		off string
	}{
		{"read", func() (int, error) { return r.ReadAt(buf, 16384) }, 0, "at offset 16384"},
		{"read", func() (int, error) { return r.ReadAt(buf, 12288) }, 4096, "at offset 16384"},
		{"write", func() (int, error) { return r.WriteAt(buf, 32768) }, 0, "at offset 32768"},
	} {
		n, err := c.do()
		wantKind(t, err, engine.KindIO)
		if n != c.n {
			t.Errorf("%v: %d bytes copied, want %d", err, n, c.n)
		}
		for _, w := range []string{c.op + " " + name, c.off, "memory fault"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: lacks %q", err, w)
			}
		}
	}

	needIOUring(t)
	path, data := randomFile(t, dir, "f", 64<<10)
	seg := openSeg(t, e, path, engine.PermRead|engine.PermWrite)
	b, err := e.AllocateBatch(4)
	if err != nil {
		t.Fatal(err)
	}
	reqs := []engine.Request{
		{Address: r.BaseAddress(), TargetOffset: 0, Length: 8192},          // before the cut
		{Address: r.BaseAddress() + 16384, TargetOffset: 0, Length: 16384}, // beyond it
		{Address: r.BaseAddress() + 8192, TargetOffset: 0, Length: 16384},  // across it
	}
	if _, err := b.Submit(engine.OpRead, seg, reqs, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Submit(engine.OpWrite, seg, []engine.Request{{Address: r.BaseAddress() + 32768, TargetOffset: 0, Length: 4096}}, nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	b.Seal()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateFailed {
		t.Fatalf("state %v %v, want failed", st, err)
	}
	ts := b.TaskStatuses()
	if ts[0].State != engine.TaskCompleted {
		t.Errorf("task 0: %v %v", ts[0].State, ts[0].Err)
	}
	// The kernel reports a fault in the middle of a transfer as EFAULT
	// or as a short count; either way the task fails with at most the
	// bytes before the cut.
	for i, most := range []uint64{1: 0, 2: 8192, 3: 0} {
		if i == 0 {
			continue
		}
		if ts[i].State != engine.TaskFailed || ts[i].Transferred > most {
			t.Errorf("task %d: %v %d bytes, want failed, at most %d: %v", i, ts[i].State, ts[i].Transferred, most, ts[i].Err)
			continue
		}
		wantKind(t, ts[i].Err, engine.KindIO)
		t.Logf("task %d: %v", i, ts[i].Err)
	}
	b.Free()
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got, data) {
		t.Error("a failed write changed the file")
	}

	// Still serving: an anonymous region round-trips.
	r2 := register(t, e, 8192)
	if _, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: r2.BaseAddress(), Length: 8192}}, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(regionBytes(t, r2), data[:8192]) {
		t.Fatal("bytes after the fault differ")
	}
	if err := e.Unregister(r); err != nil {
		t.Fatal(err)
	}
}

// TestRegisteredLimit: registrations count against max_registered_bytes,
// page-rounded, shared files included; past it KindExhausted names the
// key and the figures and maps nothing; unregistering gives room back.
func TestRegisteredLimit(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "orbitefs-limit-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(shm) })
	e := newEngine(t, func(c *config.Engine) {
		c.MaxRegisteredBytes = 64 << 10
		c.AllowedRoots = []string{shm}
	}, &refTransport{})
	a := register(t, e, 32<<10)
	b := register(t, e, 30<<10) // counts as 32 KiB
	_, err = e.RegisterMemory(1)
	wantKind(t, err, engine.KindExhausted)
	for _, w := range []string{"engine.max_registered_bytes (64KiB", "68KiB registered", "64KiB already registered"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("%v: lacks %q", err, w)
		}
	}
	if got := len(e.Regions()); got != 2 {
		t.Fatalf("%d regions after a refused registration", got)
	}
	if err := e.Unregister(b); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(shm, "s")
	os.WriteFile(p, make([]byte, 64<<10), 0o600)
	_, err = e.RegisterSharedFile(p, 64<<10)
	wantKind(t, err, engine.KindExhausted)
	s, err := e.RegisterSharedFile(p, 32<<10)
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.RegisterMemory(4096)
	wantKind(t, err, engine.KindExhausted)
	// A failed shared registration returns its reservation.
	e.Unregister(s)
	if _, err := e.RegisterSharedFile(filepath.Join(shm, "missing"), 4096); err == nil {
		t.Fatal("missing file registered")
	}
	register(t, e, 32<<10)
	_ = a
}

// tinyTmpfs mounts a tmpfs of size bytes on a fresh directory (root only).
func tinyTmpfs(t *testing.T, size int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a small tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// TestShortWriteNoSpace: a write larger than the free space of a real
// tmpfs moves what fits, then the retry of the rest reports ENOSPC as
// KindNoSpace with the exact count of bytes written, not a range error.
func TestShortWriteNoSpace(t *testing.T) {
	needIOUring(t)
	dir := tinyTmpfs(t, 256<<10)
	e := newEngine(t, func(c *config.Engine) { c.AllowedRoots = []string{dir} })
	path := filepath.Join(dir, "f")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, 1<<20); err != nil { // sparse: no space used yet
		t.Fatal(err)
	}
	seg := openSeg(t, e, path, engine.PermWrite|engine.PermRead)
	r := register(t, e, 1<<20)
	src := bytes.Repeat([]byte("orbitefs"), (1<<20)/8)
	r.WriteAt(src, 0)
	b, _ := e.AllocateBatch(2)
	reqs := []engine.Request{
		{Address: r.BaseAddress(), TargetOffset: 0, Length: 512 << 10},        // fills the disk
		{Address: r.BaseAddress(), TargetOffset: 512 << 10, Length: 64 << 10}, // nothing fits
	}
	if _, err := b.Submit(engine.OpWrite, seg, reqs[:1], nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Submit(engine.OpWrite, seg, reqs[1:], nil, ioTimeout); err != nil {
		t.Fatal(err)
	}
	b.Seal()
	if st, _ := b.Wait(ioTimeout); st != engine.StateFailed {
		t.Fatalf("state %v", st)
	}
	ts := b.TaskStatuses()
	for i, s := range ts {
		if s.State != engine.TaskFailed {
			t.Fatalf("task %d: %v", i, s.State)
		}
		wantKind(t, s.Err, engine.KindNoSpace)
		if !strings.Contains(s.Err.Error(), "no space left on device") {
			t.Errorf("task %d: %v lacks the errno", i, s.Err)
		}
		t.Logf("task %d: %d bytes: %v", i, s.Transferred, s.Err)
	}
	n := ts[0].Transferred
	if n == 0 || n >= 512<<10 || !strings.Contains(ts[0].Err.Error(), fmt.Sprintf("%d of %d bytes", n, 512<<10)) {
		t.Fatalf("task 0 wrote %d bytes: %v", n, ts[0].Err)
	}
	if ts[1].Transferred != 0 {
		t.Fatalf("task 1 wrote %d bytes on a full disk", ts[1].Transferred)
	}
	got, _ := os.ReadFile(path)
	if !bytes.Equal(got[:n], src[:n]) || bytes.ContainsFunc(got[n:], func(r rune) bool { return r != 0 }) {
		t.Fatalf("file does not hold exactly the %d bytes reported", n)
	}
}
