// Package engine is the orbitefs transfer engine: it moves bytes between
// registered host or device memory and file or memory segments through
// pluggable backends (io_uring, CUDA, cuFile).
//
// # Objects and lifetimes
//
//   - Engine: New validates the config and starts nothing. Close refuses
//     new work, cancels queued groups, waits for running ones, then closes
//     segments, regions and transports, except what an unquiesced group
//     holds (then ErrUnquiesced). Close is idempotent.
//   - Region: RegisterMemory / RegisterSharedFile map page-aligned memory
//     outside the Go heap; Unregister unmaps it, refusing (ErrBusy) while a
//     transfer holds a loan on it.
//   - Segment: OpenFileSegment binds a handle to an existing regular file's
//     inode. Handles with the same path and permission share one entry.
//     CloseFileSegment drains admitted groups within a timeout.
//   - Batch: AllocateBatch reserves task slots. Each Submit appends one
//     group of tasks; Seal stops appends; Wait blocks for the terminal
//     state; Free returns the reservation (ErrBusy while work runs; a
//     batch with an unquiesced group is quarantined, its reservation
//     kept).
//
// # Execution
//
// Submit validates every request (addresses, permissions, ranges, limits)
// and takes the group's admission charges before anything is queued, so a
// rejected group leaves no trace. The scheduler is one worker goroutine
// per busy batch (worker.go): it dispatches groups in FIFO order behind
// fences, checks deadlines, takes loans and admission. route.go maps
// every route to its executor, and the scheduler reaches each through
// one seam (executor.go). Host groups go op by op onto the ring the ring
// executor lends the batch (ringexec.go), kept full across group
// boundaries. A group that leaves the ring is cut into units and handed
// to job executors: pinned staging to a GPU (staged.go), cuFile
// (gdsexec.go) and host copy lanes for large requests on in-memory files
// (hostcopy.go), among others. They are engine-wide services, started on
// first use and stopped at Close, whose lanes take units of every batch
// round-robin (fairqueue.go). A small group may complete on its caller
// (the fast path, the caller copy). Every executor's outcome ends its
// task through one path, task.go's finishTaskLocked (then endTaskLocked,
// or failover's park); a group's Report counts the consecutive
// successful prefix. A missing completion is waited for until
// quiesce_grace after the deadline, then the group ends unquiesced and
// keeps every resource the kernel might still touch.
// A segment on a filesystem that cannot do non-blocking I/O (FUSE, NFS,
// SMB, ...) has every ring op punted to io-wq and never runs on the
// caller; opens and its stats are bounded by store_call_timeout
// (storewait.go), so a store that stops answering holds no caller and no
// worker past its deadline plus quiesce_grace.
//
// # Lock order
//
// Engine.segMu; ringLane.mu (the ring's submission side), then
// Batch.mu, then Engine.mu, then segEntry.mu, then Region.mu. No lock is
// held across a blocking wait; Batch.mu is never held across a syscall on
// the ring. OnGroupDone hooks run with no lock held (Batch.deliverMu is
// only tried, so a hook may Submit, Cancel or Free). Batch.mu is held
// when the scheduler hands a job to an executor (executor.run never
// blocks and takes only its own queue lock): in the worker's fill, and
// in finishTaskLocked when a task's end frees its group's window, so a lane
// resolving a unit may hand out the group's next window. The executors' locks are
// leaves, never held while another engine lock is taken, and no unit
// resolves under them: stagedExec.mu and lanePool.mu (the fair queues),
// offRing.mu (resolve drops it before finishTask takes Batch.mu),
// stagingPool.mu, gpuState.streamMu, and gdsState.mu (which gdsRegister
// holds while it reads Region.mu and calls cuFile, so Stats may wait for
// a first registration). Executor code never names Batch.mu or a task:
// its outcomes reach the batch through offRing.resolve, whose
// finishTask takes Batch.mu with no executor lock held.
//
// # Errors
//
// Every error is an *Error whose Kind is one row of the mount's errno
// table; errors.Is(err, ErrBusy) and friends match kinds, and messages
// name the request index and the offending value.
package engine
