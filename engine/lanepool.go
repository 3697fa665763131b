// lanepool.go owns the lanes of the executors whose unit is one
// synchronous call (the host copy's pread/pwrite, a cuFile call): a fixed
// set of goroutines, started on the first job and stopped at
// Engine.Close, taking units from one fair queue (fairqueue.go) shared by
// every batch.
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
	work chan struct{} // wake-ups; a woken lane drains the queue

	mu      sync.Mutex
	q       fairQueue
	started bool
	closed  bool
	wg      sync.WaitGroup
}

func newLanePool(n int, do func(x *offRing, k int)) *lanePool {
	return &lanePool{n: n, do: do, done: make(chan struct{}), work: make(chan struct{}, n)}
}

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
	if !p.started {
		p.started = true
		for range p.n {
			p.wg.Add(1)
			go p.lane()
		}
	}
	p.mu.Unlock()
	p.wake(len(x.units))
}

// ready queues a gated job again when it released units after leaving
// the queue.
func (p *lanePool) ready(x *offRing) {
	p.mu.Lock()
	if !p.closed && !x.exhausted() && !p.q.holds(x) {
		p.q.push(x)
	}
	p.mu.Unlock()
	p.wake(len(x.units))
}

// wake wakes up to n idle lanes.
func (p *lanePool) wake(n int) {
	for range min(n, p.n) {
		select {
		case p.work <- struct{}{}:
		default:
			return
		}
	}
}

func (p *lanePool) take() (*offRing, int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.q.take()
}

func (p *lanePool) lane() {
	defer p.wg.Done()
	for {
		for x, k := p.take(); k >= 0; x, k = p.take() {
			p.do(x, k)
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
