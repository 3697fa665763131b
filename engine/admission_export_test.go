package engine

// Test hooks for admission: instrumentation and held capacity, never
// used by the engine itself.

// HoldWindowForTest takes window capacity as if owners were running, and
// returns a func that gives it back and wakes waiters.
func (e *Engine) HoldWindowForTest(owners, bytes uint64) (release func()) {
	a := e.adm
	a.mu.Lock()
	a.win.owners += owners
	a.win.bytes += bytes
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		a.win.owners -= owners
		a.win.bytes -= bytes
		a.wakeLocked()
		a.mu.Unlock()
	}
}

// HoldQoSForTest charges a policy's contract as if a group held it.
func (e *Engine) HoldQoSForTest(p *QoSPolicy, owners, bytes uint64) (release func()) {
	a := e.adm
	a.mu.Lock()
	a.slots[p.slot].Owners += owners
	a.slots[p.slot].Bytes += bytes
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		a.slots[p.slot].Owners -= owners
		a.slots[p.slot].Bytes -= bytes
		a.wakeLocked()
		a.mu.Unlock()
	}
}

// OnGrantForTest sees every dispatch window grant: batch ID and task.
func (e *Engine) OnGrantForTest(fn func(batch uint64, task int)) {
	e.adm.mu.Lock()
	e.adm.onGrant = func(g *group, i int) { fn(g.b.id, g.first+i) }
	e.adm.mu.Unlock()
}

// QuietWakesForTest stops returned capacity from poking waiters until
// the returned func runs (which pokes them all): a waiter then stays
// exactly where its last gate left it, as one poked but not yet re-run.
func (e *Engine) QuietWakesForTest() (resume func()) {
	a := e.adm
	a.mu.Lock()
	a.quiet = true
	a.mu.Unlock()
	return func() {
		a.mu.Lock()
		a.quiet = false
		a.wakeLocked()
		a.mu.Unlock()
	}
}
