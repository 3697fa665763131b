// batch.go owns cuMemcpyBatchAsync: many pointer-to-pointer copies on a
// stream in one driver call. The driver serializes calls across threads
// (doc.go), so the staging lanes enqueue a reap pass's copies with one
// call instead of one cuMemcpyHtoDAsync per unit.
//
// The ABI changed: CUDA 12.8 declared
//
//	cuMemcpyBatchAsync(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream)
//
// and CUDA 13.0 dropped failIdx (its cuda.h maps the name to
// cuMemcpyBatchAsync_v2). The export a plain dlsym returns is the old
// ABI, so the entry point is resolved with cuGetProcAddress at a stated
// CUDA version instead: 13000 on a 13.x (or later) driver, which returns
// the signature without failIdx; 12080 on a 12.8 or 12.9 driver, which
// returns the one with it. A driver older than 12.8, or without
// cuGetProcAddress_v2, has no batch: Batched reports false and callers
// copy one by one.
//
// Invariants:
//   - memcpyBatch is called only with the argument list of
//     memcpyBatchABI; nothing else selects the signature.
//   - Every copy in one batch gets the same attributes: source access in
//     stream order (the host memory is the caller's pinned staging, read
//     after the call returns), no location hints (they apply to managed
//     memory only).

package cuda

import (
	"fmt"
	"unsafe"
)

const (
	getProcAddressLegacyStream = 1 // CU_GET_PROC_ADDRESS_LEGACY_STREAM
	memcpySrcAccessOrderStream = 1 // CU_MEMCPY_SRC_ACCESS_ORDER_STREAM
	memcpyFlagPreferOverlap    = 1 // CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE
)

// memcpyAttributes is CUmemcpyAttributes (24 bytes): srcAccessOrder,
// srcLocHint and dstLocHint (CUmemLocation: type, id), flags.
type memcpyAttributes struct {
	srcAccessOrder     int32
	srcLocType, srcLoc int32
	dstLocType, dstLoc int32
	flags              uint32
}

// batchABI picks the CUDA version whose cuMemcpyBatchAsync signature is
// asked for on a driver of version v; 0 when it has none.
func batchABI(v int) int {
	switch {
	case v >= 13000:
		return 13000
	case v >= 12080:
		return 12080
	}
	return 0
}

// resolveBatch looks up cuMemcpyBatchAsync at the ABI of the loaded
// driver; it leaves memcpyBatch zero when the driver has none.
func (d *Driver) resolveBatch() {
	f := d.fn
	abi := batchABI(d.version)
	if abi == 0 || f.getProcAddress == 0 {
		return
	}
	name := []byte("cuMemcpyBatchAsync\x00")
	var pfn uintptr
	var status int32
	r := d.call(f.getProcAddress, uintptr(unsafe.Pointer(&name[0])), uintptr(unsafe.Pointer(&pfn)),
		uintptr(abi), getProcAddressLegacyStream, uintptr(unsafe.Pointer(&status)))
	if r != Success || status != 0 || pfn == 0 {
		d.log.Info("cuda: no cuMemcpyBatchAsync; copies go one by one", "driver", d.version, "result", int(r), "status", status)
		return
	}
	f.memcpyBatch, f.memcpyBatchABI = pfn, abi
}

// Batched reports whether the driver has cuMemcpyBatchAsync.
func (d *Driver) Batched() bool { return d.fn.memcpyBatch != 0 }

// BatchABI is the CUDA version whose cuMemcpyBatchAsync signature is in
// use (13000 or 12080), or 0 without one.
func (d *Driver) BatchABI() int { return d.fn.memcpyBatchABI }

// CopyBatchAsync enqueues the copies dsts[i] <- srcs[i] of sizes[i]
// bytes on s with one call. Host memory must be pinned; the copies may
// run in any order among themselves. On error none, some or all of them
// may have been enqueued.
func (s *Stream) CopyBatchAsync(dsts, srcs []uint64, sizes []uintptr) error {
	n := len(dsts)
	if len(srcs) != n || len(sizes) != n {
		return fmt.Errorf("%w: CopyBatchAsync of %d destinations, %d sources, %d sizes", ErrInvalid, n, len(srcs), len(sizes))
	}
	if n == 0 {
		return nil
	}
	if err := s.check("CopyBatchAsync"); err != nil {
		return err
	}
	d := s.dev
	f := d.drv.fn
	if f.memcpyBatch == 0 {
		return fmt.Errorf("%w: cuMemcpyBatchAsync: driver %d has none", ErrInvalid, d.drv.version)
	}
	if err := d.bind(); err != nil {
		return err
	}
	defer d.unbind()
	attr := memcpyAttributes{srcAccessOrder: memcpySrcAccessOrderStream, flags: memcpyFlagPreferOverlap}
	var attrIdx uintptr // attr applies from copy 0 on
	var r Result
	failIdx := ^uintptr(0)
	switch f.memcpyBatchABI {
	case 13000:
		r = d.drv.call(f.memcpyBatch, uintptr(unsafe.Pointer(&dsts[0])), uintptr(unsafe.Pointer(&srcs[0])),
			uintptr(unsafe.Pointer(&sizes[0])), uintptr(n), uintptr(unsafe.Pointer(&attr)),
			uintptr(unsafe.Pointer(&attrIdx)), 1, s.h)
	case 12080:
		r = d.drv.call(f.memcpyBatch, uintptr(unsafe.Pointer(&dsts[0])), uintptr(unsafe.Pointer(&srcs[0])),
			uintptr(unsafe.Pointer(&sizes[0])), uintptr(n), uintptr(unsafe.Pointer(&attr)),
			uintptr(unsafe.Pointer(&attrIdx)), 1, uintptr(unsafe.Pointer(&failIdx)), s.h)
	default:
		return fmt.Errorf("%w: cuMemcpyBatchAsync at unknown ABI %d", ErrInvalid, f.memcpyBatchABI)
	}
	if r != Success {
		if failIdx != ^uintptr(0) && failIdx < uintptr(n) {
			i := failIdx
			return d.drv.errorf(r, "cuMemcpyBatchAsync(%d copies on %s; copy %d: %#x <- %#x, %d bytes)", n, d, i, dsts[i], srcs[i], sizes[i])
		}
		return d.drv.errorf(r, "cuMemcpyBatchAsync(%d copies on %s)", n, d)
	}
	return nil
}
