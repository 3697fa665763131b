// deferfree.go owns deferred free (spec "Ownership and API"): with
// enable_progress_worker set, Free of a busy batch fences its ID and
// returns at once instead of ErrBusy.
//
// Invariants:
//   - A deferred batch answers ErrNotFound to every call at once (its ID
//     is retired and never reused), but its accepted work runs on:
//     registrations, loans, staging and admission charges stay with their
//     groups until those drain.
//   - Its capacity stays reserved and it counts against
//     max_allocated_batches (Stats.DeferredBatches) until its last group
//     finishes; then the reservation returns, or, when a group ended
//     unquiesced, the batch is quarantined instead.
//   - Nobody can poll a deferred batch, so its parked transport attempts
//     are started at once (failover.go).

package engine

// deferFreeLocked retires a busy batch's ID and leaves its reservation
// to settleDeferredLocked. REQUIRES: b.mu, b.mu.active > 0.
func (b *Batch) deferFreeLocked() {
	b.mu.freed, b.mu.deferred = true, true
	b.mu.onDone, b.mu.notify = nil, nil // detached: nobody is listening
	b.reports.Store(false)
	b.advanceLocked(-1, true)
	b.changedLocked()
	e := b.e
	e.mu.Lock()
	delete(e.mu.batches, b.id)
	if e.mu.deferred == nil {
		e.mu.deferred = map[uint64]*Batch{}
	}
	e.mu.deferred[b.id] = b
	e.mu.Unlock()
	e.log.Debug("batch free deferred until its work drains", "batch", b.id, "groups", b.mu.active)
}

// settleDeferredLocked returns a deferred batch's reservation once its
// last group has finished. REQUIRES: b.mu.
func (b *Batch) settleDeferredLocked() {
	if !b.mu.deferred || b.mu.active > 0 {
		return
	}
	b.mu.deferred = false
	e := b.e
	e.mu.Lock()
	delete(e.mu.deferred, b.id)
	if b.mu.unquiesced {
		e.mu.quarantined++ // as Free does: the kernel may still use its memory
	} else {
		e.mu.reserved -= b.capacity
	}
	e.mu.Unlock()
	b.retiredLocked()
}

// retiredLocked marks the reservation settled. REQUIRES: b.mu.
func (b *Batch) retiredLocked() {
	if b.mu.retired == nil {
		b.mu.retired = make(chan struct{})
	}
	select {
	case <-b.mu.retired:
	default:
		close(b.mu.retired)
	}
}

// Retired returns a channel closed once Free has settled the batch's
// reservation: at Free for an idle batch, when its work drains for a
// deferred one.
func (b *Batch) Retired() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.retired == nil {
		b.mu.retired = make(chan struct{})
	}
	return b.mu.retired
}
