// idle.go owns the reclaiming of idle batches. Reading clone allocates a
// batch, so anything that walks the mount reading every file (grep -r,
// cp -r, a desktop indexer) allocates one per pass and never frees it;
// without reclaiming, mount.max_allocated_batches would end up refusing
// every client. A batch that has not accepted a single submission and
// saw no activity for mount.idle_batch_timeout is freed, as rmdir would.
//
// Activity is a write to the batch's submit or ctl file: a client
// writing a submission in pieces, or sending `progress` while it thinks,
// is using the batch, however long since the clone. Reads are not
// activity: the walkers this exists for read every file, and counting
// their reads would keep alive the very batches they left behind.
//
// Invariants:
//   - A batch that accepted a submission is never reclaimed (its owner
//     frees it); neither is one with a submit in progress: a submit and
//     the reclaim decide under Batch.mu, so a submit either runs on a
//     batch that stays or fails with KindNotFound saying why.
//   - Each batch has one timer, created before the batch is published and
//     stopped when it is freed; it never fires after Shutdown began. When
//     it fires early (activity since it was set), it is set again for the
//     rest of the timeout counted from the last activity.

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

// touch records activity on the batch (a write to submit or ctl).
func (bt *Batch) touch() { bt.active.Store(time.Now().UnixNano()) }

// idleFor is the time since the batch's last activity (or its clone).
func (bt *Batch) idleFor() time.Duration {
	return time.Since(time.Unix(0, bt.active.Load()))
}

// errReclaimed is what every operation on a reclaimed batch answers.
func (s *Service) errReclaimed(bt *Batch) error {
	return notFound("batch %d was reclaimed: it had no submission and no write to its submit or ctl file for %s (mount.idle_batch_timeout)", bt.ID, s.opts.IdleBatchTimeout)
}

// reclaimIdle frees bt unless it accepted a submission, one is in
// progress, or it is already gone. Called by bt's idle timer.
func (s *Service) reclaimIdle(bt *Batch) {
	if s.closing.Load() || s.Batch(bt.ID) != bt {
		return
	}
	if idle := bt.idleFor(); idle < s.opts.IdleBatchTimeout {
		bt.idle.Reset(s.opts.IdleBatchTimeout - idle)
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
	s.record(scope{caller: bt.owner, op: "reclaim", name: bt.name()}, s.errReclaimed(bt))
	s.log.Info("idle batch reclaimed", "op", "reclaim", "batch", bt.ID,
		"idle", bt.idleFor().Round(time.Millisecond), "timeout", s.opts.IdleBatchTimeout)
}
