// quota.go owns each user's share of the engine-wide object limits
// (mount.max_user_share): how many batches (engine.max_allocated_batches)
// and batch slots (engine.max_allocated_requests), file and memory
// segments (engine.max_file_segments) and registered host bytes
// (engine.max_registered_bytes) one unprivileged uid may hold. Without a
// share one user could take all of a limit (1024 clones) and every other
// user's creations failed with EAGAIN until it freed them.
//
// Invariants:
//   - A uid's holdings are counted from the tables (objects it owns)
//     plus what it is creating now (pending), under Service.mu, so two
//     racing creations by one uid never pass the share together.
//   - Privileged callers (owner.go) have no share: only the engine-wide
//     limits bound them.

package control

import (
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/internal/hostmem"
)

// quota is what a uid holds, or is creating, of each limited kind.
type quota struct {
	batches, slots, segments, bytes uint64
}

func (q *quota) add(o quota, sign int) {
	if sign < 0 {
		q.batches -= o.batches
		q.slots -= o.slots
		q.segments -= o.segments
		q.bytes -= o.bytes
		return
	}
	q.batches += o.batches
	q.slots += o.slots
	q.segments += o.segments
	q.bytes += o.bytes
}

// share is x of an engine-wide limit, at least 1 of it.
func (s *Service) share(limit uint64) uint64 {
	return max(1, uint64(float64(limit)*s.opts.MaxUserShare))
}

// heldLocked is what uid owns now plus what it is creating.
// REQUIRES: s.mu.
func (s *Service) heldLocked(uid uint32) quota {
	q := s.mu.pending[uid]
	for _, bt := range s.mu.batches {
		if bt.owner != nil && bt.owner.UID == uid {
			q.batches++
			q.slots += uint64(bt.b.Capacity())
		}
	}
	for _, g := range s.mu.segments {
		if g != nil && g.owner != nil && g.owner.UID == uid {
			q.segments++
		}
	}
	for _, m := range s.mu.memory {
		if m == nil || m.owner == nil || m.owner.UID != uid {
			continue
		}
		if _, dev := m.region.Location().Device(); !dev {
			q.bytes += hostmem.RoundUp(m.Len()) // as the engine counts them
		}
	}
	return q
}

// reserve counts want as being created by c, or refuses it
// (KindExhausted naming the key) when it would take c past its share.
// The returned func ends the reservation: call it once the object is in
// its table, or failed.
func (s *Service) reserve(c *engine.Caller, want quota) (func(), error) {
	if s.privileged(c) || s.opts.MaxUserShare >= 1 {
		return func() {}, nil
	}
	cfg := s.e.Config()
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.heldLocked(c.UID)
	for _, l := range []struct {
		what        string
		held, asked uint64
		limit       uint64
		key         string
	}{
		{"batches", h.batches, want.batches, uint64(cfg.MaxAllocatedBatches), "engine.max_allocated_batches"},
		{"batch slots", h.slots, want.slots, uint64(cfg.MaxAllocatedRequests), "engine.max_allocated_requests"},
		{"segments", h.segments, want.segments, uint64(cfg.MaxFileSegments), "engine.max_file_segments"},
		{"registered bytes", h.bytes, want.bytes, cfg.RegisteredLimit(), "engine.max_registered_bytes"},
	} {
		if l.asked > 0 && l.held+l.asked > s.share(l.limit) {
			return nil, detail(engine.KindExhausted, "uid %d holds %d %s; %d more would pass its share, %d (mount.max_user_share %g of %s, %d); free some",
				c.UID, l.held, l.what, l.asked, s.share(l.limit), s.opts.MaxUserShare, l.key, l.limit)
		}
	}
	p := s.mu.pending[c.UID]
	p.add(want, 1)
	s.mu.pending[c.UID] = p
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		p := s.mu.pending[c.UID]
		p.add(want, -1)
		if p == (quota{}) {
			delete(s.mu.pending, c.UID)
		} else {
			s.mu.pending[c.UID] = p
		}
	}, nil
}

// defaultMaxUserShare is mount.max_user_share's default.
const defaultMaxUserShare = 0.5
