// requester.go owns close_requester (spec: the requester side of engine
// close): stop accepting new outgoing work, then wait for the work
// already accepted.
//
// Invariants:
//   - Once CloseRequester is called every later Submit is refused with
//     KindClosed, for good; batches can still be allocated, polled,
//     waited on, cancelled and freed.
//   - A timeout leaves everything running and changes nothing more: call
//     CloseRequester again to keep waiting, or Close to end the engine.
//     Close fences both directions against its own single deadline.

package engine

import (
	"context"
	"time"
)

// CloseRequester rejects new submissions and waits up to timeout for
// every accepted group, on live and on deferred-freed batches, to
// finish. It returns ErrTimeout (KindTimeout) naming a batch still busy;
// calling it again waits again.
func (e *Engine) CloseRequester(timeout time.Duration) error {
	e.mu.Lock()
	if e.closed.Load() {
		e.mu.Unlock()
		return errorf(KindClosed, "close_requester", "engine", "engine is closed")
	}
	if !e.requesterClosed.Swap(true) {
		e.log.Info("requester closed: no new submissions", "op", "close_requester")
	}
	batches := make([]*Batch, 0, len(e.mu.batches)+len(e.mu.deferred))
	for _, b := range e.mu.batches {
		batches = append(batches, b)
	}
	for _, b := range e.mu.deferred {
		batches = append(batches, b)
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for _, b := range batches {
		b.mu.Lock()
		b.advanceLocked(-1, true) // accepted work includes parked attempts
		b.mu.Unlock()
		if err := b.drain(ctx); err != nil {
			return errorf(KindTimeout, "close_requester", "engine", "batches/%d still has accepted work after %s; call close_requester again to keep waiting", b.id, timeout)
		}
	}
	return nil
}

// checkRequester refuses new outgoing work after CloseRequester.
func (e *Engine) checkRequester(op string) error {
	if e.requesterClosed.Load() {
		return errorf(KindClosed, op, "engine", "requester is closed (close_requester): no new submissions")
	}
	return nil
}
