//go:build linux && !noiouring

// ring.go owns one io_uring instance and its fixed buffer and file tables.
//
// Invariants:
//   - inflight + prepared never exceeds depth, so the CQ (2*depth entries)
//     cannot overflow.
//   - The SQ side (Prepare, Submit) and the CQ side (Reap) may run on two
//     goroutines at once, as liburing allows: one producer, one consumer.
//     inflight is the only state they share, so it is atomic.
//   - A table slot maps to at most one key; the kernel keeps the old
//     registration alive for ops already in flight when a slot is replaced.

package iouring

import (
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/pawelgaczynski/giouring"
)

const (
	bufSlots  = 64
	fileSlots = 256
	// maxFixedBuffer is the kernel's limit on one registered buffer.
	maxFixedBuffer = 1 << 30
)

type ring struct {
	t        *Transport
	r        *giouring.Ring
	depth    int
	prepared int
	inflight atomic.Int64
	sqpoll   bool

	bufs  table
	files table
	cqes  []*giouring.CompletionQueueEvent

	fmu         sync.Mutex // guards the forget mailbox
	forgetBufs  []uint64
	forgetFiles []uint64
}

// table is a sparse registration table with round-robin replacement.
type table struct {
	enabled bool
	slot    map[uint64]int
	key     []uint64
	next    int
	failed  map[uint64]bool
}

func newTable(n int, enabled bool) table {
	return table{enabled: enabled, slot: map[uint64]int{}, key: make([]uint64, n), failed: map[uint64]bool{}}
}

func newRing(t *Transport) (*ring, error) {
	depth := t.cfg.QueueDepth
	gr := giouring.NewRing()
	var flags uint32
	if t.cfg.SQPoll {
		flags |= giouring.SetupSQPoll
	}
	if err := gr.QueueInit(uint32(depth), flags); err != nil {
		return nil, os.NewSyscallError("io_uring_setup", err)
	}
	r := &ring{t: t, r: gr, depth: depth, sqpoll: t.cfg.SQPoll,
		bufs: newTable(bufSlots, t.cfg.FixedBuffers), files: newTable(fileSlots, t.cfg.RegisterFiles),
		// giouring's PeekBatchCQE writes len(cqes) pointers on every call,
		// ready or not: a short window keeps each peek cheap.
		cqes: make([]*giouring.CompletionQueueEvent, 32)}
	if r.bufs.enabled {
		if _, err := gr.RegisterBuffersSparse(bufSlots); err != nil {
			r.bufs.enabled = false
		}
	}
	if r.files.enabled {
		if _, err := gr.RegisterFilesSparse(fileSlots); err != nil {
			r.files.enabled = false
		}
	}
	return r, nil
}

func (r *ring) close() { r.r.QueueExit() }

// Space implements engine.Queue.
func (r *ring) Space() int { return r.depth - int(r.inflight.Load()) - r.prepared }

// Prepare implements engine.Queue.
func (r *ring) Prepare(op *engine.FileOp) error {
	if r.Space() <= 0 {
		return syscall.EAGAIN
	}
	sqe := r.r.GetSQE()
	if sqe == nil {
		return syscall.EAGAIN
	}
	fd, fixedFile := op.File.FD, false
	if slot, ok := r.fileSlot(op.File); ok {
		fd, fixedFile = slot, true
	}
	n := uint64(0)
	for _, v := range op.Iov {
		n += v.Len
	}
	switch {
	case len(op.Iov) == 1:
		v := op.Iov[0]
		if slot, ok := r.bufSlot(op.Buf); ok {
			if op.Write {
				sqe.PrepareWriteFixed(fd, uintptr(v.Base), uint32(v.Len), op.Offset, slot)
			} else {
				sqe.PrepareReadFixed(fd, uintptr(v.Base), uint32(v.Len), op.Offset, slot)
			}
			r.t.st.fixedOps.Add(1)
		} else if op.Write {
			sqe.PrepareWrite(fd, uintptr(v.Base), uint32(v.Len), op.Offset)
		} else {
			sqe.PrepareRead(fd, uintptr(v.Base), uint32(v.Len), op.Offset)
		}
	default:
		// engine.IOVec has struct iovec's layout; the engine keeps the
		// slice alive until this op's completion.
		iov := uintptr(unsafe.Pointer(unsafe.SliceData(op.Iov)))
		if op.Write {
			sqe.PrepareWritev(fd, iov, uint32(len(op.Iov)), op.Offset)
		} else {
			sqe.PrepareReadv(fd, iov, uint32(len(op.Iov)), op.Offset)
		}
		r.t.st.vectored.Add(1)
	}
	if fixedFile {
		sqe.Flags |= giouring.SqeFixedFile
		r.t.st.fixedFileOps.Add(1)
	}
	if op.Offload {
		sqe.Flags |= giouring.SqeAsync
		r.t.st.offloaded.Add(1)
	}
	sqe.SetData64(op.Token)
	if op.Write {
		r.t.st.bytesWritten.Add(n)
	} else {
		r.t.st.bytesRead.Add(n)
	}
	r.prepared++
	return nil
}

// bufSlot returns the fixed-buffer index for b, registering it if needed.
func (r *ring) bufSlot(b engine.Buffer) (int, bool) {
	tb := &r.bufs
	if !tb.enabled || b.Key == 0 || b.Len > maxFixedBuffer || tb.failed[b.Key] {
		return 0, false
	}
	if s, ok := tb.slot[b.Key]; ok {
		return s, true
	}
	s := tb.next
	tb.next = (tb.next + 1) % len(tb.key)
	raw := [1]engine.IOVec{{Base: b.Base, Len: b.Len}}
	var noTags uint64
	_, err := r.r.RegisterBuffersUpdateTag(uint32(s), asIovecs(raw[:]), &noTags, 1)
	runtime.KeepAlive(&raw)
	if err != nil {
		tb.failed[b.Key] = true // e.g. RLIMIT_MEMLOCK: plain I/O still works
		return 0, false
	}
	if old := tb.key[s]; old != 0 {
		delete(tb.slot, old)
	}
	tb.key[s] = b.Key
	tb.slot[b.Key] = s
	r.t.st.bufRegs.Add(1)
	return s, true
}

// fileSlot returns the fixed-file index for f, registering it if needed.
func (r *ring) fileSlot(f engine.FileRef) (int, bool) {
	tb := &r.files
	if !tb.enabled || f.Key == 0 || tb.failed[f.Key] {
		return 0, false
	}
	if s, ok := tb.slot[f.Key]; ok {
		return s, true
	}
	s := tb.next
	tb.next = (tb.next + 1) % len(tb.key)
	if _, err := r.r.RegisterFilesUpdate(uint(s), []int{f.FD}); err != nil {
		tb.failed[f.Key] = true
		return 0, false
	}
	if old := tb.key[s]; old != 0 {
		delete(tb.slot, old)
	}
	tb.key[s] = f.Key
	tb.slot[f.Key] = s
	r.t.st.fileRegs.Add(1)
	return s, true
}

// asIovecs views engine.IOVecs (struct iovec's layout: two 64-bit words)
// as syscall.Iovecs without converting an integer to a pointer.
func asIovecs(v []engine.IOVec) []syscall.Iovec {
	return unsafe.Slice((*syscall.Iovec)(unsafe.Pointer(unsafe.SliceData(v))), len(v))
}

// Submit implements engine.Queue.
func (r *ring) Submit() (int, error) {
	if r.prepared == 0 {
		return 0, nil
	}
	got, err := r.r.Submit()
	r.t.st.enters.Add(1)
	n := int(got)
	if r.sqpoll && err == nil {
		// With SQPOLL, Submit reports the entries the kernel thread has
		// not consumed yet (counting earlier ones again); every prepared
		// entry has been handed over once the tail is published.
		n = r.prepared
	}
	n = min(n, r.prepared)
	r.prepared -= n
	r.inflight.Add(int64(n))
	r.t.st.submitted.Add(uint64(n))
	if err != nil {
		return n, os.NewSyscallError("io_uring_enter", err)
	}
	return n, nil
}

// Reap implements engine.Queue.
func (r *ring) Reap(wait time.Duration, fn func(engine.Completion)) (int, error) {
	got := r.drain(fn)
	if got > 0 || wait <= 0 || r.inflight.Load() == 0 {
		return got, nil
	}
	ts := syscall.NsecToTimespec(int64(wait))
	_, err := r.r.WaitCQETimeout(&ts)
	got = r.drain(fn)
	if err != nil && err != syscall.ETIME && err != syscall.EINTR && err != syscall.EAGAIN && got == 0 {
		return 0, os.NewSyscallError("io_uring_enter", err)
	}
	return got, nil
}

// liburingTimeout marks the internal timeout CQE of kernels without
// EXT_ARG; it is not one of ours.
const liburingTimeout = ^uint64(0)

func (r *ring) drain(fn func(engine.Completion)) int {
	total := 0
	for {
		n := r.r.PeekBatchCQE(r.cqes)
		if n == 0 {
			return total
		}
		for _, c := range r.cqes[:n] {
			if c.UserData == liburingTimeout {
				continue
			}
			r.inflight.Add(-1)
			total++
			fn(engine.Completion{Token: c.UserData, Res: c.Res})
		}
		r.r.CQAdvance(n)
		r.t.st.completed.Add(uint64(n))
	}
}

// Release implements engine.Queue.
func (r *ring) Release() { r.t.release(r) }

// Abandon implements engine.Queue.
func (r *ring) Abandon() { r.t.abandon(r) }

func (r *ring) queueForget(key uint64, buf bool) {
	r.fmu.Lock()
	if buf {
		r.forgetBufs = append(r.forgetBufs, key)
	} else {
		r.forgetFiles = append(r.forgetFiles, key)
	}
	r.fmu.Unlock()
}

// applyForgets drops forgotten registrations. Only called while no
// worker holds the ring.
func (r *ring) applyForgets() {
	r.fmu.Lock()
	bufs, files := r.forgetBufs, r.forgetFiles
	r.forgetBufs, r.forgetFiles = nil, nil
	r.fmu.Unlock()
	var noTags uint64
	for _, k := range bufs {
		delete(r.bufs.failed, k)
		if s, ok := r.bufs.slot[k]; ok {
			// An empty iovec clears the slot and unpins the pages.
			r.r.RegisterBuffersUpdateTag(uint32(s), []syscall.Iovec{{}}, &noTags, 1)
			delete(r.bufs.slot, k)
			r.bufs.key[s] = 0
		}
	}
	for _, k := range files {
		delete(r.files.failed, k)
		if s, ok := r.files.slot[k]; ok {
			r.r.RegisterFilesUpdate(uint(s), []int{-1})
			delete(r.files.slot, k)
			r.files.key[s] = 0
		}
	}
}
