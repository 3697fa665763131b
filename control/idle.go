// idle.go owns the reclaiming of idle batches. Reading clone allocates a
// batch, so anything that walks the mount reading every file (grep -r,
// cp -r, a desktop indexer) allocates one per pass and never frees it;
// without reclaiming, mount.max_allocated_batches would end up refusing
// every client. A batch that has not accepted a single submission
// mount.idle_batch_timeout after its clone is freed, as rmdir would.
//
// Invariants:
//   - A batch that accepted a submission is never reclaimed (its owner
//     frees it); neither is one with a submit in progress: a submit and
//     the reclaim decide under Batch.mu, so a submit either runs on a
//     batch that stays or fails with KindNotFound saying why.
//   - Each batch has one timer, created before the batch is published and
//     stopped when it is freed; it never fires after Shutdown began.

package control

import (
	"time"
)

// defaultIdleBatchTimeout is mount.idle_batch_timeout's default.
const defaultIdleBatchTimeout = 5 * time.Minute

// beginSubmit registers a submit in progress; false if the batch was
// reclaimed.
func (bt *Batch) beginSubmit() bool {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if bt.mu.reclaimed {
		return false
	}
	bt.mu.submitting++
	return true
}

// endSubmit ends a submit begun with beginSubmit; accepted says whether
// it appended tasks.
func (bt *Batch) endSubmit(accepted bool) {
	bt.mu.Lock()
	bt.mu.submitting--
	bt.mu.used = bt.mu.used || accepted
	bt.mu.Unlock()
}

func (bt *Batch) wasReclaimed() bool {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	return bt.mu.reclaimed
}

// errReclaimed is what every operation on a reclaimed batch answers.
func (s *Service) errReclaimed(bt *Batch) error {
	return notFound("batch %d was reclaimed: it had no submission %s after its clone (mount.idle_batch_timeout)", bt.ID, s.opts.IdleBatchTimeout)
}

// reclaimIdle frees bt unless it accepted a submission, one is in
// progress, or it is already gone. Called by bt's idle timer.
func (s *Service) reclaimIdle(bt *Batch) {
	if s.closing.Load() || s.Batch(bt.ID) != bt {
		return
	}
	bt.mu.Lock()
	if bt.mu.used || bt.mu.submitting > 0 || bt.mu.reclaimed {
		bt.mu.Unlock()
		return
	}
	bt.mu.reclaimed = true
	bt.mu.Unlock()
	if err := s.free(bt); err != nil {
		// Recorded by free; the batch stays usable.
		bt.mu.Lock()
		bt.mu.reclaimed = false
		bt.mu.Unlock()
		return
	}
	// Every later operation on the batch answers ENOENT, and its own
	// error file went with it: /error says why.
	s.record(scope{op: "reclaim", name: bt.name()}, s.errReclaimed(bt))
	s.log.Info("idle batch reclaimed", "op", "reclaim", "batch", bt.ID,
		"idle", time.Since(bt.created).Round(time.Millisecond), "timeout", s.opts.IdleBatchTimeout)
}
