// gpu.go owns the contract between the engine and its GPU backends: the
// CUDA driver (device memory, pinning, streams, events) and cuFile (GDS).
// The engine knows them only through these interfaces; backends/cuda and
// backends/gds implement them and cmd/orbitefs plugs them in through New.
//
// Rules a backend may rely on, and must keep:
//   - Every method is safe to call from any goroutine: a backend that
//     needs a per-thread context (CUDA) binds it itself.
//   - Nothing is loaded before Probe: an engine that never sees GPU memory
//     never opens libcuda or libcufile.
//   - Device addresses live in the same 64-bit virtual address space as
//     host memory (CUDA's unified addressing), so the engine's address
//     index holds both without overlap.

package engine

import "errors"

// ErrUncertain is wrapped by a GPU backend error when the call's outcome
// is unknown (it may or may not have taken effect): the engine then keeps
// whatever the call might still reference, never frees or retries it.
var ErrUncertain = errors.New("outcome uncertain")

// Backend is anything New accepts: a transport or a GPU backend.
type Backend interface {
	// Probe reports availability: nil when usable, an error wrapping
	// ErrUnavailable when absent. Called lazily and cached by the engine.
	Probe() error
	// Close releases every resource; called once by Engine.Close.
	Close() error
}

// GPU is the CUDA driver as the engine uses it.
type GPU interface {
	Backend
	// Devices is the number of CUDA devices.
	Devices() (int, error)
	// Alloc allocates n bytes of device memory on device dev.
	Alloc(dev int, n uint64) (DeviceMemory, error)
	// ImportIPC maps another process's allocation from its IPC handle.
	ImportIPC(dev int, handle []byte) (DeviceMemory, error)
	// Pin page-locks host memory [addr, addr+n) for every context
	// (portable), so device copies from and to it run at DMA speed. The
	// returned func undoes it and must run before the memory is unmapped.
	Pin(addr uintptr, n uint64) (unpin func() error, err error)
	// NewStream creates a copy stream on device dev.
	NewStream(dev int) (Stream, error)
}

// ReadOnlyPinner is a GPU that can also page-lock memory mapped
// read-only, for device reads only (a tmpfs file opened for reading,
// mappedexec.go). Without it such files stay on staging.
type ReadOnlyPinner interface {
	PinReadOnly(addr uintptr, n uint64) (unpin func() error, err error)
}

// DeviceMemory is one device allocation (or an imported IPC mapping).
type DeviceMemory interface {
	Device() int
	Ptr() uint64
	Len() uint64
	// CopyOut copies len(p) bytes at off to host memory p (synchronous).
	CopyOut(p []byte, off uint64) error
	// CopyIn copies p to off (synchronous).
	CopyIn(off uint64, p []byte) error
	// Free releases the allocation (or closes the IPC mapping).
	Free() error
}

// Stream is an ordered queue of asynchronous copies on one device.
// One goroutine uses a stream at a time.
type Stream interface {
	// HtoD enqueues a copy of n bytes from host src to device dst.
	HtoD(dst uint64, src uintptr, n uint64) error
	// DtoH enqueues a copy of n bytes from device src to host dst.
	DtoH(dst uintptr, src uint64, n uint64) error
	// Record returns an event that completes after every copy enqueued
	// so far.
	Record() (Event, error)
	// Sync waits for every enqueued copy.
	Sync() error
	Close() error
}

// Copy is one copy between pinned host memory and device memory, by
// address (CUDA's unified addressing tells the direction).
type Copy struct {
	Dst, Src uint64
	N        uint64
}

// CopyBatcher is a Stream that enqueues many copies with one driver
// call (cuMemcpyBatchAsync): the driver serializes its calls across
// threads, so one call per reap pass instead of one per unit is what
// lets many lanes feed the copy engine. A backend offers it only where
// the driver has it; the engine falls back to HtoD/DtoH otherwise.
type CopyBatcher interface {
	Stream
	// CopyBatch enqueues cs on the stream, behind what was enqueued
	// before. The copies may run in any order among themselves, so no
	// two of them may overlap. On error none, some or all of them may
	// have been enqueued: the caller may enqueue each again (it rewrites
	// the same bytes) or wait for the stream before reusing the memory.
	CopyBatch(cs []Copy) error
}

// Event marks a point in a stream.
type Event interface {
	// Done reports completion without waiting; an error means the copies
	// before it failed or their outcome is unknown.
	Done() (bool, error)
	// Wait blocks until the event completes.
	Wait() error
	Close() error
}

// GDS is cuFile as the engine uses it.
type GDS interface {
	Backend
	// Mode is the driver's compatibility policy: "native",
	// "compat-permitted", "compat-forced" or "disabled"; "" before Probe.
	Mode() string
	// DMA reports whether cuFile moves bytes by DMA between storage and
	// device memory (nvidia-fs loaded, compatibility not forced); false:
	// every call is cuFile's POSIX fallback through its own bounce
	// buffers, and an unspecified transport takes the staging instead.
	// It never loads cuFile: before Probe it reports whether DMA is
	// possible at all.
	DMA() bool
	// OpenFile registers an O_DIRECT fd with cuFile.
	OpenFile(fd int) (GDSFile, error)
	// RegisterBuffer registers device memory for cuFile I/O. A failure
	// leaves the memory usable by other paths; one wrapping ErrUncertain
	// (cuFile may hold the registration) makes the engine keep the
	// allocation for good.
	RegisterBuffer(dev int, ptr, n uint64) error
	// DeregisterBuffer undoes RegisterBuffer; on failure the engine keeps
	// the allocation for good and never retries.
	DeregisterBuffer(dev int, ptr uint64) error
}

// GDSFile is one cuFile handle.
type GDSFile interface {
	// Read reads n bytes at file offset off into device memory ptr on
	// device dev; it returns the bytes read (short at EOF).
	Read(dev int, ptr, n, off uint64) (int, error)
	// Write writes n bytes from device memory ptr to file offset off.
	Write(dev int, ptr, n, off uint64) (int, error)
	// Close destroys the handle; on failure the engine keeps the fd it
	// was registered on open for good and never retries.
	Close() error
}
