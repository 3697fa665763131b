// bind_test.go shows why every method binds the context: on a thread with
// no current context a raw driver call fails with
// CUDA_ERROR_INVALID_CONTEXT, and the same call through a method succeeds
// on that very thread.

package cuda

import (
	"errors"
	"runtime"
	"testing"
	"unsafe"
)

func TestBindingMakesContextCurrent(t *testing.T) {
	dev := gpu(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// Leave this thread with no current context, as a fresh thread has.
	if r := dev.drv.call(dev.drv.fn.ctxSetCurrent, 0); r != Success {
		t.Fatalf("cuCtxSetCurrent(NULL) = %v", r)
	}
	var p DevicePtr
	if r := dev.drv.call(dev.drv.fn.memAlloc, uintptr(unsafe.Pointer(&p)), 4096); r != ErrorInvalidContext {
		if r == Success {
			_ = dev.Free(p)
		}
		t.Fatalf("unbound cuMemAlloc = %v, want CUDA_ERROR_INVALID_CONTEXT", r)
	}
	// The method binds (nested inside this test's own lock) and succeeds.
	q, err := dev.Alloc(4096)
	must(t, err)
	must(t, dev.Free(q))
}

// TestRepeatedOpenAndClose: a second Open shares the library and the
// primary context; closing its device leaves the first device working and
// makes the closed one refuse use.
func TestRepeatedOpenAndClose(t *testing.T) {
	dev := gpu(t)
	drv2, err := Open(Options{})
	must(t, err)
	if drv2.Path() != dev.Driver().Path() {
		t.Errorf("second Open loaded %s, first %s", drv2.Path(), dev.Driver().Path())
	}
	dev2, err := drv2.Device(0)
	must(t, err)
	if dev2.ctx != dev.ctx {
		t.Errorf("second driver's primary context %#x, first %#x", dev2.ctx, dev.ctx)
	}
	must(t, dev2.Close())
	must(t, dev2.Close())
	if _, err := dev2.Alloc(4096); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc on a closed device = %v, want ErrClosed", err)
	}
	p, err := dev.Alloc(4096)
	must(t, err)
	must(t, dev.Free(p))
}
