package engine

// Test hooks for receiver credits: where a test holds the racing
// goroutine, never used by the engine itself.

// HoldPeerHandoff runs f on the peer lane before each unit's context
// check and its handoff to the Remote (task is the request's index).
func (e *Engine) HoldPeerHandoff(f func(task int)) {
	e.peerHandoff = func(_ *group, task int) { f(task) }
}

// HoldCreditSync runs f in the worker performing a credit sync, before
// it calls the issuer.
func (e *Engine) HoldCreditSync(f func()) {
	e.credit.mu.Lock()
	e.credit.beforeSync = f
	e.credit.mu.Unlock()
}
