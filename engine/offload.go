// offload.go owns the choice of which ring ops run on the kernel's worker
// threads (FileOp.Offload, IOSQE_ASYNC) instead of inside io_uring_enter.
//
// A buffered read or write of cached pages is a memory copy that the
// kernel does inline, on the thread that calls io_uring_enter: one batch
// worker then copies at most one core's worth (on tmpfs, 5.7 GB/s for
// 4 MiB reads where 32 pread goroutines reached 8-12 GB/s on two cores;
// docs/performance.md, "Memory speed"). Offloaded, the copies of the
// requests in flight run on io-wq threads, as many at once as there are
// cores, while the worker goes on reaping and submitting. Small requests
// stay inline: handing a 4 KiB copy to another thread costs more than the
// copy.
//
// Invariants:
//   - Only ops on the buffered fd are offloaded; O_DIRECT ops are issued
//     to the device from io_uring_enter without a copy and never wait for
//     a worker thread.
//   - Offload changes which thread runs an op, never its order on the
//     ring nor its result: completions, fences and FIFO are as before.

package engine

// offloadBytes is the smallest buffered request offloaded: a 256 KiB copy
// takes tens of microseconds, far more than the handoff to io-wq.
const offloadBytes = 256 << 10

// offload reports whether a request of n bytes on the buffered fd (or not)
// should run on the kernel's worker threads.
func offload(buffered bool, n uint64) bool {
	return buffered && n >= offloadBytes
}
