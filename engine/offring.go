// offring.go owns the jobs of groups that leave the batch worker's ring:
// requests that touch device memory (pinned staging, staged.go; cuFile,
// gdsexec.go), large requests on in-memory files (hostcopy.go) and every
// request on a peer's region (peerexec.go).
//
// The worker still owns the group's place in the batch: FIFO dispatch,
// fences against earlier groups, loans and the deadline check at
// dispatch. At dispatch it marks every task running and hands each
// executor (executor.go) its share of the group as one job: each
// request's file extent cut into units. The executors run units of every
// batch's jobs on lanes they own engine-wide, taken from their fair queue
// (fairqueue.go), so the disk, the copy engine and every core overlap.
//
// Invariants:
//   - A unit resolves exactly once (resolve); a task reports once, when
//     its last unit resolves, through Batch.finishOffRing and task.go's
//     endTaskLocked (the path every executor's outcome takes). Before
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

// unit is the slice of one request's file extent that one lane moves at
// once: at most one staging chunk, or one cuFile call.
type unit struct {
	task   int    // group-relative request index
	off    uint64 // file offset
	rel    uint64 // offset within the request's extent
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
	units []unit
	next  atomic.Int64
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

	mu        sync.Mutex
	res       []unitResult
	left      []int // per task: units not yet resolved
	first     []int // per task: index of its first unit
	undrained bool
	// leg, when set, is the ordered execution this job is one leg of
	// (ipcexec.go): told after each of the job's tasks reported.
	leg *legs
	// Per task: the first unit not yet counted in its published prefix,
	// and that prefix's bytes (allocated on the first resolve).
	cursor []int
	prefix []uint64
}

// newOffRing splits the group's requests into units of at most size
// bytes. byPiece keeps every unit within one piece (cuFile moves one
// device range per call).
// Tasks that are not live (cancelled before dispatch) get no unit.
func newOffRing(g *group, rt route, size uint64, byPiece bool, live func(i int) bool) *offRing {
	x := &offRing{g: g, route: rt, left: make([]int, g.n), first: make([]int, g.n)}
	for i := 0; i < g.n; i++ {
		x.first[i] = len(x.units)
		if !live(i) {
			continue
		}
		ps := g.pieces[i]
		var extent uint64
		for _, p := range ps {
			extent = max(extent, p.rel+p.n)
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
					x.units = append(x.units, unit{task: i, off: g.ops[i].Offset + p.rel + at, rel: p.rel + at, n: n, pieces: []piece{q}})
				}
			}
		} else {
			for at := uint64(0); at < extent; at += size {
				u := unit{task: i, off: g.ops[i].Offset + at, rel: at, n: min(size, extent-at)}
				u.pieces = clip(ps, at, u.n)
				x.units = append(x.units, u)
			}
		}
		x.left[i] = len(x.units) - x.first[i]
	}
	x.res = make([]unitResult, len(x.units))
	x.ready, x.readyErr = make([]sync.Once, g.n), make([]error, g.n)
	x.skip = make([]atomic.Bool, g.n)
	x.broken = make([]atomic.Bool, g.n)
	x.avail.Store(int64(len(x.units)))
	return x
}

// waitProducer consumes unit k's task's producer event once, before
// anything touches its device memory (spec: "consumes its producer event
// before access"). A failure fails the unit with nothing moved.
func (x *offRing) waitProducer(k int) error {
	i := x.units[k].task
	if x.g.producers == nil || x.g.producers[i] == nil {
		return nil
	}
	x.ready[i].Do(func() {
		// Polled, never past deadline + quiesce_grace: a producer that
		// never signals must not hang the group. Nothing was touched, so
		// nothing is retained.
		cut := x.g.deadline.Add(x.g.b.e.cfg.QuiesceGrace.D())
		done, err := waitEvent(x.g.producers[i], cut)
		switch {
		case err != nil:
			x.readyErr[i] = unitErr(x.g, &x.units[k], KindIO, fmt.Errorf("producer event: %w", err))
		case !done:
			x.readyErr[i] = unitErr(x.g, &x.units[k], KindTimeout, errors.New("the producer event did not complete by the deadline"))
		}
	})
	return x.readyErr[i]
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
		if x.skip[x.units[k].task].Load() {
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
	switch {
	case x.broken[u.task].Load():
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
	for i := range x.g.n {
		if x.g.producers[i] != nil && x.left[i] > 0 {
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
		for i := range x.g.n {
			end := len(x.units)
			if i+1 < x.g.n {
				end = x.first[i+1]
			}
			if x.first[i] == end {
				continue
			}
			err := x.waitProducer(x.first[i])
			if err != nil {
				x.skip[i].Store(true)
			}
			x.avail.Store(int64(end))
			if err != nil {
				for k := x.first[i]; k < end; k++ {
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
	i := x.units[k].task
	if x.g.op == OpWrite && (err != nil || got < x.units[k].n) {
		x.broken[i].Store(true)
	}
	x.left[i]--
	if x.left[i] > 0 {
		got, grew := x.advancePrefixLocked(i)
		x.mu.Unlock()
		if grew {
			x.g.b.progressOffRing(x.g, i, got)
		}
		return
	}
	transferred, terr, effect := x.taskResultLocked(i)
	drained := !x.undrained
	x.mu.Unlock()
	x.g.b.finishOffRing(x.g, i, transferred, terr, effect, drained)
	if x.leg != nil {
		x.leg.taskDone(i, terr)
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
	end := len(x.units)
	if i+1 < len(x.first) {
		end = x.first[i+1]
	}
	grew := false
	for k := x.cursor[i]; k < end; k++ {
		r := &x.res[k]
		if !r.done || r.err != nil || r.got < x.units[k].n {
			break
		}
		x.prefix[i] += x.units[k].n
		x.cursor[i] = k + 1
		grew = true
	}
	return x.prefix[i], grew
}

// progressOffRing publishes a running task's prefix so far; the final
// count comes with its last unit (finishOffRing).
func (b *Batch) progressOffRing(g *group, i int, got uint64) {
	b.mu.Lock()
	if t := &b.mu.tasks[g.first+i]; t.state == TaskRunning && !t.parked && got > t.transferred {
		t.transferred = got
		b.changedLocked()
	}
	b.mu.Unlock()
}

// taskResultLocked folds task i's units. REQUIRES: x.mu.
func (x *offRing) taskResultLocked(i int) (uint64, error, RemoteEffect) {
	g := x.g
	end := len(x.units)
	if i+1 < g.n {
		end = x.first[i+1]
	}
	var got uint64
	var err error
	effect := EffectNone
	prefix := true
	for k := x.first[i]; k < end; k++ {
		u, r := &x.units[k], &x.res[k]
		if g.op == OpWrite && r.submitted && (r.err != nil || r.got < u.n) {
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
		got += min(r.got, u.n)
		switch {
		case r.err != nil:
			err, prefix = r.err, false
		case r.got < u.n:
			what := "short read"
			if g.op == OpWrite {
				what = "short write"
			}
			err = errorf(KindRange, g.op.String(), g.targetName(), "requests[%d]: %s: %d of %d bytes at offset %d (file is shorter than at submit)", i, what, r.got, u.n, u.off)
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

// finishOffRing publishes one off-ring task's outcome (or parks a failed
// attempt that may fail over, failover.go) and finishes the group after
// its last task.
func (b *Batch) finishOffRing(g *group, i int, transferred uint64, err error, effect RemoteEffect, drained bool) {
	if g.remote != nil && g.remote.credit != nil {
		g.remote.credit.end(i, err == nil, effect)
	}
	b.mu.Lock()
	t := &b.mu.tasks[g.first+i]
	if t.state == TaskRunning {
		if err != nil && b.retryableLocked(g, i, t, transferred, effect, drained) {
			b.parkLocked(parked{g: g, i: i, transferred: transferred, err: err, effect: effect})
		} else {
			b.endTaskLocked(g, i, outcome{transferred, err, effect, drained})
		}
		b.changedLocked()
	}
	w := b.mu.w
	b.mu.Unlock()
	b.deliver()
	if w != nil {
		w.poke()
	}
}

// startOffRing hands a dispatched group to its executor. Every pending
// task becomes running. REQUIRES: b.mu.
func (w *worker) startOffRingLocked(g *group) {
	if g.mem != nil {
		w.startMemLocked(g) // memgroup.go
		return
	}
	b := w.b
	for i := 0; i < g.n; i++ {
		t := &b.mu.tasks[g.first+i]
		if t.state == TaskPending {
			t.state = TaskRunning
			t.submitted = true
			g.outstanding++
		}
	}
	g.next = g.n
	g.offRing = true
	// Every running task is handed to an executor now: the affected span
	// of a failure reaches the last of them.
	for i := g.n - 1; i >= 0; i-- {
		if b.mu.tasks[g.first+i].state == TaskRunning {
			g.lastSubmitted = i
			break
		}
	}
	if g.outstanding == 0 {
		g.finishLocked(true)
		return
	}
	// One job per executor, so cuFile and staging units of one group run
	// at once.
	b.e.runOffRing(g, func(i int) bool { return b.mu.tasks[g.first+i].state == TaskRunning })
}

// runOffRing hands each executor its share of g's live requests as one
// job. live must not change meanwhile (the caller holds b.mu).
func (e *Engine) runOffRing(g *group, live func(i int) bool) {
	g.rideAlong()
	alive := make([]bool, g.n)
	for i := range alive {
		alive[i] = live(i)
	}
	if g.mixedIPC(alive) {
		e.runLegs(g, alive) // in input order (ipcexec.go)
		return
	}
	var seen []route
	for i := 0; i < g.n; i++ {
		if !live(i) {
			continue
		}
		rt, ex := e.executor(g.routes[i])
		if slices.Contains(seen, rt) {
			continue
		}
		seen = append(seen, rt)
		ex.run(e.newJob(g, rt, ex, func(j int) bool {
			r, _ := e.executor(g.routes[j])
			return live(j) && r == rt
		}))
	}
}

// newJob cuts g's requests for which live holds into ex's units.
func (e *Engine) newJob(g *group, rt route, ex executor, live func(j int) bool) *offRing {
	size, byPiece := ex.cut()
	if rt != routeIPC {
		size = g.unitSize(size) // a peer's slice bounds a TCP unit, not a GPU copy
	}
	return newOffRing(g, rt, size, byPiece, live)
}

// unitErr wraps a lane failure for one unit.
func unitErr(g *group, u *unit, kind Kind, err error) error {
	return &Error{Op: g.op.String(), Name: g.targetName(), Kind: kind,
		Err: fmt.Errorf("requests[%d]: bytes [%d, %d): %w", u.task, u.rel, u.rel+u.n, err)}
}
