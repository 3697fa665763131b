// pool.go owns which data lane carries a request: up to Config.Lanes
// bulk lanes, each with up to laneDepth requests in flight, and one
// lane reserved for small requests (at most SmallFrame bytes), so a
// 4 KiB request never waits behind megabytes of a bulk stream on the
// same TCP connection.
//
// Invariants:
//   - At most max bulk lanes exist (open or being dialed), plus one small
//     lane; a lane carries at most its depth of requests at once.
//   - A request takes an idle lane first, then a new lane while under
//     max, then the least loaded lane with room; it waits only when every
//     lane is full.
//   - A lane with nothing in flight is checked before it carries a
//     request (idleOpen, and a ping after KeepAlive of idleness); a dead
//     lane is dropped and closed, never used again.

package peer

import (
	"context"
	"sync"
)

const (
	// SmallFrame is the largest request that travels on the small lane.
	SmallFrame = 64 << 10
	// laneDepth is how many bulk requests one lane pipelines: enough to
	// keep a link busy across a round trip, few enough that a lane's
	// queue stays short.
	laneDepth = 4
	// smallDepth is how many small requests the small lane pipelines.
	smallDepth = 64
)

type pool struct {
	max int

	mu      sync.Mutex
	bulk    []*lane
	small   *lane
	dialing int  // bulk lanes being dialed
	smallD  bool // the small lane is being dialed
	closed  bool
	changed chan struct{} // closed and replaced when a lane frees room
}

func newPool(max int) *pool { return &pool{max: max, changed: make(chan struct{})} }

// choice is a lane the pool picked, or the order to dial one.
type choice struct {
	l    *lane
	dial bool
	wait chan struct{}
}

// pick chooses under mu. It reserves the lane (or the dial) it returns.
func (p *pool) pick(small bool, n uint64) choice {
	if small {
		if p.small != nil && p.small.isDead() {
			p.small = nil
		}
		switch {
		case p.small == nil && !p.smallD:
			p.smallD = true
			return choice{dial: true}
		case p.small != nil && p.small.inflight < smallDepth:
			p.small.inflight++
			p.small.queued += n
			return choice{l: p.small}
		}
		return choice{wait: p.changed}
	}
	live := p.bulk[:0]
	for _, l := range p.bulk {
		if l.inflight == 0 && l.isDead() {
			continue
		}
		live = append(live, l)
	}
	clear(p.bulk[len(live):])
	p.bulk = live
	var best *lane
	for _, l := range p.bulk {
		if l.isDead() || l.inflight >= laneDepth {
			continue
		}
		if l.inflight == 0 {
			best = l
			break
		}
		if best == nil || l.queued < best.queued {
			best = l
		}
	}
	if (best == nil || best.inflight > 0) && len(p.bulk)+p.dialing < p.max {
		p.dialing++
		return choice{dial: true}
	}
	if best == nil {
		return choice{wait: p.changed}
	}
	best.inflight++
	best.queued += n
	return choice{l: best}
}

// add records a lane dialed after pick said dial, reserved for its
// dialer; l is nil when the dial failed.
func (p *pool) add(small bool, l *lane, n uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if small {
		p.smallD = false
	} else {
		p.dialing--
	}
	if l != nil {
		l.inflight, l.queued = 1, n
		if p.closed {
			l.close()
		} else if small {
			p.small = l
		} else {
			p.bulk = append(p.bulk, l)
		}
	}
	p.wake()
}

// done releases a reservation of n bytes on l.
func (p *pool) done(l *lane, n uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l.inflight--
	l.queued -= n
	if p.closed {
		l.close()
	}
	p.wake()
}

func (p *pool) wake() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// closeAll closes every lane; later picks still run but their lanes are
// closed as they come back.
func (p *pool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, l := range p.bulk {
		l.close()
	}
	if p.small != nil {
		p.small.close()
	}
	p.wake()
}

// lanes lists the lanes, for counters.
func (p *pool) lanes() []*lane {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]*lane(nil), p.bulk...)
	if p.small != nil {
		out = append(out, p.small)
	}
	return out
}

// wait blocks until ch is closed or ctx ends.
func wait(ctx context.Context, ch chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
