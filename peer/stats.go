// stats.go owns the figures a daemon shows for its peers: per Conn
// (bytes, frames, errors, round-trip time, lanes, state), per session a
// peer opened to a Server, and the Tracker that lists a daemon's live
// Conns.
//
// Invariants:
//   - A Conn's counters are shared by its control connection and its
//     lanes and only grow; a lane that is replaced keeps its bytes.
//   - RTT is a moving average over small round trips only (at most
//     SmallFrame each way), so it measures the path, not bulk transfer.
//   - A Conn is listed by its Tracker from Dial until Close, failed or
//     not (its State says so).

package peer

import (
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// counters are one Conn's figures.
type counters struct {
	sent, recv, frames, errors atomic.Uint64
	rtt                        atomic.Int64 // nanoseconds, moving average; 0: none yet
}

// sample folds one small round trip into the average (weight 1/8).
func (c *counters) sample(d time.Duration) {
	for {
		old := c.rtt.Load()
		v := int64(d)
		if old != 0 {
			v = old + (int64(d)-old)/8
		}
		if c.rtt.CompareAndSwap(old, max(v, 1)) {
			return
		}
	}
}

// ConnStats are one Conn's figures.
type ConnStats struct {
	ID            uint64    `json:"-"` // unique in its Tracker
	Addr          string    `json:"addr"`
	Name          string    `json:"name"`
	Epoch         string    `json:"epoch"`
	Lanes         int       `json:"lanes"`      // configured bulk lanes
	OpenLanes     int       `json:"open_lanes"` // open now, the small lane included
	State         string    `json:"state"`      // connected, or failed: why
	BytesSent     uint64    `json:"bytes_sent"`
	BytesReceived uint64    `json:"bytes_received"`
	Frames        uint64    `json:"frames"` // requests sent
	Errors        uint64    `json:"errors"` // error replies and failed connections
	RTTMicros     float64   `json:"rtt_us"` // 0 until a small round trip
	Since         time.Time `json:"since"`
}

// Stats returns the Conn's figures.
func (c *Conn) Stats() ConnStats {
	st := ConnStats{ID: c.trackID, Addr: c.addr, Name: c.peerName, Epoch: fmt.Sprintf("%016x", c.peerEpoch),
		Lanes: c.cfg.Lanes, State: "connected", BytesSent: c.cnt.sent.Load(), BytesReceived: c.cnt.recv.Load(),
		Frames: c.cnt.frames.Load(), Errors: c.cnt.errors.Load(),
		RTTMicros: float64(c.cnt.rtt.Load()) / 1e3, Since: c.since}
	for _, l := range c.lanes.lanes() {
		if !l.isDead() {
			st.OpenLanes++
		}
	}
	if err := c.Err(); err != nil {
		st.State = "failed: " + err.Error()
	}
	return st
}

// Tracker lists a daemon's live Conns (those dialed with it in their
// Config) for its figures. Safe for concurrent use.
type Tracker struct {
	next  atomic.Uint64
	mu    sync.Mutex
	conns map[*Conn]struct{}
}

// NewTracker makes an empty Tracker.
func NewTracker() *Tracker { return &Tracker{conns: map[*Conn]struct{}{}} }

func (t *Tracker) add(c *Conn) {
	if t == nil {
		return
	}
	c.trackID = t.next.Add(1)
	t.mu.Lock()
	t.conns[c] = struct{}{}
	t.mu.Unlock()
}

func (t *Tracker) remove(c *Conn) {
	if t == nil {
		return
	}
	t.mu.Lock()
	delete(t.conns, c)
	t.mu.Unlock()
}

// Conns returns every tracked Conn's figures, oldest first.
func (t *Tracker) Conns() []ConnStats {
	t.mu.Lock()
	cs := make([]*Conn, 0, len(t.conns))
	for c := range t.conns {
		cs = append(cs, c)
	}
	t.mu.Unlock()
	out := make([]ConnStats, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.Stats())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// SessionStats are the figures of one session a peer opened to a Server.
type SessionStats struct {
	ID            uint64    `json:"-"`
	Remote        string    `json:"addr"` // the control connection's remote address
	Name          string    `json:"name"`
	Epoch         string    `json:"epoch"`
	Lanes         int       `json:"lanes"` // lanes open now
	BytesReceived uint64    `json:"bytes_received"`
	BytesSent     uint64    `json:"bytes_sent"`
	Frames        uint64    `json:"frames"` // requests served
	Errors        uint64    `json:"errors"` // requests answered with an error
	Since         time.Time `json:"since"`
}

// Sessions returns the figures of the sessions open now, oldest first.
func (s *Server) Sessions() []SessionStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]SessionStats, 0, len(s.mu.sessions))
	for _, ss := range s.mu.sessions {
		out = append(out, SessionStats{ID: ss.id, Remote: ss.ctrl.RemoteAddr().String(), Name: ss.name,
			Epoch: fmt.Sprintf("%016x", ss.epoch), Lanes: len(ss.lanes), BytesReceived: ss.cnt.recv.Load(),
			BytesSent: ss.cnt.sent.Load(), Frames: ss.cnt.frames.Load(), Errors: ss.cnt.errors.Load(), Since: ss.since})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
