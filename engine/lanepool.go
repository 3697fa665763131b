// lanepool.go owns the lanes of the executors whose unit is one
// synchronous call (the host copy's pread/pwrite, a cuFile call, a peer's
// round trip, a memory owner's copy): a fixed set of goroutines, started
// on the first job and stopped at Engine.Close, taking units from one
// fair queue (fairqueue.go) shared by every batch.
//
// Invariants:
//   - A unit is handed to exactly one lane; do resolves it (offring.go).
//   - Units of a task that waits for a producer event are released only
//     after it (offRing.gate), so no lane blocks on a producer.
//   - The pool's lock is a leaf: do runs, and units resolve, without it.

package engine

import "sync"

type lanePool struct {
	n    int
	do   func(x *offRing, k int)
	done chan struct{}
	work chan struct{} // wake-ups, one per lane claimed idle (wakeLocked)

	mu sync.Mutex
	q  fairQueue
	// copies: lane copies (lanecopy.go) in FIFO order from copies[head];
	// turn says whether the next take prefers them to a unit.
	copies  []*group
	head    int
	turn    bool
	idle    int // lanes that found nothing to take and wait on work
	started bool
	closed  bool
	wg      sync.WaitGroup
}

func newLanePool(n int, do func(x *offRing, k int)) *lanePool {
	return &lanePool{n: n, do: do, done: make(chan struct{}), work: make(chan struct{}, n)}
}

// window: a lane pool takes a queue depth of a group's tasks at once;
// its fair queue spreads their units over the lanes.
func (p *lanePool) window(depth int) int { return depth }

// run queues a dispatched job without blocking.
func (p *lanePool) run(x *offRing) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		go x.failRest(errorf(KindUnavailable, x.g.op.String(), x.g.b.name(), "the engine is closing"))
		return
	}
	if x.hasProducers() {
		x.gate(func() { p.ready(x) })
	}
	p.q.push(x)
	p.startLocked()
	k := p.wakeLocked(len(x.units))
	p.mu.Unlock()
	p.wake(k)
}

// runCopy queues lane copy g, or reports false once the pool is closed
// (the submitter then copies it).
func (p *lanePool) runCopy(g *group) bool {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return false
	}
	p.copies = append(p.copies, g)
	p.startLocked()
	k := p.wakeLocked(1)
	p.mu.Unlock()
	p.wake(k)
	return true
}

// startLocked starts the lanes on the first job. REQUIRES: p.mu.
func (p *lanePool) startLocked() {
	if !p.started {
		p.started = true
		for range p.n {
			p.wg.Add(1)
			go p.lane()
		}
	}
}

// ready queues a gated job again when it released units after leaving
// the queue.
func (p *lanePool) ready(x *offRing) {
	p.mu.Lock()
	if !p.closed && !x.exhausted() && !p.q.holds(x) {
		p.q.push(x)
	}
	k := p.wakeLocked(len(x.units))
	p.mu.Unlock()
	p.wake(k)
}

// wakeLocked claims up to n idle lanes for new work and returns how many
// to wake. Only a lane that found nothing to take is idle, so a lane
// still draining the queue costs the submitter no wake-up (a futex round
// trip per small lane copy otherwise). REQUIRES: p.mu.
func (p *lanePool) wakeLocked(n int) int {
	k := min(n, p.idle)
	p.idle -= k
	return k
}

// wake sends n wake-ups claimed by wakeLocked; each lane claimed idle
// has room for one in work, so this never blocks.
func (p *lanePool) wake(n int) {
	for range n {
		p.work <- struct{}{}
	}
}

// take hands out a lane copy or a unit, the two in turn while both
// wait: (nil, nil, -1) when neither does.
func (p *lanePool) take() (*group, *offRing, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.turn = !p.turn
	if p.turn {
		if g := p.popCopyLocked(); g != nil {
			return g, nil, -1
		}
	}
	if x, k := p.q.take(); k >= 0 {
		return nil, x, k
	}
	g := p.popCopyLocked()
	if g == nil {
		p.idle++ // the lane waits on work next; wakeLocked claims it
	}
	return g, nil, -1
}

// popCopyLocked removes the oldest lane copy, or returns nil.
// REQUIRES: p.mu.
func (p *lanePool) popCopyLocked() *group {
	if p.head == len(p.copies) {
		return nil
	}
	g := p.copies[p.head]
	p.copies[p.head] = nil
	p.head++
	if p.head == len(p.copies) {
		p.copies, p.head = p.copies[:0], 0
	}
	return g
}

func (p *lanePool) lane() {
	defer p.wg.Done()
	for {
		for {
			g, x, k := p.take()
			if g != nil {
				g.b.laneCopy(g)
			} else if k >= 0 {
				p.do(x, k)
			} else {
				break
			}
		}
		select {
		case <-p.work:
		case <-p.done:
			return
		}
	}
}

// close stops the lanes; every batch has drained, so none is busy.
func (p *lanePool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	p.wg.Wait()
}
