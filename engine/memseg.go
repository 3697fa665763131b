// memseg.go owns memory segments: a registered region of this engine
// opened as a target (mem://NAME), with its permission and the users
// (admitted groups) that its close drains. memgroup.go plans and runs the
// transfers that target one.
//
// Invariants:
//   - A memory segment never owns its region: the region stays the
//     engine's, and unregistering it while idle is allowed (later
//     submissions fail KindNotFound); a running group's loans keep it.
//   - After close, no new group is admitted; close returns once the
//     admitted ones finished, or KindTimeout (retry later).

package engine

import (
	"strings"
	"sync"
	"time"
)

// MemSegment is a registered region opened as a target. Safe for
// concurrent use.
type MemSegment struct {
	e      *Engine
	region *Region
	uri    string
	perm   Permission

	mu struct {
		sync.Mutex
		closed bool
		users  int
		idle   chan struct{} // closed when users drops to 0 while closed
	}
}

func (*MemSegment) isTarget() {}

// URI is the segment's mem:// URI.
func (m *MemSegment) URI() string { return m.uri }

func (m *MemSegment) name() string { return "segments/" + m.uri }

// MemSegmentInfo describes a memory segment.
type MemSegmentInfo struct {
	URI        string     `json:"uri"`
	Location   Location   `json:"location"`
	Size       uint64     `json:"size"`
	Permission Permission `json:"-"`
	Users      int        `json:"users"`
	Draining   bool       `json:"draining"`
}

// Info returns the segment's description.
func (m *MemSegment) Info() MemSegmentInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	return MemSegmentInfo{URI: m.uri, Location: m.region.Location(), Size: m.region.Len(), Permission: m.perm,
		Users: m.mu.users, Draining: m.mu.closed}
}

// OpenMemorySegment opens region r of this engine as a target named uri
// (mem://NAME) with permission perm.
func (e *Engine) OpenMemorySegment(uri string, r *Region, perm Permission) (*MemSegment, error) {
	const op = "open"
	name := "segments/" + uri
	if err := e.checkOpen(op); err != nil {
		return nil, err
	}
	if rest, ok := strings.CutPrefix(uri, "mem://"); !ok || rest == "" {
		return nil, errorf(KindInvalid, op, name, "uri %q: want mem://NAME", uri)
	}
	if perm != PermRead && perm != PermWrite && perm != PermReadWrite {
		return nil, errorf(KindInvalid, op, name, "permission %d: want read, write or read_write", perm)
	}
	if r == nil || r.e != e {
		return nil, errorf(KindNotFound, op, name, "the region is not registered with this engine")
	}
	r.mu.Lock()
	closed := r.mu.closed
	r.mu.Unlock()
	if closed {
		return nil, errorf(KindNotFound, op, name, "%s was unregistered", r.name())
	}
	return &MemSegment{e: e, region: r, uri: uri, perm: perm}, nil
}

// CloseMemorySegment closes the segment to new work and waits up to
// timeout for admitted groups; on ErrTimeout it stays closed to new work
// and a later call retries.
func (e *Engine) CloseMemorySegment(m *MemSegment, timeout time.Duration) error {
	m.mu.Lock()
	m.mu.closed = true
	if m.mu.users == 0 {
		m.mu.Unlock()
		return nil
	}
	if m.mu.idle == nil {
		m.mu.idle = make(chan struct{})
	}
	idle, n := m.mu.idle, m.mu.users
	m.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
		return nil
	case <-t.C:
		return errorf(KindTimeout, "close", m.name(), "%d submission(s) still running after %s; the segment takes no new work", n, timeout)
	}
}

func (m *MemSegment) admit(shard) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return false
	}
	m.mu.users++
	return true
}

func (m *MemSegment) done() {
	m.mu.Lock()
	m.mu.users--
	if m.mu.users == 0 && m.mu.idle != nil {
		close(m.mu.idle)
		m.mu.idle = nil
	}
	m.mu.Unlock()
}
