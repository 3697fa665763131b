// driver.go owns Driver: one loaded libcuda with cuInit done, the device
// table, and the counters of live driver objects (tests assert they drop
// to zero).
//
// Repeated Open: each call returns its own Driver, but dlopen hands every
// caller the same library handle (the loader refcounts it) and cuInit is
// idempotent, so a second Open costs a few microseconds and shares the
// process's primary contexts. One Open per process is the intended use.

package cuda

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"
)

// Options configure Open.
type Options struct {
	// Library is the full path of libcuda to load. Empty: the
	// ORBITEFS_LIBCUDA environment variable, then the loader path, then
	// the usual directories.
	Library string
	// Logger receives load and device events; nil means slog.Default().
	Logger *slog.Logger
	// NoBatch makes the engine's streams copy one call per copy even
	// where the driver has cuMemcpyBatchAsync (batch.go): the per-copy
	// path, for comparison and as a way around a driver fault.
	NoBatch bool
}

// Driver is a loaded, initialised CUDA driver. Safe for concurrent use.
type Driver struct {
	fn      *funcs
	path    string
	version int
	log     *slog.Logger

	keys atomic.Uint64 // source of unique chunk keys
	live Live

	mu      sync.Mutex
	devices map[int]*Device // retained devices by ordinal; REQUIRES mu
}

// Live counts driver objects that are currently allocated through this
// Driver. Every field returns to zero when callers free what they took.
type Live struct {
	DeviceAllocs, HostAllocs, HostRegs, Streams, Events, IPCOpens atomic.Int64
}

// Open loads libcuda and runs cuInit(0). Failure to load or initialise
// returns an error matching ErrUnavailable that names the library and
// where it was looked for.
func Open(opts Options) (*Driver, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	override := opts.Library
	if override == "" {
		override = os.Getenv(EnvLibrary)
	}
	_, fn, path, err := load(override)
	if err != nil {
		return nil, err
	}
	d := &Driver{fn: fn, path: path, log: log, devices: map[int]*Device{}}
	if r := d.call(fn.init, 0); r != Success {
		return nil, fmt.Errorf("%w: %s loaded from %s: %w", ErrUnavailable, LibraryName, path, d.errorf(r, "cuInit(0)"))
	}
	var v int32
	if r := d.call(fn.driverGetVersion, uintptr(unsafe.Pointer(&v))); r != Success {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, d.errorf(r, "cuDriverGetVersion"))
	}
	d.version = int(v)
	d.resolveBatch()
	log.Info("cuda driver loaded", "library", path, "version", d.version, "memcpy_batch_abi", fn.memcpyBatchABI)
	return d, nil
}

// call invokes a driver function and returns its CUresult. The result is
// an int in eax; the upper half of rax is undefined, hence the truncation.
//
//go:uintptrescapes
func (d *Driver) call(fn uintptr, args ...uintptr) Result {
	r, _, _ := purego.SyscallN(fn, args...)
	return Result(uint32(r))
}

// errorf builds the *Error for a failed call, asking the driver for the
// result's name. The op text is formatted only here, off the hot path.
func (d *Driver) errorf(r Result, format string, args ...any) error {
	e := &Error{Op: fmt.Sprintf(format, args...), Code: r}
	var name *byte
	if d.call(d.fn.getErrorName, uintptr(r), uintptr(unsafe.Pointer(&name))) == Success && name != nil {
		e.Name = cString(name)
	}
	return e
}

// cString copies a NUL-terminated C string.
func cString(p *byte) string {
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(p), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(p, n))
}

// Path is the file the driver was loaded from.
func (d *Driver) Path() string { return d.path }

// Version is cuDriverGetVersion's value (e.g. 13000 for 13.0).
func (d *Driver) Version() int { return d.version }

// Live returns the counters of live objects.
func (d *Driver) Live() *Live { return &d.live }

// DeviceCount is the number of CUDA devices.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if r := d.call(d.fn.deviceGetCount, uintptr(unsafe.Pointer(&n))); r != Success {
		return 0, d.errorf(r, "cuDeviceGetCount")
	}
	return int(n), nil
}

// Device returns device ordinal, retaining its primary context on first
// use. Every call for the same ordinal returns the same *Device until it
// is closed. A missing ordinal gives an error matching ErrNoDevice.
func (d *Driver) Device(ordinal int) (*Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dev, ok := d.devices[ordinal]; ok {
		return dev, nil
	}
	count, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= count {
		return nil, fmt.Errorf("%w: cuda:%d requested, %d device(s) present", ErrNoDevice, ordinal, count)
	}
	var h int32
	if r := d.call(d.fn.deviceGet, uintptr(unsafe.Pointer(&h)), uintptr(ordinal)); r != Success {
		return nil, d.errorf(r, "cuDeviceGet(%d)", ordinal)
	}
	var name [256]byte
	if r := d.call(d.fn.deviceGetName, uintptr(unsafe.Pointer(&name[0])), uintptr(len(name)-1), uintptr(h)); r != Success {
		return nil, d.errorf(r, "cuDeviceGetName(%d)", ordinal)
	}
	var ctx uintptr
	if r := d.call(d.fn.primaryCtxRetain, uintptr(unsafe.Pointer(&ctx)), uintptr(h)); r != Success {
		return nil, d.errorf(r, "cuDevicePrimaryCtxRetain(cuda:%d)", ordinal)
	}
	dev := &Device{drv: d, ordinal: ordinal, handle: h, ctx: ctx, name: cString(&name[0])}
	d.devices[ordinal] = dev
	d.log.Info("cuda device opened", "ordinal", ordinal, "name", dev.name)
	return dev, nil
}

// forget drops a closed device from the table.
func (d *Driver) forget(dev *Device) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.devices[dev.ordinal] == dev {
		delete(d.devices, dev.ordinal)
	}
}
