// executor.go owns the seam between the scheduler and the executors:
// every route's executor (route.go maps each route to one) is reached
// only through these interfaces.
//
// The scheduler (worker.go, group.go, task.go, failover.go) dispatches a
// group in one of three shapes, which route selection decides, not the
// scheduler:
//   - ops on the batch's ring (the ring executor, ringexec.go): the
//     worker writes a queue depth of one op per request into the ring
//     lane the ring executor lent the batch;
//   - a caller copy (callercopy.go): the submitter copies inside Submit;
//   - jobs (offring.go): a window of tasks at a time, each route's share
//     as one job cut into units, handed to that route's jobExecutor.
//
// Every executor's outcome for a task, whatever the shape, takes one path
// (task.go's finishTaskLocked): ring CQEs and caller copies as
// Completions (Batch.completeLocked), a job's units through
// offRing.resolve, which reports a task once, after its last unit,
// through Batch.finishTask. The scheduler never names an executor; an
// executor never takes a batch's lock (the ring's CQEs are applied by
// the batch worker under it), and never blocks the dispatching caller.
//
// Cancel reaches a running task's executor the same way: an executor
// that can stop work it is running implements canceller; for any other a
// running task cannot be recalled. Batch.Cancel names no executor.
//
// Adding a transport is one executor (a type with these methods) and one
// line in Engine.routeTable.

package engine

import "errors"

// executor is what the scheduler sees of every route's executor.
type executor interface {
	// transport is the kind a task on this executor reports.
	transport() TransportKind
	// path names the executor's data path in the measured bandwidth
	// estimate (bandwidth.go).
	path() string
	// close stops the executor at Engine.Close, after every batch
	// drained; what an unquiesced job may still touch stays retained.
	close()
}

// jobExecutor is an executor the scheduler hands jobs: a window of a
// group's tasks, cut into units (offring.go).
type jobExecutor interface {
	executor
	// cut says how jobs for this executor are split into units: at most
	// size bytes each, and with byPiece never across two pieces (cuFile
	// moves one device range per call).
	cut() (size uint64, byPiece bool)
	// window is how many of one group's tasks the scheduler hands the
	// executor at once, given io_uring.queue_depth (a physical owner's
	// tasks go together, whatever the window).
	window(depth int) int
	// run takes a dispatched job without blocking; every unit of x
	// resolves exactly once, also when the executor cannot start.
	run(x *offRing)
}

// canceller is the optional part of the seam for an executor that can
// stop a task it is running (the peer executor cuts a transfer on the
// wire; the CUDA IPC executor one whose copy is not queued yet).
type canceller interface {
	// cancelRunning asks to stop running task j (relative) of g, whose
	// route is this executor's. It runs under the batch's lock, so it
	// sees only g's plan for its own route (never a task's state), never
	// blocks, and takes no lock a lane holds while it resolves a unit.
	// nil: the task is cut; its units in flight end and later ones never
	// start, each resolving with errCutRunning, and the task ends
	// cancelled through the one task path (task.go). Otherwise it returns
	// why the task cannot be recalled (its kind is Cancel's) and changes
	// nothing.
	cancelRunning(g *group, j int) error
}

// errCutRunning is how a canceller's units report a cut: a task whose
// outcome wraps it ends cancelled, not failed (endTaskLocked).
var errCutRunning = errors.New("cancelled while running: its transfer was cut")

// The staged executor's share of the seam (staged.go holds the rest).

// cut for the staged executor: one staging chunk per unit.
func (s *stagedExec) cut() (uint64, bool) { return uint64(s.e.cfg.StagingChunkSize), false }

func (s *stagedExec) window(depth int) int { return depth }

func (s *stagedExec) path() string { return "staged_gpu" }

func (s *stagedExec) transport() TransportKind { return TransportIOUring }
