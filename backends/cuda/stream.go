// stream.go owns Stream and Event: asynchronous copies and the
// completion markers that gate them.
//
// Invariants:
//   - Host memory given to an async copy must be pinned (HostBuffer, a
//     pool Chunk, or HostRegister'd) and must not be reused or freed until
//     an event recorded after the copy reports done (or the stream is
//     synchronized); the package does not track that, the caller's slot
//     ownership does.
//   - Query maps CUDA_ERROR_NOT_READY to (false, nil); every other
//     non-success result is an error.
//   - Destroy is idempotent; Live counters move once.

package cuda

import (
	"fmt"
	"sync/atomic"
	"unsafe"
)

const (
	streamNonBlocking  = 0x1 // CU_STREAM_NON_BLOCKING
	eventDisableTiming = 0x2 // CU_EVENT_DISABLE_TIMING
)

// Stream is a CUDA stream on one device.
type Stream struct {
	dev       *Device
	h         uintptr // CUstream
	destroyed atomic.Bool
}

// NewStream creates a stream. nonBlocking streams do not synchronize with
// the legacy default stream (the synchronous copies).
func (d *Device) NewStream(nonBlocking bool) (*Stream, error) {
	var flags uintptr
	if nonBlocking {
		flags = streamNonBlocking
	}
	var h uintptr
	err := d.do(func() error {
		if r := d.drv.call(d.drv.fn.streamCreate, uintptr(unsafe.Pointer(&h)), flags); r != Success {
			return d.drv.errorf(r, "cuStreamCreate(flags %#x on %s)", flags, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.drv.live.Streams.Add(1)
	return &Stream{dev: d, h: h}, nil
}

func (s *Stream) check(op string) error {
	if s.destroyed.Load() {
		return fmt.Errorf("%w: %s on a destroyed stream of %s", ErrClosed, op, s.dev)
	}
	return nil
}

// HtoDAsync queues a copy of src (pinned host memory) to dst.
func (s *Stream) HtoDAsync(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if err := s.check("HtoDAsync"); err != nil {
		return err
	}
	d := s.dev
	if err := d.bind(); err != nil {
		return err
	}
	defer d.unbind()
	if r := d.drv.call(d.drv.fn.memcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(&src[0])), uintptr(len(src)), s.h); r != Success {
		return d.drv.errorf(r, "cuMemcpyHtoDAsync(%#x <- %d bytes on %s)", uint64(dst), len(src), d)
	}
	return nil
}

// DtoHAsync queues a copy of len(dst) bytes from src into dst (pinned
// host memory).
func (s *Stream) DtoHAsync(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	if err := s.check("DtoHAsync"); err != nil {
		return err
	}
	d := s.dev
	if err := d.bind(); err != nil {
		return err
	}
	defer d.unbind()
	if r := d.drv.call(d.drv.fn.memcpyDtoHAsync, uintptr(unsafe.Pointer(&dst[0])), uintptr(src), uintptr(len(dst)), s.h); r != Success {
		return d.drv.errorf(r, "cuMemcpyDtoHAsync(%d bytes <- %#x on %s)", len(dst), uint64(src), d)
	}
	return nil
}

// WaitEvent makes later work on s wait until ev has completed (a
// producer's readiness event), without blocking the host.
func (s *Stream) WaitEvent(ev *Event) error {
	if err := s.check("WaitEvent"); err != nil {
		return err
	}
	if err := ev.check("WaitEvent"); err != nil {
		return err
	}
	return s.dev.do(func() error {
		if r := s.dev.drv.call(s.dev.drv.fn.streamWaitEvent, s.h, ev.h, 0); r != Success {
			return s.dev.drv.errorf(r, "cuStreamWaitEvent(%s)", s.dev)
		}
		return nil
	})
}

// Sync blocks until all work queued on s has completed.
func (s *Stream) Sync() error {
	if err := s.check("Sync"); err != nil {
		return err
	}
	return s.dev.do(func() error {
		if r := s.dev.drv.call(s.dev.drv.fn.streamSynchronize, s.h); r != Success {
			return s.dev.drv.errorf(r, "cuStreamSynchronize(%s)", s.dev)
		}
		return nil
	})
}

// Destroy releases the stream; queued work still completes.
func (s *Stream) Destroy() error {
	if s.destroyed.Swap(true) {
		return nil
	}
	s.dev.drv.live.Streams.Add(-1)
	return s.dev.do(func() error {
		if r := s.dev.drv.call(s.dev.drv.fn.streamDestroy, s.h); r != Success {
			return s.dev.drv.errorf(r, "cuStreamDestroy(%s)", s.dev)
		}
		return nil
	})
}

// Event marks a point in a stream.
type Event struct {
	dev       *Device
	h         uintptr // CUevent
	destroyed atomic.Bool
}

// NewEvent creates an event; disableTiming makes Record and Query cheaper
// (the staging path never reads timings).
func (d *Device) NewEvent(disableTiming bool) (*Event, error) {
	var flags uintptr
	if disableTiming {
		flags = eventDisableTiming
	}
	var h uintptr
	err := d.do(func() error {
		if r := d.drv.call(d.drv.fn.eventCreate, uintptr(unsafe.Pointer(&h)), flags); r != Success {
			return d.drv.errorf(r, "cuEventCreate(flags %#x on %s)", flags, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	d.drv.live.Events.Add(1)
	return &Event{dev: d, h: h}, nil
}

func (e *Event) check(op string) error {
	if e.destroyed.Load() {
		return fmt.Errorf("%w: %s on a destroyed event of %s", ErrClosed, op, e.dev)
	}
	return nil
}

// Record captures the work queued on s so far (nil s: the legacy
// default stream).
func (e *Event) Record(s *Stream) error {
	if err := e.check("Record"); err != nil {
		return err
	}
	var sh uintptr
	if s != nil {
		if err := s.check("Record"); err != nil {
			return err
		}
		sh = s.h
	}
	d := e.dev
	if err := d.bind(); err != nil {
		return err
	}
	defer d.unbind()
	if r := d.drv.call(d.drv.fn.eventRecord, e.h, sh); r != Success {
		return d.drv.errorf(r, "cuEventRecord(%s)", d)
	}
	return nil
}

// Query reports whether the recorded work has completed, without
// blocking. An event never recorded reports done.
func (e *Event) Query() (bool, error) {
	if err := e.check("Query"); err != nil {
		return false, err
	}
	d := e.dev
	if err := d.bind(); err != nil {
		return false, err
	}
	defer d.unbind()
	switch r := d.drv.call(d.drv.fn.eventQuery, e.h); r {
	case Success:
		return true, nil
	case ErrorNotReady:
		return false, nil
	default:
		return false, d.drv.errorf(r, "cuEventQuery(%s)", d)
	}
}

// Sync blocks until the recorded work has completed.
func (e *Event) Sync() error {
	if err := e.check("Sync"); err != nil {
		return err
	}
	return e.dev.do(func() error {
		if r := e.dev.drv.call(e.dev.drv.fn.eventSynchronize, e.h); r != Success {
			return e.dev.drv.errorf(r, "cuEventSynchronize(%s)", e.dev)
		}
		return nil
	})
}

// Destroy releases the event. A second Destroy does nothing.
func (e *Event) Destroy() error {
	if e.destroyed.Swap(true) {
		return nil
	}
	e.dev.drv.live.Events.Add(-1)
	return e.dev.do(func() error {
		if r := e.dev.drv.call(e.dev.drv.fn.eventDestroy, e.h); r != Success {
			return e.dev.drv.errorf(r, "cuEventDestroy(%s)", e.dev)
		}
		return nil
	})
}
