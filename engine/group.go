// group.go owns a group: the requests of one Submit after validation,
// their admission charges, prebuilt file ops, and the group's report.
//
// Invariants:
//   - prepare either returns a fully admitted group (inflight charge taken,
//     segment user counted, scratch mapped) or takes nothing.
//   - A group finishes exactly once (finishLocked). A drained finish
//     returns every charge, loan and scratch mapping (a caller copy that
//     moved every byte returned its loans and charges just before it,
//     callercopy.go); an unquiesced finish returns none of them, because
//     the kernel may still use that memory.
//   - Fences (conflicts) identify a file by device and inode, never by
//     segment entry, so results equal strict FIFO execution however many
//     entries (permissions, paths, hard links) reach one file.
//   - One submission carries at most max_batch_requests descriptors
//     (scalar requests plus vector elements), checked before any work.
//   - A report of an unquiesced group has KindUnquiesced at the first
//     unsuccessful request; a failed WRITE group's report has an unknown
//     remote effect when any request of its affected span was submitted.
//   - Reuse: a group object is recycled (Engine.groups, or the free list
//     that a freed batch's pooled lists carry to the batch that takes
//     them next, recycle) only when nothing can reach it any more, which
//     is when its batch is freed by Free with no group active (never
//     deferred, never quarantined), and only when it is a finished,
//     drained one-request caller copy (callercopy.go).
//     Until its batch is freed every task of the group points to it, so
//     status and report readers of a live batch always read their own
//     group. A caller copy is touched only by its submitter (or a host
//     copy lane), by the batch's combiner (combine.go), by a fold
//     (claim.go) and under b.mu, and it is let go of at the finish,
//     under b.mu (SubmitWith reads the group's first task under b.mu,
//     before the copy; a finish left on the combining list is the
//     submitter's last touch, and the combiner reads nothing of the
//     group after applying it; a claimed copy's last touch is its push
//     on its shard's stack); Free takes b.mu after that, so it sees
//     every write to the group and no goroutine holds it. Free empties
//     the batch's task and group lists before it recycles, so a reader
//     of the freed batch finds nothing rather than another batch's
//     group.
//     Groups of the ring, the off-ring executors, memory and remote
//     targets are never recycled: their executors may touch them after
//     they finish. The emptied task and group lists are pooled too,
//     cleared, so no group stays reachable through them.
//   - A free list is fixed when its batch is allocated; each entry is
//     handed out once (an atomic index per part of the list,
//     takeFree), and Free claims the entries not handed out. A free
//     list's array is never reused: a submission that took its entry
//     before Free may clear it after. A freed batch whose groups are all
//     recyclable (b.mu.recyclable, counted at each finish) passes its
//     group list on as the free list whole.

package engine

import (
	"fmt"
	"math"
	"time"

	"github.com/orbitefs/orbitefs/internal/hostmem"
)

type group struct {
	b        *Batch
	first, n int
	op       Op
	seg      *Segment
	mem      *memTarget    // a memory segment target (memgroup.go); seg and ent are nil
	remote   *remoteTarget // a remote segment target (peerexec.go); seg and ent are nil
	ent      *segEntry
	deadline time.Time
	charge   uint64
	allowed  []*Region // SubmitOptions.Regions: nil allows every region
	adm      groupAdm  // admission.go; guarded by admission.mu

	ops     []FileOp
	iovs    []IOVec // backing store for scalar requests' one-element Iov
	scratch []*hostmem.Mapping
	ranges  []hostRange // every local range, for loans
	routes  []route     // per request (route.go); failover.go may advance one
	policy  []reqPolicy // per request: what failover must respect
	// producers: per request, the readiness event to consume before its
	// device memory is touched (nil when none); offring.go waits.
	producers []Event
	pieces    [][]piece   // per off-ring request: its elements in file order
	bounds    []hostRange // per-region bounding box, for same-batch fences
	fileLo    uint64
	fileHi    uint64
	vector    bool // some request carries Elements (even one): never the fast path
	// offRing: some request touches device memory, so the whole group
	// runs on the off-ring executors (offring.go) instead of the ring.
	offRing      bool
	offUndrained bool // guarded by b.mu: an off-ring lane could not prove its drain
	// lanesBatch: the group is a batch the host copy lanes take whole
	// (hostcopy.go, lanesBatch); set before its requests are routed.
	lanesBatch bool
	window     int // guarded by b.mu: an off-ring group's dispatch window (0: not yet asked)
	// caller: the submitting goroutine copies it (callercopy.go); the
	// worker neither reaps nor cuts it off.
	caller bool
	// lane: a caller copy that the host copy lanes run (lanecopy.go).
	lane bool
	// settled: a caller copy that moved every byte returned its loans
	// and admission charges when its copy ended, before its finish
	// (callercopy.go); the finish returns only its segment user.
	settled bool

	// Guarded by b.mu.
	dispatched    bool
	finished      bool
	unquiesced    bool
	next          int // next request to hand to the ring
	outstanding   int // ops handed to the ring and not completed
	lastSubmitted int // highest request index consumed by the kernel, or -1
	final         *Report

	// nearDeadline: the deadline was less than deadlineSlack after the
	// submission's clock read, so starting it without I/O reads the
	// clock again.
	nearDeadline bool

	// inlineAsked: its submitter asked for the report back from Submit
	// (SubmitOptions.Inline); claim: its part in a claim (claim.go).
	inlineAsked bool
	claim       claimState

	inline groupInline // storage of a one-request group (groupinline.go)
	comb   combNode    // its link in the batch's combining list (combine.go)
}

// deadlineSlack bounds how late a group may start without reading the
// clock again: a submission whose deadline was at least this far away
// when it read the clock starts a caller copy within that read's
// microseconds (under b.mu), so a second read could not find it late.
const deadlineSlack = time.Second

type hostRange struct {
	region *Region
	lo, hi uint64
	req    int
}

// prepare validates a submission and admits it. Nothing is queued yet.
func (e *Engine) prepare(b *Batch, op Op, target Target, reqs []Request, note *Notification, opts SubmitOptions) (*group, error) {
	const verb = "submit"
	if err := e.checkOpen(verb); err != nil {
		return nil, err
	}
	if err := e.checkRequester(verb); err != nil {
		return nil, err
	}
	if ms, ok := target.(*MemSegment); ok && ms != nil {
		return e.prepareMem(b, op, ms, reqs, note, opts) // memgroup.go
	}
	if rs, ok := target.(*RemoteSegment); ok && rs != nil {
		return e.prepareRemote(b, op, rs, reqs, note, opts) // peerexec.go
	}
	seg, ok := target.(*Segment)
	if !ok || seg == nil {
		return nil, errorf(KindInvalid, verb, b.name(), "target %T is not a file segment", target)
	}
	if err := seg.check(verb); err != nil {
		return nil, err
	}
	if op != OpRead && op != OpWrite {
		return nil, errorf(KindInvalid, verb, b.name(), "op %d: want read or write", op)
	}
	if note != nil {
		return nil, errorf(KindInvalid, verb, b.name(), "local file targets reject attached notifications")
	}
	if len(reqs) == 0 {
		return nil, errorf(KindInvalid, verb, b.name(), "no requests")
	}
	if !seg.ent.perm.allows(op) {
		return nil, errorf(KindPermission, verb, b.name(), "%s on %s, opened %s", op, seg.uri, seg.ent.perm)
	}
	pol, err := e.checkPolicy(opts.QoS)
	if err != nil {
		return nil, wrap(KindInvalid, verb, b.name(), err)
	}
	// One submission carries at most max_batch_requests descriptors: a
	// scalar request is one, a vector one per element (padding included).
	// Without this bound 4096 requests of 1024 elements each would pass.
	descs := 0
	for i := range reqs {
		descs += max(1, len(reqs[i].Elements))
	}
	if descs > e.cfg.MaxBatchRequests {
		return nil, errorf(KindTooLarge, verb, b.name(), "%d requests carry %d descriptors (scalar requests and vector elements), more than max_batch_requests (%d)", len(reqs), descs, e.cfg.MaxBatchRequests)
	}
	for i := range reqs {
		if reqs[i].Transport > TransportGDS {
			return nil, errorf(KindInvalid, verb, b.name(), "requests[%d]: transport %d unknown", i, reqs[i].Transport)
		}
	}
	if err := e.fileReady(); err != nil {
		return nil, &Error{Op: verb, Name: b.name(), Kind: KindUnavailable, Err: err.(*Error).Err}
	}
	ent := seg.ent
	size, err := e.newSizeCheck(ent, op, opts.SizeNow) // segment.go
	if err != nil {
		return nil, wrap(KindOf(err), verb, b.name(), err)
	}
	// The submission's one clock read: the deadline, and whether it is so
	// close that a caller copy must read the clock again (callercopy.go).
	now := time.Now()
	deadline := e.deadlineAt(opts, now)
	g := e.newGroup(b, len(reqs))
	g.b, g.op, g.seg, g.ent = b, op, seg, ent
	g.deadline, g.fileLo, g.lastSubmitted = deadline, ^uint64(0), -1
	g.nearDeadline = deadline.Sub(now) < deadlineSlack
	g.allowed = opts.Regions
	g.lanesBatch = e.lanesBatch(ent, reqs) // hostcopy.go
	fail := func(i int, err error) (*group, error) {
		g.unmapScratch()
		return nil, &Error{Op: verb, Name: b.name(), Kind: KindOf(err), Err: fmt.Errorf("requests[%d]: %w", i, err)}
	}
	for i := range reqs {
		r := &reqs[i]
		if err := g.build(e, i, r, &size); err != nil {
			return fail(i, err)
		}
	}
	if g.offRing {
		g.rideAlong(reqs) // route.go
	}
	g.computeBounds()

	if err := e.admitGroup(verb, g, pol, ent.admit, seg.uri); err != nil {
		return nil, err
	}
	return g, nil
}

// admitGroup takes a built group's charges in order: the engine-wide
// charge, QoS and runtime-queue admission (admission.go), then a user of
// its segment (segAdmit, false once the segment is closing). On refusal
// it returns what it took and frees the group's scratch mappings, so a
// refused group leaves no trace. Every kind of group (file, memory,
// remote) is admitted here.
func (e *Engine) admitGroup(verb string, g *group, pol *QoSPolicy, segAdmit func(shard) bool, uri string) error {
	if err := e.admitCharge(verb, g, pol); err != nil {
		g.unmapScratch()
		return err
	}
	if err := e.adm.admit(g, pol); err != nil {
		g.unadmit()
		return err
	}
	if !segAdmit(g.adm.shard) {
		g.unadmit()
		return errorf(KindBusy, verb, g.b.name(), "segment %s is closing", uri)
	}
	return nil
}

// admitCharge takes g's engine-wide admission charge (max_inflight_*),
// or nothing. A group under a delay contract (pol) takes its
// max_inflight_bytes share at its batch head instead, waiting for it
// (runqueue.go); one larger than the whole budget fails here.
func (e *Engine) admitCharge(verb string, g *group, pol *QoSPolicy) error {
	b := g.b
	if e.closed.Load() {
		return errorf(KindClosed, verb, b.name(), "engine is closed")
	}
	if g.charge > uint64(e.cfg.MaxInflightBytes) {
		// Larger than the whole budget: refused before it is counted
		// anywhere, so it never makes a concurrent submission fail.
		return errorf(KindExhausted, verb, b.name(), "%d bytes exceed max_inflight_bytes (%d) on their own", g.charge, uint64(e.cfg.MaxInflightBytes))
	}
	// The group and byte charges are taken one after the other: a group
	// refused for bytes holds a group slot for that instant, which can
	// make a concurrent submission at exactly max_inflight_batches fail.
	g.adm.shard = shardHere()
	if !e.inflightGroups.take(g.adm.shard, 1) {
		return errorf(KindExhausted, verb, b.name(), "%d submissions in flight reach max_inflight_batches (%d)", e.inflightGroups.inUse(), e.cfg.MaxInflightBatches)
	}
	deferBytes := e.adm.defersBytes(pol)
	if !deferBytes && !e.tryChargeBytes(g.adm.shard, g.charge) {
		e.inflightGroups.give(g.adm.shard, 1)
		return errorf(KindExhausted, verb, b.name(), "%d bytes + %d in flight exceed max_inflight_bytes (%d)", g.charge, e.inflightBytes.inUse(), uint64(e.cfg.MaxInflightBytes))
	}
	g.adm.bytesDeferred = deferBytes
	return nil
}

// tryChargeBytes adds n to the bytes in flight, on shard at, unless that
// would exceed max_inflight_bytes.
func (e *Engine) tryChargeBytes(at shard, n uint64) bool { return e.inflightBytes.take(at, n) }

// build validates request i and prepares its file op.
func (g *group) build(e *Engine, i int, r *Request, size *sizeCheck) error {
	firstRange := len(g.ranges)
	var iov []IOVec
	var buf Buffer
	var extent uint64
	if len(r.Elements) == 0 {
		if r.Length == 0 {
			return detail(KindInvalid, "zero length")
		}
		if r.Length > uint64(e.cfg.MaxTransferBytes) {
			return detail(KindTooLarge, "length %d exceeds max_transfer_bytes (%d)", r.Length, uint64(e.cfg.MaxTransferBytes))
		}
		reg, err := e.resolveFor(g.allowed, r.Address, r.Length)
		if err != nil {
			return err
		}
		g.ranges = append(g.ranges, hostRange{region: reg, lo: r.Address, hi: r.Address + r.Length, req: i})
		g.iovs[i] = IOVec{Base: r.Address, Len: r.Length}
		iov = g.iovs[i : i+1 : i+1]
		if reg.anon {
			buf = Buffer{Key: reg.key, Base: reg.BaseAddress(), Len: reg.Len()}
		}
		extent = r.Length
	} else {
		g.vector = true
		if n := len(r.Elements); n > e.cfg.MaxVectorElements {
			return detail(KindTooLarge, "vector has %d elements, more than max_vector_elements (%d)", n, e.cfg.MaxVectorElements)
		}
		var maxPad uint64
		for j, el := range r.Elements {
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
			if el.Padding > maxPad {
				maxPad = el.Padding
			}
		}
		if extent > uint64(e.cfg.MaxTransferBytes) {
			return detail(KindTooLarge, "vector covers %d bytes, more than max_transfer_bytes (%d)", extent, uint64(e.cfg.MaxTransferBytes))
		}
		var scratch *hostmem.Mapping
		if maxPad > 0 {
			// One private lease for all padding of this vector; a fresh
			// anonymous mapping is zeroed, which WRITE needs.
			m, err := hostmem.Anonymous(maxPad)
			if err != nil {
				return detail(KindExhausted, "padding scratch of %d bytes: %v", maxPad, err)
			}
			scratch = m
			g.scratch = append(g.scratch, m)
		}
		iov = make([]IOVec, len(r.Elements))
		for j, el := range r.Elements {
			if el.Padding != 0 {
				iov[j] = IOVec{Base: scratch.Addr(), Len: el.Padding}
				continue
			}
			reg, err := e.resolveFor(g.allowed, el.Address, el.Length)
			if err != nil {
				return fmt.Errorf("elements[%d]: %w", j, err)
			}
			g.ranges = append(g.ranges, hostRange{region: reg, lo: el.Address, hi: el.Address + el.Length, req: i})
			iov[j] = IOVec{Base: el.Address, Len: el.Length}
		}
	}
	if err := size.check(g.seg, g.op, r.TargetOffset, extent); err != nil {
		return err
	}
	if err := g.route(e, i, r, firstRange); err != nil { // route.go
		return err
	}
	g.charge += extent
	// Fences compare whole DIO blocks: a buffered write and an O_DIRECT
	// write sharing a page race in the page cache even without sharing
	// bytes.
	a := g.ent.dioOff
	g.fileLo = min(g.fileLo, r.TargetOffset/a*a)
	g.fileHi = max(g.fileHi, (r.TargetOffset+extent+a-1)/a*a)

	file := g.ent.buffered
	if g.ent.direct.FD >= 0 && g.dioAligned(r.TargetOffset, iov) {
		file = g.ent.direct
	} else {
		buf = Buffer{} // fixed buffers only pay off with the direct fd
	}
	g.ops[i] = FileOp{Write: g.op == OpWrite, File: file, Offset: r.TargetOffset, Iov: iov, Buf: buf,
		Offload: offload(file == g.ent.buffered, extent) || g.ent.blocking}
	return nil
}

// dioAligned reports whether an op satisfies the file's O_DIRECT rules.
func (g *group) dioAligned(off uint64, iov []IOVec) bool {
	if off%g.ent.dioOff != 0 {
		return false
	}
	for _, v := range iov {
		if v.Base%g.ent.dioMem != 0 || v.Len%g.ent.dioOff != 0 {
			return false
		}
	}
	return true
}

// computeBounds folds ranges into one bounding box per region.
func (g *group) computeBounds() {
	for _, r := range g.ranges {
		found := false
		for k := range g.bounds {
			if g.bounds[k].region == r.region {
				g.bounds[k].lo = min(g.bounds[k].lo, r.lo)
				g.bounds[k].hi = max(g.bounds[k].hi, r.hi)
				found = true
				break
			}
		}
		if !found {
			g.bounds = append(g.bounds, r)
		}
	}
}

// conflicts reports whether g must wait for h (same batch, in flight):
// overlapping local memory, or overlapping bytes of the same file (by
// device and inode, not by entry: a read_write and a read handle on one
// file are two entries) where one writes.
func (g *group) conflicts(h *group) bool {
	if g.remoteConflict(h) {
		return true
	}
	if g.ent != nil && h.ent != nil && g.ent.sameFile(h.ent) && (g.op == OpWrite || h.op == OpWrite) && g.fileLo < h.fileHi && h.fileLo < g.fileHi {
		return true
	}
	for _, a := range g.bounds {
		for _, b := range h.bounds {
			if a.region == b.region && a.lo < b.hi && b.lo < a.hi {
				return true
			}
		}
	}
	return false
}

// hazard reports whether a file read submitted while g is in flight
// must be checked against g for more than an overlap of memory (which
// loans refuse): g writes, is moved off the ring (and may be partly
// dispatched wherever it stands in flight), or is not a file group.
func (g *group) hazard() bool {
	return g.op != OpRead || g.offRing || g.ent == nil || g.mem != nil || g.remote != nil
}

// inflightLocked puts g in flight. REQUIRES: b.mu.
func (b *Batch) inflightLocked(g *group) {
	b.mu.inflight = append(b.mu.inflight, g)
	if g.hazard() {
		b.mu.hazards++
	}
}

// fastPathEligible: one contiguous host request of at most
// caller_fast_path_bytes. Vectors keep the worker path (spec), even a
// vector of one element, which would otherwise look scalar here.
func (g *group) fastPathEligible() bool {
	e := g.b.e
	return !g.offRing && g.n == 1 && !g.vector && len(g.scratch) == 0 && len(g.ops[0].Iov) == 1 &&
		g.ops[0].Iov[0].Len <= uint64(e.cfg.CallerFastPathBytes) && e.cfg.CallerFastPathWait > 0 &&
		!e.adm.gates() && // admission may make it wait: never on the caller
		(g.ent == nil || !g.ent.blocking) // its server may never answer (storewait.go)
}

// recyclable reports whether g may go back to the engine's pool once
// its batch is freed (the invariant at the top of this file).
func (g *group) recyclable() bool {
	return g.caller && g.finished && !g.unquiesced && g.n == 1 && !g.offRing && g.mem == nil && g.remote == nil
}

// detachGroupsLocked empties the task and group lists of a batch that
// Free just freed with no group active, and returns them with the rest of
// its free list; recycle them after b.mu is released. REQUIRES: b.mu.
func (b *Batch) detachGroupsLocked() batchLists {
	l := batchLists{tasks: b.mu.tasks, groups: b.mu.groups, claimed: b.claimed, all: b.mu.recyclable == len(b.mu.groups)}
	b.mu.groups, b.mu.tasks = nil, nil
	b.claimed = nil // every entry is nil after a fold
	// Claim what no submission took: one that claims after this finds
	// the list empty (freeClosed is past any length).
	for k := range b.freeNext {
		lo, hi := b.freePart(k)
		if next := b.freeNext[k].Swap(freeClosed); next < int64(hi-lo) {
			if l.free == nil {
				l.free = make([]*group, 0, len(b.free)-lo-int(next))
			}
			l.free = append(l.free, b.free[lo+int(next):hi]...)
		}
	}
	return l
}

// freeClosed is freeNext once Free claimed the rest of the free list.
const freeClosed = math.MaxInt64 / 2

// batchLists are a batch's task and group lists, which a freed batch
// hands back for reuse with its groups, and a free list: recyclable
// groups for the next batch that takes the lists.
type batchLists struct {
	tasks   []task
	groups  []*group
	free    []*group
	claimed []*group // a fold's scratch, every entry nil (claim.go)
	all     bool     // every group in groups is recyclable
}

// recycle hands the recyclable groups of a freed batch, and its lists,
// to the pools. The groups ride with the lists as the next batch's free
// list when the lists are pooled: a batch of 4096 caller copies put its
// groups into the engine's sync.Pool one by one, all on the processor
// that ran Free, and every other processor then stole them back one by
// one (sync.Pool was 7 % of the engine's CPU at 32 jobs at QD 1 on 16
// cores, docs/performance.md). REQUIRES: l came from
// detachGroupsLocked of a batch not quarantined.
func (e *Engine) recycle(l batchLists) {
	if cap(l.tasks) < minPooledList {
		for _, g := range l.groups {
			if g.recyclable() {
				e.groups.Put(g)
			}
		}
		e.putGroups(l.free)
		return
	}
	if l.all && len(l.free) == 0 && len(l.groups) <= maxFreeList {
		// Every group is recyclable and the old free list was used up
		// (a batch of caller copies): the group list itself becomes the
		// free list, with no look at each group, whose lines went cold
		// thousands of requests ago (Free, with the pool's Puts, was 3 %
		// of the CPU at 32 jobs at QD 1, docs/performance.md). The next
		// batch gets a new group list (takeLists).
		clear(l.tasks)
		e.lists.Put(&batchLists{tasks: l.tasks[:0], free: l.groups, claimed: l.claimed})
		return
	}
	// A new slice: the old free list may still see a late nil from a
	// submission that took its group before Free (takeFree).
	free := make([]*group, 0, min(len(l.free)+len(l.groups), maxFreeList))
	for _, g := range l.groups {
		if g.recyclable() && len(free) < maxFreeList {
			free = append(free, g)
		}
	}
	spill := min(len(l.free), maxFreeList-len(free))
	free = append(free, l.free[:spill]...)
	e.putGroups(l.free[spill:])
	clear(l.free)  // Free owns these entries: nothing stays reachable
	clear(l.tasks) // no group stays reachable through a pooled list
	clear(l.groups)
	e.lists.Put(&batchLists{tasks: l.tasks[:0], groups: l.groups[:0], free: free, claimed: l.claimed})
}

// putGroups puts groups into the engine's pool.
func (e *Engine) putGroups(gs []*group) {
	for _, g := range gs {
		e.groups.Put(g)
	}
}

// minPooledList: shorter lists cost less to grow than to pool.
const minPooledList = 64

// maxFreeList bounds a free list (the largest batch is 4096 tasks by
// default): groups beyond it go to the engine's pool.
const maxFreeList = 4096

// takeLists gives a new batch a freed batch's task and group lists and
// its free list, as long as the new batch may fill them, and returns
// them (to be pooled again should the allocation fail). REQUIRES: b not
// yet shared.
func (b *Batch) takeLists() *batchLists {
	if b.capacity < minPooledList {
		return nil
	}
	l, ok := b.e.lists.Get().(*batchLists)
	if !ok {
		return nil
	}
	b.mu.tasks, b.mu.groups, b.free, b.claimed = l.tasks, l.groups, l.free, l.claimed
	if l.groups == nil && l.tasks != nil {
		b.mu.groups = make([]*group, 0, min(cap(l.tasks), b.capacity)) // the old one is a free list now
	}
	return l
}

// listsForLocked gives a batch's first submission its task and group
// lists when its allocation found none pooled (takeLists); the free list
// that came with them goes to the engine's pool, since a live batch's
// free list never changes. REQUIRES: b.mu; b has no task yet.
func (b *Batch) listsForLocked() {
	if b.capacity < minPooledList {
		return
	}
	if l, ok := b.e.lists.Get().(*batchLists); ok {
		b.mu.tasks, b.mu.groups = l.tasks, l.groups
		if b.claimed == nil {
			b.claimed = l.claimed
		}
		b.e.putGroups(l.free)
	}
}

func (g *group) unmapScratch() {
	for _, m := range g.scratch {
		m.Close()
	}
	g.scratch = nil
}

// release returns the admission charge and segment user of a group that
// has drained (or was never queued).
func (g *group) release() {
	switch {
	case g.mem != nil:
		g.mem.seg.done()
	case g.remote != nil:
		g.endRemote()
		g.remote.seg.done()
	default:
		g.ent.done(g.adm.shard)
	}
	g.unadmit()
}

// unadmit returns the engine-wide admission charge and the scratch
// mappings, but no segment user (for a group the segment refused).
func (g *group) unadmit() {
	e := g.b.e
	e.inflightGroups.give(g.adm.shard, 1)
	if !g.adm.bytesDeferred || g.adm.bytesHeld {
		e.inflightBytes.give(g.adm.shard, g.charge)
	}
	e.adm.release(g)
	g.unmapScratch()
}

// finishLocked ends the group. drained=false (unquiesced) retains every
// resource. REQUIRES: b.mu.
func (g *group) finishLocked(drained bool) {
	if g.finished {
		return
	}
	b := g.b
	g.finished = true
	g.unquiesced = !drained
	if !drained {
		b.mu.unquiesced = true
	}
	if g.recyclable() {
		b.mu.recyclable++
	}
	b.mu.active--
	defer b.settleDeferredLocked() // deferfree.go
	for k, h := range b.mu.inflight {
		if h == g {
			b.mu.inflight = append(b.mu.inflight[:k], b.mu.inflight[k+1:]...)
			if g.hazard() {
				b.mu.hazards--
			}
			break
		}
	}
	switch {
	case drained && g.settled:
		g.ent.done(g.adm.shard)
	case drained:
		if g.dispatched {
			releaseLoans(g, -1)
		}
		g.release()
	}
	r := g.reportLocked()
	if r.Err != nil {
		r.FailedAt = time.Now() // only failures pay for the clock
	}
	g.inline.final = r
	g.final = &g.inline.final
	if b.mu.onDone != nil {
		b.mu.notify = append(b.mu.notify, r)
		b.reports.Store(true)
	}
	if r.Err != nil {
		b.e.log.Debug("group finished with error", "batch", b.id, "task", g.first+r.RequestIndex, "err", r.Err)
	}
}

// reportLocked builds the group's report. REQUIRES: b.mu.
func (g *group) reportLocked() Report {
	if g.final != nil {
		return *g.final
	}
	b := g.b
	r := Report{Tasks: TaskRange{First: g.first, Count: g.n}, Op: g.op, Target: g.targetURI(),
		Done: g.finished, RequestIndex: -1, LocallyDrained: g.finished && !g.unquiesced}
	prefix := true
	for i := 0; i < g.n; i++ {
		t := &b.mu.tasks[g.first+i]
		if prefix && t.state == TaskCompleted {
			r.CompletedRequests++
			r.CompletedBytes += t.length
			continue
		}
		prefix = false
		if t.state == TaskFailed || t.state == TaskCancelled {
			r.RequestIndex = i
			kind := KindOf(t.err)
			if g.finished && g.unquiesced {
				// The group's retained state outranks the first task's own
				// cause: a caller must learn that memory and fds are held.
				kind = KindUnquiesced
			}
			op, name := g.op.String(), b.name()
			r.Err = &Error{Op: op, Name: name, Kind: kind, Err: fmt.Errorf("requests[%d] (task %d): %w", i, g.first+i, quoted(t.err, op, name, kind))}
			if g.lastSubmitted >= i {
				r.AffectedRequests = g.lastSubmitted - i + 1
			}
			if g.op == OpWrite {
				for j := i; j <= g.lastSubmitted; j++ {
					t := &b.mu.tasks[g.first+j]
					// Off-ring executors know per task whether a failed
					// write reached the kernel or cuFile; a ring task that
					// was submitted may have, whatever its outcome.
					if (!g.offRing && t.submitted) || t.effect == EffectUnknown {
						r.RemoteEffect = EffectUnknown
						break
					}
				}
			}
			break
		}
	}
	if g.op == OpWrite && r.RemoteEffect == EffectNone {
		for i := 0; i < g.n; i++ {
			if b.mu.tasks[g.first+i].transferred > 0 {
				r.RemoteEffect = EffectApplied
				break
			}
		}
	}
	return r
}

// addPieces records request i's pieces in file order; its ranges start
// at g.ranges[first], in element order. Every request of an off-ring
// group needs them: a host request routed to the ring rides with the
// group's executor (offring.go).
func (g *group) addPieces(i int, r *Request, first int) {
	k := first
	var rel uint64
	add := func(p piece) {
		p.rel = rel
		rel += p.n
		g.pieces[i] = append(g.pieces[i], p)
	}
	if g.pieces == nil {
		g.pieces = make([][]piece, g.n)
	}
	elems := r.Elements
	if len(elems) == 0 {
		elems = []Element{{Address: r.Address, Length: r.Length}}
	}
	for _, el := range elems {
		if el.Padding != 0 {
			add(piece{kind: piecePad, n: el.Padding})
			continue
		}
		reg := g.ranges[k].region
		k++
		if reg.dev != nil {
			add(piece{kind: pieceDevice, n: el.Length, addr: el.Address, dev: reg.dev.Device()})
			continue
		}
		lo := el.Address - reg.BaseAddress()
		add(piece{kind: pieceHost, n: el.Length, addr: el.Address, host: reg.m.Bytes()[lo : lo+el.Length]})
	}
}
