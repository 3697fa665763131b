// reftransport_test.go is a test-only file transport in the style of
// pebble's errorfs: it executes ops with plain pread/pwrite (the
// reference for equivalence checks) and can stall ops until released,
// fail the Nth op with an errno, or shorten the Nth op.

package engine_test

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

type refTransport struct {
	mu       sync.Mutex
	stall    chan struct{} // while non-nil and open, ops wait
	failNth  int64         // 1-based op number to fail; 0: none
	errno    unix.Errno
	shortNth int64 // 1-based op number to shorten by half
	lose     bool  // stalled ops never complete (missing CQE)
	// loseAfter > 0: once that many ops have executed, every further op
	// is dropped without a completion (a CQE that never comes).
	loseAfter int64
	limit     int          // queues that may be held at once; 0: no limit
	held      int          // guarded by mu
	ops       atomic.Int64 // ops executed
	prepared  atomic.Int64 // ops handed to Prepare (counted even while stalled)
	acquired  atomic.Int64
	released  atomic.Int64
	abandons  atomic.Int64
}

func (t *refTransport) Kind() engine.TransportKind { return engine.TransportIOUring }
func (t *refTransport) Probe() error               { return nil }
func (t *refTransport) Close() error               { return nil }
func (t *refTransport) ForgetBuffer(uint64)        {}
func (t *refTransport) ForgetFile(uint64)          {}
func (t *refTransport) FileStats() engine.FileStats {
	return engine.FileStats{Available: true, Submitted: uint64(t.ops.Load())}
}

// TryAcquire honours limit, as the io_uring pool honours max_rings.
func (t *refTransport) TryAcquire() (engine.Queue, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.limit > 0 && t.held >= t.limit {
		return nil, nil
	}
	t.held++
	t.acquired.Add(1)
	return &refQueue{t: t}, nil
}

// Acquire waits while limit queues are held.
func (t *refTransport) Acquire() (engine.Queue, error) {
	for {
		if q, _ := t.TryAcquire(); q != nil {
			return q, nil
		}
		time.Sleep(time.Millisecond)
	}
}

func (t *refTransport) put() {
	t.mu.Lock()
	t.held--
	t.mu.Unlock()
}

// release lets stalled ops run.
// stallAgain makes new ops wait until the next release.
func (t *refTransport) stallAgain() {
	t.mu.Lock()
	t.stall = make(chan struct{})
	t.mu.Unlock()
}

func (t *refTransport) release() {
	t.mu.Lock()
	if t.stall != nil {
		close(t.stall)
		t.stall = nil
	}
	t.mu.Unlock()
}

// refQueue follows the Queue contract: its SQ side (Space, Prepare,
// Submit) and CQ side (Reap) may run on two goroutines at once.
type refQueue struct {
	t        *refTransport
	mu       sync.Mutex
	prepared []engine.FileOp
	running  []engine.FileOp
}

func (q *refQueue) Space() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return 64 - len(q.prepared) - len(q.running)
}

func (q *refQueue) Prepare(op *engine.FileOp) error {
	q.t.prepared.Add(1)
	q.mu.Lock()
	defer q.mu.Unlock()
	q.prepared = append(q.prepared, *op)
	return nil
}

func (q *refQueue) Submit() (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := len(q.prepared)
	q.running = append(q.running, q.prepared...)
	q.prepared = q.prepared[:0]
	return n, nil
}

func (q *refQueue) Reap(wait time.Duration, fn func(engine.Completion)) (int, error) {
	q.t.mu.Lock()
	stall := q.t.stall
	q.t.mu.Unlock()
	if stall != nil {
		select {
		case <-stall:
		case <-time.After(wait):
			return 0, nil
		}
	}
	if q.t.lose {
		if wait > 0 {
			time.Sleep(min(wait, 10*time.Millisecond))
		}
		return 0, nil
	}
	q.mu.Lock()
	run := q.running
	q.running = nil
	q.mu.Unlock()
	for _, op := range run {
		if q.t.loseAfter > 0 && q.t.ops.Load() >= q.t.loseAfter {
			continue
		}
		fn(engine.Completion{Token: op.Token, Res: q.t.exec(op)})
	}
	return len(run), nil
}

func (t *refTransport) exec(op engine.FileOp) int32 {
	nth := t.ops.Add(1)
	if nth == t.failNth {
		return -int32(t.errno)
	}
	var done int64
	off := int64(op.Offset)
	for i, v := range op.Iov {
		want := v.Len
		if nth == t.shortNth && i == len(op.Iov)-1 {
			want /= 2
		}
		nr := unix.SYS_PREAD64
		if op.Write {
			nr = unix.SYS_PWRITE64
		}
		r, _, errno := unix.Syscall6(uintptr(nr), uintptr(op.File.FD), uintptr(v.Base), uintptr(want), uintptr(off), 0, 0)
		if errno != 0 {
			if done > 0 {
				return int32(done)
			}
			return -int32(errno)
		}
		done += int64(r)
		off += int64(r)
		if uint64(r) < v.Len {
			break
		}
	}
	return int32(done)
}

func (q *refQueue) Release() { q.t.released.Add(1); q.t.put() }
func (q *refQueue) Abandon() { q.t.abandons.Add(1); q.t.put() }
