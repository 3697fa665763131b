// progress.go owns explicit progress (spec "Explicit progress"): a
// caller-driven step on one batch, and the poll-delay schedule for
// callers that poll.
//
// Every busy batch already has its own worker (worker.go) that
// dispatches groups and publishes completions, so a step here has one
// thing left to do: decide one parked transport attempt (failover.go),
// starting the next attempt, which the executors then run with the
// group's original budget. It also hands finished groups' reports to an
// OnGroupDone hook. A step does no backend I/O on the caller.

package engine

import (
	"runtime"
	"time"
)

// Progress performs at most one step on the batch (starting one parked
// transport attempt) and returns the batch state. A freed batch returns
// ErrNotFound.
func (b *Batch) Progress() (State, error) {
	b.lockFolded()
	if err := b.checkLocked("progress"); err != nil {
		b.mu.Unlock()
		return StateOpen, err
	}
	b.advanceLocked(1, true)
	st := b.mu.state
	b.mu.Unlock()
	b.deliver()
	return st, nil
}

// ProgressBatch is Progress on the live batch with id.
func (e *Engine) ProgressBatch(id uint64) (State, error) {
	b, err := e.Batch(id)
	if err != nil {
		return StateOpen, err
	}
	return b.Progress()
}

// Poll-delay schedule: polls 0 through pollYields-1 only yield; later
// delays start at minPollDelay and double up to maxPollDelay.
const (
	pollYields   = 128
	minPollDelay = time.Microsecond
	maxPollDelay = 200 * time.Microsecond
)

// NextPollDelay is how long a caller polling a batch should wait before
// poll number count (counting from 0): zero (just yield) for the first
// 128, then 1 us doubling up to 200 us. Increment count with saturating
// arithmetic; any count is valid.
func NextPollDelay(count uint64) time.Duration {
	if count < pollYields {
		return 0
	}
	shift := count - pollYields
	if shift >= 8 { // 1 us << 8 = 256 us, past the cap
		return maxPollDelay
	}
	return min(minPollDelay<<shift, maxPollDelay)
}

// WaitBeforeNextPoll yields or sleeps as NextPollDelay(count) says.
func WaitBeforeNextPoll(count uint64) {
	if d := NextPollDelay(count); d > 0 {
		time.Sleep(d)
		return
	}
	runtime.Gosched()
}
