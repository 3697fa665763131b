package engine

import "testing"

// TestUsersCloseDrains: a close sees every user that entered before it,
// refuses later ones, and the count reaches 0 only when the last leaves,
// whichever goroutine and shard it leaves from.
func TestUsersCloseDrains(t *testing.T) {
	var u users
	const n = 8
	left := make(chan bool, n)
	ready := make(chan struct{}, n)
	release := make(chan struct{})
	for i := 0; i < n; i++ {
		if !u.enter(0) {
			t.Fatal("enter failed while open")
		}
		go func() { // leave from other goroutines (other shards)
			ready <- struct{}{}
			<-release
			left <- u.leave(shard(1 + i%(budgetShards-1)))
		}()
	}
	for i := 0; i < n; i++ {
		<-ready
	}
	u.closing.Store(true)
	if c := u.count(); c != n {
		t.Fatalf("count %d after closing, want %d", c, n)
	}
	if u.enter(0) {
		t.Fatal("enter succeeded while closing")
	}
	if c := u.count(); c != n {
		t.Fatalf("count %d after a refused enter, want %d", c, n)
	}
	close(release)
	for i := 0; i < n; i++ {
		if !<-left {
			t.Fatal("leave did not see closing")
		}
	}
	if c := u.count(); c != 0 {
		t.Fatalf("count %d after every leave", c)
	}
}

// TestUsersLateEnterWakesClose models the race an enter runs against a
// close: its add lands before the close sets closing and counts (so the
// close waits for it), and its look at closing after; taking its add
// back must wake the close, or the close waits for a user that never
// was.
func TestUsersLateEnterWakesClose(t *testing.T) {
	var ent segEntry
	const at = 3
	ent.users.shards[at].n.Add(1) // enter, first half: the add
	ent.mu.Lock()
	n := ent.closeLocked() // sets closing, counts the add
	idle := ent.mu.idle
	ent.mu.Unlock()
	if n != 1 || idle == nil {
		t.Fatalf("close counted %d users (idle %v), want the late enter's 1", n, idle != nil)
	}
	// enter, second half: it sees closing and takes its add back.
	if ent.users.closing.Load() {
		ent.users.shards[at].n.Add(-1)
		ent.wakeIfIdle()
	}
	select {
	case <-idle:
	default:
		t.Fatal("the close still waits after the late enter took its add back")
	}
	// A later admit is refused and leaves the count at 0.
	if ent.admit(at) || ent.userCount() != 0 {
		t.Fatalf("admit while closing: count %d", ent.userCount())
	}
}

// TestUsersStaleWakeKeepsNextClose: a leave that saw a first close, and
// looks for it only after that close ended and a second close began with
// users of its own, must not wake the second one.
func TestUsersStaleWakeKeepsNextClose(t *testing.T) {
	var ent segEntry
	if !ent.admit(1) {
		t.Fatal("admit while open")
	}
	ent.mu.Lock()
	ent.closeLocked()
	ent.mu.Unlock()
	ent.users.shards[1].n.Add(-1) // the leave, first half: the drop, closing seen
	ent.wakeIfIdle()              // the first close is woken
	ent.mu.Lock()                 // it reopens; a new user comes; a second close
	ent.users.closing.Store(false)
	ent.mu.Unlock()
	if !ent.admit(2) {
		t.Fatal("admit after reopening")
	}
	ent.mu.Lock()
	if n := ent.closeLocked(); n != 1 {
		t.Fatalf("second close counted %d users, want 1", n)
	}
	idle := ent.mu.idle
	ent.mu.Unlock()
	ent.wakeIfIdle() // the stale look, late
	select {
	case <-idle:
		t.Fatal("a stale leave woke the second close while a user remains")
	default:
	}
	ent.done(2)
	select {
	case <-idle:
	default:
		t.Fatal("the last user's leave did not wake the second close")
	}
}
