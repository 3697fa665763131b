package engine_test

// credit_test.go: receiver credits on the sending side, against the
// fake Remote (fakeremote_test.go) and a fake issuer: a missing binding,
// cumulative manual updates and their refusals, the freshness TTL, a
// starved head that leaves the dispatch window to other peers, refund
// before the handoff, deactivate's fence and BatchBusy (a lost WRITE ack
// keeps it for good), and the automatic window's one shared sync.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orbitefs/orbitefs/config"
	"github.com/orbitefs/orbitefs/engine"
)

// creditEngine is an engine with receiver credits on.
func creditEngine(t *testing.T, mut func(*config.Engine)) *engine.Engine {
	return newEngine(t, func(c *config.Engine) {
		c.MaxReceiverCreditSessions = 4
		if mut != nil {
			mut(c)
		}
	})
}

// creditSeg opens a fake peer region at addr (epoch 7).
func creditSeg(t *testing.T, e *engine.Engine, addr string) (*engine.RemoteSegment, *fakeRemote) {
	t.Helper()
	needIOUring(t)
	f := newFakeRemote(64<<10, engine.PermReadWrite, peerUnit)
	f.info.Address = addr
	s, err := e.OpenRemoteSegment("tcp://"+addr+"/kv", f, engine.PermReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	return s, f
}

func grant(peer string, seq, bytes, reqs uint64) engine.CreditUpdate {
	return engine.CreditUpdate{Peer: peer, Epoch: 7, Sequence: seq, Totals: []engine.CreditTotal{
		{Resource: engine.CreditDataBytes, Total: bytes}, {Resource: engine.CreditRequestSlots, Total: reqs}}}
}

func binding(t *testing.T, e *engine.Engine, peer string) engine.CreditBindingStats {
	t.Helper()
	for _, b := range e.ReceiverCreditStats().Bindings {
		if b.Peer == peer {
			return b
		}
	}
	t.Fatalf("no binding for %s in %+v", peer, e.ReceiverCreditStats())
	return engine.CreditBindingStats{}
}

// submit queues reqs on seg in a new sealed batch.
func submitSealed(t *testing.T, e *engine.Engine, op engine.Op, seg engine.Target, reqs []engine.Request) *engine.Batch {
	t.Helper()
	b, err := e.AllocateBatch(len(reqs))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SubmitWith(op, seg, reqs, nil, engine.SubmitOptions{Timeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	b.Seal()
	t.Cleanup(func() { b.CancelAll(); b.Wait(10 * time.Second); b.Free() })
	return b
}

func waitDone(t *testing.T, b *engine.Batch, want engine.State) {
	t.Helper()
	st, err := b.Wait(10 * time.Second)
	if err != nil || st != want {
		t.Fatalf("batch: %v %v, want %v", st, err, want)
	}
}

func TestCreditManual(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	seg, f := creditSeg(t, e, peer)
	host := register(t, e, 16<<10)
	rd := func(off uint64) []engine.Request {
		return []engine.Request{{Address: host.BaseAddress() + off, TargetOffset: off, Length: 4096}}
	}

	// No binding: refused at preparation, nothing reaches the peer.
	_, err := e.SubmitAndWait(engine.OpRead, seg, rd(0), ioTimeout)
	wantKind(t, err, engine.KindPermission)
	if !strings.Contains(err.Error(), "no receiver credit binding for 127.0.0.1:1 epoch 7") {
		t.Fatal(err)
	}
	if err := e.ActivateReceiverCredit(peer, 7, 0); err != nil {
		t.Fatal(err)
	}
	wantKind(t, e.ActivateReceiverCredit(peer, 7, 0), engine.KindExists)
	wantKind(t, e.ActivateReceiverCredit(peer, 8, 0), engine.KindBusy)

	// Activated but never updated: the head waits, the peer sees nothing.
	b := submitSealed(t, e, engine.OpRead, seg, rd(0))
	waitFor(t, "the head to wait for credit", func() bool { return e.ReceiverCreditStats().Waiting == 1 })
	if n := f.reads.Load(); n != 0 {
		t.Fatalf("a starved head reached the peer %d times", n)
	}
	if err := e.ApplyReceiverCredit(grant(peer, 1, 8192, 1)); err != nil {
		t.Fatal(err)
	}
	waitDone(t, b, engine.StateCompleted)
	s := binding(t, e, peer)
	if d, r := s.Resource(engine.CreditDataBytes), s.Resource(engine.CreditRequestSlots); d.Granted != 8192 || d.Consumed != 4096 || d.Available != 4096 || r.Consumed != 1 || r.Available != 0 || s.Permits != 0 || s.Open != 0 {
		t.Fatalf("after one owner: %+v", s)
	}

	// Refusals change nothing; an old sequence is ignored.
	for _, tc := range []struct {
		u    engine.CreditUpdate
		text string
	}{
		{grant(peer, 2, 4096, 2), "data_bytes total 4096 is below the 8192 already granted"},
		{engine.CreditUpdate{Peer: peer, Epoch: 7, Sequence: 2, Totals: []engine.CreditTotal{{Resource: engine.CreditRequestSlots, Total: 3}, {Resource: engine.CreditRequestSlots, Total: 4}}}, "request_slots appears twice"},
	} {
		err := e.ApplyReceiverCredit(tc.u)
		wantKind(t, err, engine.KindInvalid)
		if !strings.Contains(err.Error(), tc.text) {
			t.Fatalf("%v: want %q", err, tc.text)
		}
	}
	if err := e.ApplyReceiverCredit(grant(peer, 1, 1<<20, 100)); err != nil {
		t.Fatal(err)
	}
	if s := binding(t, e, peer); s.Ignored != 1 || s.Resource(engine.CreditDataBytes).Granted != 8192 || s.Sequence != 1 {
		t.Fatalf("an old sequence changed the binding: %+v", s)
	}
	// One more request slot: the same bytes run again.
	if err := e.ApplyReceiverCredit(grant(peer, 2, 8192, 2)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SubmitAndWait(engine.OpRead, seg, rd(4096), ioTimeout); err != nil {
		t.Fatal(err)
	}

	// Freshness: stale totals authorize no new reservation, even with
	// balance left; the next update does.
	u := grant(peer, 3, 64<<10, 10)
	u.FreshnessTTL = time.Millisecond
	if err := e.ApplyReceiverCredit(u); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	b = submitSealed(t, e, engine.OpRead, seg, rd(8192))
	waitFor(t, "the head to wait for fresh credit", func() bool { return e.ReceiverCreditStats().Waiting == 1 })
	if s := binding(t, e, peer); s.Fresh || s.Resource(engine.CreditDataBytes).Available == 0 {
		t.Fatalf("stale binding: %+v", s)
	}
	if err := e.ApplyReceiverCredit(grant(peer, 4, 64<<10, 10)); err != nil {
		t.Fatal(err)
	}
	waitDone(t, b, engine.StateCompleted)

	if err := e.DeactivateReceiverCredit(peer, 7); err != nil {
		t.Fatal(err)
	}
	_, err = e.SubmitAndWait(engine.OpRead, seg, rd(0), ioTimeout)
	wantKind(t, err, engine.KindPermission)
}

// A head starved of credit for one peer waits without the dispatch
// window: a submission to another peer passes it.
func TestCreditStarvedHeadLeavesWindow(t *testing.T) {
	e := creditEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxDispatchOwners = 1
	})
	starved, _ := creditSeg(t, e, "127.0.0.1:1")
	other, _ := creditSeg(t, e, "127.0.0.1:2")
	host := register(t, e, 16<<10)
	for _, p := range []string{"127.0.0.1:1", "127.0.0.1:2"} {
		if err := e.ActivateReceiverCredit(p, 7, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ApplyReceiverCredit(grant("127.0.0.1:1", 1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyReceiverCredit(grant("127.0.0.1:2", 1, 1<<20, 16)); err != nil {
		t.Fatal(err)
	}
	a := submitSealed(t, e, engine.OpRead, starved, []engine.Request{{Address: host.BaseAddress(), Length: 4096}})
	waitFor(t, "the starved head to wait", func() bool { return e.ReceiverCreditStats().Waiting == 1 })
	b := submitSealed(t, e, engine.OpRead, other, []engine.Request{{Address: host.BaseAddress() + 4096, Length: 4096}})
	waitDone(t, b, engine.StateCompleted)
	if q := e.Stats().RuntimeQueue; q.DispatchOwners != 0 {
		t.Fatalf("the starved head holds the window: %+v", q)
	}
	if err := e.ApplyReceiverCredit(grant("127.0.0.1:1", 2, 4096, 1)); err != nil {
		t.Fatal(err)
	}
	waitDone(t, a, engine.StateCompleted)
}

// An owner cancelled after its reservation and before its handoff gets
// its credit back; a committed one does not, even when it fails.
func TestCreditRefundBeforeHandoff(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	seg, f := creditSeg(t, e, peer)
	host := register(t, e, 16<<10)
	if err := e.ActivateReceiverCredit(peer, 7, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyReceiverCredit(grant(peer, 1, 8192, 2)); err != nil {
		t.Fatal(err)
	}
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.HoldPeerHandoff(func(int) {
		once.Do(func() { close(held); <-release })
	})
	b := submitSealed(t, e, engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress(), Length: 4096}})
	<-held
	if s := binding(t, e, peer); s.Permits != 1 || s.Resource(engine.CreditDataBytes).Reserved != 4096 {
		t.Fatalf("reserved before handoff: %+v", s)
	}
	if err := b.Cancel(0); err != nil {
		t.Fatal(err)
	}
	close(release)
	st, _ := b.Wait(10 * time.Second)
	if st == engine.StateCompleted {
		t.Fatal("the cancelled owner completed")
	}
	s := binding(t, e, peer)
	if d := s.Resource(engine.CreditDataBytes); s.Permits != 0 || s.Refunds != 1 || d.Reserved != 0 || d.Consumed != 0 || d.Available != 8192 || f.reads.Load() != 0 {
		t.Fatalf("after a cancel before handoff: %+v (peer reads %d)", s, f.reads.Load())
	}

	// Committed, then failed: spent, and no completed_total.
	f.mu.Lock()
	f.size = 0 // every call fails Range
	f.mu.Unlock()
	_, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress(), Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindRange)
	s = binding(t, e, peer)
	if d := s.Resource(engine.CreditDataBytes); d.Consumed != 4096 || d.Available != 4096 || s.Open != 0 || s.Completed[1] != 0 {
		t.Fatalf("after a failed committed owner: %+v", s)
	}
}

// Deactivate fences new work at once and is busy while a committed owner
// runs; a lost WRITE ack keeps the epoch fenced for good, and a fresh
// epoch cannot replace it.
func TestCreditDeactivateFences(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	seg, f := creditSeg(t, e, peer)
	host := register(t, e, 16<<10)
	if err := e.ActivateReceiverCredit(peer, 7, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyReceiverCredit(grant(peer, 1, 1<<20, 16)); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.hold, f.holdEnd = make(chan struct{}), 4096
	f.mu.Unlock()
	b := submitSealed(t, e, engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress(), Length: 4096}})
	waitFor(t, "the owner to reach the peer", func() bool { return f.reads.Load() == 1 })
	err := e.DeactivateReceiverCredit(peer, 7)
	wantKind(t, err, engine.KindBusy)
	if !strings.Contains(err.Error(), "1 committed owner(s) without a completion receipt") {
		t.Fatal(err)
	}
	_, err = e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress() + 4096, TargetOffset: 4096, Length: 4096}}, ioTimeout)
	wantKind(t, err, engine.KindBusy)
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()
	waitDone(t, b, engine.StateCompleted)
	if err := e.DeactivateReceiverCredit(peer, 7); err != nil {
		t.Fatal(err)
	}

	// A WRITE whose ack is lost.
	if err := e.ActivateReceiverCredit(peer, 7, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyReceiverCredit(grant(peer, 1, 1<<20, 16)); err != nil {
		t.Fatal(err)
	}
	unknown := engine.EffectUnknown
	f.mu.Lock()
	f.failOff, f.failEffect = 0, &unknown
	f.mu.Unlock()
	_, err = e.SubmitAndWait(engine.OpWrite, seg, []engine.Request{{Address: host.BaseAddress(), Length: 4096}}, ioTimeout)
	if err == nil {
		t.Fatal("the write with a lost ack succeeded")
	}
	for range 2 { // after local drain too
		err = e.DeactivateReceiverCredit(peer, 7)
		wantKind(t, err, engine.KindBusy)
		if !strings.Contains(err.Error(), "acknowledgement was lost") {
			t.Fatal(err)
		}
	}
	err = e.ActivateReceiverCredit(peer, 8, 0)
	wantKind(t, err, engine.KindBusy)
	if !strings.Contains(err.Error(), "a fresh epoch cannot replace it") {
		t.Fatal(err)
	}
	if s := binding(t, e, peer); !s.LostAck || !s.Fenced || s.Open != 1 {
		t.Fatalf("after a lost ack: %+v", s)
	}
}

// fakeIssuer is a receiver's issuer in memory: a fixed window, grants
// window + completed.
type fakeIssuer struct {
	window engine.CreditGrant
	syncs  atomic.Int64
	mu     sync.Mutex
	closed []uint64 // completed totals at close
	done   [2]uint64
}

func (f *fakeIssuer) Connect(context.Context, uint8) (engine.CreditGrant, error) {
	return f.window, nil
}

func (f *fakeIssuer) Sync(_ context.Context, bytes, reqs uint64) (engine.CreditGrant, error) {
	f.syncs.Add(1)
	f.mu.Lock()
	f.done = [2]uint64{bytes, reqs}
	f.mu.Unlock()
	g := f.window
	g.Bytes += bytes
	g.Requests += reqs
	return g, nil
}

func (f *fakeIssuer) Close(_ context.Context, bytes, reqs uint64) error {
	f.mu.Lock()
	f.closed = []uint64{bytes, reqs}
	f.mu.Unlock()
	return nil
}

func (f *fakeIssuer) Release() {}

// Two heads starved on one automatic binding share one sync, performed
// by a worker (held at the sync, so the other head is seen waiting for
// it rather than racing it).
func TestCreditAutomaticSharedSync(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	seg, f := creditSeg(t, e, peer)
	host := register(t, e, 32<<10)
	is := &fakeIssuer{window: engine.CreditGrant{Bytes: 8192, Requests: 2}}
	if err := e.ConnectReceiverCredit(context.Background(), peer, 7, is, 0); err != nil {
		t.Fatal(err)
	}
	// One request larger than the window: it could never dispatch.
	_, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress(), Length: 12288}}, ioTimeout)
	wantKind(t, err, engine.KindExhausted)

	two := []engine.Request{{Address: host.BaseAddress(), Length: 4096}, {Address: host.BaseAddress() + 4096, TargetOffset: 4096, Length: 4096}}
	if _, err := e.SubmitAndWait(engine.OpRead, seg, two, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if n := is.syncs.Load(); n != 0 {
		t.Fatalf("%d syncs while the window had room", n)
	}
	var entered atomic.Int64
	release := make(chan struct{})
	e.HoldCreditSync(func() {
		entered.Add(1)
		<-release
	})
	b1 := submitSealed(t, e, engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress() + 8192, Length: 4096}})
	b2 := submitSealed(t, e, engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress() + 12288, Length: 4096}})
	// A head's wait and its decision to sync are recorded together, so
	// once both heads wait, every sync they will begin is counted.
	waitFor(t, "both heads to wait", func() bool { return e.ReceiverCreditStats().Waiting == 2 })
	if n := e.ReceiverCreditStats().Syncs; n != 1 {
		t.Fatalf("%d syncs begun for two waiting heads, want one shared", n)
	}
	waitFor(t, "the sync to reach the issuer", func() bool { return entered.Load() == 1 })
	close(release)
	waitDone(t, b1, engine.StateCompleted)
	waitDone(t, b2, engine.StateCompleted)
	if n := is.syncs.Load(); n != 1 {
		t.Fatalf("issuer saw %d syncs, want 1", n)
	}
	if is.done != [2]uint64{8192, 2} {
		t.Fatalf("the sync reported completed %v, want 8192 bytes, 2 requests", is.done)
	}

	// Disconnect is busy while a committed owner runs, then returns the
	// window with the completed totals.
	f.mu.Lock()
	f.hold, f.holdEnd = make(chan struct{}), 4096
	f.mu.Unlock()
	e.HoldCreditSync(nil)
	b := submitSealed(t, e, engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress(), Length: 4096}})
	waitFor(t, "the owner to reach the peer", func() bool { return binding(t, e, peer).Open == 1 })
	wantKind(t, e.DisconnectReceiverCredit(context.Background(), peer), engine.KindBusy)
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()
	waitDone(t, b, engine.StateCompleted)
	if err := e.DisconnectReceiverCredit(context.Background(), peer); err != nil {
		t.Fatal(err)
	}
	if len(is.closed) != 2 || is.closed[0] != 20480 || is.closed[1] != 5 {
		t.Fatalf("close reported %v, want 20480 bytes, 5 requests", is.closed)
	}
	if s := e.ReceiverCreditStats(); s.Sessions != 0 {
		t.Fatalf("after disconnect: %+v", s)
	}
}

// closeFails is an issuer whose receiver is gone: close fails.
type closeFails struct {
	fakeIssuer
	released atomic.Bool
}

func (f *closeFails) Close(context.Context, uint64, uint64) error {
	return errors.New("the receiver restarted")
}

func (f *closeFails) Release() { f.released.Store(true) }

// A disconnect that cannot reach a restarted receiver keeps the binding
// fenced; once it is drained, connecting at the new epoch replaces it.
func TestCreditReconnectAfterReceiverRestart(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	old := &closeFails{fakeIssuer: fakeIssuer{window: engine.CreditGrant{Bytes: 8192, Requests: 2}}}
	if err := e.ConnectReceiverCredit(context.Background(), peer, 7, old, 0); err != nil {
		t.Fatal(err)
	}
	fresh := &fakeIssuer{window: engine.CreditGrant{Bytes: 8192, Requests: 2}}
	wantKind(t, e.ConnectReceiverCredit(context.Background(), peer, 8, fresh, 0), engine.KindBusy)
	if err := e.DisconnectReceiverCredit(context.Background(), peer); err == nil {
		t.Fatal("a disconnect whose close failed succeeded")
	}
	if s := binding(t, e, peer); !s.Fenced || s.Epoch != 7 {
		t.Fatalf("after the failed disconnect: %+v", s)
	}
	if err := e.ConnectReceiverCredit(context.Background(), peer, 8, fresh, 0); err != nil {
		t.Fatal(err)
	}
	if s := binding(t, e, peer); s.Fenced || s.Epoch != 8 || e.ReceiverCreditStats().Sessions != 1 {
		t.Fatalf("after reconnecting: %+v", s)
	}
	waitFor(t, "the old issuer to be released", old.released.Load)
}

// A head with credit that waits for the dispatch window holds no credit
// while it waits: nothing is charged partially.
func TestCreditNotHeldWhileWaitingForWindow(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, func(c *config.Engine) {
		c.RuntimeQueue.Enabled = true
		c.RuntimeQueue.MaxDispatchOwners = 1
	})
	seg, _ := creditSeg(t, e, peer)
	host := register(t, e, 16<<10)
	if err := e.ActivateReceiverCredit(peer, 7, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyReceiverCredit(grant(peer, 1, 8192, 2)); err != nil {
		t.Fatal(err)
	}
	release := e.HoldWindowForTest(1, 0)
	b := submitSealed(t, e, engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress(), Length: 4096}})
	waitFor(t, "the head to wait for the window", func() bool { return e.Stats().RuntimeQueue.Waiting == 1 })
	if s := binding(t, e, peer); s.Permits != 0 || s.Resource(engine.CreditDataBytes).Reserved != 0 {
		t.Fatalf("credit held while waiting for the window: %+v", s)
	}
	release()
	waitDone(t, b, engine.StateCompleted)
	if s := binding(t, e, peer); s.Resource(engine.CreditDataBytes).Consumed != 4096 || s.Permits != 0 {
		t.Fatalf("after dispatch: %+v", s)
	}
}

// A head waiting on a binding that is deactivated fails at once (busy),
// with nothing sent.
func TestCreditFenceFailsWaitingHead(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	seg, f := creditSeg(t, e, peer)
	host := register(t, e, 16<<10)
	if err := e.ActivateReceiverCredit(peer, 7, 0); err != nil {
		t.Fatal(err)
	}
	b := submitSealed(t, e, engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress(), Length: 4096}})
	waitFor(t, "the head to wait", func() bool { return e.ReceiverCreditStats().Waiting == 1 })
	if err := e.DeactivateReceiverCredit(peer, 7); err != nil {
		t.Fatal(err)
	}
	st, err := b.Wait(5 * time.Second)
	if err != nil || st != engine.StateFailed || f.reads.Load() != 0 {
		t.Fatalf("the waiting head after deactivate: %v %v, peer reads %d", st, err, f.reads.Load())
	}
	if ts, _ := b.TaskStatus(0); ts.Err == nil || !strings.Contains(ts.Err.Error(), "is fenced") || engine.KindOf(ts.Err) != engine.KindBusy {
		t.Fatalf("task: %+v", ts)
	}
}

// flakyIssuer fails its first sync.
type flakyIssuer struct {
	fakeIssuer
	failed atomic.Bool
}

func (f *flakyIssuer) Sync(ctx context.Context, bytes, reqs uint64) (engine.CreditGrant, error) {
	if !f.failed.Swap(true) {
		return engine.CreditGrant{}, errors.New("the receiver is busy")
	}
	return f.fakeIssuer.Sync(ctx, bytes, reqs)
}

// A failed sync is reported and tried again (no sooner than its retry
// interval) by the next head that needs it; the head then goes on.
func TestCreditSyncFailureRetried(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	seg, _ := creditSeg(t, e, peer)
	host := register(t, e, 16<<10)
	is := &flakyIssuer{fakeIssuer: fakeIssuer{window: engine.CreditGrant{Bytes: 4096, Requests: 1}}}
	if err := e.ConnectReceiverCredit(context.Background(), peer, 7, is, 0); err != nil {
		t.Fatal(err)
	}
	rd := []engine.Request{{Address: host.BaseAddress(), Length: 4096}}
	if _, err := e.SubmitAndWait(engine.OpRead, seg, rd, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if _, err := e.SubmitAndWait(engine.OpRead, seg, rd, ioTimeout); err != nil {
		t.Fatal(err)
	}
	s := e.ReceiverCreditStats()
	if s.SyncErrors != 1 || s.Syncs != 2 || is.syncs.Load() != 1 || s.Bindings[0].SyncError != "" {
		t.Fatalf("after a failed and a retried sync: %+v (issuer syncs %d)", s, is.syncs.Load())
	}
}

// Owners reserve as they dispatch: a submission of four requests under a
// manual grant of two sends two, holds no credit for the other two while
// they wait (still pending, so cancellable), and sends them once an
// update grants more. A fifth request, cancelled while it waits, never
// spends credit.
func TestCreditOwnersReserveAsTheyDispatch(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	seg, f := creditSeg(t, e, peer)
	host := register(t, e, 32<<10)
	if err := e.ActivateReceiverCredit(peer, 7, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyReceiverCredit(grant(peer, 1, 8192, 2)); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.hold, f.holdEnd = make(chan struct{}), 64<<10
	f.mu.Unlock()
	var reqs []engine.Request
	for i := range uint64(5) {
		reqs = append(reqs, engine.Request{Address: host.BaseAddress() + i*4096, TargetOffset: i * 4096, Length: 4096})
	}
	b := submitSealed(t, e, engine.OpRead, seg, reqs)
	waitFor(t, "two owners at the peer and the third waiting", func() bool {
		bs := binding(t, e, peer)
		return bs.Open == 2 && e.ReceiverCreditStats().Waiting == 1
	})
	bs := binding(t, e, peer)
	if r := bs.Resource(engine.CreditDataBytes); bs.Permits != 0 || r.Reserved != 0 || r.Consumed != 8192 || r.Available != 0 {
		t.Fatalf("while the rest wait: permits %d, data_bytes %+v", bs.Permits, r)
	}
	for i := 2; i < 5; i++ {
		if st, _ := b.TaskStatus(i); st.State != engine.TaskPending {
			t.Fatalf("requests[%d] is %v while it waits for credit, want pending", i, st.State)
		}
	}
	if err := b.Cancel(4); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()
	if err := e.ApplyReceiverCredit(grant(peer, 2, 16384, 4)); err != nil {
		t.Fatal(err)
	}
	st, _ := b.Wait(10 * time.Second)
	for i := range 4 {
		if s, _ := b.TaskStatus(i); s.State != engine.TaskCompleted {
			t.Fatalf("requests[%d]: %v (batch %v)", i, s.State, st)
		}
	}
	bs = binding(t, e, peer)
	if r := bs.Resource(engine.CreditDataBytes); r.Consumed != 16384 || r.Reserved != 0 || bs.Permits != 0 || bs.Open != 0 {
		t.Fatalf("after: permits %d open %d, data_bytes %+v", bs.Permits, bs.Open, r)
	}
}

// An automatic window smaller than a submission: the submission is
// accepted (each request fits the window) and goes out owner by owner,
// the worker syncing as owners complete; a single request larger than
// the window is still refused at submit.
func TestCreditAutomaticSubmissionLargerThanWindow(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	seg, _ := creditSeg(t, e, peer)
	host := register(t, e, 32<<10)
	is := &fakeIssuer{window: engine.CreditGrant{Bytes: 8192, Requests: 2}}
	if err := e.ConnectReceiverCredit(context.Background(), peer, 7, is, 0); err != nil {
		t.Fatal(err)
	}
	var reqs []engine.Request
	for i := range uint64(6) {
		reqs = append(reqs, engine.Request{Address: host.BaseAddress() + i*4096, TargetOffset: i * 4096, Length: 4096})
	}
	if _, err := e.SubmitAndWait(engine.OpWrite, seg, reqs, ioTimeout); err != nil {
		t.Fatal(err)
	}
	if n := is.syncs.Load(); n < 2 {
		t.Fatalf("%d syncs for six owners through a window of two, want at least 2", n)
	}
	bs := binding(t, e, peer)
	if bs.Completed != [2]uint64{24576, 6} || bs.Resource(engine.CreditDataBytes).Consumed != 24576 {
		t.Fatalf("after: %+v", bs)
	}
	_, err := e.SubmitAndWait(engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress(), Length: 12288}}, ioTimeout)
	wantKind(t, err, engine.KindExhausted)
}

// A sync begun by a group stopped mid-way (its next owner lacks credit)
// is the one sync of the binding: another batch's head waiting on the
// same binding meanwhile waits for its answer instead of asking again.
// The hook holds the first sync at the issuer's door, so the second head
// meets it in flight every run.
func TestCreditFeedSyncShared(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	seg, _ := creditSeg(t, e, peer)
	host := register(t, e, 32<<10)
	is := &fakeIssuer{window: engine.CreditGrant{Bytes: 8192, Requests: 2}}
	if err := e.ConnectReceiverCredit(context.Background(), peer, 7, is, 0); err != nil {
		t.Fatal(err)
	}
	var entered atomic.Int64
	release := make(chan struct{})
	e.HoldCreditSync(func() {
		entered.Add(1)
		<-release
	})
	var reqs []engine.Request
	for i := range uint64(4) {
		reqs = append(reqs, engine.Request{Address: host.BaseAddress() + i*4096, TargetOffset: i * 4096, Length: 4096})
	}
	a := submitSealed(t, e, engine.OpRead, seg, reqs)
	waitFor(t, "the group's sync to reach the issuer", func() bool { return entered.Load() == 1 })
	if bs := binding(t, e, peer); bs.Completed != [2]uint64{8192, 2} {
		t.Fatalf("the group synced before its first two owners completed: %+v", bs)
	}
	b := submitSealed(t, e, engine.OpRead, seg, []engine.Request{{Address: host.BaseAddress() + 16384, Length: 4096}})
	waitFor(t, "both to wait", func() bool { return e.ReceiverCreditStats().Waiting == 2 })
	if n := e.ReceiverCreditStats().Syncs; n != 1 {
		t.Fatalf("%d syncs begun while one was in flight, want 1", n)
	}
	close(release)
	e.HoldCreditSync(nil)
	waitDone(t, a, engine.StateCompleted)
	waitDone(t, b, engine.StateCompleted)
	if bs := binding(t, e, peer); bs.Completed != [2]uint64{20480, 5} {
		t.Fatalf("after: %+v", bs)
	}
}

// A fence reaches requests waiting mid-submission too: deactivate while
// the first request is at the peer and the second waits for credit
// fails the waiting rest (busy, never sent); the one at the peer
// completes, and deactivate succeeds once it has its receipt.
func TestCreditFenceFailsWaitingOwners(t *testing.T) {
	const peer = "127.0.0.1:1"
	e := creditEngine(t, nil)
	seg, f := creditSeg(t, e, peer)
	host := register(t, e, 16<<10)
	if err := e.ActivateReceiverCredit(peer, 7, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.ApplyReceiverCredit(grant(peer, 1, 4096, 1)); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.hold, f.holdEnd = make(chan struct{}), 64<<10
	f.mu.Unlock()
	b := submitSealed(t, e, engine.OpRead, seg, []engine.Request{
		{Address: host.BaseAddress(), Length: 4096},
		{Address: host.BaseAddress() + 4096, TargetOffset: 4096, Length: 4096},
		{Address: host.BaseAddress() + 8192, TargetOffset: 8192, Length: 4096}})
	waitFor(t, "one request at the peer, the rest waiting", func() bool {
		return binding(t, e, peer).Open == 1 && e.ReceiverCreditStats().Waiting == 1
	})
	wantKind(t, e.DeactivateReceiverCredit(peer, 7), engine.KindBusy)
	for i := 1; i < 3; i++ {
		waitFor(t, "the waiting requests to fail", func() bool {
			ts, _ := b.TaskStatus(i)
			return ts.State == engine.TaskFailed
		})
		if ts, _ := b.TaskStatus(i); engine.KindOf(ts.Err) != engine.KindBusy || !strings.Contains(ts.Err.Error(), "is fenced") {
			t.Fatalf("requests[%d]: %+v", i, ts)
		}
	}
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()
	b.Wait(5 * time.Second)
	if ts, _ := b.TaskStatus(0); ts.State != engine.TaskCompleted {
		t.Fatalf("requests[0]: %+v", ts)
	}
	if n := f.reads.Load(); n != 1 {
		t.Fatalf("%d reads reached the peer, want 1", n)
	}
	if err := e.DeactivateReceiverCredit(peer, 7); err != nil {
		t.Fatal(err)
	}
}
