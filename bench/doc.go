// Package bench drives file workloads at a fixed queue depth and measures
// them: bytes/s, IOPS and a latency histogram. It is the library behind
// `orbitefs bench file`; bench/fio-compare.sh runs it beside fio and
// docs/performance.md records the results.
//
// Two implementations run the same workload (Options) so their numbers
// compare directly:
//
//   - Run drives an *engine.Engine through its public API, exactly as a
//     client would: one registered region split into QueueDepth buffer
//     slots, one batch whose worker pipelines single-request groups, and a
//     rollover to a fresh batch before the old one's task slots run out.
//   - RunPread is the naive baseline: QueueDepth goroutines, each looping
//     over pread(2)/pwrite(2) on its own slot. No engine, no io_uring.
//
// Both count an operation only if it completed before the runtime ended;
// operations still in flight then are drained and discarded. Latency is
// measured from just before the submit (Submit, pread) to the moment the
// driver sees the completion.
//
// The package never creates or extends a file on its own: Prepare does,
// and only when asked (`--create`).
package bench
