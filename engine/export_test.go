package engine

// export_test.go exposes internals that tests must wait on without
// changing them.

// ParkedAttempts is how many failed attempts await a failover decision
// (failover.go). It is not a poll: it decides nothing.
func (b *Batch) ParkedAttempts() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.mu.parked)
}

// HoldCloses installs f as the hook every CloseFileSegment runs after
// closing the entry to new work and before waiting for its users. Set
// before the engine is used concurrently.
func (e *Engine) HoldCloses(f func()) { e.closeDrained = f }

// HoldLaneCopies installs f as the hook a host copy lane runs before a
// lane copy's deadline check (lanecopy.go). Set before the engine is
// used concurrently.
func (e *Engine) HoldLaneCopies(f func()) { e.laneCopyHeld = f }

// HoldUnits installs f as the hook every executor runs before a unit
// starts, with the unit's absolute task index: a job executor's lane
// before the unit's start check (offRing.startable), the ring before an
// op it was handed goes on the ring (ringLane.prepareChosen). Set before
// the engine is used concurrently.
func (e *Engine) HoldUnits(f func(task int)) { e.unitHeld = f }

// HoldProgress installs f as the hook an off-ring lane runs before it
// publishes a task's progress short of its final report.
func (e *Engine) HoldProgress(f func()) { e.progressHeld = f }

// HoldCallerCopies runs f on the submitter before each caller copy.
func (e *Engine) HoldCallerCopies(f func()) { e.callerCopyHeld = f }

// HoldClaims runs f on each claimed copy's submitter while it is counted
// in flight, before its copy.
func (e *Engine) HoldClaims(f func()) { e.claimHeld = f }

// HoldLoanedClaims runs f on a claim's submitter after it took its
// loans and before it takes its task slot.
func (e *Engine) HoldLoanedClaims(f func()) { e.claimLoaned = f }

// HoldLeftClaims runs f on a claim's submitter right after it is
// counted out of the claims in flight.
func (e *Engine) HoldLeftClaims(f func()) { e.claimLeft = f }

// HoldCopiedCallerCopies runs f on the submitter after each caller copy
// moved its bytes, before its finish takes the batch's lock.
func (e *Engine) HoldCopiedCallerCopies(f func()) { e.callerCopyCopied = f }

// HoldRegionCopies installs f as the hook ReadAt/WriteAt on r run with
// their range pinned, before any byte moves. Set before r is used
// concurrently.
func (r *Region) HoldRegionCopies(f func(off int64, n int)) { r.copying = f }

// SetPagemapPath makes the mapped executor read path instead of
// /proc/self/pagemap (a file that does not exist: a sandbox without it).
// Set before the engine is used.
func (e *Engine) SetPagemapPath(path string) { e.mapped.pagemapPath = path }

// HoldCombiners runs f on a batch's combiner that applied the list it
// took, under the batch's lock, before it lets the combining lock go
// (combine.go).
func (e *Engine) HoldCombiners(f func()) { e.combineHeld = func(*Batch) { f() } }

// CombineWaiterAsleep reports whether the newest node on b's combining
// list is an entry whose submitter sleeps for its decision.
func (b *Batch) CombineWaiterAsleep() bool {
	g := b.comb.head.Load()
	return g != nil && !g.comb.finish && g.comb.state.Load() == combSleeping
}

// LockBatch takes b's lock and returns its release: a submitter that
// meanwhile enters a caller copy goes through the combiner.
func (b *Batch) LockBatch() func() {
	b.mu.Lock()
	return b.mu.Unlock
}

// NotifyCombinerTakes runs f on a batch's combiner each time it has
// taken its list, before it takes the batch's lock (combine.go).
func (e *Engine) NotifyCombinerTakes(f func()) { e.combineTook = func(*Batch) { f() } }
