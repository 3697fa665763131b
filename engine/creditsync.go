// creditsync.go owns automatic receiver credit: a binding whose grants
// come from the receiver's issuer (the peer package's credit frames)
// instead of manual updates. The receiver reserves a fixed window for
// this engine at connect and grants window + completed_total, where
// completed_total counts only this engine's owners that completed
// successfully (credit.go publishes them as their permits drop).
//
// There is no background thread and no per-slice round trip: when a
// head lacks credit and owners completed since the last sync, the worker
// of that head asks the issuer once (sync), outside every lock, and
// every other head waiting on the binding waits for that one answer
// (syncing). A failed sync is retried no sooner than creditSyncRetry,
// on the next head that needs it.
//
// Invariants:
//   - At most one sync per binding is in flight.
//   - Grants never decrease: a sync answering lower totals is an error
//     and changes nothing.
//   - Disconnect fences at once and returns the window only once every
//     committed owner has its receipt (KindBusy until then).

package engine

import (
	"context"
	"fmt"
	"time"
)

// CreditIssuer is a receiver's credit issuer as this engine reaches it.
// Implementations must be safe for concurrent use.
type CreditIssuer interface {
	// Connect reserves this engine's window at the receiver and returns
	// it, the first grant. Connecting again (a lost reply) returns the
	// same window.
	Connect(ctx context.Context, qosClass uint8) (CreditGrant, error)
	// Sync reports completed_total and returns the cumulative grants.
	Sync(ctx context.Context, doneBytes, doneRequests uint64) (CreditGrant, error)
	// Close returns the window; the receiver keeps a tombstone.
	Close(ctx context.Context, doneBytes, doneRequests uint64) error
	// Release ends the issuer's connection; called once.
	Release()
}

// CreditGrant is an issuer's answer: cumulative totals per resource
// (at connect, the window itself).
type CreditGrant struct {
	Bytes, Requests, StagingSlots, ConsumerSlots uint64
}

func (g CreditGrant) totals() [numCreditResources]uint64 {
	return [numCreditResources]uint64{g.Bytes, g.Requests, g.StagingSlots, g.ConsumerSlots}
}

// creditSyncTimeout bounds one sync; creditSyncRetry is the least time
// between a failed sync and the next.
const (
	creditSyncTimeout = 10 * time.Second
	creditSyncRetry   = 100 * time.Millisecond
)

// creditAuto is an automatic binding's issuer state. Guarded by ledger.mu.
type creditAuto struct {
	is      CreditIssuer
	window  [numCreditResources]uint64
	syncing bool
	synced  [2]uint64 // completed_total the last successful sync reported
	retry   time.Time // no sync before this (after a failure)
	err     error     // the last sync's failure
	syncs   uint64
}

// wantSyncLocked: a sync can bring more credit only if owners completed
// since the last one. REQUIRES: ledger.mu.
func (a *creditAuto) wantSyncLocked(b *creditBinding, now time.Time) bool {
	return !a.syncing && (b.doneBytes != a.synced[0] || b.doneReqs != a.synced[1]) && !now.Before(a.retry)
}

// ConnectReceiverCredit binds peer (an endpoint, host:port) at epoch to
// its receiver's issuer is: the receiver reserves this engine's window
// and every transport's submissions to that peer share it. On error the
// caller keeps is; on success the binding owns it.
func (e *Engine) ConnectReceiverCredit(ctx context.Context, peer string, epoch uint64, is CreditIssuer, qosClass uint8) error {
	const op = "connect"
	l := e.credit
	key := creditKey{peer, epoch}
	l.mu.Lock()
	b, err := l.addLocked(op, key, qosClass)
	l.releaseStaleLocked()
	if err != nil {
		l.mu.Unlock()
		return err
	}
	b.auto = &creditAuto{is: is, syncing: true} // no head syncs before the window is known
	l.mu.Unlock()
	g, err := is.Connect(ctx, qosClass)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		delete(l.bindings, key)
		l.wakeLocked()
		return wrap(KindOf(err), op, creditName(peer, epoch), fmt.Errorf("the receiver's issuer: %w", err))
	}
	a := b.auto
	a.window, a.syncing = g.totals(), false
	for r, t := range a.window {
		b.res[r].granted = t
	}
	b.updated, b.fresh = true, time.Now()
	l.wakeLocked()
	e.log.Info("receiver credit connected", "peer", peer, "epoch", epoch, "window_bytes", g.Bytes, "window_requests", g.Requests)
	return nil
}

// DisconnectReceiverCredit fences peer's automatic binding and, once
// every committed owner has its receipt, returns the window to the
// receiver and removes the binding. KindBusy until then (the fence
// stays; call again); an issuer failure keeps the fenced binding too.
func (e *Engine) DisconnectReceiverCredit(ctx context.Context, peer string) error {
	const op = "disconnect"
	l := e.credit
	l.mu.Lock()
	b := l.byPeerLocked(peer)
	if b == nil {
		l.mu.Unlock()
		return errorf(KindNotFound, op, "credit/"+peer, "no receiver credit binding for %s", peer)
	}
	if b.auto == nil {
		l.mu.Unlock()
		return errorf(KindInvalid, op, creditName(peer, b.key.epoch), "the binding of %s is manual: deactivate it", peer)
	}
	if err := l.fenceLocked(op, b); err != nil {
		l.mu.Unlock()
		return err
	}
	is, done := b.auto.is, [2]uint64{b.doneBytes, b.doneReqs}
	l.mu.Unlock()
	if err := is.Close(ctx, done[0], done[1]); err != nil {
		return wrap(KindOf(err), op, creditName(peer, b.key.epoch), fmt.Errorf("the receiver's issuer: %w", err))
	}
	l.mu.Lock()
	if l.bindings[b.key] == b {
		delete(l.bindings, b.key)
	}
	l.mu.Unlock()
	is.Release()
	e.log.Info("receiver credit disconnected", "peer", peer, "epoch", b.key.epoch, "completed_bytes", done[0], "completed_requests", done[1])
	return nil
}

// sync asks b's issuer for fresh totals on behalf of every head waiting
// on b. The caller's reserve set b.auto.syncing. Runs on a batch worker,
// outside every lock.
func (l *creditLedger) sync(b *creditBinding) {
	a := b.auto
	l.mu.Lock()
	done := [2]uint64{b.doneBytes, b.doneReqs}
	hook := l.beforeSync
	l.mu.Unlock()
	if hook != nil {
		hook()
	}
	ctx, cancel := context.WithTimeout(context.Background(), creditSyncTimeout)
	g, err := a.is.Sync(ctx, done[0], done[1])
	cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	a.syncing = false
	now := time.Now()
	if err == nil {
		t := g.totals()
		for r := range numCreditResources {
			if t[r] < b.res[r].granted {
				err = fmt.Errorf("the issuer granted %d %s, below the %d it granted before", t[r], r, b.res[r].granted)
				break
			}
		}
		if err == nil {
			for r := range numCreditResources {
				b.res[r].granted = t[r]
			}
			a.synced, a.err, b.fresh = done, nil, now
		}
	}
	if err != nil {
		a.err, a.retry = err, now.Add(creditSyncRetry)
		l.st.syncErrors++
	}
	l.wakeLocked()
}
