// memory.go owns memory locations and the GPU-backed registrations:
// page-locked ("pinned") host memory and CUDA device memory, allocated or
// imported from another process's IPC handle.
//
// Invariants:
//   - A region is host memory (m != nil, bytes addressable by the CPU and
//     by io_uring) or device memory (dev != nil, reached only through the
//     GPU backend); never both.
//   - Pinned regions are ordinary host regions that are also page-locked:
//     every host path (io_uring, fixed buffers, data file) treats them as
//     cpu memory, and device copies from them run at DMA speed.
//   - The GPU backend is probed once, on the first registration or
//     transfer that needs it; an engine that never sees GPU memory never
//     loads libcuda.

package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/internal/hostmem"
)

// Location says where a region's bytes live: "cpu", "pinned" or
// "cuda:N".
type Location string

const (
	// LocationCPU is pageable host memory.
	LocationCPU Location = "cpu"
	// LocationPinned is page-locked host memory, visible to every CUDA
	// context.
	LocationPinned Location = "pinned"
)

// LocationCUDA names device memory on CUDA device dev.
func LocationCUDA(dev int) Location { return Location("cuda:" + strconv.Itoa(dev)) }

// ParseLocation checks a location's spelling.
func ParseLocation(s string) (Location, error) {
	switch s {
	case string(LocationCPU), string(LocationPinned):
		return Location(s), nil
	}
	if n, ok := strings.CutPrefix(s, "cuda:"); ok {
		d, err := strconv.Atoi(n)
		if err == nil && d >= 0 && strconv.Itoa(d) == n {
			return Location(s), nil
		}
	}
	return "", fmt.Errorf("location %q: want cpu, pinned or cuda:N", s)
}

// Device returns the CUDA device of a cuda:N location.
func (l Location) Device() (int, bool) {
	n, ok := strings.CutPrefix(string(l), "cuda:")
	if !ok {
		return 0, false
	}
	d, err := strconv.Atoi(n)
	return d, err == nil
}

// gpuState is the engine's GPU backend and what it built lazily.
type gpuState struct {
	b         GPU
	probeOnce sync.Once
	probeErr  error

	stagingOnce sync.Once
	staging     atomic.Pointer[stagingPool]
	stagingErr  error

	streamMu sync.Mutex
	streams  map[int][]Stream // idle copy streams by device

	copy copyStage // pinned chunks of device copies outside the lanes (copystage.go)
}

// gpuReady probes the GPU backend once. Errors are KindUnavailable and
// say why (no backend in this build, no libcuda, no device).
func (e *Engine) gpuReady(op, name string) error {
	if e.gpu.b == nil {
		return errorf(KindUnavailable, op, name, "cuda: no GPU backend in this build")
	}
	e.gpu.probeOnce.Do(func() { e.gpu.probeErr = e.gpu.b.Probe() })
	if e.gpu.probeErr != nil {
		return wrap(KindUnavailable, op, name, e.gpu.probeErr)
	}
	return nil
}

// checkDevice verifies that device dev exists.
func (e *Engine) checkDevice(op, name string, dev int) error {
	if err := e.gpuReady(op, name); err != nil {
		return err
	}
	n, err := e.gpu.b.Devices()
	if err != nil {
		return wrap(KindUnavailable, op, name, err)
	}
	if dev < 0 || dev >= n {
		return errorf(KindUnavailable, op, name, "no CUDA device %d (this machine has %d)", dev, n)
	}
	return nil
}

// RegisterPinned allocates bytes of zeroed, page-aligned host memory and
// page-locks it for every CUDA context.
func (e *Engine) RegisterPinned(bytes uint64) (*Region, error) {
	if err := e.checkOpen("register"); err != nil {
		return nil, err
	}
	if bytes == 0 {
		return nil, errorf(KindInvalid, "register", "memory", "bytes is 0")
	}
	if err := e.gpuReady("register", "memory"); err != nil {
		return nil, err
	}
	if err := e.reserveRegistered(bytes); err != nil {
		return nil, err
	}
	m, err := hostmem.Anonymous(bytes)
	if err != nil {
		e.releaseRegistered(bytes)
		return nil, wrap(KindExhausted, "register", "memory", err)
	}
	unpin, err := e.gpu.b.Pin(uintptr(m.Addr()), m.Len())
	if err != nil {
		m.Close()
		e.releaseRegistered(bytes)
		return nil, wrap(KindExhausted, "register", "memory", fmt.Errorf("pinning %d bytes: %w", bytes, err))
	}
	return e.addRegion(&Region{e: e, loc: LocationPinned, m: m, anon: true, unpin: unpin})
}

// checkDeviceRegistration is what every device registration checks
// first: an open engine, a nonzero size, a usable device dev.
func (e *Engine) checkDeviceRegistration(dev int, bytes uint64) error {
	if err := e.checkOpen("register"); err != nil {
		return err
	}
	if bytes == 0 {
		return errorf(KindInvalid, "register", "memory", "bytes is 0")
	}
	return e.checkDevice("register", "memory", dev)
}

// RegisterDevice allocates bytes of device memory on CUDA device dev.
func (e *Engine) RegisterDevice(dev int, bytes uint64) (*Region, error) {
	if err := e.checkDeviceRegistration(dev, bytes); err != nil {
		return nil, err
	}
	d, err := e.gpu.b.Alloc(dev, bytes)
	if err != nil {
		return nil, wrap(KindExhausted, "register", "memory", err)
	}
	return e.addRegion(&Region{e: e, loc: LocationCUDA(dev), dev: d})
}

// ImportDevice maps another process's device allocation from its CUDA IPC
// handle. bytes may be less than the exporter's allocation; the exporter
// must keep it alive until Unregister.
func (e *Engine) ImportDevice(dev int, handle []byte, bytes uint64) (*Region, error) {
	if err := e.checkDeviceRegistration(dev, bytes); err != nil {
		return nil, err
	}
	d, err := e.gpu.b.ImportIPC(dev, handle)
	if err != nil {
		return nil, wrap(KindInvalid, "register", "memory", fmt.Errorf("cuda_ipc_handle: %w", err))
	}
	if d.Len() != 0 && d.Len() < bytes {
		d.Free()
		return nil, errorf(KindRange, "register", "memory", "the imported allocation has %d bytes, fewer than %d", d.Len(), bytes)
	}
	return e.addRegion(&Region{e: e, loc: LocationCUDA(dev), dev: sized{d, bytes}})
}

// sized narrows an imported mapping to the registered length.
type sized struct {
	DeviceMemory
	n uint64
}

func (s sized) Len() uint64 { return s.n }

// deviceCopy serves ReadAt/WriteAt on device memory through the pinned
// copy staging (copystage.go): a write returns only after the copy
// event of its last byte completed. The copies are bounded as a
// submission without a timeout would be: default_timeout plus
// quiesce_grace. On an error wrapping ErrUncertain the bytes past the
// count returned may have changed, and the region is never freed (the
// GPU may still write it; it is marked so before the range is unpinned,
// so an Unregister that finds no pin finds the mark). REQUIRES: the
// range pinned.
func (r *Region) deviceCopy(op string, p []byte, off uint64, write bool) (int, error) {
	cut := time.Now().Add(r.e.cfg.DefaultTimeout.D() + r.e.cfg.QuiesceGrace.D())
	n, err := r.e.stagedDeviceCopy(context.Background(), r.dev, off, p, write, cut)
	if errors.Is(err, ErrUncertain) {
		r.mu.Lock()
		r.mu.uncertain = true
		r.mu.Unlock()
	}
	if err != nil {
		return int(n), &Error{Op: op, Name: r.name(), Kind: kindOr(err, KindIO),
			Err: fmt.Errorf("bytes [%d, %d) at offset %d: %w", off, off+uint64(len(p)), off+n, err)}
	}
	return len(p), nil
}

// kindOr is err's kind, or k when err carries none.
func kindOr(err error, k Kind) Kind {
	if kk := KindOf(err); kk != KindUnknown {
		return kk
	}
	return k
}
