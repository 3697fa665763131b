// device.go owns Device, one CUDA device and its retained primary
// context, and the context binding every driver call goes through.
//
// Invariants:
//   - Every method that calls the driver runs between bind and unbind:
//     the goroutine is locked to its OS thread and the device's primary
//     context is made current on that thread first, so a method is
//     correct from any goroutine (goroutines migrate between threads, and
//     a context is current per thread).
//   - bind nests: runtime.LockOSThread counts, so a bound method may call
//     another bound method.
//   - The primary context is released exactly once, by Close.

package cuda

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"
)

// Device is one CUDA device with its primary context retained. Safe for
// concurrent use; callers must not use it after Close.
type Device struct {
	drv     *Driver
	ordinal int
	handle  int32   // CUdevice
	ctx     uintptr // CUcontext (primary)
	name    string
	closed  atomic.Bool
}

// Ordinal is the device number (cuda:N).
func (d *Device) Ordinal() int { return d.ordinal }

// Name is the device's marketing name, e.g. "NVIDIA H200".
func (d *Device) Name() string { return d.name }

// Driver is the driver the device came from.
func (d *Device) Driver() *Driver { return d.drv }

func (d *Device) String() string { return fmt.Sprintf("cuda:%d", d.ordinal) }

// bind locks the calling goroutine to its thread and makes the device's
// context current there. On success the caller must call unbind.
func (d *Device) bind() error {
	runtime.LockOSThread()
	if d.closed.Load() {
		runtime.UnlockOSThread()
		return fmt.Errorf("%w: %s", ErrClosed, d)
	}
	if r := d.drv.call(d.drv.fn.ctxSetCurrent, d.ctx); r != Success {
		runtime.UnlockOSThread()
		return d.drv.errorf(r, "cuCtxSetCurrent(%s)", d)
	}
	return nil
}

func (d *Device) unbind() { runtime.UnlockOSThread() }

// do runs fn with the device's context current on a locked thread.
func (d *Device) do(fn func() error) error {
	if err := d.bind(); err != nil {
		return err
	}
	defer d.unbind()
	return fn()
}

// Synchronize waits for all work on the device's primary context.
func (d *Device) Synchronize() error {
	return d.do(func() error {
		if r := d.drv.call(d.drv.fn.ctxSynchronize); r != Success {
			return d.drv.errorf(r, "cuCtxSynchronize(%s)", d)
		}
		return nil
	})
}

// MemGetInfo returns free and total device memory in bytes.
func (d *Device) MemGetInfo() (free, total uint64, err error) {
	err = d.do(func() error {
		if r := d.drv.call(d.drv.fn.memGetInfo, uintptr(unsafe.Pointer(&free)), uintptr(unsafe.Pointer(&total))); r != Success {
			return d.drv.errorf(r, "cuMemGetInfo(%s)", d)
		}
		return nil
	})
	return free, total, err
}

// Close releases the primary context. Memory, streams and events made on
// the device must be freed first. A second Close does nothing.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.drv.forget(d)
	if r := d.drv.call(d.drv.fn.primaryCtxRelease, uintptr(d.handle)); r != Success {
		return d.drv.errorf(r, "cuDevicePrimaryCtxRelease(%s)", d)
	}
	return nil
}
