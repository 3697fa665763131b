// executor.go owns the seam between the scheduler and the executors
// that move bytes off the batch worker's ring.
//
// The scheduler (worker.go, group.go, task.go, failover.go) dispatches a
// group a window of tasks at a time (offring.go), marks the window's
// tasks running and hands each route's share of them to that route's
// executor as one job (offRing): the requests cut into units.
// The executor moves the units on resources it owns engine-wide and
// resolves each unit exactly once through offRing.resolve, which reports
// a task once, after its last unit, through Batch.finishOffRing (the one
// task path). The scheduler never names an executor: route selection
// (route.go) maps a route to its executor; an executor never takes a
// batch's lock, and never blocks the dispatching caller.
//
// Adding a transport is one executor (a type with these methods) and one
// line in Engine.executor.

package engine

// executor moves the units of off-ring jobs.
type executor interface {
	// cut says how jobs for this executor are split into units: at most
	// size bytes each, and with byPiece never across two pieces (cuFile
	// moves one device range per call).
	cut() (size uint64, byPiece bool)
	// window is how many of one group's tasks the scheduler hands the
	// executor at once, given io_uring.queue_depth (a physical owner's
	// tasks go together, whatever the window).
	window(depth int) int
	// path names the executor's data path in the measured bandwidth
	// estimate (bandwidth.go).
	path() string
	// run takes a dispatched job without blocking; every unit of x
	// resolves exactly once, also when the executor cannot start.
	run(x *offRing)
	// close stops the executor at Engine.Close, after every batch
	// drained; what an unquiesced job may still touch stays retained.
	close()
}

// The staged executor's share of the seam (staged.go holds the rest).

// cut for the staged executor: one staging chunk per unit.
func (s *stagedExec) cut() (uint64, bool) { return uint64(s.e.cfg.StagingChunkSize), false }

func (s *stagedExec) window(depth int) int { return depth }

func (s *stagedExec) path() string { return "staged_gpu" }
