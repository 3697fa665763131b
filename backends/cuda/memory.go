// memory.go owns device memory (DevicePtr), pinned host memory
// (HostBuffer, HostRegister) and the synchronous copies between them.
//
// Invariants:
//   - A size or address is checked before it reaches the driver: bad
//     input returns ErrInvalid and changes nothing.
//   - Live counters move only when the driver call succeeded.
//   - Synchronous copies run on the legacy default stream, so they are
//     ordered after each other and after Memset on the same device.

package cuda

import (
	"fmt"
	"unsafe"
)

// DevicePtr is a device address (CUdeviceptr). Offsets are plain
// additions: p + DevicePtr(off).
type DevicePtr uint64

// CUDA flag values from cuda.h.
const (
	memHostAllocPortable    = 0x01 // CU_MEMHOSTALLOC_PORTABLE
	memHostRegisterPortable = 0x01 // CU_MEMHOSTREGISTER_PORTABLE
	memHostRegisterReadOnly = 0x08 // CU_MEMHOSTREGISTER_READ_ONLY
)

// Alloc allocates n bytes of device memory (cuMemAlloc).
func (d *Device) Alloc(n int) (DevicePtr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("%w: alloc of %d bytes on %s", ErrInvalid, n, d)
	}
	var p DevicePtr
	err := d.do(func() error {
		if r := d.drv.call(d.drv.fn.memAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)); r != Success {
			return d.drv.errorf(r, "cuMemAlloc(%d bytes on %s)", n, d)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	d.drv.live.DeviceAllocs.Add(1)
	return p, nil
}

// Free releases memory from Alloc.
func (d *Device) Free(p DevicePtr) error {
	err := d.do(func() error {
		if r := d.drv.call(d.drv.fn.memFree, uintptr(p)); r != Success {
			return d.drv.errorf(r, "cuMemFree(%#x on %s)", uint64(p), d)
		}
		return nil
	})
	if err == nil {
		d.drv.live.DeviceAllocs.Add(-1)
	}
	return err
}

// Memset sets n bytes at p to v (cuMemsetD8). It may return before the
// device finished; later copies on the default stream see its result.
func (d *Device) Memset(p DevicePtr, v byte, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: memset of %d bytes at %#x on %s", ErrInvalid, n, uint64(p), d)
	}
	return d.do(func() error {
		if r := d.drv.call(d.drv.fn.memsetD8, uintptr(p), uintptr(v), uintptr(n)); r != Success {
			return d.drv.errorf(r, "cuMemsetD8(%#x, %#x, %d bytes on %s)", uint64(p), v, n, d)
		}
		return nil
	})
}

// CopyHtoD copies src to device address dst and returns when src may be
// reused.
func (d *Device) CopyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return d.do(func() error {
		if r := d.drv.call(d.drv.fn.memcpyHtoD, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src))); r != Success {
			return d.drv.errorf(r, "cuMemcpyHtoD(%#x <- %d bytes on %s)", uint64(dst), len(src), d)
		}
		return nil
	})
}

// CopyDtoH copies len(dst) bytes from device address src into dst and
// returns when they have arrived.
func (d *Device) CopyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return d.do(func() error {
		if r := d.drv.call(d.drv.fn.memcpyDtoH, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst))); r != Success {
			return d.drv.errorf(r, "cuMemcpyDtoH(%d bytes <- %#x on %s)", len(dst), uint64(src), d)
		}
		return nil
	})
}

// CopyDtoD copies n bytes between device addresses.
func (d *Device) CopyDtoD(dst, src DevicePtr, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: device copy of %d bytes on %s", ErrInvalid, n, d)
	}
	if n == 0 {
		return nil
	}
	return d.do(func() error {
		if r := d.drv.call(d.drv.fn.memcpyDtoD, uintptr(dst), uintptr(src), uintptr(n)); r != Success {
			return d.drv.errorf(r, "cuMemcpyDtoD(%#x <- %#x, %d bytes on %s)", uint64(dst), uint64(src), n, d)
		}
		return nil
	})
}

// HostBuffer is portable pinned host memory from cuMemHostAlloc: usable
// by every context, DMA-able, page-aligned.
type HostBuffer struct {
	dev *Device
	p   unsafe.Pointer // C memory; never Go heap
	n   int
}

// HostAlloc allocates n bytes of portable pinned host memory.
func (d *Device) HostAlloc(n int) (*HostBuffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("%w: pinned alloc of %d bytes on %s", ErrInvalid, n, d)
	}
	var p unsafe.Pointer
	err := d.do(func() error {
		if r := d.drv.call(d.drv.fn.memHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), memHostAllocPortable); r != Success {
			return d.drv.errorf(r, "cuMemHostAlloc(%d bytes, portable, on %s)", n, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.drv.live.HostAllocs.Add(1)
	return &HostBuffer{dev: d, p: p, n: n}, nil
}

// Addr is the buffer's start address (page-aligned).
func (b *HostBuffer) Addr() uintptr { return uintptr(b.p) }

// Len is the buffer's size in bytes.
func (b *HostBuffer) Len() int { return b.n }

// Bytes views the buffer as a slice. The slice is valid only until Free:
// touching it afterwards is a use-after-free the runtime cannot catch.
func (b *HostBuffer) Bytes() []byte {
	if b.p == nil {
		return nil
	}
	return unsafe.Slice((*byte)(b.p), b.n)
}

// Free releases the buffer (cuMemFreeHost). A second Free does nothing;
// Free must not race with other use of the buffer.
func (b *HostBuffer) Free() error {
	if b.p == nil {
		return nil
	}
	err := b.dev.do(func() error {
		if r := b.dev.drv.call(b.dev.drv.fn.memFreeHost, uintptr(b.p)); r != Success {
			return b.dev.drv.errorf(r, "cuMemFreeHost(%#x, %d bytes)", uintptr(b.p), b.n)
		}
		return nil
	})
	if err == nil {
		b.p = nil
		b.dev.drv.live.HostAllocs.Add(-1)
	}
	return err
}

// HostRegister pins n bytes of existing host memory at addr (for example
// an mmap'd region) for DMA from every context (portable). The memory
// must stay mapped until HostUnregister.
func (d *Device) HostRegister(addr uintptr, n int) error {
	return d.hostRegister(addr, n, false)
}

// HostRegisterReadOnly is HostRegister for memory mapped read-only (the
// device only reads it: CU_MEMHOSTREGISTER_READ_ONLY).
func (d *Device) HostRegisterReadOnly(addr uintptr, n int) error {
	return d.hostRegister(addr, n, true)
}

func (d *Device) hostRegister(addr uintptr, n int, readOnly bool) error {
	if addr == 0 || n <= 0 {
		return fmt.Errorf("%w: host register of %d bytes at %#x on %s", ErrInvalid, n, addr, d)
	}
	flags, what := uintptr(memHostRegisterPortable), "portable"
	if readOnly {
		flags, what = flags|memHostRegisterReadOnly, "portable, read-only"
	}
	err := d.do(func() error {
		if r := d.drv.call(d.drv.fn.memHostRegister, addr, uintptr(n), flags); r != Success {
			return d.drv.errorf(r, "cuMemHostRegister(%#x, %d bytes, %s, on %s)", addr, n, what, d)
		}
		return nil
	})
	if err == nil {
		d.drv.live.HostRegs.Add(1)
	}
	return err
}

// HostUnregister undoes HostRegister for the region starting at addr.
func (d *Device) HostUnregister(addr uintptr) error {
	err := d.do(func() error {
		if r := d.drv.call(d.drv.fn.memHostUnregister, addr); r != Success {
			return d.drv.errorf(r, "cuMemHostUnregister(%#x on %s)", addr, d)
		}
		return nil
	})
	if err == nil {
		d.drv.live.HostRegs.Add(-1)
	}
	return err
}

// PointerOrdinal returns the ordinal of the device that owns p
// (cuPointerGetAttribute DEVICE_ORDINAL).
func (d *Device) PointerOrdinal(p DevicePtr) (int, error) {
	const attrDeviceOrdinal = 9 // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
	var ord int32
	err := d.do(func() error {
		if r := d.drv.call(d.drv.fn.pointerGetAttrib, uintptr(unsafe.Pointer(&ord)), attrDeviceOrdinal, uintptr(p)); r != Success {
			return d.drv.errorf(r, "cuPointerGetAttribute(DEVICE_ORDINAL, %#x)", uint64(p))
		}
		return nil
	})
	return int(ord), err
}
