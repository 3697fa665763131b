// batch.go owns the Batcher interface and the native cuFile batch
// (cuFileBatchIOSetUp/Submit/GetStatus/Cancel/Destroy).
//
// Invariants:
//   - At most Depth slices are in flight; Submit refuses more (ErrInvalid)
//     before calling cuFile, so a refused Submit changes nothing.
//   - inflight falls only on a terminal receipt (complete, failed,
//     canceled, invalid); Destroy refuses while it is non-zero, because
//     only terminal receipts authorize releasing the memory and handles a
//     slice names.
//   - Each slice is at most MaxSlice bytes.
//   - Calls on one batch are serialized (mu): a Cancel waits for a Poll in
//     progress, so a caller that may cancel polls with short timeouts.

package gds

import (
	"fmt"
	"sync"
	"time"
)

// MaxSlice is the largest request one batch entry carries (16 MiB, the
// default max_direct_io_size); use Split for larger requests.
const MaxSlice = 16 << 20

// Op is a slice's direction.
type Op uint8

const (
	Read  Op = iota // file -> memory
	Write           // memory -> file
)

func (o Op) String() string {
	if o == Write {
		return "write"
	}
	return "read"
}

// IO is one slice of a batch.
type IO struct {
	Op      Op
	Handle  *Handle
	DevPtr  uintptr // base of the registered (or plain) device allocation
	DevOff  int64
	FileOff int64
	Size    int    // at most MaxSlice
	Cookie  uint64 // the caller's identity for this slice, echoed in Result
}

// Result is one terminal receipt.
type Result struct {
	Cookie uint64
	N      int   // bytes done (valid when Err is nil)
	Err    error // wraps ErrIO, ErrCanceled or an *Error
}

// Batcher runs slices asynchronously: Batch (native cuFile) and
// ParallelBatch (synchronous calls on N bound goroutines) implement it.
type Batcher interface {
	// Submit queues slices; it refuses (changing nothing) if they would
	// exceed Depth in flight or a slice is invalid.
	Submit(ios []IO) error
	// Poll waits until at least min receipts are ready or timeout passes
	// (timeout <= 0: no limit), and returns the receipts ready (possibly
	// fewer than min on timeout).
	Poll(min int, timeout time.Duration) ([]Result, error)
	// Cancel asks for every in-flight slice to be canceled; their receipts
	// still arrive through Poll.
	Cancel() error
	// Destroy releases the batch; ErrBusy while slices are in flight.
	Destroy() error
	// Depth is the most slices in flight.
	Depth() int
	// InFlight is the slices submitted without a receipt yet.
	InFlight() int
}

// Batch is one native cuFile batch handle.
type Batch struct {
	d     *Driver
	depth int

	mu        sync.Mutex // serializes every call on the handle
	id        uintptr
	inflight  int
	destroyed bool
	params    []ioParams
	events    []ioEvent
}

// NewBatch sets up a native batch of depth entries (1..the driver's
// max_batch_io_size).
func (d *Driver) NewBatch(depth int) (*Batch, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if !d.lib.hasBatch {
		return nil, fmt.Errorf("%w: %s has no batch API (cuFileBatchIOSetUp)", ErrUnavailable, d.lib.path)
	}
	if max := d.props.MaxBatchIOSize; depth <= 0 || (max > 0 && depth > max) {
		return nil, fmt.Errorf("%w: batch depth %d (driver max %d)", ErrInvalid, depth, d.props.MaxBatchIOSize)
	}
	b := &Batch{d: d, depth: depth, params: make([]ioParams, depth), events: make([]ioEvent, depth)}
	err := d.bind(func() error {
		return statusError("cuFileBatchIOSetUp", d.lib.batchSetUp(&b.id, uint32(depth)), ErrUnavailable)
	})
	if err != nil {
		return nil, fmt.Errorf("batch of depth %d: %w", depth, err)
	}
	return b, nil
}

// Depth is the most slices in flight.
func (b *Batch) Depth() int { return b.depth }

// InFlight is the slices without a receipt.
func (b *Batch) InFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight
}

func validSlices(ios []IO, room int) error {
	if len(ios) == 0 {
		return fmt.Errorf("%w: no slices", ErrInvalid)
	}
	if len(ios) > room {
		return fmt.Errorf("%w: %d slices with room for %d", ErrInvalid, len(ios), room)
	}
	for i, io := range ios {
		if io.Handle == nil {
			return fmt.Errorf("%w: slice %d has no handle", ErrInvalid, i)
		}
		if io.Size > MaxSlice {
			return fmt.Errorf("%w: slice %d is %d bytes, over %d", ErrInvalid, i, io.Size, MaxSlice)
		}
		if err := validIO(io.DevPtr, io.Size, io.FileOff, io.DevOff); err != nil {
			return fmt.Errorf("slice %d: %w", i, err)
		}
	}
	return nil
}

// Submit queues ios with cuFileBatchIOSubmit.
func (b *Batch) Submit(ios []IO) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return fmt.Errorf("%w: batch", ErrClosed)
	}
	if err := validSlices(ios, b.depth-b.inflight); err != nil {
		return err
	}
	p := b.params[:len(ios)]
	for i, io := range ios {
		op := int32(opRead)
		if io.Op == Write {
			op = opWrite
		}
		p[i] = ioParams{mode: batchMode, devPtr: io.DevPtr, fileOffset: io.FileOff, devOffset: io.DevOff,
			size: uint64(io.Size), fh: io.Handle.fh, opcode: op, cookie: uintptr(io.Cookie)}
	}
	err := b.d.bind(func() error {
		return statusError("cuFileBatchIOSubmit", b.d.lib.batchSubmit(b.id, uint32(len(p)), &p[0], 0), ErrIO)
	})
	if err != nil {
		// The submit may have queued some entries; they are not counted,
		// so the caller must treat the batch as uncertain (Cancel, Poll).
		return fmt.Errorf("submit %d slices: %w", len(ios), err)
	}
	b.inflight += len(ios)
	return nil
}

// Poll waits for receipts with cuFileBatchIOGetStatus.
func (b *Batch) Poll(min int, timeout time.Duration) ([]Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return nil, fmt.Errorf("%w: batch", ErrClosed)
	}
	if min > b.inflight {
		min = b.inflight
	}
	if min < 0 {
		min = 0
	}
	nr := uint32(b.depth)
	if timeout <= 0 {
		timeout = time.Hour // no limit: cuFile needs a timespec
	}
	ts := timespec{sec: int64(timeout / time.Second), nsec: int64(timeout % time.Second)}
	err := b.d.bind(func() error {
		return statusError("cuFileBatchIOGetStatus", b.d.lib.batchGetStatus(b.id, uint32(min), &nr, &b.events[0], &ts), ErrIO)
	})
	if err != nil {
		return nil, fmt.Errorf("poll: %w", err)
	}
	var out []Result
	for _, ev := range b.events[:nr] {
		r, terminal := receipt(ev)
		if !terminal {
			continue
		}
		b.inflight--
		out = append(out, r)
	}
	return out, nil
}

// receipt turns one event into a Result; terminal is false for waiting
// and pending entries.
func receipt(ev ioEvent) (Result, bool) {
	r := Result{Cookie: uint64(ev.cookie)}
	switch ev.status {
	case statusComplete:
		if ret := int64(ev.ret); ret < 0 {
			r.Err = fmt.Errorf("slice %d: %w", r.Cookie, ioError("cuFileBatchIOGetStatus", ret, 0))
		} else {
			r.N = int(ret)
		}
	case statusCanceled:
		r.Err = fmt.Errorf("slice %d: %w", r.Cookie, ErrCanceled)
	case statusFailed, statusInvalid, statusTimeout:
		r.Err = fmt.Errorf("%w: slice %d status %#x ret %d", ErrIO, r.Cookie, ev.status, int64(ev.ret))
		if ret := int64(ev.ret); ret < -1 {
			r.Err = fmt.Errorf("slice %d status %#x: %w", r.Cookie, ev.status, ioError("cuFileBatchIOGetStatus", ret, 0))
		}
	default:
		return r, false
	}
	return r, true
}

// Cancel asks cuFile to cancel every in-flight slice.
func (b *Batch) Cancel() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return fmt.Errorf("%w: batch", ErrClosed)
	}
	return b.d.bind(func() error {
		return statusError("cuFileBatchIOCancel", b.d.lib.batchCancel(b.id), ErrIO)
	})
}

// Destroy releases the batch handle; it refuses while slices are in
// flight. A second Destroy does nothing.
func (b *Batch) Destroy() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return nil
	}
	if b.inflight > 0 {
		return fmt.Errorf("%w: %d slices", ErrBusy, b.inflight)
	}
	err := b.d.bind(func() error {
		b.d.lib.batchDestroy(b.id)
		return nil
	})
	if err != nil {
		return err
	}
	b.destroyed = true
	return nil
}
