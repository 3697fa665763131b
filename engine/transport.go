// transport.go owns the contract between the engine and its data-path
// backends. The engine knows backends only through these interfaces;
// cmd/orbitefs (or a test) plugs them in through New.
//
// Ownership rules a backend may rely on:
//   - Every address in a FileOp points at memory the engine keeps mapped
//     and loaned until the op's completion has been delivered (or, for an
//     unquiesced queue, forever).
//   - Fds in a FileOp stay open until the op completes and until
//     ForgetFile for that key returns.
//   - A Queue's SQ side (Space, Prepare, Submit) is used by one goroutine
//     at a time; its CQ side (Reap) by one goroutine at a time; the two
//     sides may run concurrently (a caller submits while the worker reaps).

package engine

import "time"

// Transport is a data path the engine can route requests to.
type Transport interface {
	// Probe (from Backend) is called lazily, on the first submission that
	// considers this transport; Close after all queues are released or
	// abandoned.
	Backend
	// Kind names the path (io_uring, gds).
	Kind() TransportKind
}

// FileTransport executes DRAM<->file I/O.
type FileTransport interface {
	Transport
	// Acquire hands out a Queue for exclusive use; Release or Abandon
	// gives it back. Acquire may block only briefly (it creates a queue
	// when the pool is empty and the limit allows).
	Acquire() (Queue, error)
	// TryAcquire is Acquire without waiting: (nil, nil) when every queue
	// is held and no new one may be created. The caller fast path uses it,
	// so a Submit never waits for another batch to release a ring.
	TryAcquire() (Queue, error)
	// ForgetBuffer drops any registration of the buffer with this key;
	// called before the memory is unmapped.
	ForgetBuffer(key uint64)
	// ForgetFile drops any registration of the fd with this key; called
	// before the fd is closed.
	ForgetFile(key uint64)
	// FileStats returns a snapshot of counters.
	FileStats() FileStats
}

// Queue is one submission/completion queue pair (an io_uring ring).
type Queue interface {
	// Space returns how many ops can be prepared before Submit.
	Space() int
	// Prepare queues op for the next Submit; it fails only when Space is 0.
	Prepare(op *FileOp) error
	// Submit hands prepared ops to the kernel and returns how many it took.
	// After an error, ops not taken stay prepared.
	Submit() (int, error)
	// Reap delivers completed ops to fn. It waits up to wait for the first
	// one (0: do not wait); it returns the number delivered. A deadline
	// expiring is not an error (0, nil).
	Reap(wait time.Duration, fn func(Completion)) (int, error)
	// Release returns the queue to its pool. Only valid with nothing in
	// flight.
	Release()
	// Abandon retires a queue that still has ops in flight: it is never
	// reused, and its memory stays mapped (spec: unquiesced owners retain
	// the ring).
	Abandon()
}

// Buffer identifies registered local memory for fixed-buffer I/O.
type Buffer struct {
	Key  uint64 // unique per registration, never reused
	Base uint64
	Len  uint64
}

// FileRef identifies an open fd for registered-file I/O.
type FileRef struct {
	Key uint64 // unique per fd, never reused
	FD  int
}

// IOVec is one local memory range.
type IOVec struct {
	Base uint64
	Len  uint64
}

// FileOp is one SQE: a read or write of File at Offset, to or from Iov.
// With one IOVec and Buf.Key != 0, the backend may use fixed-buffer I/O.
type FileOp struct {
	Write  bool
	File   FileRef
	Offset uint64
	Iov    []IOVec
	Buf    Buffer // the registration holding Iov[0]; Key 0 when none
	Token  uint64 // returned in Completion
	// Offload asks the backend to run the op on the kernel's worker
	// threads rather than inline in the submitting call (io_uring:
	// IOSQE_ASYNC), so several large page-cache copies proceed on several
	// cores at once (offload.go).
	Offload bool
}

// Completion is one finished op: Res is bytes moved, or a negative errno.
type Completion struct {
	Token uint64
	Res   int32
}

// FileStats are a file transport's counters.
type FileStats struct {
	Available    bool   `json:"available"`
	ProbeError   string `json:"probe_error,omitempty"`
	Rings        int    `json:"rings"`
	RingsIdle    int    `json:"rings_idle"`
	RingsAbandon int    `json:"rings_abandoned"`
	Submitted    uint64 `json:"sqes_submitted"`
	Completed    uint64 `json:"cqes_completed"`
	FixedOps     uint64 `json:"fixed_buffer_ops"`
	FixedFileOps uint64 `json:"fixed_file_ops"`
	VectoredOps  uint64 `json:"vectored_ops"`
	BufferRegs   uint64 `json:"buffer_registrations"`
	FileRegs     uint64 `json:"file_registrations"`
	BytesRead    uint64 `json:"bytes_read"`
	BytesWritten uint64 `json:"bytes_written"`
	// SubmitCalls counts the submitting system calls (io_uring_enter):
	// sqes_submitted / submit_calls is the SQEs each call carried.
	SubmitCalls uint64 `json:"submit_calls"`
	// OffloadedOps counts ops run on the kernel's worker threads
	// (FileOp.Offload).
	OffloadedOps uint64 `json:"offloaded_ops"`
}
