// spytransport_test.go wraps a real file transport and records, for every
// op the engine prepares, whether its fd was opened O_DIRECT (read back
// from the kernel with fcntl, not from engine state) and how many iovecs
// it carries. Tests use it to check which path an op took.

package engine_test

import (
	"sync"

	"github.com/orbitefs/orbitefs/engine"
	"golang.org/x/sys/unix"
)

type spyOp struct {
	direct bool
	iovs   int
	offset uint64
}

type spyTransport struct {
	engine.FileTransport
	mu  sync.Mutex
	ops []spyOp
	// onPrepare, when set, runs before each op reaches the ring: after
	// admission, before I/O (a test truncates the file there).
	onPrepare func(*engine.FileOp)
}

func (s *spyTransport) Acquire() (engine.Queue, error) {
	q, err := s.FileTransport.Acquire()
	if q == nil {
		return q, err
	}
	return &spyQueue{Queue: q, s: s}, err
}

func (s *spyTransport) TryAcquire() (engine.Queue, error) {
	q, err := s.FileTransport.TryAcquire()
	if q == nil {
		return q, err
	}
	return &spyQueue{Queue: q, s: s}, err
}

// take returns and forgets the ops recorded so far.
func (s *spyTransport) take() []spyOp {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.ops
	s.ops = nil
	return out
}

type spyQueue struct {
	engine.Queue
	s *spyTransport
}

func (q *spyQueue) Prepare(op *engine.FileOp) error {
	fl, err := unix.FcntlInt(uintptr(op.File.FD), unix.F_GETFL, 0)
	if err != nil {
		panic(err)
	}
	q.s.mu.Lock()
	q.s.ops = append(q.s.ops, spyOp{direct: fl&unix.O_DIRECT != 0, iovs: len(op.Iov), offset: op.Offset})
	hook := q.s.onPrepare
	q.s.mu.Unlock()
	if hook != nil {
		hook(op)
	}
	return q.Queue.Prepare(op)
}

// heldWrite holds the worker inside Prepare of the first WRITE op it
// writes to the ring: that group is dispatched (in flight, its op
// chosen) but its bytes have not reached the kernel. A test submits
// what must fence against it, checks, then calls release. The Submit
// that queued the write runs on its own goroutine (a group on the
// caller's fast path would block its caller here).
type heldWrite struct {
	held, release chan struct{}
	once          sync.Once
}

func holdFirstWrite(s *spyTransport) *heldWrite {
	h := &heldWrite{held: make(chan struct{}), release: make(chan struct{})}
	s.onPrepare = func(op *engine.FileOp) {
		if !op.Write {
			return
		}
		first := false
		h.once.Do(func() { first = true })
		if first {
			close(h.held)
			<-h.release
		}
	}
	return h
}
