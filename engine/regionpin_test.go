package engine_test

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// heldCopy starts a WriteAt of n bytes of fill at off of r and holds it
// in the copy hook, range pinned, before any byte moves. It returns a
// release function and a channel carrying the WriteAt's error.
func heldCopy(t *testing.T, r *engine.Region, off int64, n int, fill byte) (release func(), done <-chan error) {
	t.Helper()
	held, rel := make(chan struct{}), make(chan struct{})
	var first sync.Once
	r.HoldRegionCopies(func(o int64, k int) {
		if o == off && k == n {
			first.Do(func() { close(held); <-rel })
		}
	})
	errc := make(chan error, 1)
	go func() {
		_, err := r.WriteAt(bytes.Repeat([]byte{fill}, n), off)
		errc <- err
	}()
	select {
	case <-held:
	case <-time.After(5 * time.Second):
		t.Fatal("the large copy never reached its hook")
	}
	var once bool
	release = func() {
		if !once {
			once = true
			close(rel)
		}
	}
	t.Cleanup(release)
	return release, errc
}

// TestRegionCopiesSideBySide: while an 8 MiB WriteAt into a region is
// held mid-copy, 4 KiB copies to the same region (beside it, and over
// the same bytes) complete; a submission over the held bytes fails busy
// before any I/O, and one beside them runs.
func TestRegionCopiesSideBySide(t *testing.T) {
	ref := &refTransport{}
	e := newEngine(t, nil, ref)
	const big = 8 << 20
	r := register(t, e, big+1<<20)
	release, done := heldCopy(t, r, 0, big, 0xaa)

	small := make(chan error, 3)
	go func() {
		_, err := r.WriteAt(bytes.Repeat([]byte{0x55}, 4096), big)
		small <- err
		_, err = r.ReadAt(make([]byte, 4096), big)
		small <- err
		_, err = r.ReadAt(make([]byte, 4096), 4096) // inside the held range
		small <- err
	}()
	for i := 0; i < 3; i++ {
		select {
		case err := <-small:
			if err != nil {
				t.Fatalf("4 KiB copy %d beside the held one: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("4 KiB copy %d to the same region waited behind the held 8 MiB copy", i)
		}
	}

	// A group's loan is never granted over a running copy.
	path, _ := randomFile(t, t.TempDir(), "f", 1<<16)
	s := openSeg(t, e, path, engine.PermRead)
	b, _ := e.AllocateBatch(2)
	b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress() + 4096, Length: 4096}}, nil, 5*time.Second)
	b.Submit(engine.OpRead, s, []engine.Request{{Address: r.BaseAddress() + big, Length: 4096}}, nil, 5*time.Second)
	b.Seal()
	if st, _ := b.Wait(5 * time.Second); st != engine.StateFailed {
		t.Fatalf("a submission over a running copy: batch %v", st)
	}
	ts, _ := b.TaskStatus(0)
	wantKind(t, ts.Err, engine.KindBusy)
	if !strings.Contains(ts.Err.Error(), "ReadAt/WriteAt") {
		t.Fatalf("message %q does not name the copy", ts.Err)
	}
	if ts, _ := b.TaskStatus(1); ts.Err != nil {
		t.Fatalf("a submission beside the running copy: %v", ts.Err)
	}

	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	got := make([]byte, big+4096)
	if _, err := r.ReadAt(got, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got[:big], bytes.Repeat([]byte{0xaa}, big)) {
		t.Fatal("the held copy's bytes are not in the region")
	}
}

// TestUnregisterDuringCopy: an Unregister while a WriteAt is held
// mid-copy answers busy and leaves the region usable and mapped; once
// the copy returned, the bytes are there and Unregister succeeds.
func TestUnregisterDuringCopy(t *testing.T) {
	e := newEngine(t, nil, &refTransport{})
	const n = 4 << 20
	r := register(t, e, n)
	release, done := heldCopy(t, r, 0, n, 0x3c)

	err := e.Unregister(r)
	wantKind(t, err, engine.KindBusy)
	if !strings.Contains(err.Error(), "ReadAt/WriteAt") {
		t.Fatalf("message %q does not name the copy", err)
	}
	if got := e.Regions(); len(got) != 1 || got[0] != r {
		t.Fatal("a refused Unregister removed the region")
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the held copy after a refused Unregister: %v", err)
	}
	if !bytes.Equal(regionBytes(t, r), bytes.Repeat([]byte{0x3c}, n)) {
		t.Fatal("the held copy's bytes are not in the region")
	}
	if err := e.Unregister(r); err != nil {
		t.Fatal(err)
	}
	_, err = r.ReadAt(make([]byte, 1), 0)
	wantKind(t, err, engine.KindNotFound)
}

// TestCloseWaitsForCopy: Engine.Close with a WriteAt held mid-copy
// waits for it before unmapping, and later copies find the region gone.
func TestCloseWaitsForCopy(t *testing.T) {
	e := newEngine(t, nil, &refTransport{})
	const n = 1 << 20
	r := register(t, e, n)
	release, done := heldCopy(t, r, 0, n, 0x11)
	closed := make(chan error, 1)
	go func() { closed <- e.Close(5 * time.Second) }()
	select {
	case err := <-closed:
		t.Fatalf("Close returned (%v) while a copy into a region was held", err)
	case <-time.After(100 * time.Millisecond):
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("the held copy: %v", err)
	}
	if err := <-closed; err != nil {
		t.Fatal(err)
	}
	_, err := r.ReadAt(make([]byte, 1), 0)
	wantKind(t, err, engine.KindNotFound)
}

// TestInPlace: private host memory is reached in place with its range
// pinned (an Unregister meanwhile is busy); a shared file is not (only
// the checked copy reaches it); a range past the end, and an
// unregistered region, are refused without running f.
func TestInPlace(t *testing.T) {
	dir, err := os.MkdirTemp("/dev/shm", "orbitefs-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.WriteFile(dir+"/f", make([]byte, 8192), 0o600)
	e := newEngine(t, func(c *config.Engine) { c.AllowedRoots = []string{"/dev/shm"} }, &refTransport{})
	shm, err := e.RegisterSharedFile(dir+"/f", 8192)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := shm.InPlace(0, 10, func([]byte) error { t.Fatal("f ran on a shared file"); return nil }); ok || err != nil {
		t.Fatalf("InPlace on a shared file: ok %v, %v", ok, err)
	}

	r := register(t, e, 8192)
	ok, err := r.InPlace(4096, 4096, func(b []byte) error {
		copy(b, "in place")
		wantKind(t, e.Unregister(r), engine.KindBusy)
		return nil
	})
	if !ok || err != nil {
		t.Fatalf("InPlace on cpu memory: ok %v, %v", ok, err)
	}
	got := make([]byte, 8)
	if r.ReadAt(got, 4096); string(got) != "in place" {
		t.Fatalf("region holds %q", got)
	}
	_, err = r.InPlace(4096, 4097, func([]byte) error { t.Fatal("f ran past the end"); return nil })
	wantKind(t, err, engine.KindRange)
	if err := e.Unregister(r); err != nil {
		t.Fatal(err)
	}
	_, err = r.InPlace(0, 1, func([]byte) error { t.Fatal("f ran on an unregistered region"); return nil })
	wantKind(t, err, engine.KindNotFound)
}
