// driver.go owns the process-wide cuFile driver: loading the library once,
// the one cuFileDriverOpen shared by every Driver (reference counted), the
// PID guard after fork, and the properties read at open.
//
// Invariants:
//   - process is the package's only mutable global, because cuFile's driver
//     is itself one per process; everything in it is guarded by its mu.
//   - refs counts open Drivers of the current PID; the driver is open in
//     the library exactly while refs > 0.
//   - A Driver (and every Handle or Batch made from it) records the PID
//     and generation it was opened in; after fork, the child's first Open
//     starts a new generation and never closes or reuses the parent's.

package gds

import (
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Options configure Open.
type Options struct {
	// Binder runs cuFile calls with the device's CUDA context current
	// (required).
	Binder ContextBinder
	// Logger receives one line per driver open and close (optional).
	Logger *slog.Logger
}

// Mode is the driver's compatibility policy.
type Mode string

const (
	ModeNative          Mode = "native"           // compat off, nvidia-fs loaded
	ModeCompatPermitted Mode = "compat-permitted" // compat allowed when native cannot
	ModeCompatForced    Mode = "compat-forced"    // every I/O through the POSIX fallback
	ModeDisabled        Mode = "disabled"         // compat off and no nvidia-fs
)

// Properties are what the driver reported at open.
type Properties struct {
	Library            string        // path the library was loaded from
	Mode               Mode          // compatibility policy
	ModeSource         string        // API the policy was read with
	NvfsLoaded         bool          // the nvidia-fs kernel module is present
	NvfsVersion        string        // "major.minor" reported by the driver
	MaxDirectIOSize    int64         // bytes per direct I/O (max_direct_io_size)
	PerBufferCacheSize int64         // bytes of bounce cache per buffer
	MaxDeviceCacheSize int64         // bytes
	MaxPinnedMemSize   int64         // bytes
	PollThreshold      int64         // bytes
	MaxBatchIOSize     int           // entries per batch the driver accepts
	MaxBatchIOTimeout  time.Duration // batch I/O timeout
	BatchAPI           bool          // the batch symbols resolved
}

// processState is the one cuFile driver of this process.
type processState struct {
	mu     sync.Mutex
	pid    int
	gen    uint64
	lib    *library
	refs   int
	props  Properties
	load   func() (*library, error) // loadLibrary; replaced in tests
	getpid func() int               // os.Getpid; replaced in tests
}

var process = &processState{load: loadLibrary, getpid: os.Getpid}

// Driver is one reference to the process's open cuFile driver.
type Driver struct {
	st     *processState
	lib    *library
	binder ContextBinder
	log    *slog.Logger
	pid    int
	gen    uint64
	props  Properties

	mu     sync.Mutex
	closed bool
}

// Open loads libcufile.so.0 if needed and opens (or shares) the driver.
// Every failure to reach a usable driver wraps ErrUnavailable and names
// the cause.
func Open(opts Options) (*Driver, error) {
	return process.open(opts)
}

func (s *processState) open(opts Options) (*Driver, error) {
	if opts.Binder == nil {
		return nil, fmt.Errorf("%w: Options.Binder is nil", ErrInvalid)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if pid := s.getpid(); pid != s.pid {
		if s.refs > 0 {
			// Forked child: the parent's driver state is not ours to use
			// or close. Start over.
			log.Warn("gds: process forked, parent driver state dropped", "parent_pid", s.pid, "pid", pid)
		}
		s.pid, s.refs = pid, 0
		s.gen++
	}
	if s.lib == nil {
		lib, err := s.load()
		if err != nil {
			return nil, err
		}
		s.lib = lib
	}
	if s.refs == 0 {
		props, err := openDriver(s.lib, opts.Binder)
		if err != nil {
			return nil, err
		}
		s.props = props
		log.Info("gds: driver open", "library", props.Library, "mode", props.Mode, "max_direct_io_size", props.MaxDirectIOSize)
	}
	s.refs++
	return &Driver{st: s, lib: s.lib, binder: opts.Binder, log: log, pid: s.pid, gen: s.gen, props: s.props}, nil
}

// openDriver runs cuFileDriverOpen and reads the properties; it closes the
// driver again if the properties cannot be read.
func openDriver(lib *library, b ContextBinder) (Properties, error) {
	var props Properties
	err := b.Bind(func() error {
		if err := statusError("cuFileDriverOpen", lib.driverOpen(), ErrUnavailable); err != nil {
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		var raw drvProps
		if err := statusError("cuFileDriverGetProperties", lib.getProperties(&raw), ErrUnavailable); err != nil {
			lib.driverClose()
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		props = propsFrom(lib, &raw)
		return nil
	})
	return props, err
}

func propsFrom(lib *library, raw *drvProps) Properties {
	p := Properties{
		Library:            lib.path,
		NvfsLoaded:         nvfsLoaded(),
		NvfsVersion:        fmt.Sprintf("%d.%d", raw.nvfsMajor, raw.nvfsMinor),
		MaxDirectIOSize:    int64(raw.maxDirectKB) << 10,
		PerBufferCacheSize: int64(raw.perBufferCacheKB) << 10,
		MaxDeviceCacheSize: int64(raw.maxDeviceCacheKB) << 10,
		MaxPinnedMemSize:   int64(raw.maxPinnedMemKB) << 10,
		PollThreshold:      int64(raw.pollThreshKB) << 10,
		MaxBatchIOSize:     int(raw.maxBatchIOSize),
		MaxBatchIOTimeout:  time.Duration(raw.maxBatchIOTimeoutMs) * time.Millisecond,
		BatchAPI:           lib.hasBatch,
	}
	allow := raw.dcontrolFlg&(1<<controlAllowCompatBit) != 0
	force := false
	p.ModeSource = "cuFileDriverGetProperties(dcontrolflags)"
	if lib.hasParamBoolAPI {
		var a, f byte
		ea := statusError("cuFileGetParameterBool", lib.getParamBool(paramAllowCompat, &a), nil)
		ef := statusError("cuFileGetParameterBool", lib.getParamBool(paramForceCompat, &f), nil)
		if ea == nil && ef == nil {
			allow, force = a != 0, f != 0
			p.ModeSource = "cuFileGetParameterBool(allow_compat_mode, force_compat_mode)"
		}
	}
	p.Mode = modeOf(allow, force, p.NvfsLoaded)
	return p
}

// modeOf names the policy: force wins, then allow, then whether native
// I/O is possible at all.
func modeOf(allow, force, nvfs bool) Mode {
	switch {
	case force:
		return ModeCompatForced
	case allow:
		return ModeCompatPermitted
	case nvfs:
		return ModeNative
	}
	return ModeDisabled
}

func nvfsLoaded() bool {
	_, err := os.Stat("/sys/module/nvidia_fs")
	return err == nil
}

// Mode reports the compatibility policy read at open.
func (d *Driver) Mode() Mode { return d.props.Mode }

// DMA reports whether cuFile can move bytes by DMA between storage and
// device memory: nvidia-fs is loaded and compatibility is not forced.
// When false, every call is cuFile's POSIX fallback, a copy through its
// own host bounce buffers.
func (d *Driver) DMA() bool {
	return d.props.NvfsLoaded && d.props.Mode != ModeCompatForced // disabled implies no nvidia-fs (modeOf)
}

// Properties reports what the driver reported at open.
func (d *Driver) Properties() Properties { return d.props }

// check reports ErrClosed or ErrForked when d may not be used.
func (d *Driver) check() error {
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return fmt.Errorf("%w: driver", ErrClosed)
	}
	if pid := d.st.getpid(); pid != d.pid {
		return fmt.Errorf("%w: driver opened in pid %d, used in pid %d", ErrForked, d.pid, pid)
	}
	return nil
}

// bind runs fn with the context current, after check.
func (d *Driver) bind(fn func() error) error {
	if err := d.check(); err != nil {
		return err
	}
	return d.binder.Bind(fn)
}

// Close drops this reference; the last one in the process closes the
// driver. A second Close, or a Close in a forked child, does nothing.
func (d *Driver) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	d.mu.Unlock()
	s := d.st
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.getpid() != d.pid || s.gen != d.gen {
		return nil // the parent's reference: not ours to close
	}
	s.refs--
	if s.refs > 0 {
		return nil
	}
	err := d.binder.Bind(func() error {
		return statusError("cuFileDriverClose_v2", d.lib.driverClose(), ErrUnavailable)
	})
	d.log.Info("gds: driver closed", "err", err)
	return err
}
