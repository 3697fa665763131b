// staged.go owns the CUDA <-> file path through pinned staging: each lane
// holds one io_uring ring, a few staging chunks and a CUDA stream per
// device, and moves units (at most one chunk of file bytes each).
//
//   - READ: the unit's bytes are read into a chunk (fixed-buffer SQE);
//     on its CQE the returned prefix is copied to the device
//     asynchronously and an event recorded; the chunk takes new I/O only
//     after that event completed.
//   - WRITE: the unit's device bytes are copied into a chunk and the copy
//     is confirmed (stream sync) before the SQE is written; host bytes are
//     copied and padding zeroed in the chunk.
//
// Several lanes run at once (up to staging_lanes), so one request keeps
// the disk queue deep and, on page-cache files, uses several cores for
// the copy the kernel does inside io_uring_enter.
//
// Invariants (besides offring.go's):
//   - A slot is free, in I/O (its SQE is on the ring) or copying (its
//     CQE arrived and device copies were enqueued); only a free slot is
//     given a unit.
//   - The lane gives back its ring, chunks and streams only when every
//     slot is free; otherwise (cutoff, uncertain copy) it keeps them.
//   - A slot whose chunk the kernel or the GPU may still touch (an SQE
//     left in a ring whose submit failed, a copy whose outcome is
//     unknown) is dead: it never takes another unit.
//   - No wait is unbounded: copies and producer events are polled against
//     deadline + quiesce_grace, past which the lane ends unquiesced.
//   - A lane that cannot start (no ring, no chunk) leaves its units to the
//     other lanes; runStaged fails whatever no lane took.

package engine

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

type slotState uint8

const (
	slotFree slotState = iota
	slotIO
	slotCopy
	slotDead // its chunk may still be used by the kernel or the GPU
)

type slot struct {
	c     *chunk
	k     int // unit index
	state slotState
	evs   []Event
	got   uint64
	short error // why a READ unit stopped short, reported after its copy
}

type lane struct {
	e       *Engine
	x       *offRing
	q       Queue
	slots   []slot
	streams map[int]Stream
	pending []int // slots prepared, not yet consumed by Submit
	inIO    int
	inCopy  int
	clean   bool // false once the lane must keep its resources
	// poisoned: a submit failed for good, so the ring's SQ may still hold
	// SQEs; the lane prepares and submits nothing more on it.
	poisoned bool
}

// errNoLane fails units that no lane could take (no ring or no staging
// buffer for any lane).
var errNoLane = errors.New("no staging lane could run these bytes")

// stagingLanes is how many lanes one job may use.
func (e *Engine) stagingLanes() int {
	if n := e.cfg.StagingLanes; n > 0 {
		return n
	}
	// One lane per core, up to 16: on page-cache files each lane's ring
	// copies in io_uring_enter on its own thread. Measured on the H200
	// (16 cores, 4 GiB tmpfs file -> GPU): 4 lanes 16 GB/s, 8 lanes 26,
	// 16 lanes 37 (docs/performance.md).
	return min(runtime.GOMAXPROCS(0), 16)
}

// runStaged runs a staged job to the end.
func (e *Engine) runStaged(x *offRing) {
	if err := e.gpuReady(x.g.op.String(), x.g.b.name()); err != nil {
		x.failRest(err)
		return
	}
	p, err := e.staging()
	if err != nil {
		x.failRest(err)
		return
	}
	// More lanes than chunks would leave lanes with nothing to stage in.
	n := x.lanes(min(e.stagingLanes(), e.cfg.StagingChunkCount))
	per := max(1, e.cfg.StagingChunkCount/n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = e.stagedLane(x, p, per, i == 0)
		}()
	}
	wg.Wait()
	// Units no lane took: every lane failed to start (or stopped early).
	cause := errors.Join(errs...)
	if cause == nil {
		cause = errNoLane
	}
	x.failRest(wrap(KindOf(cause), x.g.op.String(), x.g.b.name(), fmt.Errorf("%w: %w", errNoLane, cause)))
}

// stagedLane runs one lane until no unit is left. It returns why it could
// not start (no ring, no staging buffer); its units then go to the other
// lanes. Only a job's first lane waits for a ring; the others take one
// only if the pool has it free, so a job never holds a ring while it
// waits for another (many concurrent jobs once held every ring's worth of
// waiting lanes and hung).
func (e *Engine) stagedLane(x *offRing, p *stagingPool, depth int, first bool) error {
	var q Queue
	var err error
	if first {
		q, err = e.file.Acquire()
	} else if q, err = e.file.TryAcquire(); q == nil && err == nil {
		return nil // the pool is busy: the job's other lanes take its units
	}
	if err != nil {
		return wrap(KindExhausted, x.g.op.String(), x.g.b.name(), err)
	}
	// Only the first lane falls back to a pageable buffer: with the
	// pinned pool leased out (concurrent groups), a lane of pageable
	// memory maps, faults and copies slower than it helps; its units go
	// to the lanes that have chunks (16 clients into cuda:0 ran no faster
	// than 4, docs/performance.md).
	cs, err := e.getChunks(p, depth, first)
	if err == nil && len(cs) == 0 {
		q.Release()
		return nil
	}
	if err != nil {
		q.Release()
		return err
	}
	l := &lane{e: e, x: x, q: q, streams: map[int]Stream{}, clean: true}
	for _, c := range cs {
		l.slots = append(l.slots, slot{c: c, k: -1})
	}
	l.run()
	if !l.clean {
		q.Abandon()
		return nil
	}
	q.Release()
	e.putChunks(p, cs)
	for dev, s := range l.streams {
		e.putStream(dev, s)
	}
	return nil
}

func (l *lane) run() {
	g := l.x.g
	grace := l.e.cfg.QuiesceGrace.D()
	more := true
	cut := g.deadline.Add(grace)
	for {
		l.retireCopies(time.Time{})
		if more && !l.poisoned {
			more = l.fill()
		}
		l.submit()
		if l.inIO == 0 && l.inCopy == 0 && (!more || l.poisoned || !l.alive()) {
			return // units left over go to other lanes, or runStaged fails them
		}
		if l.inIO == 0 {
			if !l.retireCopies(cut) {
				l.cutoff(grace)
				return
			}
			continue
		}
		left := time.Until(cut)
		if left <= 0 {
			l.cutoff(grace)
			return
		}
		wait := min(left, maxReapWait)
		if l.inCopy > 0 {
			wait = min(wait, 100*time.Microsecond)
		}
		if _, err := l.q.Reap(wait, l.complete); err != nil {
			l.e.log.Warn("staged reap failed", "batch", g.b.id, "err", err)
		}
	}
}

// alive reports whether some slot can still take a unit.
func (l *lane) alive() bool {
	for i := range l.slots {
		if l.slots[i].state != slotDead {
			return true
		}
	}
	return false
}

// fill gives free slots new units; false when no unit is left.
func (l *lane) fill() bool {
	g := l.x.g
	for i := range l.slots {
		s := &l.slots[i]
		if s.state != slotFree {
			continue
		}
		for {
			k := l.x.take()
			if k < 0 {
				return false
			}
			u := &l.x.units[k]
			if time.Now().After(g.deadline) {
				l.x.resolve(k, 0, unitErr(g, u, KindTimeout, errors.New("deadline passed before these bytes started")))
				continue
			}
			if err := l.x.waitProducer(k); err != nil {
				l.x.resolve(k, 0, err)
				continue
			}
			if g.op == OpWrite {
				dead, err := l.stageOut(s.c, u)
				if err != nil {
					l.x.resolve(k, 0, err)
					if dead {
						s.state = slotDead
						break
					}
					continue
				}
			}
			op := FileOp{Write: g.op == OpWrite, File: l.fileFor(s.c, u), Offset: u.off,
				Iov: []IOVec{{Base: s.c.addr(), Len: u.n}}, Buf: s.c.fixed, Token: uint64(i),
				Offload: g.ent != nil && g.ent.blocking} // storewait.go
			if err := l.q.Prepare(&op); err != nil {
				l.x.resolve(k, 0, unitErr(g, u, KindIO, err))
				return true
			}
			s.k, s.state = k, slotIO
			l.inIO++
			l.pending = append(l.pending, i)
			break
		}
	}
	return true
}

// fileFor picks the O_DIRECT fd when the unit satisfies its alignment.
func (l *lane) fileFor(c *chunk, u *unit) FileRef {
	ent := l.x.g.ent
	if ent.direct.FD >= 0 && u.off%ent.dioOff == 0 && u.n%ent.dioOff == 0 && c.addr()%ent.dioMem == 0 {
		return ent.direct
	}
	return ent.buffered
}

// submit hands prepared SQEs to the kernel. A persistent failure
// poisons the ring: the SQEs it did not take may still be in its SQ, so
// their slots die (the chunks stay out of use), their units fail as never
// submitted, and the lane only drains what the kernel took.
func (l *lane) submit() {
	for tries := 0; len(l.pending) > 0 && !l.poisoned; tries++ {
		n, err := l.q.Submit()
		n = min(n, len(l.pending))
		if l.x.g.op == OpWrite {
			for _, i := range l.pending[:n] {
				l.x.markSubmitted(l.slots[i].k)
			}
		}
		l.pending = l.pending[:copy(l.pending, l.pending[n:])]
		if err == nil {
			continue
		}
		transient := errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EINTR)
		if transient && tries < 3 {
			continue
		}
		l.poisoned = true
		l.clean = false
		for _, i := range l.pending {
			s := &l.slots[i]
			k := s.k
			s.state, s.k = slotDead, -1
			l.inIO--
			l.x.resolve(k, 0, unitErr(l.x.g, &l.x.units[k], KindIO, fmt.Errorf("not submitted: %w", err)))
		}
		l.pending = l.pending[:0]
	}
}

// complete applies one CQE.
func (l *lane) complete(c Completion) {
	g := l.x.g
	s := &l.slots[c.Token]
	k := s.k
	u := &l.x.units[k]
	l.inIO--
	if c.Res < 0 {
		s.state, s.k = slotFree, -1
		l.x.resolve(k, 0, unitErr(g, u, KindIO, os.NewSyscallError(g.op.String(), unix.Errno(-c.Res))))
		return
	}
	got := uint64(c.Res)
	var short error
	if got < u.n {
		got, short = l.retryRest(s.c, u, got)
	}
	if g.op == OpWrite || got == 0 {
		s.state, s.k = slotFree, -1
		l.x.resolve(k, got, short)
		return
	}
	// READ: copy the returned prefix to its destinations.
	s.got = got
	for _, p := range u.pieces {
		if p.rel >= got {
			continue
		}
		n := min(p.n, got-p.rel)
		switch p.kind {
		case pieceHost:
			copy(p.host[:n], s.c.b[p.rel:p.rel+n])
		case pieceDevice:
			st, err := l.stream(p.dev)
			if err == nil {
				err = st.HtoD(p.addr, uintptr(s.c.addr()+p.rel), n)
			}
			if err != nil {
				l.abortCopies(s, unitErr(g, u, KindIO, err))
				return
			}
		}
	}
	if err := l.record(s); err != nil {
		l.abortCopies(s, unitErr(g, u, KindIO, err))
		return
	}
	s.short = short
	if len(s.evs) == 0 {
		s.state, s.k = slotFree, -1
		l.x.resolve(k, got, short)
		return
	}
	s.state = slotCopy
	l.inCopy++
}

// retryRest moves the rest of a short unit once more, synchronously, with
// pread/pwrite on the buffered fd (as shortio.go does for the ring), so
// the unit ends with its exact count and the real reason: end of file on
// a read stays a short count (KindRange), an errno becomes its kind
// (ENOSPC -> KindNoSpace).
func (l *lane) retryRest(c *chunk, u *unit, got uint64) (uint64, error) {
	g := l.x.g
	fd := g.ent.buffered.FD
	for got < u.n {
		var n int
		var err error
		if g.op == OpWrite {
			n, err = unix.Pwrite(fd, c.b[got:u.n], int64(u.off+got))
		} else {
			n, err = unix.Pread(fd, c.b[got:u.n], int64(u.off+got))
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			var errno unix.Errno
			kind := KindIO
			if errors.As(err, &errno) {
				kind = errnoKind(errno)
			}
			what := "short read"
			if g.op == OpWrite {
				what = "short write"
			}
			return got, &Error{Op: g.op.String(), Name: g.seg.name(), Kind: kind,
				Err: fmt.Errorf("requests[%d]: %s: %d of %d bytes at offset %d, the rest failed: %w", u.task, what, got, u.n, u.off, os.NewSyscallError(g.op.String(), err))}
		}
		if n == 0 {
			if g.op == OpWrite {
				return got, unitErr(g, u, KindIO, errShortWrite)
			}
			return got, nil // end of file: a short count, KindRange
		}
		got += uint64(n)
	}
	return got, nil
}

// record puts an event behind the copies of slot s on every stream the
// lane used.
func (l *lane) record(s *slot) error {
	for _, st := range l.streams {
		ev, err := st.Record()
		if err != nil {
			return err
		}
		s.evs = append(s.evs, ev)
	}
	return nil
}

// abortCopies handles a copy that could not be enqueued or recorded:
// wait (bounded) for what was enqueued; if that cannot be confirmed the
// chunk's fate is unknown: the slot dies and the lane keeps everything.
func (l *lane) abortCopies(s *slot, err error) {
	state := slotFree
	if !l.drainStreams() {
		l.uncertain()
		state = slotDead
	}
	l.closeEvents(s)
	k := s.k
	s.state, s.k = state, -1
	l.x.resolve(k, 0, err)
}

// drainStreams waits, until deadline + quiesce_grace, for every copy the
// lane enqueued; false when that cannot be confirmed.
func (l *lane) drainStreams() bool {
	cut := l.x.g.deadline.Add(l.e.cfg.QuiesceGrace.D())
	ok := true
	for _, st := range l.streams {
		ev, err := st.Record()
		if err != nil {
			ok = false
			continue
		}
		if done, err := waitEvent(ev, cut); !done || err != nil {
			ok = false
		}
		ev.Close()
	}
	return ok
}

// waitEvent polls ev until it completes or until cut (zero: no wait at
// all). It never blocks past cut: a copy that never completes must not
// hang its group (the caller ends it unquiesced).
func waitEvent(ev Event, cut time.Time) (bool, error) {
	pause := 20 * time.Microsecond
	for {
		done, err := ev.Done()
		if done || err != nil || cut.IsZero() || !time.Now().Before(cut) {
			return done, err
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Millisecond)
	}
}

// retireCopies frees slots whose device copies completed. With a
// nonzero cut it first waits (polling, never past cut) for the oldest
// copy; it returns false when that copy did not complete by cut.
func (l *lane) retireCopies(cut time.Time) bool {
	ok := true
	for i := range l.slots {
		s := &l.slots[i]
		if s.state != slotCopy {
			continue
		}
		done := true
		var err error
		for _, ev := range s.evs {
			var d bool
			d, err = waitEvent(ev, cut)
			if err != nil || !d {
				done = false
				break
			}
		}
		if err != nil {
			// The copy's outcome is unknown: the destination may still
			// change and the chunk may still be read by the GPU, so the
			// slot never takes another unit.
			l.uncertain()
			k := s.k
			s.state, s.k = slotDead, -1
			l.inCopy--
			l.x.resolve(k, 0, unitErr(l.x.g, &l.x.units[k], KindIO, fmt.Errorf("device copy: %w", err)))
			continue
		}
		if !done {
			if !cut.IsZero() {
				ok = false
			}
			cut = time.Time{} // waited once; only poll the rest
			continue
		}
		cut = time.Time{}
		l.closeEvents(s)
		k := s.k
		s.state, s.k = slotFree, -1
		l.inCopy--
		l.x.resolve(k, s.got, s.short)
	}
	return ok
}

func (l *lane) closeEvents(s *slot) {
	for _, ev := range s.evs {
		ev.Close()
	}
	s.evs = s.evs[:0]
}

// stageOut fills chunk c with unit u's bytes for a WRITE and confirms
// the device copies before the SQE is written. A copy that cannot be
// enqueued waits for the ones already enqueued into c; when even that
// cannot be confirmed, c's fate is unknown (the caller's slot dies).
func (l *lane) stageOut(c *chunk, u *unit) (dead bool, err error) {
	g := l.x.g
	enqueued := false
	for _, p := range u.pieces {
		dst := c.b[p.rel : p.rel+p.n]
		switch p.kind {
		case pieceHost:
			copy(dst, p.host)
		case piecePad:
			clear(dst)
		case pieceDevice:
			st, err := l.stream(p.dev)
			if err == nil {
				err = st.DtoH(uintptr(c.addr()+p.rel), p.addr, p.n)
			}
			if err != nil {
				if enqueued && !l.drainStreams() {
					l.uncertain()
					return true, unitErr(g, u, KindIO, fmt.Errorf("device-to-host copy: %w (and earlier copies into the chunk could not be confirmed)", err))
				}
				return false, unitErr(g, u, KindIO, err)
			}
			enqueued = true
		}
	}
	if enqueued && !l.drainStreams() {
		l.uncertain()
		return true, unitErr(g, u, KindIO, errors.New("device-to-host copy not confirmed by the deadline"))
	}
	return false, nil
}

// uncertain marks the lane and its job as unable to prove a drain.
func (l *lane) uncertain() {
	l.clean = false
	l.x.mu.Lock()
	l.x.undrained = true
	l.x.mu.Unlock()
}

// cutoff ends a lane whose CQEs are missing past deadline+grace: its
// units fail unquiesced and it keeps ring, chunks and streams.
func (l *lane) cutoff(grace time.Duration) {
	l.uncertain()
	g := l.x.g
	for i := range l.slots {
		s := &l.slots[i]
		if s.state == slotFree || s.state == slotDead {
			continue
		}
		k := s.k
		l.x.resolve(k, 0, unitErr(g, &l.x.units[k], KindUnquiesced, fmt.Errorf("no completion %s after the deadline; its memory, file and ring stay retained", grace)))
	}
	for k := l.x.take(); k >= 0; k = l.x.take() {
		l.x.resolve(k, 0, unitErr(g, &l.x.units[k], KindTimeout, errors.New("deadline passed before these bytes started")))
	}
}

// stream returns the lane's stream on device dev.
func (l *lane) stream(dev int) (Stream, error) {
	if s, ok := l.streams[dev]; ok {
		return s, nil
	}
	s, err := l.e.getStream(dev)
	if err != nil {
		return nil, err
	}
	l.streams[dev] = s
	return s, nil
}

// getStream takes a pooled stream of device dev or creates one.
func (e *Engine) getStream(dev int) (Stream, error) {
	g := &e.gpu
	g.streamMu.Lock()
	if ss := g.streams[dev]; len(ss) > 0 {
		s := ss[len(ss)-1]
		g.streams[dev] = ss[:len(ss)-1]
		g.streamMu.Unlock()
		return s, nil
	}
	g.streamMu.Unlock()
	return g.b.NewStream(dev)
}

func (e *Engine) putStream(dev int, s Stream) {
	g := &e.gpu
	g.streamMu.Lock()
	if g.streams == nil {
		g.streams = map[int][]Stream{}
	}
	g.streams[dev] = append(g.streams[dev], s)
	g.streamMu.Unlock()
}
