// engine.go adapts this package to the engine's GPU contract
// (engine.GPU): device memory, page-locking, streams and events by raw
// address, loaded on the engine's first Probe.
//
// Invariants:
//   - Nothing is loaded before Probe; Probe's verdict (library missing,
//     no device) is cached and returned by every later call.
//   - Every method is safe from any goroutine: each driver call binds the
//     device's primary context itself (doc.go).

package cuda

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"github.com/orbitefs/orbitefs/engine"
)

// Backend is the engine's view of the CUDA driver.
type Backend struct {
	opts Options
	once sync.Once
	drv  *Driver
	err  error
}

var _ engine.GPU = (*Backend)(nil)

// NewBackend returns an unloaded backend. ORBITEFS_CUDA_NOBATCH=1 in
// the environment sets Options.NoBatch.
func NewBackend(opts Options) *Backend {
	opts.NoBatch = opts.NoBatch || os.Getenv(EnvNoBatch) == "1"
	return &Backend{opts: opts}
}

// EnvNoBatch, set to 1, makes the engine's streams copy one call per
// copy (Options.NoBatch).
const EnvNoBatch = "ORBITEFS_CUDA_NOBATCH"

// Probe loads libcuda and checks that a device exists. Errors match
// engine.ErrUnavailable and say why.
func (b *Backend) Probe() error {
	b.once.Do(func() {
		d, err := Open(b.opts)
		if err == nil {
			var n int
			if n, err = d.DeviceCount(); err == nil && n == 0 {
				err = errors.New("libcuda loaded but it reports no CUDA device")
			}
		}
		if err != nil {
			b.err = unavailable{err}
			return
		}
		b.drv = d
	})
	return b.err
}

// Close does nothing: devices stay retained for the process (the driver
// is never unloaded, doc.go).
func (b *Backend) Close() error { return nil }

// Driver returns the loaded driver (nil before a successful Probe).
func (b *Backend) Driver() *Driver { return b.drv }

func (b *Backend) device(dev int) (*Device, error) {
	if err := b.Probe(); err != nil {
		return nil, err
	}
	return b.drv.Device(dev)
}

// Devices is the number of CUDA devices.
func (b *Backend) Devices() (int, error) {
	if err := b.Probe(); err != nil {
		return 0, err
	}
	return b.drv.DeviceCount()
}

// Bind runs fn on a locked thread with device dev's context current (the
// cuFile backend's context binder).
func (b *Backend) Bind(dev int, fn func() error) error {
	d, err := b.device(dev)
	if err != nil {
		return err
	}
	return d.do(fn)
}

// Alloc allocates device memory.
func (b *Backend) Alloc(dev int, n uint64) (engine.DeviceMemory, error) {
	d, err := b.device(dev)
	if err != nil {
		return nil, err
	}
	p, err := d.Alloc(int(n))
	if err != nil {
		return nil, err
	}
	return &deviceMemory{d: d, p: p, n: n}, nil
}

// ImportIPC opens another process's allocation.
func (b *Backend) ImportIPC(dev int, handle []byte) (engine.DeviceMemory, error) {
	d, err := b.device(dev)
	if err != nil {
		return nil, err
	}
	var h IPCHandle
	if len(handle) != len(h) {
		return nil, fmt.Errorf("%w: IPC handle of %d bytes, want %d", ErrInvalid, len(handle), len(h))
	}
	copy(h[:], handle)
	p, err := d.OpenIPC(h)
	if err != nil {
		return nil, err
	}
	return &deviceMemory{d: d, p: p, ipc: true}, nil
}

// Pin page-locks host memory for every context.
func (b *Backend) Pin(addr uintptr, n uint64) (func() error, error) {
	d, err := b.device(0)
	if err != nil {
		return nil, err
	}
	if err := d.HostRegister(addr, int(n)); err != nil {
		return nil, err
	}
	return func() error { return d.HostUnregister(addr) }, nil
}

// PinReadOnly page-locks host memory mapped read-only, for device reads
// only (engine.ReadOnlyPinner).
func (b *Backend) PinReadOnly(addr uintptr, n uint64) (func() error, error) {
	d, err := b.device(0)
	if err != nil {
		return nil, err
	}
	if err := d.HostRegisterReadOnly(addr, int(n)); err != nil {
		return nil, err
	}
	return func() error { return d.HostUnregister(addr) }, nil
}

// NewStream creates a non-blocking stream on device dev.
func (b *Backend) NewStream(dev int) (engine.Stream, error) {
	d, err := b.device(dev)
	if err != nil {
		return nil, err
	}
	s, err := d.NewStream(true)
	if err != nil {
		return nil, err
	}
	if d.drv.Batched() && !b.opts.NoBatch {
		return &batchStream{stream: stream{s: s}}, nil
	}
	return &stream{s: s}, nil
}

type deviceMemory struct {
	d   *Device
	p   DevicePtr
	n   uint64 // 0 for an IPC import (its size is the exporter's)
	ipc bool
}

func (m *deviceMemory) Device() int { return m.d.Ordinal() }
func (m *deviceMemory) Ptr() uint64 { return uint64(m.p) }
func (m *deviceMemory) Len() uint64 { return m.n }

func (m *deviceMemory) CopyOut(p []byte, off uint64) error {
	return m.d.CopyDtoH(p, m.p+DevicePtr(off))
}

func (m *deviceMemory) CopyIn(off uint64, p []byte) error {
	return m.d.CopyHtoD(m.p+DevicePtr(off), p)
}

func (m *deviceMemory) Free() error {
	if m.ipc {
		return m.d.CloseIPC(m.p)
	}
	return m.d.Free(m.p)
}

// stream copies by raw address: the engine's staging chunks and pinned
// regions live outside the Go heap.
//
// It keeps the events the engine closed after they completed and records
// with them again: the staging path records an event per stream for
// every reap pass (READ) or fill (WRITE) of a lane, and
// cuEventCreate/cuEventDestroy would be two more driver calls each, which
// the driver serializes across lanes (doc.go). An event closed before it
// was seen complete is destroyed, never reused.
type stream struct {
	s *Stream

	mu   sync.Mutex
	free []*Event // completed, closed by the engine, ready to record again
}

// maxFreeEvents bounds the events a stream keeps: a lane has a few
// staging slots, each with one event in flight.
const maxFreeEvents = 64

func hostSlice(addr uintptr, n uint64) []byte {
	return unsafe.Slice(*(**byte)(unsafe.Pointer(&addr)), n)
}

func (s *stream) HtoD(dst uint64, src uintptr, n uint64) error {
	return s.s.HtoDAsync(DevicePtr(dst), hostSlice(src, n))
}

func (s *stream) DtoH(dst uintptr, src uint64, n uint64) error {
	return s.s.DtoHAsync(hostSlice(dst, n), DevicePtr(src))
}

func (s *stream) Record() (engine.Event, error) {
	var ev *Event
	s.mu.Lock()
	if n := len(s.free); n > 0 {
		ev = s.free[n-1]
		s.free = s.free[:n-1]
	}
	s.mu.Unlock()
	if ev == nil {
		var err error
		if ev, err = s.s.dev.NewEvent(true); err != nil {
			return nil, err
		}
	}
	if err := ev.Record(s.s); err != nil {
		ev.Destroy()
		return nil, err
	}
	return &event{ev: ev, home: s}, nil
}

// batchStream is a stream on a driver with cuMemcpyBatchAsync: the
// engine enqueues a reap pass's copies with one call (batch.go). One
// goroutine uses it at a time (engine.Stream), so the argument arrays
// are reused.
type batchStream struct {
	stream
	dsts, srcs []uint64
	sizes      []uintptr
}

var _ engine.CopyBatcher = (*batchStream)(nil)

func (s *batchStream) CopyBatch(cs []engine.Copy) error {
	s.dsts, s.srcs, s.sizes = s.dsts[:0], s.srcs[:0], s.sizes[:0]
	for _, c := range cs {
		s.dsts = append(s.dsts, c.Dst)
		s.srcs = append(s.srcs, c.Src)
		s.sizes = append(s.sizes, uintptr(c.N))
	}
	return s.s.CopyBatchAsync(s.dsts, s.srcs, s.sizes)
}

// keep takes back a completed event; false when the stream keeps enough.
func (s *stream) keep(ev *Event) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.free) >= maxFreeEvents {
		return false
	}
	s.free = append(s.free, ev)
	return true
}

func (s *stream) Sync() error { return s.s.Sync() }

func (s *stream) Close() error {
	s.mu.Lock()
	free := s.free
	s.free = nil
	s.mu.Unlock()
	var errs []error
	for _, ev := range free {
		errs = append(errs, ev.Destroy())
	}
	errs = append(errs, s.s.Destroy())
	return errors.Join(errs...)
}

// event is one recorded event. home is the stream that may record with
// it again once it completed (nil: a producer's event, destroyed on
// Close).
type event struct {
	ev   *Event
	home *stream
	done bool // a Done or Wait saw it complete
}

func (e *event) Done() (bool, error) {
	d, err := e.ev.Query()
	e.done = d && err == nil
	return d, err
}

func (e *event) Wait() error {
	err := e.ev.Sync()
	e.done = err == nil
	return err
}

func (e *event) Close() error {
	if e.done && e.home != nil && e.home.keep(e.ev) {
		return nil
	}
	return e.ev.Destroy()
}

// unavailable keeps the driver's own text and matches
// engine.ErrUnavailable, so the engine's message says it once.
type unavailable struct{ err error }

func (u unavailable) Error() string        { return u.err.Error() }
func (u unavailable) Unwrap() error        { return u.err }
func (u unavailable) Is(target error) bool { return target == engine.ErrUnavailable }

// EngineEvent lets a producer's event (recorded after the work that
// filled device memory) gate a transfer: engine.Request.Producer.
func EngineEvent(ev *Event) engine.Event { return &event{ev: ev} }
