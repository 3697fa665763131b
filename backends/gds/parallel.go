// parallel.go owns ParallelBatch: the Batcher that runs each slice as one
// synchronous cuFileRead/Write on a pool of worker goroutines, each of
// which binds the device's context once (Binder.Bind around its whole
// loop) and so stays on one locked thread. It serves where the native
// batch API is missing or refuses the driver's mode.
//
// Invariants:
//   - Every submitted slice yields exactly one Result, including slices
//     canceled before a worker took them.
//   - inflight counts submitted slices whose Result Poll has not yet
//     returned; Destroy refuses while it is non-zero.
//   - Workers hold the slice's Handle shared (Handle.mu) for the call, so
//     a Handle.Close waits for them.

package gds

import (
	"fmt"
	"sync"
	"time"
)

// ParallelBatch runs slices on workers goroutines.
type ParallelBatch struct {
	d       *Driver
	depth   int
	jobs    chan IO
	results chan Result
	wg      sync.WaitGroup

	mu        sync.Mutex
	inflight  int
	destroyed bool
	ready     []Result // received from results, not yet returned
}

// NewParallelBatch starts workers goroutines (1..depth) for up to depth
// slices in flight.
func (d *Driver) NewParallelBatch(depth, workers int) (*ParallelBatch, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	if depth <= 0 || workers <= 0 || workers > depth {
		return nil, fmt.Errorf("%w: parallel batch depth %d workers %d", ErrInvalid, depth, workers)
	}
	b := &ParallelBatch{d: d, depth: depth, jobs: make(chan IO, depth), results: make(chan Result, depth)}
	errs := make(chan error, workers)
	for range workers {
		b.wg.Add(1)
		go b.worker(errs)
	}
	// A worker whose Bind fails reports once; fail the whole batch then.
	var first error
	for range workers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first != nil {
		close(b.jobs)
		b.wg.Wait()
		return nil, fmt.Errorf("parallel batch: bind worker: %w", first)
	}
	return b, nil
}

// worker binds the context once and runs slices until jobs is closed.
func (b *ParallelBatch) worker(started chan<- error) {
	defer b.wg.Done()
	reported := false
	err := b.d.bind(func() error {
		started <- nil
		reported = true
		for io := range b.jobs {
			b.results <- b.run(io)
		}
		return nil
	})
	if !reported {
		started <- err
	}
}

// run performs one slice on the bound thread.
func (b *ParallelBatch) run(io IO) Result {
	r := Result{Cookie: io.Cookie}
	h := io.Handle
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.closed {
		r.Err = fmt.Errorf("%w: handle for fd %d", ErrClosed, h.fd)
		return r
	}
	op := int32(opRead)
	if io.Op == Write {
		op = opWrite
	}
	r.N, r.Err = h.ioBound(op, io.DevPtr, io.Size, io.FileOff, io.DevOff)
	return r
}

// Depth is the most slices in flight.
func (b *ParallelBatch) Depth() int { return b.depth }

// InFlight is the slices without a returned receipt.
func (b *ParallelBatch) InFlight() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inflight
}

// Submit queues ios for the workers.
func (b *ParallelBatch) Submit(ios []IO) error {
	if err := b.d.check(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return fmt.Errorf("%w: batch", ErrClosed)
	}
	if err := validSlices(ios, b.depth-b.inflight); err != nil {
		return err
	}
	b.inflight += len(ios)
	for _, io := range ios {
		b.jobs <- io // never blocks: capacity depth >= inflight
	}
	return nil
}

// Poll waits until min receipts are ready or timeout passes (timeout <= 0:
// no limit). Calls on one batch are serialized.
func (b *ParallelBatch) Poll(min int, timeout time.Duration) ([]Result, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return nil, fmt.Errorf("%w: batch", ErrClosed)
	}
	if min > b.inflight {
		min = b.inflight
	}
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	out := b.ready
	b.ready = nil
	for len(out) < min {
		select {
		case r := <-b.results:
			out = append(out, r)
		case <-timer:
			b.inflight -= len(out)
			return out, nil
		}
	}
	// Take whatever else is ready without waiting.
	for {
		select {
		case r := <-b.results:
			out = append(out, r)
			continue
		default:
		}
		break
	}
	b.inflight -= len(out)
	return out, nil
}

// Cancel drains slices no worker has started; they complete with
// ErrCanceled. Slices already running finish normally (a synchronous
// cuFile call cannot be interrupted).
func (b *ParallelBatch) Cancel() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return fmt.Errorf("%w: batch", ErrClosed)
	}
	for {
		select {
		case io := <-b.jobs:
			b.ready = append(b.ready, Result{Cookie: io.Cookie, Err: fmt.Errorf("slice %d: %w", io.Cookie, ErrCanceled)})
			continue
		default:
		}
		return nil
	}
}

// Destroy stops the workers; it refuses while slices are in flight. A
// second Destroy does nothing.
func (b *ParallelBatch) Destroy() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.destroyed {
		return nil
	}
	if b.inflight > 0 {
		return fmt.Errorf("%w: %d slices", ErrBusy, b.inflight)
	}
	b.destroyed = true
	close(b.jobs)
	b.wg.Wait()
	return nil
}
