// memgroup.go owns transfers that target a memory segment (memseg.go):
// the local memory transport that moves bytes between two regions of this
// engine (the loopback the network transports will share): memcpy between
// host regions, the GPU backend's copies where a side is device memory.
// READ copies target region -> local memory, WRITE local memory -> target
// region; TargetOffset is relative to the target region.
//
// Physical owners (spec "Physical owners and public tasks"): with
// merge_requests, consecutive requests of one submission whose local
// ranges are adjacent in one region and whose target ranges are adjacent
// merge into one physical transfer (owner), up to max_transfer_bytes,
// unless the merged local and target ranges overlap (a self-transfer whose
// result would then depend on copy order). Every public task keeps its
// index and length; physical_owner is the absolute index of the owner's
// first task. Aliases share running, cancellation and terminal state; each
// reports only the bytes of its own range.
//
// Invariants:
//   - The memory executor (memExec, behind the executor seam like the
//     others) runs a memory group's owners one at a time, in submission
//     order: its window is one owner, so the scheduler hands out the next
//     owner only after the last one ended. There is no reordering inside
//     a group, so overlapping destinations and read-after-write within it
//     resolve as strict FIFO. Across groups, conflicts() fences on the
//     bounding boxes of both the local and the target ranges.
//   - An owner starts only while all its tasks are pending (cancelling an
//     alias cancels the owner; the scheduler marks an owner's tasks
//     running together); a cancelled owner leaves its successors
//     eligible. Each alias reports its own share of the owner's bytes
//     (offRing.share) and the owner's error.
//   - The group holds loans on every local and target range from dispatch
//     to its end (so neither region is unregistered or read through data
//     meanwhile) and a user on the memory segment (so close drains it).
//   - Memory groups need the file transport: the batch worker that
//     dispatches and fences every group runs on an io_uring ring.

package engine

import (
	"fmt"
	"runtime"

	"github.com/orbitefs/orbitefs/internal/hostmem"
)

// memTarget is a memory group's plan.
type memTarget struct {
	seg     *MemSegment
	owners  []memOwner
	ownerOf []int // per request: index into owners
	local   []*Region
	addrs   []uint64 // per request: local address
}

// memOwner is one physical transfer: requests first..last (group
// relative), n bytes from local address local and target offset off.
type memOwner struct {
	first, last int
	local       *Region
	addr        uint64
	off         uint64
	n           uint64
}

// targetURI is what reports name as the group's target.
func (g *group) targetURI() string {
	switch {
	case g.mem != nil:
		return g.mem.seg.uri
	case g.remote != nil:
		return g.remote.seg.uri
	}
	return g.seg.uri
}

// targetName is the target as errors name it ("segments/URI").
func (g *group) targetName() string { return "segments/" + g.targetURI() }

// aliases returns the group-relative requests sharing request i's
// physical transfer (i itself for file groups).
func (g *group) aliases(i int) (first, last int) {
	if g.mem == nil {
		return i, i
	}
	o := &g.mem.owners[g.mem.ownerOf[i]]
	return o.first, o.last
}

// ownerIndex is the absolute task index of request i's physical owner.
func (g *group) ownerIndex(i int) int {
	first, _ := g.aliases(i)
	return g.first + first
}

// prepareMem validates a submission to a memory segment and admits it.
func (e *Engine) prepareMem(b *Batch, op Op, ms *MemSegment, reqs []Request, note *Notification, opts SubmitOptions) (*group, error) {
	const verb = "submit"
	if op != OpRead && op != OpWrite {
		return nil, errorf(KindInvalid, verb, b.name(), "op %d: want read or write", op)
	}
	if note != nil {
		return nil, errorf(KindInvalid, verb, b.name(), "local memory segments reject attached notifications")
	}
	if len(reqs) == 0 {
		return nil, errorf(KindInvalid, verb, b.name(), "no requests")
	}
	if len(reqs) > e.cfg.MaxBatchRequests {
		return nil, errorf(KindTooLarge, verb, b.name(), "%d requests, more than max_batch_requests (%d)", len(reqs), e.cfg.MaxBatchRequests)
	}
	ms.mu.Lock()
	closed := ms.mu.closed
	ms.mu.Unlock()
	if closed {
		return nil, errorf(KindBusy, verb, b.name(), "segment %s is closing", ms.uri)
	}
	if !ms.perm.allows(op) {
		return nil, errorf(KindPermission, verb, b.name(), "%s on %s, opened %s", op, ms.uri, ms.perm)
	}
	// The batch worker that dispatches every group (and fences memory
	// groups against file groups) runs on an io_uring ring.
	if err := e.fileReady(); err != nil {
		return nil, &Error{Op: verb, Name: b.name(), Kind: KindUnavailable, Err: fmt.Errorf("memory segments: %w", err.(*Error).Err)}
	}
	pol, err := e.checkPolicy(opts.QoS)
	if err != nil {
		return nil, wrap(KindInvalid, verb, b.name(), err)
	}
	deadline := e.deadlineOf(opts)
	n := len(reqs)
	g := &group{b: b, n: n, op: op, deadline: deadline, routes: make([]route, n), policy: make([]reqPolicy, n),
		offRing: true, lastSubmitted: -1, allowed: opts.Regions,
		mem: &memTarget{seg: ms, ownerOf: make([]int, n), local: make([]*Region, n), addrs: make([]uint64, n)}}
	for i := range reqs {
		if err := g.buildMem(e, i, &reqs[i]); err != nil {
			return nil, &Error{Op: verb, Name: b.name(), Kind: KindOf(err), Err: fmt.Errorf("requests[%d]: %w", i, err)}
		}
	}
	g.planOwners(e, reqs)
	g.computeBounds()
	// Memory-segment copies are admitted as file transfers are: the
	// engine-wide charge, then the policy's contract and the runtime
	// queue, counting physical owners (admission.go).
	if err := e.admitGroup(verb, g, pol, ms.admit, ms.uri); err != nil {
		return nil, err
	}
	return g, nil
}

// buildMem validates request i against both regions.
func (g *group) buildMem(e *Engine, i int, r *Request) error {
	ms := g.mem.seg
	switch {
	case len(r.Elements) > 0:
		return detail(KindInvalid, "vectors target file segments only; %s takes scalar requests", ms.uri)
	case r.Transport != TransportUnspec:
		return detail(KindInvalid, "transport %s does not apply to memory segments (they use the local memory transport); omit it", r.Transport)
	case r.Length == 0:
		return detail(KindInvalid, "zero length")
	case r.Length > uint64(e.cfg.MaxTransferBytes):
		return detail(KindTooLarge, "length %d exceeds max_transfer_bytes (%d)", r.Length, uint64(e.cfg.MaxTransferBytes))
	}
	local, err := e.resolveFor(g.allowed, r.Address, r.Length)
	if err != nil {
		return err
	}
	size := ms.region.Len()
	if r.TargetOffset > size || r.Length > size-r.TargetOffset {
		return detail(KindRange, "target range [%d, %d) is beyond %s (%d bytes)", r.TargetOffset, r.TargetOffset+r.Length, ms.uri, size)
	}
	remote := ms.region.BaseAddress() + r.TargetOffset
	if rr, err := e.resolve(remote, r.Length); err != nil || rr != ms.region {
		return detail(KindNotFound, "the region of %s was unregistered", ms.uri)
	}
	g.ranges = append(g.ranges,
		hostRange{region: local, lo: r.Address, hi: r.Address + r.Length, req: i},
		hostRange{region: ms.region, lo: remote, hi: remote + r.Length, req: i})
	g.mem.local[i], g.mem.addrs[i] = local, r.Address
	// One piece: the extent the executor's job cuts (offring.go); the
	// copy itself goes through the owner (copyOwnerUnit).
	kind := pieceHost
	if local.dev != nil {
		kind = pieceDevice
	}
	if g.pieces == nil {
		g.pieces = make([][]piece, g.n)
	}
	g.pieces[i] = []piece{{kind: kind, n: r.Length, addr: r.Address}}
	g.routes[i] = routeMem
	g.policy[i] = reqPolicy{asked: r.Transport}
	g.charge += r.Length
	return nil
}

// planOwners merges consecutive requests into physical owners.
func (g *group) planOwners(e *Engine, reqs []Request) {
	m := g.mem
	for i := range reqs {
		r := &reqs[i]
		if k := len(m.owners) - 1; k >= 0 && e.cfg.MergeRequests {
			o := &m.owners[k]
			if o.local == m.local[i] && o.addr+o.n == r.Address && o.off+o.n == r.TargetOffset &&
				o.n+r.Length <= uint64(e.cfg.MaxTransferBytes) && !selfOverlap(m.seg.region, o.local, o.addr, o.off, o.n+r.Length) {
				o.n += r.Length
				o.last = i
				m.ownerOf[i] = k
				continue
			}
		}
		m.ownerOf[i] = len(m.owners)
		m.owners = append(m.owners, memOwner{first: i, last: i, local: m.local[i], addr: r.Address, off: r.TargetOffset, n: r.Length})
	}
}

// selfOverlap: the local range [addr, addr+n) and the target range at
// off overlap in one region.
func selfOverlap(target, local *Region, addr, off, n uint64) bool {
	if target != local {
		return false
	}
	t := target.BaseAddress() + off
	return addr < t+n && t < addr+n
}

// memExec is the engine-wide memory executor: lanes (lanepool.go) that
// copy physical owners, one unit per owner. The scheduler hands a memory
// group to it one owner at a time (window), so owners run in submission
// order and an owner not yet handed out stays pending (cancellable with
// its aliases).
type memExec struct {
	*lanePool
	e *Engine
}

func newMemExec(e *Engine) memExec {
	return memExec{newLanePool(min(runtime.GOMAXPROCS(0), 16), copyOwnerUnit), e}
}

// cut: one unit per owner (an owner is at most max_transfer_bytes).
func (m memExec) cut() (uint64, bool) { return uint64(m.e.cfg.MaxTransferBytes), false }

// window: one owner at a time, whatever the queue depth: a memory group
// has no reordering inside it (overlapping destinations and
// read-after-write resolve as strict FIFO), and an owner starts only
// while all its tasks are pending.
func (memExec) window(int) int { return 1 }

func (memExec) path() string { return "memory" }

func (memExec) transport() TransportKind { return TransportMemory }

// copyOwnerUnit copies unit k of memory job x: one physical owner.
func copyOwnerUnit(x *offRing, k int) {
	g := x.g
	u := &x.units[k]
	if err := x.startable(k); err != nil {
		x.resolve(k, 0, err)
		return
	}
	o := &g.mem.owners[g.mem.ownerOf[u.task]]
	if g.op == OpWrite {
		x.markSubmitted(k) // the copy may change target bytes past what it reports
	}
	got, err := g.copyOwner(o)
	if err == nil && got < o.n {
		err = fmt.Errorf("copied %d of %d bytes", got, o.n)
	}
	if err != nil {
		err = &Error{Op: g.op.String(), Name: g.mem.seg.name(), Kind: KindOf(err),
			Err: fmt.Errorf("requests[%d] (physical owner task %d): %w", u.task, g.first+o.first, err)}
	}
	x.resolve(k, got, err)
}

// copyOwner moves one owner's bytes.
func (g *group) copyOwner(o *memOwner) (uint64, error) {
	target := g.mem.seg.region
	taddr := target.BaseAddress() + o.off
	if g.op == OpRead {
		return memCopy(o.local, o.addr, target, taddr, o.n)
	}
	return memCopy(target, taddr, o.local, o.addr, o.n)
}

// memBounce is the host bounce size for device-to-device copies.
const memBounce = 4 << 20

// memCopy copies n bytes from src at address sa to dst at address da:
// memcpy (fault-safe) between host regions, the GPU backend's copies
// where device memory is involved.
func memCopy(dst *Region, da uint64, src *Region, sa uint64, n uint64) (uint64, error) {
	doff, soff := da-dst.BaseAddress(), sa-src.BaseAddress()
	switch {
	case dst.dev == nil && src.dev == nil:
		got, err := hostmem.Copy(dst.m.Bytes()[doff:doff+n], src.m.Bytes()[soff:soff+n])
		if err != nil {
			err = wrap(KindIO, "copy", src.name(), err)
		}
		return uint64(got), err
	case dst.dev == nil:
		if err := src.dev.CopyOut(dst.m.Bytes()[doff:doff+n], soff); err != nil {
			return 0, wrap(KindIO, "copy", src.name(), err)
		}
		return n, nil
	case src.dev == nil:
		if err := dst.dev.CopyIn(doff, src.m.Bytes()[soff:soff+n]); err != nil {
			return 0, wrap(KindIO, "copy", dst.name(), err)
		}
		return n, nil
	}
	buf := make([]byte, min(n, memBounce))
	var done uint64
	for done < n {
		c := min(n-done, uint64(len(buf)))
		if err := src.dev.CopyOut(buf[:c], soff+done); err != nil {
			return done, wrap(KindIO, "copy", src.name(), err)
		}
		if err := dst.dev.CopyIn(doff+done, buf[:c]); err != nil {
			return done, wrap(KindIO, "copy", dst.name(), err)
		}
		done += c
	}
	return done, nil
}
