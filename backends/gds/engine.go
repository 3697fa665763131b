// engine.go adapts this package to the engine's cuFile contract
// (engine.GDS), loaded on the engine's first Probe.
//
// Invariants:
//   - Nothing is loaded before Probe; its verdict is cached.
//   - cuFile calls run with CUDA device 0's primary context current
//     (through the bind func the CUDA backend supplies): cuFile finds a
//     buffer's device from its unified address, and one context serves
//     the single-GPU machines this is qualified on.

package gds

import (
	"sync"
	"sync/atomic"

	"github.com/orbitefs/orbitefs/engine"
)

// Backend is the engine's view of cuFile.
type Backend struct {
	bind   func(dev int, fn func() error) error
	nvfs   func() bool // whether the nvidia-fs module is loaded, read once
	once   sync.Once
	probed atomic.Bool // set once Probe's verdict (drv, err) is written
	drv    *Driver
	err    error
}

var _ engine.GDS = (*Backend)(nil)

// NewBackend returns an unloaded backend; bind runs fn with device dev's
// CUDA context current (cuda.Backend.Bind).
func NewBackend(bind func(dev int, fn func() error) error) *Backend {
	return &Backend{bind: bind, nvfs: sync.OnceValue(nvfsLoaded)}
}

// Probe loads libcufile and opens the driver. Errors match
// engine.ErrUnavailable.
func (b *Backend) Probe() error {
	b.once.Do(func() {
		d, err := Open(Options{Binder: BindFunc(func(fn func() error) error { return b.bind(0, fn) })})
		if err != nil {
			b.err = unavailable{err}
			return
		}
		b.drv = d
	})
	b.probed.Store(true)
	return b.err
}

// Close drops this process's reference to the driver.
func (b *Backend) Close() error {
	if b.drv == nil {
		return nil
	}
	return b.drv.Close()
}

// Mode is the driver's compatibility policy ("" before Probe).
func (b *Backend) Mode() string {
	if b.drv == nil {
		return ""
	}
	return string(b.drv.Mode())
}

// DMA reports whether cuFile moves bytes by DMA (Driver.DMA). It never
// loads cuFile: before Probe it says whether DMA is possible at all (the
// nvidia-fs module is loaded).
func (b *Backend) DMA() bool {
	if !b.probed.Load() {
		return b.nvfs()
	}
	return b.drv != nil && b.drv.DMA()
}

// OpenFile registers an O_DIRECT fd.
func (b *Backend) OpenFile(fd int) (engine.GDSFile, error) {
	if err := b.Probe(); err != nil {
		return nil, err
	}
	h, err := b.drv.RegisterFile(fd)
	if err != nil {
		return nil, err
	}
	return file{h}, nil
}

// RegisterBuffer registers device memory with cuFile.
func (b *Backend) RegisterBuffer(dev int, ptr, n uint64) error {
	if err := b.Probe(); err != nil {
		return err
	}
	return b.drv.RegisterBuffer(uintptr(ptr), int64(n))
}

// DeregisterBuffer undoes RegisterBuffer.
func (b *Backend) DeregisterBuffer(dev int, ptr uint64) error {
	if b.drv == nil {
		return nil
	}
	return b.drv.DeregisterBuffer(uintptr(ptr))
}

type file struct{ h *Handle }

func (f file) Read(dev int, ptr, n, off uint64) (int, error) {
	return f.h.Read(uintptr(ptr), int(n), int64(off), 0)
}

func (f file) Write(dev int, ptr, n, off uint64) (int, error) {
	return f.h.Write(uintptr(ptr), int(n), int64(off), 0)
}

func (f file) Close() error { return f.h.Close() }

// unavailable keeps cuFile's own text and matches engine.ErrUnavailable.
type unavailable struct{ err error }

func (u unavailable) Error() string        { return u.err.Error() }
func (u unavailable) Unwrap() error        { return u.err }
func (u unavailable) Is(target error) bool { return target == engine.ErrUnavailable }
