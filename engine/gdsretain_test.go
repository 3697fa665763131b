package engine_test

// gdsretain_test.go: what the engine keeps when cuFile cannot say that it
// let go (gdsexec.go): an uncertain buffer registration, a failed
// deregistration and a failed handle destroy keep the device allocation
// or the O_DIRECT fd for good, and are never retried.

import (
	"bytes"
	"testing"

	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

// gdsRead runs one unspec READ of 64 KiB into r's device region and
// returns the task's transport.
func gdsRead(t *testing.T, r *failoverRig) engine.TransportKind {
	t.Helper()
	b, err := r.e.SubmitAsync(engine.OpRead, r.seg, []engine.Request{{Address: r.dev.BaseAddress(), Length: 64 << 10}}, nil, ioTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Free()
	if st, err := b.Wait(ioTimeout); err != nil || st != engine.StateCompleted {
		t.Fatalf("state %v %v", st, err)
	}
	if !bytes.Equal(r.devBytes(t, 0, 64<<10), r.orig[:64<<10]) {
		t.Fatal("device bytes differ from the file")
	}
	ts, _ := b.TaskStatus(0)
	return ts.Transport
}

// TestGDSUncertainRegistration: a registration whose outcome cuFile could
// not report leaves the region to staging, is never undone, and its
// device allocation is never freed, not even at unregister.
func TestGDSUncertainRegistration(t *testing.T) {
	r := newFailoverRig(t, nil)
	r.gds.uncertainRegister.Store(true)
	if tr := gdsRead(t, r); tr != engine.TransportIOUring {
		t.Fatalf("transport %v, want staging (io_uring)", tr)
	}
	ptr := r.dev.BaseAddress()
	err := r.e.Unregister(r.dev)
	wantKind(t, err, engine.KindIO)
	if !r.gpu.allocated(ptr) {
		t.Fatal("the device allocation of an uncertain registration was freed")
	}
	st := r.e.Stats().GDS
	if r.gds.deregs.Load() != 0 || st.Retained != 1 || st.BufferRegistrationFailures != 1 {
		t.Fatalf("deregisters %d, stats %+v: want none, one retained, one failure", r.gds.deregs.Load(), st)
	}
}

// TestGDSFailedDeregister: a deregistration that fails keeps the device
// allocation for good and is not tried again.
func TestGDSFailedDeregister(t *testing.T) {
	r := newFailoverRig(t, nil)
	if tr := gdsRead(t, r); tr != engine.TransportGDS {
		t.Fatalf("transport %v, want gds", tr)
	}
	r.gds.failDeregister.Store(true)
	ptr := r.dev.BaseAddress()
	wantKind(t, r.e.Unregister(r.dev), engine.KindIO)
	if !r.gpu.allocated(ptr) {
		t.Fatal("the device allocation was freed after its deregistration failed")
	}
	wantKind(t, r.e.Unregister(r.dev), engine.KindNotFound)
	if n := r.gds.deregs.Load(); n != 1 || r.e.Stats().GDS.Retained != 1 {
		t.Fatalf("deregisters %d, retained %d: want one attempt, one retained", n, r.e.Stats().GDS.Retained)
	}

	// The control: a deregistration that succeeds frees the memory.
	r.gds.failDeregister.Store(false)
	d := deviceRegion(t, r.e, 0, 1<<20)
	r.dev = d
	if tr := gdsRead(t, r); tr != engine.TransportGDS {
		t.Fatalf("transport %v, want gds", tr)
	}
	if err := r.e.Unregister(d); err != nil || r.gpu.allocated(d.BaseAddress()) {
		t.Fatalf("unregister %v, still allocated %v", err, r.gpu.allocated(d.BaseAddress()))
	}
}

// TestGDSFailedHandleDestroy: when destroying an entry's cuFile handle
// fails, the O_DIRECT fd it was registered on stays open (cuFile may
// still use it); when it succeeds, the fd closes with the segment.
func TestGDSFailedHandleDestroy(t *testing.T) {
	for _, fail := range []bool{true, false} {
		r := newFailoverRig(t, nil)
		if tr := gdsRead(t, r); tr != engine.TransportGDS {
			t.Fatalf("transport %v, want gds", tr)
		}
		r.gds.failClose.Store(fail)
		fd := int(r.gds.lastFD.Load())
		var before unix.Stat_t
		if err := unix.Fstat(fd, &before); err != nil {
			t.Fatal(err)
		}
		if err := r.e.CloseFileSegment(r.seg, ioTimeout); err != nil {
			t.Fatal(err)
		}
		var after unix.Stat_t
		err := unix.Fstat(fd, &after)
		open := err == nil && after.Ino == before.Ino && after.Dev == before.Dev
		if open != fail {
			t.Fatalf("destroy failed %v: the O_DIRECT fd open after close: %v (%v)", fail, open, err)
		}
		if fail && r.e.Stats().GDS.Retained != 1 {
			t.Fatalf("retained %d, want 1", r.e.Stats().GDS.Retained)
		}
		if r.gds.closed.Load() != 1 {
			t.Fatalf("%d destroys, want 1", r.gds.closed.Load())
		}
	}
}
