// offring.go owns the jobs of groups that leave the batch worker's ring:
// requests that touch device memory (pinned staging, staged.go; cuFile,
// gdsexec.go), large requests and batches of mid-size ones on in-memory
// files (hostcopy.go) and every
// request on a peer's region (peerexec.go).
//
// The worker still owns the group's place in the batch: FIFO dispatch,
// fences against earlier groups, loans and the deadline check at
// dispatch. It hands the group out a window at a time, as the ring takes
// a queue depth of ops (Batch.feedLocked): it marks the window's tasks
// running and hands each executor (executor.go) its share of them as one
// job, each request's file extent cut into units. Tasks not yet handed
// out stay pending, so a cancel or the deadline still stops them. The executors run units of every
// batch's jobs on lanes they own engine-wide, taken from their fair queue
// (fairqueue.go), so the disk, the copy engine and every core overlap.
//
// Invariants:
//   - A unit resolves exactly once (resolve); a task reports once, when
//     its last unit resolves, through Batch.finishTask (task.go's
//     finishTaskLocked, the path every executor's outcome takes). Before
//     that, each resolve that extends the task's fully successful prefix
//     publishes it as the running task's byte count.
//   - A unit starts only before its deadline and, for a WRITE, while no
//     earlier unit of its task failed (startable); units of a task
//     waiting for its producer event are released only after it (gate).
//   - A task's transferred bytes are its consecutive fully successful
//     units from the start, plus the returned prefix of the first short
//     one; a gap stops the count even if later units succeeded.
//   - A WRITE unit that reached the kernel (or cuFile) and failed makes
//     its task's remote effect unknown; on a remote segment so does any
//     posted unit past the task's reported prefix (peerexec.go).
//   - A lane that cannot prove its units drained (no CQE past deadline +
//     quiesce_grace, an uncertain device copy) marks the job undrained
//     before resolving them: the group then ends unquiesced and keeps its
//     loans and charges, and the lane keeps what the unit used (its
//     chunk, its ring) forever.

package engine

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

type pieceKind uint8

const (
	pieceHost pieceKind = iota
	pieceDevice
	piecePad
)

// piece is one element of a request in file order.
type piece struct {
	kind pieceKind
	rel  uint64 // offset in the request's file extent
	n    uint64
	addr uint64 // host or device address
	host []byte // host bytes (pieceHost)
	dev  int    // CUDA device (pieceDevice)
}

// unit is the slice of one physical owner's extent that one lane moves
// at once: at most one staging chunk, or one cuFile call. A file
// request is its own owner; a memory segment's merged requests
// (memgroup.go) share one owner, and its units serve tasks task..last.
type unit struct {
	task   int    // group-relative request index (the owner's first)
	last   int    // the owner's last request (task, but for merged aliases)
	off    uint64 // file offset (a memory unit finds its target through its owner)
	rel    uint64 // offset within the owner's extent
	n      uint64
	pieces []piece // the parts of the request this unit covers, clipped
}

type unitResult struct {
	done      bool
	got       uint64
	err       error
	submitted bool // a WRITE reached the kernel or cuFile
}

// offRing is one group's off-ring execution.
type offRing struct {
	g     *group
	route route
	// lo, hi: the group's requests [lo, hi) this job may serve (a
	// window); the per-task slices below are indexed by i - lo.
	lo, hi int
	units  []unit
	next   atomic.Int64
	// avail: units below it may be handed out. A job whose tasks wait for
	// producer events releases them task by task (gate); skip marks a
	// task whose producer failed, whose units are resolved by the gate
	// and never handed out.
	avail atomic.Int64
	skip  []atomic.Bool
	// broken: a WRITE unit of the task failed or came back short, so its
	// units not yet started are failed without I/O: bytes past the gap
	// would not count, and would change the file for nothing. (READ units
	// past a gap still land; they hold the file's bytes.)
	broken []atomic.Bool

	ready    []sync.Once // per task: its producer event consumed once
	readyErr []error

	mu    sync.Mutex
	res   []unitResult
	left  []int // per task: units not yet resolved
	first []int // per task: index of its first unit
	count []int // per task: its units, from first
	// span: per task, its bytes within its owner's extent ([0, extent)
	// for a request that is its own owner).
	span      [][2]uint64
	undrained bool
	// leg, when set, is the ordered execution this job is one leg of
	// (ipcexec.go): told after each of the job's tasks reported.
	leg *legs
	// Per task: the first unit not yet counted in its published prefix,
	// and that prefix's bytes (allocated on the first resolve).
	cursor []int
	prefix []uint64
}

// newOffRing splits the group's physical owners into units of at most
// size bytes. byPiece keeps every unit within one piece (cuFile moves one
// device range per call). An owner's extent is its requests' extents end
// to end (g.aliases: one request, or a memory segment's merged ones).
// Owners that are not live (cancelled before dispatch) get no unit;
// aliases share their state, so live holds for all of an owner or none.
func newOffRing(g *group, rt route, size uint64, byPiece bool, from, to int, live func(i int) bool) *offRing {
	n := to - from
	x := &offRing{g: g, route: rt, lo: from, hi: to, left: make([]int, n), first: make([]int, n), count: make([]int, n), span: make([][2]uint64, n)}
	var ps []piece
	for i := from; i < to; {
		lo, hi := g.aliases(i) // a window holds whole owners
		start := len(x.units)
		for j := lo; j <= hi; j++ {
			x.first[j-from] = start
		}
		if !live(lo) {
			i = hi + 1
			continue
		}
		ps = ps[:0]
		var extent uint64
		for j := lo; j <= hi; j++ {
			var e uint64
			for _, p := range g.pieces[j] {
				e = max(e, p.rel+p.n)
				p.rel += extent
				ps = append(ps, p)
			}
			x.span[j-from] = [2]uint64{extent, extent + e}
			extent += e
		}
		var base uint64
		if g.ops != nil {
			base = g.ops[lo].Offset // memory owners have no file (memgroup.go)
		}
		if byPiece {
			for _, p := range ps {
				for at := uint64(0); at < p.n; at += size {
					n := min(size, p.n-at)
					q := p
					q.rel, q.n = 0, n
					q.addr += at
					if q.host != nil {
						q.host = q.host[at : at+n]
					}
					x.units = append(x.units, unit{task: lo, last: hi, off: base + p.rel + at, rel: p.rel + at, n: n, pieces: []piece{q}})
				}
			}
		} else {
			for at := uint64(0); at < extent; at += size {
				u := unit{task: lo, last: hi, off: base + at, rel: at, n: min(size, extent-at)}
				u.pieces = clip(ps, at, u.n)
				x.units = append(x.units, u)
			}
		}
		for j := lo; j <= hi; j++ {
			x.count[j-from] = len(x.units) - start
			x.left[j-from] = x.count[j-from]
		}
		i = hi + 1
	}
	x.res = make([]unitResult, len(x.units))
	x.ready, x.readyErr = make([]sync.Once, n), make([]error, n)
	x.skip = make([]atomic.Bool, n)
	x.broken = make([]atomic.Bool, n)
	x.avail.Store(int64(len(x.units)))
	return x
}

// share is task i's part of unit k: the bytes of the unit that are
// task i's, and how many of them the unit moved.
func (x *offRing) share(k, i int) (want, got uint64) {
	u, r := &x.units[k], &x.res[k]
	sp := x.span[i-x.lo]
	lo, hi := max(u.rel, sp[0]), min(u.rel+u.n, sp[1])
	if lo >= hi {
		return 0, 0
	}
	moved := u.rel + min(r.got, u.n)
	return hi - lo, min(hi, max(moved, lo)) - lo
}

// waitProducer consumes unit k's task's producer event once, before
// anything touches its device memory (spec: "consumes its producer event
// before access"). A failure fails the unit with nothing moved.
func (x *offRing) waitProducer(k int) error {
	i := x.units[k].task
	if x.g.producers == nil || x.g.producers[i] == nil {
		return nil
	}
	j := i - x.lo
	x.ready[j].Do(func() {
		// Polled, never past deadline + quiesce_grace: a producer that
		// never signals must not hang the group. Nothing was touched, so
		// nothing is retained.
		cut := x.g.deadline.Add(x.g.b.e.cfg.QuiesceGrace.D())
		done, err := waitEvent(x.g.producers[i], cut)
		switch {
		case err != nil:
			x.readyErr[j] = unitErr(x.g, &x.units[k], KindIO, fmt.Errorf("producer event: %w", err))
		case !done:
			x.readyErr[j] = unitErr(x.g, &x.units[k], KindTimeout, errors.New("the producer event did not complete by the deadline"))
		}
	})
	return x.readyErr[j]
}

// clip returns the parts of ps inside [at, at+n), with rel made relative
// to at.
func clip(ps []piece, at, n uint64) []piece {
	var out []piece
	for _, p := range ps {
		lo, hi := max(p.rel, at), min(p.rel+p.n, at+n)
		if lo >= hi {
			continue
		}
		q := p
		d := lo - p.rel
		q.rel, q.n = lo-at, hi-lo
		q.addr += d
		if q.host != nil {
			q.host = q.host[d : d+q.n]
		}
		out = append(out, q)
	}
	return out
}

// take hands out the next unit, in file order, or -1 when none is
// ready (all handed out, or the next waits for its producer event).
func (x *offRing) take() int {
	for {
		k := x.next.Load()
		if k >= int64(len(x.units)) || k >= x.avail.Load() {
			return -1
		}
		if !x.next.CompareAndSwap(k, k+1) {
			continue
		}
		if x.skip[x.units[k].task-x.lo].Load() {
			continue
		}
		return int(k)
	}
}

// errBroken fails a WRITE unit whose task already failed.
var errBroken = errors.New("not started: an earlier part of the request failed")

// startable returns why unit k must not start (an earlier WRITE unit of
// its task failed, or the deadline passed), or nil.
func (x *offRing) startable(k int) error {
	u := &x.units[k]
	if h := x.g.b.e.unitHeld; h != nil {
		h(x.g.first + u.task)
	}
	switch {
	case x.broken[u.task-x.lo].Load():
		return unitErr(x.g, u, KindIO, errBroken)
	case time.Now().After(x.g.deadline):
		return unitErr(x.g, u, KindTimeout, errors.New("deadline passed before these bytes started"))
	}
	return nil
}

// exhausted reports whether every unit has been handed out.
func (x *offRing) exhausted() bool { return x.next.Load() >= int64(len(x.units)) }

// hasProducers reports whether some live task waits for a producer event.
func (x *offRing) hasProducers() bool {
	if x.g.producers == nil {
		return false
	}
	for i := x.lo; i < x.hi; i++ {
		if x.g.producers[i] != nil && x.left[i-x.lo] > 0 {
			return true
		}
	}
	return false
}

// gate releases the job's units task by task, each after its task's
// producer event completed (bounded by deadline + quiesce_grace), so an
// executor's lanes never block on a producer and other jobs keep moving.
// A task whose producer failed has its units resolved here with that
// error; nothing of it is touched. release is called after each step.
func (x *offRing) gate(release func()) {
	x.avail.Store(0)
	go func() {
		for i := x.lo; i < x.hi; i++ {
			first := x.first[i-x.lo]
			end := first + x.count[i-x.lo]
			if lo, _ := x.g.aliases(i); first == end || lo != i {
				continue // no unit, or an alias of its owner's first task
			}
			err := x.waitProducer(first)
			if err != nil {
				x.skip[i-x.lo].Store(true)
			}
			x.avail.Store(int64(end))
			if err != nil {
				for k := first; k < end; k++ {
					x.resolve(k, 0, err)
				}
			}
			release()
		}
	}()
}

// markSubmitted records that a WRITE unit reached the kernel.
func (x *offRing) markSubmitted(k int) {
	x.mu.Lock()
	x.res[k].submitted = true
	x.mu.Unlock()
}

// resolve records unit k's outcome and reports its task when it was the
// task's last unit.
func (x *offRing) resolve(k int, got uint64, err error) {
	x.mu.Lock()
	r := &x.res[k]
	if r.done {
		x.mu.Unlock()
		return
	}
	r.done, r.got, r.err = true, got, err
	u := &x.units[k]
	type report struct {
		i           int
		final       bool
		transferred uint64
		err         error
		effect      RemoteEffect
	}
	var reports []report
	for i := u.task; i <= u.last; i++ {
		if x.g.op == OpWrite && (err != nil || got < u.n) {
			x.broken[i-x.lo].Store(true)
		}
		x.left[i-x.lo]--
		if x.left[i-x.lo] > 0 {
			if got, grew := x.advancePrefixLocked(i); grew {
				reports = append(reports, report{i: i, transferred: got})
			}
			continue
		}
		transferred, terr, effect := x.taskResultLocked(i)
		reports = append(reports, report{i, true, transferred, terr, effect})
	}
	drained := !x.undrained
	x.mu.Unlock()
	for _, r := range reports {
		if r.final {
			x.g.b.finishTask(x.g, r.i, outcome{r.transferred, r.err, r.effect, drained})
			if x.leg != nil {
				x.leg.taskDone(r.i, r.err)
			}
		} else {
			if h := x.g.b.e.progressHeld; h != nil {
				h() // tests: a lane holds a progress report here
			}
			x.g.b.progressOffRing(x.g, r.i, r.transferred)
		}
	}
}

// advancePrefixLocked extends task i's count of consecutive fully
// successful units from its start (spec: a task's byte count advances as
// contiguous receipts arrive) and reports it when it grew. Amortized
// O(1) per unit. REQUIRES: x.mu.
func (x *offRing) advancePrefixLocked(i int) (uint64, bool) {
	if x.cursor == nil {
		x.cursor = append([]int(nil), x.first...)
		x.prefix = make([]uint64, len(x.first))
	}
	i -= x.lo
	grew := false
	for k := x.cursor[i]; k < x.first[i]+x.count[i]; k++ {
		r := &x.res[k]
		want, got := x.share(k, i+x.lo)
		if !r.done || r.err != nil || got < want {
			break
		}
		x.prefix[i] += want
		x.cursor[i] = k + 1
		grew = grew || want > 0
	}
	return x.prefix[i], grew
}

// progressOffRing publishes a running task's prefix so far; the final
// count comes with its last unit (finishTask). Reports are published
// outside x.mu, so one may arrive after its task's final report from
// another lane, after the batch was even freed (its task list gone):
// it is dropped.
func (b *Batch) progressOffRing(g *group, i int, got uint64) {
	b.mu.Lock()
	if b.mu.freed {
		b.mu.Unlock()
		return
	}
	if t := &b.mu.tasks[g.first+i]; t.state == TaskRunning && !t.parked && got > t.transferred {
		t.transferred = got
		b.changedLocked()
	}
	b.mu.Unlock()
}

// taskResultLocked folds task i's units. REQUIRES: x.mu.
func (x *offRing) taskResultLocked(i int) (uint64, error, RemoteEffect) {
	g := x.g
	var got uint64
	var err error
	effect := EffectNone
	prefix := true
	for k := x.first[i-x.lo]; k < x.first[i-x.lo]+x.count[i-x.lo]; k++ {
		u, r := &x.units[k], &x.res[k]
		want, moved := x.share(k, i)
		if g.op == OpWrite && r.submitted && (r.err != nil || moved < want) {
			effect = EffectUnknown
		}
		if !prefix {
			// A peer may hold bytes past the reported prefix: never
			// call that none (peerexec.go).
			if g.remote != nil && g.op == OpWrite && r.submitted {
				effect = EffectUnknown
			}
			continue
		}
		got += moved
		switch {
		case r.err != nil:
			err, prefix = r.err, false
		case moved < want:
			what := "short read"
			if g.op == OpWrite {
				what = "short write"
			}
			err = errorf(KindRange, g.op.String(), g.targetName(), "requests[%d]: %s: %d of %d bytes at offset %d (file is shorter than at submit)", i, what, moved, want, u.off)
			prefix = false
		}
	}
	return got, err, effect
}

// failRest resolves every unit not yet handed out with err (used when a
// lane cannot start: no ring, no staging).
func (x *offRing) failRest(err error) {
	for k := x.take(); k >= 0; k = x.take() {
		x.resolve(k, 0, err)
	}
}

// finishTask is finishTaskLocked for an executor that holds no engine
// lock (offRing.resolve): it takes Batch.mu, then delivers the reports
// of groups that ended and pokes the worker.
func (b *Batch) finishTask(g *group, i int, o outcome) {
	if g.remote != nil && g.remote.credit != nil {
		g.remote.credit.end(i, o.err == nil, o.effect)
	}
	b.mu.Lock()
	if b.finishTaskLocked(g, i, o) {
		b.changedLocked()
	}
	w := b.mu.w
	b.mu.Unlock()
	b.deliver()
	if w != nil {
		w.poke()
	}
}

// feedLocked hands the executors g's next pending physical
// owners, as the ring takes a queue depth of ops: at most a window of
// the group's tasks are running at once (io_uring.queue_depth, or less
// where an executor says so: Engine.window), and the window is refilled
// once half of it is free (so a refill is one job of many tasks, not one
// job per finished task). Tasks not yet handed out stay pending: a
// cancel still stops them, and the deadline fails them before dispatch.
// It reports whether every task of g has been dispatched; the worker
// dispatches nothing behind g before (FIFO), and each finished task
// pokes it, or feeds the group itself (finishTaskLocked). REQUIRES: b.mu.
func (b *Batch) feedLocked(g *group, now time.Time) bool {
	if g.window == 0 { // its first window
		g.window = b.e.window(g)
	}
	window := g.window
	if g.next < g.n && g.outstanding > window/2 {
		return false
	}
	from := g.next
	for g.next < g.n && g.outstanding < window {
		i := g.next
		_, last := g.aliases(i) // an owner's tasks share their state
		t := &b.mu.tasks[g.first+i]
		if t.state != TaskPending {
			b.creditSkipLocked(g, i) // its head reservation, if it held one
			g.next = last + 1        // cancelled meanwhile
			continue
		}
		if now.After(g.deadline) {
			b.failRestLocked(g, i, errorf(KindTimeout, g.op.String(), b.name(), "deadline passed before requests[%d] was dispatched", i))
			break
		}
		if !b.creditFeedLocked(g, i, now) {
			break // it waits for receiver credit (credit.go), or g failed
		}
		for j := i; j <= last; j++ {
			t := &b.mu.tasks[g.first+j]
			t.state = TaskRunning
			t.submitted = true
			g.outstanding++
		}
		// Every running task is handed to an executor now: the
		// affected span of a failure reaches the last of them.
		g.lastSubmitted = last
		g.next = last + 1
	}
	to := g.next
	if from < to {
		// One job per executor, so cuFile and staging units of one group
		// run at once.
		b.e.runOffRing(g, from, to, func(i int) bool { return b.mu.tasks[g.first+i].state == TaskRunning })
	}
	if g.next == g.n && g.outstanding == 0 {
		b.endGroupLocked(g) // an earlier window may have ended undrained
	}
	if from < to {
		b.changedLocked() // after the finish: it publishes the batch's end
	}
	return g.next == g.n
}

// runOffRing hands each executor its share of g's live requests in
// [from, to) as one job. live must not change meanwhile (the caller
// holds b.mu).
func (e *Engine) runOffRing(g *group, from, to int, live func(i int) bool) {
	if g.remote != nil {
		alive := make([]bool, g.n)
		for i := from; i < to; i++ {
			alive[i] = live(i)
		}
		if g.mixedIPC(alive) {
			e.runLegs(g, alive) // in input order (ipcexec.go)
			return
		}
	}
	var seen []route
	for i := from; i < to; i++ {
		if !live(i) {
			continue
		}
		rt := g.routes[i]
		if slices.Contains(seen, rt) {
			continue
		}
		seen = append(seen, rt)
		ex := e.jobExec(rt)
		ex.run(e.newJob(g, rt, ex, from, to, func(j int) bool {
			return live(j) && g.routes[j] == rt
		}))
	}
}

// newJob cuts g's requests in [from, to) for which live holds into ex's
// units.
func (e *Engine) newJob(g *group, rt route, ex jobExecutor, from, to int, live func(j int) bool) *offRing {
	size, byPiece := ex.cut()
	if rt != routeIPC {
		size = g.unitSize(size) // a peer's slice bounds a TCP unit, not a GPU copy
	}
	return newOffRing(g, rt, size, byPiece, from, to, live)
}

// window is how many of g's tasks may be running at once: the queue
// depth, or less where one of its executors says so. A group mixing
// cuda_ipc with another route runs in legs in input order (ipcexec.go),
// which a later window could overtake: it goes out whole.
func (e *Engine) window(g *group) int {
	if g.remote != nil {
		all := make([]bool, g.n)
		for i := range all {
			all[i] = true
		}
		if g.mixedIPC(all) {
			return g.n
		}
	}
	n := e.cfg.IOUring.QueueDepth
	for i := 0; i < g.n; i++ {
		n = min(n, e.jobExec(g.routes[i]).window(e.cfg.IOUring.QueueDepth))
	}
	return max(n, 1)
}

// unitErr wraps a lane failure for one unit.
func unitErr(g *group, u *unit, kind Kind, err error) error {
	return &Error{Op: g.op.String(), Name: g.targetName(), Kind: kind,
		Err: fmt.Errorf("requests[%d]: bytes [%d, %d): %w", u.task, u.rel, u.rel+u.n, err)}
}
