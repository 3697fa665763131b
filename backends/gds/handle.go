// handle.go owns cuFile file registrations and synchronous I/O on them.
//
// Invariants:
//   - A Handle owns one cuFileHandleRegister result; the fd stays the
//     caller's and must stay open until Close returns.
//   - Reads and writes may run concurrently; Close waits for them (mu is
//     held shared by each call, exclusively by Close) and deregisters once.

package gds

import (
	"fmt"
	"sync"
	"syscall"
)

// Handle is one cuFile registration of an O_DIRECT fd.
type Handle struct {
	d  *Driver
	fd int
	fh uintptr

	mu     sync.RWMutex
	closed bool
}

// RegisterFile registers fd (opened with O_DIRECT, on a file system with a
// block device). Refusals wrap ErrNotDirect or ErrIneligible; when cuFile
// refuses and the udev entry for the file's device is missing, the error
// names that path.
func (d *Driver) RegisterFile(fd int) (*Handle, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if err := checkEligible(fd); err != nil {
		return nil, err
	}
	return d.registerRaw(fd)
}

// registerRaw calls cuFileHandleRegister without the local checks (tests
// use it to record what cuFile itself answers).
func (d *Driver) registerRaw(fd int) (*Handle, error) {
	var fh uintptr
	err := d.bind(func() error {
		desc := cuFileDescr{typ: handleTypeOpaqueFD, fd: int32(fd)}
		return statusError("cuFileHandleRegister", d.lib.handleRegister(&fh, &desc), ErrIneligible)
	})
	if err != nil {
		if p, ok := udevEntry(fd); !ok && p != "" {
			return nil, fmt.Errorf("register fd %d: %w (udev entry %s missing: cuFile reads block device properties from it)", fd, err, p)
		}
		return nil, fmt.Errorf("register fd %d: %w", fd, err)
	}
	return &Handle{d: d, fd: fd, fh: fh}, nil
}

// Fd is the registered descriptor.
func (h *Handle) Fd() int { return h.fd }

// Close deregisters the handle; a second Close does nothing.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	return h.d.bind(func() error {
		h.d.lib.handleDereg(h.fh)
		return nil
	})
}

// Read reads size bytes at fileOff into devPtr+devOff. It returns the
// bytes read (short at end of file).
func (h *Handle) Read(devPtr uintptr, size int, fileOff, devOff int64) (int, error) {
	return h.io(opRead, devPtr, size, fileOff, devOff)
}

// Write writes size bytes from devPtr+devOff at fileOff.
func (h *Handle) Write(devPtr uintptr, size int, fileOff, devOff int64) (int, error) {
	return h.io(opWrite, devPtr, size, fileOff, devOff)
}

func (h *Handle) io(op int32, devPtr uintptr, size int, fileOff, devOff int64) (int, error) {
	if err := validIO(devPtr, size, fileOff, devOff); err != nil {
		return 0, err
	}
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		return 0, fmt.Errorf("%w: handle for fd %d", ErrClosed, h.fd)
	}
	var n int
	err := h.d.bind(func() error {
		var err error
		n, err = h.ioBound(op, devPtr, size, fileOff, devOff)
		return err
	})
	return n, err
}

// ioBound is one cuFileRead/Write; the caller holds h.mu shared and runs
// on a bound, locked thread (errno is read on that thread).
func (h *Handle) ioBound(op int32, devPtr uintptr, size int, fileOff, devOff int64) (int, error) {
	fn, name := h.d.lib.read, "cuFileRead"
	if op == opWrite {
		fn, name = h.d.lib.write, "cuFileWrite"
	}
	ret := fn(h.fh, devPtr, uint64(size), fileOff, devOff)
	if ret < 0 {
		errno := syscall.Errno(h.d.lib.lastErrno())
		return 0, fmt.Errorf("fd %d, %d bytes at file offset %d: %w", h.fd, size, fileOff, ioError(name, ret, errno))
	}
	return int(ret), nil
}

func validIO(devPtr uintptr, size int, fileOff, devOff int64) error {
	switch {
	case devPtr == 0:
		return fmt.Errorf("%w: device pointer is 0", ErrInvalid)
	case size <= 0:
		return fmt.Errorf("%w: size %d", ErrInvalid, size)
	case fileOff < 0:
		return fmt.Errorf("%w: file offset %d", ErrInvalid, fileOff)
	case devOff < 0:
		return fmt.Errorf("%w: device offset %d", ErrInvalid, devOff)
	}
	return nil
}
