// peerexec.go owns the peer executor: submissions on a remote segment
// (remote.go), READ (peer region -> local host memory) and WRITE (local
// -> peer), cut into units of the remote's unit size and moved by an
// engine-wide set of lanes over the fair queue (lanepool.go), each unit
// one ReadAt or WriteAt call on the Remote.
//
// Invariants (besides offring.go's):
//   - A remote effect is never guessed: a unit is marked submitted only
//     when its WriteAt says it reached the region (applied or unknown);
//     a unit never started (deadline, cancel, an earlier failure of its
//     task) posted nothing. A failed WRITE task any of whose posted units
//     lies outside its reported prefix has an unknown effect, so the
//     failover rule (retry only with effect none and nothing moved)
//     never replays bytes a peer may hold.
//   - Every task has a context that ends at the group's deadline or at a
//     cancel of the running task: a unit in flight is cut (the Remote
//     closes its lane), and for a WRITE the effect is then the Remote's
//     answer, unknown once anything was posted.
//   - A unit always returns (the Remote bounds every round trip), so the
//     lanes never leave anything in flight: every job drains, except a
//     unit whose device copy's outcome is unknown, which marks its job
//     undrained (the group keeps its loans and charges).
//   - Local device memory (cuda:N) goes through a pinned chunk of the
//     copy staging (copystage.go), one chunk per unit: a WRITE copies
//     the device bytes out and waits for their event before anything is
//     posted (a failed copy posts nothing: effect none); a READ lands in
//     the chunk and is copied in, the unit done only after the copy
//     event. A unit on device memory is at most one chunk.

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
)

// peerLanes is how many units the executor moves at once, over every
// peer: each lane waits on a network round trip, not on a core. A
// Remote bounds its own connections (its lanes); the surplus waits there.
const peerLanes = 16

// peerExec is the engine-wide peer executor.
type peerExec struct{ *lanePool }

func newPeerExec() peerExec { return peerExec{newLanePool(peerLanes, peerUnit)} }

// cut: units are at most the remote's unit (runOffRing asks the group,
// unitSize); one unit never spans two local pieces, so a unit is one
// contiguous host slice handed to the Remote as it is.
func (peerExec) cut() (uint64, bool) { return 64 << 20, true }

func (peerExec) path() string { return "peer" }

func (peerExec) transport() TransportKind { return TransportTCP }

// remoteTarget is a remote group's plan.
type remoteTarget struct {
	seg *RemoteSegment
	// Per request: its context (ends at the deadline or at a cancel of
	// the running task) and that cancel.
	ctx    []context.Context
	cancel []context.CancelFunc
	cut    []atomic.Bool  // a cancel of the running task cut it
	device bool           // some local memory on the TCP route is device memory
	ipcRun []atomic.Int32 // per request on cuda_ipc: ipcIdle, ipcStarted or ipcCut (ipcexec.go)
	// credit is the group's receiver credit (credit.go); nil when
	// credits are off.
	credit *groupCredit
}

// handoff commits task i's receiver credit as its bytes go to the
// Remote: spent from here on, even if the transfer fails.
func (rt *remoteTarget) handoff(i int) {
	if rt.credit != nil {
		rt.credit.commit(i)
	}
}

// unitSize is the unit of g's job on an executor that cuts at size.
func (g *group) unitSize(size uint64) uint64 {
	if g.remote != nil {
		size = min(size, g.remote.seg.info.Unit)
		if g.remote.device {
			size = min(size, uint64(g.b.e.cfg.StagingChunkSize))
		}
		return size
	}
	return size
}

// prepareRemote validates a submission to a remote segment and admits it.
func (e *Engine) prepareRemote(b *Batch, op Op, rs *RemoteSegment, reqs []Request, note *Notification, opts SubmitOptions) (*group, error) {
	const verb = "submit"
	if op != OpRead && op != OpWrite {
		return nil, errorf(KindInvalid, verb, b.name(), "op %d: want read or write", op)
	}
	if note != nil {
		return nil, errorf(KindInvalid, verb, b.name(), "remote segments do not carry notifications yet")
	}
	if len(reqs) == 0 {
		return nil, errorf(KindInvalid, verb, b.name(), "no requests")
	}
	descs := 0
	for i := range reqs {
		descs += max(1, len(reqs[i].Elements))
	}
	if descs > e.cfg.MaxBatchRequests {
		return nil, errorf(KindTooLarge, verb, b.name(), "%d requests carry %d descriptors, more than max_batch_requests (%d)", len(reqs), descs, e.cfg.MaxBatchRequests)
	}
	rs.mu.Lock()
	closed := rs.mu.closed
	rs.mu.Unlock()
	if closed {
		return nil, errorf(KindBusy, verb, b.name(), "segment %s is closing", rs.uri)
	}
	if !rs.perm.allows(op) {
		return nil, errorf(KindPermission, verb, b.name(), "%s on %s, opened %s", op, rs.uri, rs.perm)
	}
	// The batch worker that dispatches and fences every group runs on an
	// io_uring ring.
	if err := e.fileReady(); err != nil {
		return nil, &Error{Op: verb, Name: b.name(), Kind: KindUnavailable, Err: fmt.Errorf("remote segments: %w", err.(*Error).Err)}
	}
	pol, err := e.checkPolicy(opts.QoS)
	if err != nil {
		return nil, wrap(KindInvalid, verb, b.name(), err)
	}
	deadline := e.deadlineOf(opts)
	n := len(reqs)
	g := newGroup(n)
	g.b, g.op, g.deadline, g.lastSubmitted, g.allowed = b, op, deadline, -1, opts.Regions
	g.offRing, g.fileLo = true, ^uint64(0)
	g.remote = &remoteTarget{seg: rs, ctx: make([]context.Context, n), cancel: make([]context.CancelFunc, n), cut: make([]atomic.Bool, n)}
	for i := range reqs {
		k := len(g.ranges)
		if err := g.buildRemote(e, i, &reqs[i]); err != nil {
			g.unmapScratch()
			return nil, &Error{Op: verb, Name: b.name(), Kind: KindOf(err), Err: fmt.Errorf("requests[%d]: %w", i, err)}
		}
		g.addPieces(i, &reqs[i], k)
	}
	g.computeBounds()
	if g.remote.credit, err = e.credit.bind(rs, n, reqExtents(reqs)); err != nil {
		g.unmapScratch()
		return nil, &Error{Op: verb, Name: b.name(), Kind: KindOf(err), Err: err}
	}
	if err := e.admitGroup(verb, g, pol, rs.admit, rs.uri); err != nil {
		return nil, err
	}
	for i := range n {
		g.remote.ctx[i], g.remote.cancel[i] = context.WithDeadline(context.Background(), deadline)
	}
	return g, nil
}

// buildRemote validates request i on a remote segment: registered host
// memory, a range inside the remote region.
func (g *group) buildRemote(e *Engine, i int, r *Request) error {
	if r.Transport != TransportUnspec {
		return detail(KindInvalid, "transport %s: a remote segment moves bytes over its peer; leave transport unset", r.Transport)
	}
	elems := r.Elements
	if len(elems) == 0 {
		if r.Length == 0 {
			return detail(KindInvalid, "zero length")
		}
		elems = []Element{{Address: r.Address, Length: r.Length}}
	} else {
		g.vector = true
		if n := len(elems); n > e.cfg.MaxVectorElements {
			return detail(KindTooLarge, "vector has %d elements, more than max_vector_elements (%d)", n, e.cfg.MaxVectorElements)
		}
	}
	ipc := g.ipcEligible(e, r) // device memory and a same-host peer's device region (ipc.go)
	device := false
	var extent uint64
	for j, el := range elems {
		switch {
		case el.Length == 0 && el.Padding == 0:
			return detail(KindInvalid, "elements[%d]: zero length; omit empty elements", j)
		case el.Length != 0 && el.Padding != 0:
			return detail(KindInvalid, "elements[%d]: both a range (%d bytes) and padding (%d bytes)", j, el.Length, el.Padding)
		}
		if extent+el.bytes() < extent {
			return detail(KindInvalid, "elements[%d]: vector length overflows", j)
		}
		extent += el.bytes()
		if el.Padding != 0 {
			continue
		}
		reg, err := e.resolveFor(g.allowed, el.Address, el.Length)
		if err != nil {
			if len(r.Elements) > 0 {
				return fmt.Errorf("elements[%d]: %w", j, err)
			}
			return err
		}
		if reg.dev != nil {
			device = true
			// A cuda_ipc request copies on the GPU; only the TCP route
			// stages device memory (and cuts its units to a chunk).
			g.remote.device = g.remote.device || !ipc
		}
		g.ranges = append(g.ranges, hostRange{region: reg, lo: el.Address, hi: el.Address + el.Length, req: i})
	}
	if extent > uint64(e.cfg.MaxTransferBytes) {
		return detail(KindTooLarge, "request covers %d bytes, more than max_transfer_bytes (%d)", extent, uint64(e.cfg.MaxTransferBytes))
	}
	if r.Producer != nil {
		if !device {
			return detail(KindInvalid, "a producer event needs device memory; this request touches host memory only")
		}
		if g.producers == nil {
			g.producers = make([]Event, g.n)
		}
		g.producers[i] = r.Producer
	}
	info := g.remote.seg.info
	end := r.TargetOffset + extent
	if end < r.TargetOffset {
		return detail(KindInvalid, "target_offset %d + length %d overflows", r.TargetOffset, extent)
	}
	if end > info.Size {
		return detail(KindRange, "target_offset %d + length %d = %d is beyond region %q of %s (%d bytes)", r.TargetOffset, extent, end, info.Region, info.Peer, info.Size)
	}
	g.ops[i].Offset = r.TargetOffset
	g.routes[i] = routeRemote
	if ipc {
		g.useIPC(i)
	}
	g.policy[i] = reqPolicy{asked: r.Transport}
	g.fileLo, g.fileHi = min(g.fileLo, r.TargetOffset), max(g.fileHi, end)
	g.charge += extent
	return nil
}

// remoteConflict: two groups on one remote region with overlapping
// bytes, one of them a WRITE, keep FIFO order.
func (g *group) remoteConflict(h *group) bool {
	return g.remote != nil && h.remote != nil && g.remote.seg.r == h.remote.seg.r &&
		(g.op == OpWrite || h.op == OpWrite) && g.fileLo < h.fileHi && h.fileLo < g.fileHi
}

// cancelRunning cuts running task j of remote group g (canceller,
// executor.go): its units in flight end through their context (the
// Remote closes the lane a frame is on), later ones never start.
func (peerExec) cancelRunning(g *group, j int) error {
	g.remote.cutTask(j)
	return nil
}

// cutTask marks task j cut and ends its context.
func (rt *remoteTarget) cutTask(j int) {
	rt.cut[j].Store(true)
	rt.cancel[j]()
}

// endRemote releases a remote group's contexts once it finished, and
// refunds the credit of owners never handed off.
func (g *group) endRemote() {
	for _, c := range g.remote.cancel {
		if c != nil {
			c()
		}
	}
	if g.remote.credit != nil {
		g.remote.credit.release()
	}
}

// reqExtents is each request's byte count (padding included: it
// crosses the wire too).
func reqExtents(reqs []Request) []uint64 {
	out := make([]uint64, len(reqs))
	for i, r := range reqs {
		if len(r.Elements) == 0 {
			out[i] = r.Length
			continue
		}
		for _, el := range r.Elements {
			out[i] += el.bytes()
		}
	}
	return out
}

// peerUnit moves unit k of job x with one call on the Remote.
func peerUnit(x *offRing, k int) {
	g := x.g
	u := &x.units[k]
	rt := g.remote
	if err := x.startable(k); err != nil {
		x.resolve(k, 0, err)
		return
	}
	if h := g.b.e.peerHandoff; h != nil {
		h(g, u.task)
	}
	ctx := rt.ctx[u.task]
	if ctx.Err() != nil {
		x.resolve(k, 0, rt.ctxErr(g, u, ctx))
		return
	}
	p := u.pieces[0] // cut byPiece: one local piece per unit
	buf := p.host
	switch p.kind {
	case piecePad:
		buf = make([]byte, u.n) // zeros on WRITE; discarded on READ
	case pieceDevice:
		peerDeviceUnit(x, k, ctx, p)
		return
	}
	if g.op == OpRead {
		rt.handoff(u.task)
		if err := rt.seg.r.ReadAt(ctx, buf, u.off); err != nil {
			x.resolve(k, 0, rt.unitErr(g, u, ctx, err))
			return
		}
		g.b.e.st.peerUnits.Add(1)
		x.resolve(k, u.n, nil)
		return
	}
	got, err := peerWrite(x, k, ctx, buf)
	x.resolve(k, got, err)
}

// peerWrite posts buf as unit k's bytes and returns the unit's outcome
// (marking it submitted unless the Remote's effect is none).
func peerWrite(x *offRing, k int, ctx context.Context, buf []byte) (uint64, error) {
	g, u, rt := x.g, &x.units[k], x.g.remote
	rt.handoff(u.task)
	effect, err := rt.seg.r.WriteAt(ctx, buf, u.off)
	if err == nil && effect != EffectApplied {
		err = fmt.Errorf("the remote returned no error with effect %s", effect)
		if effect == EffectNone {
			effect = EffectUnknown // a contradiction is not proof that nothing was posted
		}
	}
	if effect != EffectNone {
		x.markSubmitted(k)
	}
	if err != nil {
		return 0, rt.unitErr(g, u, ctx, err)
	}
	g.b.e.st.peerUnits.Add(1)
	return u.n, nil
}

// peerDeviceUnit moves unit k, whose local piece p is device memory,
// through a pinned chunk of the copy staging. A WRITE's device bytes are
// confirmed in the chunk (their event completed) before anything is
// posted; a READ's unit ends only after its copy into device memory
// completed. A copy of unknown outcome keeps the chunk and marks the job
// undrained.
func peerDeviceUnit(x *offRing, k int, ctx context.Context, p piece) {
	g, u, rt := x.g, &x.units[k], x.g.remote
	e := g.b.e
	cut := g.deadline.Add(e.cfg.QuiesceGrace.D())
	s, err := e.stage()
	if err != nil {
		x.resolve(k, 0, unitErr(g, u, kindOr(err, KindUnavailable), err))
		return
	}
	c, err := s.lease(ctx, cut)
	if err != nil {
		x.resolve(k, 0, rt.unitErr(g, u, ctx, err))
		return
	}
	c = c[:u.n]
	copyFailed := func(err error) {
		if errors.Is(err, ErrUncertain) {
			s.retain()
			x.mu.Lock()
			x.undrained = true
			x.mu.Unlock()
		} else {
			s.release(c)
		}
		x.resolve(k, 0, unitErr(g, u, KindIO, err))
	}
	if g.op == OpWrite {
		if err := e.copyChunk(c, p.dev, p.addr, false, cut); err != nil {
			copyFailed(err) // nothing was posted: effect none
			return
		}
		got, err := peerWrite(x, k, ctx, c)
		s.release(c) // WriteAt returned: its lanes no longer read c
		x.resolve(k, got, err)
		return
	}
	rt.handoff(u.task)
	if err := rt.seg.r.ReadAt(ctx, c, u.off); err != nil {
		s.release(c)
		x.resolve(k, 0, rt.unitErr(g, u, ctx, err))
		return
	}
	if err := e.copyChunk(c, p.dev, p.addr, true, cut); err != nil {
		copyFailed(err)
		return
	}
	s.release(c)
	e.st.peerUnits.Add(1)
	x.resolve(k, u.n, nil)
}

// ctxErr is why a unit of a task whose context ended did not start.
func (rt *remoteTarget) ctxErr(g *group, u *unit, ctx context.Context) error {
	if rt.cut[u.task].Load() {
		return unitErr(g, u, KindIO, errCutRunning)
	}
	return unitErr(g, u, KindTimeout, errors.New("deadline passed before these bytes started"))
}

// unitErr classifies a Remote's failure: a cut by cancel or deadline
// first (the Remote saw only a closed lane), else the kind it carries.
func (rt *remoteTarget) unitErr(g *group, u *unit, ctx context.Context, err error) error {
	switch {
	case rt.cut[u.task].Load():
		return unitErr(g, u, KindIO, fmt.Errorf("%w: %v", errCutRunning, err))
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return unitErr(g, u, KindTimeout, fmt.Errorf("deadline passed during the transfer: %w", err))
	}
	return unitErr(g, u, kindByIs(err), err)
}

// kindByIs is the engine kind an error from another package matches
// through errors.Is (the peer package's errors do), else KindIO.
func kindByIs(err error) Kind {
	if k := KindOf(err); k != KindUnknown {
		return k
	}
	for _, k := range Kinds() {
		if k != KindUnknown && errors.Is(err, kindError(k)) {
			return k
		}
	}
	return KindIO
}
