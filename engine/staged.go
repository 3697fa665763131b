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
)

type slot struct {
	c     *chunk
	k     int // unit index
	state slotState
	evs   []Event
	got   uint64
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
}

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
	n := x.lanes(e.stagingLanes())
	per := max(1, e.cfg.StagingChunkCount/n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.stagedLane(x, p, per)
		}()
	}
	wg.Wait()
}

func (e *Engine) stagedLane(x *offRing, p *stagingPool, depth int) {
	q, err := e.file.Acquire()
	if err != nil {
		x.failRest(wrap(KindExhausted, x.g.op.String(), x.g.b.name(), err))
		return
	}
	cs, err := e.getChunks(p, depth)
	if err != nil {
		q.Release()
		x.failRest(err)
		return
	}
	l := &lane{e: e, x: x, q: q, streams: map[int]Stream{}, clean: true}
	for _, c := range cs {
		l.slots = append(l.slots, slot{c: c, k: -1})
	}
	l.run()
	if !l.clean {
		q.Abandon()
		return
	}
	q.Release()
	e.putChunks(p, cs)
	for dev, s := range l.streams {
		e.putStream(dev, s)
	}
}

func (l *lane) run() {
	g := l.x.g
	grace := l.e.cfg.QuiesceGrace.D()
	more := true
	for {
		l.retireCopies(false)
		if more {
			more = l.fill()
		}
		l.submit()
		if l.inIO == 0 && l.inCopy == 0 && !more {
			return
		}
		if l.inIO == 0 {
			l.retireCopies(true)
			continue
		}
		left := time.Until(g.deadline.Add(grace))
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
				l.x.resolve(k, 0, unitErr(g, k, u, KindTimeout, errors.New("deadline passed before these bytes started")))
				continue
			}
			if err := l.x.waitProducer(k); err != nil {
				l.x.resolve(k, 0, err)
				continue
			}
			if g.op == OpWrite {
				if err := l.stageOut(s.c, u); err != nil {
					l.x.resolve(k, 0, err)
					continue
				}
			}
			op := FileOp{Write: g.op == OpWrite, File: l.fileFor(s.c, u), Offset: u.off,
				Iov: []IOVec{{Base: s.c.addr(), Len: u.n}}, Buf: s.c.fixed, Token: uint64(i)}
			if err := l.q.Prepare(&op); err != nil {
				l.x.resolve(k, 0, unitErr(g, k, u, KindIO, err))
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

// submit hands prepared SQEs to the kernel. A persistent failure fails
// the units that never reached it.
func (l *lane) submit() {
	for tries := 0; len(l.pending) > 0; tries++ {
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
		// The unsent SQEs stay in the ring's SQ: the ring cannot be
		// reused, so the lane keeps it (Abandon) once the rest drains.
		for _, i := range l.pending {
			s := &l.slots[i]
			u := &l.x.units[s.k]
			l.x.resolve(s.k, 0, unitErr(l.x.g, s.k, u, KindIO, fmt.Errorf("not submitted: %w", err)))
			s.state = slotFree
			s.k = -1
			l.inIO--
		}
		l.pending = l.pending[:0]
		l.clean = false
		return
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
		l.x.resolve(k, 0, unitErr(g, k, u, KindIO, os.NewSyscallError(g.op.String(), unix.Errno(-c.Res))))
		return
	}
	got := uint64(c.Res)
	if g.op == OpWrite || got == 0 {
		s.state, s.k = slotFree, -1
		l.x.resolve(k, got, nil)
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
				l.abortCopies(s, unitErr(g, k, u, KindIO, err))
				return
			}
		}
	}
	if err := l.record(s); err != nil {
		l.abortCopies(s, unitErr(g, k, u, KindIO, err))
		return
	}
	if len(s.evs) == 0 {
		s.state, s.k = slotFree, -1
		l.x.resolve(k, got, nil)
		return
	}
	s.state = slotCopy
	l.inCopy++
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
// wait for what was enqueued; if even that cannot be confirmed the
// chunk's fate is unknown and the lane keeps everything.
func (l *lane) abortCopies(s *slot, err error) {
	for _, st := range l.streams {
		if serr := st.Sync(); serr != nil {
			l.uncertain()
		}
	}
	l.closeEvents(s)
	k := s.k
	s.state, s.k = slotFree, -1
	l.x.resolve(k, 0, err)
}

// retireCopies frees slots whose device copies completed; with block, it
// waits for the oldest one first.
func (l *lane) retireCopies(block bool) {
	for i := range l.slots {
		s := &l.slots[i]
		if s.state != slotCopy {
			continue
		}
		done := true
		var err error
		for _, ev := range s.evs {
			var d bool
			if block {
				err = ev.Wait()
				d = err == nil
			} else {
				d, err = ev.Done()
			}
			if err != nil || !d {
				done = false
				break
			}
		}
		if err != nil {
			// The copy's outcome is unknown: the destination may still
			// change and the chunk may still be read by the GPU.
			l.uncertain()
			k := s.k
			s.state, s.k = slotFree, -1
			l.inCopy--
			l.x.resolve(k, 0, unitErr(l.x.g, k, &l.x.units[k], KindIO, fmt.Errorf("device copy: %w", err)))
			continue
		}
		if !done {
			continue
		}
		block = false
		l.closeEvents(s)
		k := s.k
		s.state, s.k = slotFree, -1
		l.inCopy--
		l.x.resolve(k, s.got, nil)
	}
}

func (l *lane) closeEvents(s *slot) {
	for _, ev := range s.evs {
		ev.Close()
	}
	s.evs = s.evs[:0]
}

// stageOut fills chunk c with unit u's bytes for a WRITE and confirms
// the device copies.
func (l *lane) stageOut(c *chunk, u *unit) error {
	g := l.x.g
	k := -1
	var used []Stream
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
				return unitErr(g, k, u, KindIO, err)
			}
			used = append(used, st)
		}
	}
	for _, st := range used {
		if err := st.Sync(); err != nil {
			l.uncertain()
			return unitErr(g, k, u, KindIO, fmt.Errorf("device-to-host copy: %w", err))
		}
	}
	return nil
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
		if s.state == slotFree {
			continue
		}
		k := s.k
		l.x.resolve(k, 0, unitErr(g, k, &l.x.units[k], KindUnquiesced, fmt.Errorf("no completion %s after the deadline; its memory, file and ring stay retained", grace)))
	}
	for k := l.x.take(); k >= 0; k = l.x.take() {
		l.x.resolve(k, 0, unitErr(g, k, &l.x.units[k], KindTimeout, errors.New("deadline passed before these bytes started")))
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
