// reqcount.go owns the FUSE request counter behind Options.CountRequests:
// how many requests of each opcode the kernel sent, so `orbitefs bench
// ctl` can report FUSE requests per control-plane round trip.
//
// go-fuse has no request statistics (RecordLatencies is a no-op in
// v2.12) and toggling its debug log at run time races with its request
// handlers, so a counting mount runs with debug on from the start and
// tallies the "rx N: OPCODE ..." line go-fuse prints per request instead
// of logging it. That formatting is slow: mount a second, counting mount
// for the count and time on a plain one.
//
// Invariants:
//   - "rx" and "tx" lines are tallied (rx) and dropped; every other line
//     still reaches the daemon log.

package fusefs

import (
	"bytes"
	"sync"
)

// requestCounter sits between go-fuse's logger and the daemon log.
type requestCounter struct {
	next slogWriter
	mu   sync.Mutex
	byOp map[string]uint64
}

func (c *requestCounter) Write(p []byte) (int, error) {
	if bytes.HasPrefix(p, []byte("tx ")) {
		return len(p), nil
	}
	if !bytes.HasPrefix(p, []byte("rx ")) {
		return c.next.Write(p)
	}
	// "rx 12: LOOKUP n1 [...]": the opcode follows the first ": ".
	if i := bytes.Index(p, []byte(": ")); i >= 0 {
		rest := p[i+2:]
		if j := bytes.IndexAny(rest, " \n"); j >= 0 {
			rest = rest[:j]
		}
		c.mu.Lock()
		if c.byOp == nil {
			c.byOp = map[string]uint64{}
		}
		c.byOp[string(rest)]++
		c.mu.Unlock()
	}
	return len(p), nil
}

// Requests returns the FUSE requests served so far, by opcode; nil
// without Options.CountRequests.
func (s *Server) Requests() map[string]uint64 {
	if s.reqs == nil {
		return nil
	}
	s.reqs.mu.Lock()
	defer s.reqs.mu.Unlock()
	out := make(map[string]uint64, len(s.reqs.byOp))
	for k, v := range s.reqs.byOp {
		out[k] = v
	}
	return out
}
