// ipcexec.go owns the CUDA IPC executor: requests between local device
// memory and a same-host peer's device region (ipc.go), each unit one
// device-to-device copy on a pooled stream of the local device into or
// out of the region's mapping, confirmed by an event; and the ordered
// legs of a submission that mixes such requests with TCP ones.
//
// Invariants (besides offring.go's):
//   - A unit is confirmed by its event before it resolves; a copy queued
//     and not confirmed by deadline + quiesce_grace, or whose event
//     reports an error, is uncertain: the job is undrained (the group
//     ends unquiesced and keeps its loans and admission), the mapping is
//     retained for good and the stream never reused, a WRITE's effect is
//     unknown, and nothing is replayed (no failover leads here).
//   - A unit starts only while its peer reports no error (same epoch):
//     otherwise it fails with nothing queued (effect none), and the
//     segment's mappings close once idle.
//   - Cancel: a task whose copies were not yet started is cut (cancelled,
//     nothing moved); once one started, Cancel returns KindUnavailable,
//     as the reference design does for a running NVLink transfer.
//   - Mixed submissions run in input order: a group whose requests use
//     cuda_ipc and another route runs in legs, each a maximal run of
//     consecutive requests on one executor, leg k+1 starting only after
//     every task of leg k reported; after a leg with a failed task the
//     later legs are not started (their tasks fail, nothing moved).

package engine

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ipcLanes is how many copies the executor keeps queued at once over
// every device: each lane waits on its copy's event, not on a core. One
// device-to-device copy already drives a GPU's memory at its rate, so
// more copies at once only share it (and its DRAM pages) among
// themselves; a few keep the next copy queued while a lane wakes from
// the last one's event, on each of a host's devices.
const ipcLanes = 4

// ipcUnit is the largest device-to-device copy of one unit: a request of
// up to max_transfer_bytes' default is one copy (as a user's own
// cuMemcpyDtoDAsync of it would be), so the per-copy cost (queue, record,
// the lane's wake on its event) is paid once per request, and a copy of
// this size lasts far longer than that cost (about half a millisecond on
// an H200).
const ipcUnit = 1 << 30

// ipcExec is the engine-wide CUDA IPC executor.
type ipcExec struct {
	*lanePool
	e *Engine
}

func newIPCExec(e *Engine) *ipcExec {
	x := &ipcExec{e: e}
	x.lanePool = newLanePool(ipcLanes, x.unit)
	return x
}

// cut: one device range per unit (a copy has one source and one
// destination).
func (*ipcExec) cut() (uint64, bool) { return ipcUnit, true }

func (*ipcExec) path() string { return "cuda_ipc" }

func (*ipcExec) transport() TransportKind { return TransportCUDAIPC }

// Task states of an IPC request (remoteTarget.ipcRun).
const (
	ipcIdle    = iota // no copy started
	ipcStarted        // a copy was queued: no longer cancellable
	ipcCut            // cancelled before any copy
)

// useIPC routes request i of a remote group to the IPC executor (its
// producer event, if any, is already set: buildRemote).
func (g *group) useIPC(i int) {
	rt := g.remote
	if rt.ipcRun == nil {
		rt.ipcRun = make([]atomic.Int32, g.n)
	}
	g.routes[i] = routeIPC
}

// begin reports whether task j may queue a copy: false once it was cut.
func (rt *remoteTarget) begin(j int) bool {
	for {
		switch rt.ipcRun[j].Load() {
		case ipcStarted:
			return true
		case ipcCut:
			return false
		}
		if rt.cut[j].Load() {
			return false
		}
		if rt.ipcRun[j].CompareAndSwap(ipcIdle, ipcStarted) {
			return true
		}
	}
}

// errIPCQueued is why a cuda_ipc task whose copy was queued cannot be
// cancelled.
var errIPCQueued = detail(KindUnavailable, "its CUDA IPC copy is on the GPU and cannot be recalled")

// cancelRunning stops running task j of g (canceller, executor.go) if no
// copy of it was queued yet: it is marked cut, so no unit of it starts
// one (begin), and cut as a peer task is. Once a copy was queued it
// refuses, and the task runs on.
func (*ipcExec) cancelRunning(g *group, j int) error {
	rt := g.remote
	run := &rt.ipcRun[j]
	if !run.CompareAndSwap(ipcIdle, ipcCut) && run.Load() == ipcStarted {
		return errIPCQueued
	}
	rt.cutTask(j)
	return nil
}

// unit moves unit k of job x: one device-to-device copy.
func (p *ipcExec) unit(x *offRing, k int) {
	g := x.g
	u := &x.units[k]
	rt := g.remote
	seg := rt.seg
	if err := x.startable(k); err != nil {
		x.resolve(k, 0, err)
		return
	}
	if !rt.begin(u.task) {
		x.resolve(k, 0, unitErr(g, u, KindIO, errCutRunning))
		return
	}
	pc := u.pieces[0] // cut byPiece: one device range
	if pc.kind != pieceDevice {
		x.resolve(k, 0, unitErr(g, u, KindInvalid, errors.New("a CUDA IPC unit without device memory")))
		return
	}
	m, err := seg.ipcAcquire(pc.dev)
	if err != nil {
		x.resolve(k, 0, unitErr(g, u, KindUnavailable, err))
		return
	}
	s, err := p.e.getStream(pc.dev)
	if err != nil {
		seg.ipcRelease(m, false)
		x.resolve(k, 0, unitErr(g, u, KindUnavailable, fmt.Errorf("cuda:%d stream: %w", pc.dev, err)))
		return
	}
	dc, ok := s.(DeviceCopier)
	if !ok {
		p.e.putStream(pc.dev, s)
		seg.ipcRelease(m, false)
		x.resolve(k, 0, unitErr(g, u, KindUnavailable, errors.New("the GPU backend cannot copy device to device")))
		return
	}
	dst, src := pc.addr, m.mem.Ptr()+u.off
	if g.op == OpWrite {
		dst, src = src, dst
	}
	if err := dc.DtoD(dst, src, u.n); err != nil {
		// Refused at the queue: no byte moves.
		p.e.putStream(pc.dev, s)
		seg.ipcRelease(m, false)
		x.resolve(k, 0, unitErr(g, u, KindIO, err))
		return
	}
	if g.op == OpWrite {
		x.markSubmitted(k)
	}
	cut := g.deadline.Add(p.e.cfg.QuiesceGrace.D())
	err = confirmCopy(s, cut)
	if err != nil {
		// Queued and not confirmed: the stream and the mapping stay
		// as they are for good.
		x.mu.Lock()
		x.undrained = true
		x.mu.Unlock()
		seg.ipcRelease(m, true)
		x.resolve(k, 0, unitErr(g, u, KindUnquiesced, fmt.Errorf("CUDA IPC copy not confirmed (%w); its memory, the peer's mapping and its stream stay retained", err)))
		return
	}
	p.e.putStream(pc.dev, s)
	seg.ipcRelease(m, false)
	p.e.st.ipc.units.Add(1)
	x.resolve(k, u.n, nil)
}

// confirmCopy waits until the copies queued on s so far completed, or
// says why that is not known: the event failed, or cut passed first (the
// wait is then left behind, with its event).
func confirmCopy(s Stream, cut time.Time) error {
	ev, err := s.Record()
	if err != nil {
		return fmt.Errorf("event record: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- ev.Wait() }()
	t := time.NewTimer(time.Until(cut))
	defer t.Stop()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("event: %w", err)
		}
		ev.Close()
		return nil
	case <-t.C:
		return errors.New("not complete at deadline + quiesce_grace")
	}
}

// legs is the ordered execution of a group that mixes cuda_ipc with
// another route: one job per leg, started after the previous leg.
type legs struct {
	e    *Engine
	g    *group
	live []bool
	mu   sync.Mutex
	next int   // the first request after the running leg
	left int   // its live tasks not yet reported
	err  error // the first failure, which skips later legs
	fail int   // the request that failed
}

// mixedIPC reports whether g's live requests use cuda_ipc and another
// route: they then run in legs.
func (g *group) mixedIPC(live []bool) bool {
	ipc, other := false, false
	for i := range g.n {
		if live[i] {
			ipc = ipc || g.routes[i] == routeIPC
			other = other || g.routes[i] != routeIPC
		}
	}
	return ipc && other
}

// runLegs starts the first leg.
func (e *Engine) runLegs(g *group, live []bool) {
	l := &legs{e: e, g: g, live: live}
	l.start(0)
}

// start runs the leg that begins at request from (or, after a failure,
// fails it without moving anything), and those after it while a leg has
// nothing live.
func (l *legs) start(from int) {
	g := l.g
	for from < g.n {
		rt := g.routes[from]
		ex := l.e.jobExec(rt)
		end := from
		n := 0
		for end < g.n {
			if g.routes[end] != rt {
				break
			}
			if l.live[end] {
				n++
			}
			end++
		}
		if n == 0 {
			from = end
			continue
		}
		lo, hi := from, end
		x := l.e.newJob(g, rt, ex, lo, hi, func(j int) bool { return l.live[j] })
		x.leg = l
		l.mu.Lock()
		l.next, l.left = end, n
		err, fail := l.err, l.fail
		l.mu.Unlock()
		if err != nil {
			skip := &Error{Op: g.op.String(), Name: g.targetName(), Kind: KindOf(err),
				Err: &notStartedError{at: fail, task: g.first + fail, cause: err}}
			x.failRest(skip)
			return // the last task's report starts the next leg
		}
		ex.run(x)
		return
	}
}

// taskDone is called after task i of the running leg reported; the
// leg's last report starts the next one.
func (l *legs) taskDone(i int, err error) {
	l.mu.Lock()
	if err != nil && l.err == nil && !errors.Is(err, errCutRunning) {
		l.err, l.fail = err, i
	}
	l.left--
	last, next := l.left == 0, l.next
	l.mu.Unlock()
	if last {
		l.start(next)
	}
}
