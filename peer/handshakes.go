// handshakes.go owns the bound on a server's connections still in their
// handshake: accepted, not yet authenticated. Anyone who can reach the
// listener can open connections and say nothing, each held until the
// I/O timeout; without a bound they cost a goroutine and a socket each,
// and a bound that refused newcomers would let such a flood lock real
// peers out. So at the bound a newcomer displaces a waiting connection:
// the oldest that has sent nothing (a peer sends its hello at once, so
// these are the silent ones), else the oldest of all. Sent means a
// complete hello read, or bytes waiting in the socket: a peer's hello
// can sit there unread while its goroutine waits for a CPU, and on a
// loaded machine that wait outlasts a flood's filling of the bound.
//
// Invariants:
//   - At most MaxHandshakes connections are in their handshake at once;
//     a displaced one is closed, and its handshake then fails with the
//     reason logged as displaced.
//   - A connection leaves the set exactly once: when its handshake ends
//     (either way) or when it is displaced.

package peer

import (
	"net"
	"sync"
)

// DefaultMaxHandshakes bounds a server's connections in their handshake
// unless configured.
const DefaultMaxHandshakes = 64

// shaking is one connection in its handshake.
type shaking struct {
	c     net.Conn
	hello bool // a complete hello arrived
}

// handshakes is the set of connections in their handshake, oldest first.
type handshakes struct {
	max int

	mu        sync.Mutex
	list      []*shaking
	displaced map[net.Conn]bool
	count     uint64 // connections displaced, ever
}

func newHandshakes(max int) *handshakes {
	return &handshakes{max: max, displaced: map[net.Conn]bool{}}
}

// begin adds c, displacing (closing) one waiting connection first when
// the set is full. It returns c's entry.
func (h *handshakes) begin(c net.Conn) *shaking {
	h.mu.Lock()
	var victim net.Conn
	if len(h.list) >= h.max {
		i := 0
		for j, s := range h.list {
			if !s.hello && !pending(s.c) {
				i = j
				break
			}
		}
		victim = h.list[i].c
		h.list = append(h.list[:i], h.list[i+1:]...)
		h.displaced[victim] = true
		h.count++
	}
	s := &shaking{c: c}
	h.list = append(h.list, s)
	h.mu.Unlock()
	if victim != nil {
		victim.Close()
	}
	return s
}

// helloed records that s's hello arrived.
func (h *handshakes) helloed(s *shaking) {
	h.mu.Lock()
	s.hello = true
	h.mu.Unlock()
}

// end removes s once its handshake ended, and reports whether it had
// been displaced instead.
func (h *handshakes) end(s *shaking) (displaced bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.displaced[s.c] {
		delete(h.displaced, s.c)
		return true
	}
	for i, o := range h.list {
		if o == s {
			h.list = append(h.list[:i], h.list[i+1:]...)
			break
		}
	}
	return false
}

// stats returns the connections in their handshake now and those
// displaced so far.
func (h *handshakes) stats() (int, uint64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.list), h.count
}
