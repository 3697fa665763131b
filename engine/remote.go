// remote.go owns remote segments: a region exported by another engine
// (a peer), opened as a target through the small Remote interface the
// engine defines, so the engine never imports a network package. The
// peer executor (peerexec.go) moves the bytes.
//
// Invariants:
//   - A remote segment is opened only with a permission its region was
//     exported with, and requests are range-checked against the region's
//     size as the peer described it at open.
//   - After close no new group is admitted; close returns once the
//     admitted ones finished (or KindTimeout, retry later), and only then
//     closes the Remote.

package engine

import (
	"context"
	"sync"
	"time"
)

// Remote is one exported region of a peer, as the engine reaches it.
// Implementations (an adapter over the peer package's connection) must
// be safe for concurrent use and must never retry a WRITE that may have
// posted anything (one found unsent, effect none, may go again).
type Remote interface {
	// ReadAt fills p from offset off of the region. A READ never changes
	// the remote region, whatever it returns.
	ReadAt(ctx context.Context, p []byte, off uint64) error
	// WriteAt stores p at offset off of the region and returns what it
	// did to the region: EffectApplied only with a nil error (every byte
	// acknowledged), EffectNone when nothing reached the region,
	// EffectUnknown for anything between (posted, not acknowledged: a
	// lost ack, a peer killed mid-frame, ctx cut it). Never a guess.
	WriteAt(ctx context.Context, p []byte, off uint64) (RemoteEffect, error)
	// Info describes the region as the peer announced it.
	Info() RemoteInfo
	// Close releases the connection; called once, when the segment closes.
	Close() error
}

// A Remote may also report its connection's health with a method
// Err() error: nil while the peer that described the region is still
// there with the same epoch, else why not (it restarted, the connection
// failed). The CUDA IPC executor checks it before every copy and closes
// its mappings of the region once it reports an error (ipc.go).

// RemoteInfo describes a remote region.
type RemoteInfo struct {
	Address string     `json:"address"` // host:port dialed (at open, or at the last redial)
	Peer    string     `json:"peer"`    // the name the peer proved at its handshake
	Epoch   uint64     `json:"epoch"`   // the peer's epoch (at open, or at the last redial)
	Region  string     `json:"region"`
	Size    uint64     `json:"size"`
	Export  Permission `json:"-"` // what the peer lets us do
	Lanes   int        `json:"lanes"`
	// Unit is the largest transfer one executor unit hands to the Remote
	// (the peer's slice size times its lanes, so one unit stripes).
	Unit uint64 `json:"unit"`
	// IPC is set when the region is device memory of an engine on this
	// host that exported its CUDA IPC handle: device requests then copy
	// on the GPU (ipc.go).
	IPC *RemoteIPC `json:"cuda_ipc,omitempty"`
}

// RemoteSegment is a peer's exported region opened as a target. Safe for
// concurrent use.
type RemoteSegment struct {
	e    *Engine
	r    Remote
	info RemoteInfo
	uri  string
	perm Permission
	ipc  *ipcState // the imported CUDA IPC mappings (ipc.go)

	mu struct {
		sync.Mutex
		closed bool
		gone   bool // the Remote was closed
		users  int
		idle   chan struct{} // closed when users drops to 0 while closed
	}
}

func (*RemoteSegment) isTarget() {}

// URI is the text the segment was opened with.
func (s *RemoteSegment) URI() string { return s.uri }

func (s *RemoteSegment) name() string { return "segments/" + s.uri }

// RemoteSegmentInfo describes a remote segment.
type RemoteSegmentInfo struct {
	URI        string     `json:"uri"`
	Remote     RemoteInfo `json:"remote"`
	Permission Permission `json:"-"`
	Users      int        `json:"users"`
	Draining   bool       `json:"draining"`
	// IPCMappings: CUDA IPC mappings of the region open here (ipc.go).
	IPCMappings int `json:"cuda_ipc_mappings"`
}

// Info returns the segment's description; the remote part is the
// Remote's own (a Remote that dialed a restarted peer again shows the
// new epoch).
func (s *RemoteSegment) Info() RemoteSegmentInfo {
	maps := s.IPCMappings()
	ri := s.r.Info()
	s.mu.Lock()
	defer s.mu.Unlock()
	return RemoteSegmentInfo{URI: s.uri, Remote: ri, Permission: s.perm, Users: s.mu.users, Draining: s.mu.closed, IPCMappings: maps}
}

// OpenRemoteSegment opens r as a target named uri with permission perm.
// It refuses (ErrPermission) a permission the region was not exported
// with, and a region of zero bytes (ErrRange). On error r stays the
// caller's to close; on success the segment owns it.
func (e *Engine) OpenRemoteSegment(uri string, r Remote, perm Permission) (*RemoteSegment, error) {
	const op = "open"
	name := "segments/" + uri
	if err := e.checkOpen(op); err != nil {
		return nil, err
	}
	if perm != PermRead && perm != PermWrite && perm != PermReadWrite {
		return nil, errorf(KindInvalid, op, name, "permission %d: want read, write or read_write", perm)
	}
	if r == nil {
		return nil, errorf(KindInvalid, op, name, "no remote region")
	}
	info := r.Info()
	if perm&^info.Export != 0 {
		return nil, errorf(KindPermission, op, name, "permission %s asked, but %s exports region %q with permission %s",
			perm, info.Peer, info.Region, exportText(info.Export))
	}
	if info.Size == 0 {
		return nil, errorf(KindRange, op, name, "region %q of %s has 0 bytes", info.Region, info.Peer)
	}
	if info.Unit == 0 {
		return nil, errorf(KindInvalid, op, name, "the remote announces a unit of 0 bytes")
	}
	e.log.Info("segment opened", "segment", uri, "peer", info.Peer, "epoch", info.Epoch, "region", info.Region, "bytes", info.Size, "permission", perm.String())
	return &RemoteSegment{e: e, r: r, info: info, uri: uri, perm: perm, ipc: newIPCState()}, nil
}

func exportText(p Permission) string {
	if p == 0 {
		return "none"
	}
	return p.String()
}

// CloseRemoteSegment closes the segment to new work, waits up to timeout
// for admitted groups, then closes the Remote. On ErrTimeout it stays
// closed to new work and a later call retries.
func (e *Engine) CloseRemoteSegment(s *RemoteSegment, timeout time.Duration) error {
	s.mu.Lock()
	s.mu.closed = true
	if s.mu.users > 0 {
		if s.mu.idle == nil {
			s.mu.idle = make(chan struct{})
		}
		idle, n := s.mu.idle, s.mu.users
		s.mu.Unlock()
		t := time.NewTimer(timeout)
		defer t.Stop()
		select {
		case <-idle:
		case <-t.C:
			return errorf(KindTimeout, "close", s.name(), "%d submission(s) still running after %s; the segment takes no new work", n, timeout)
		}
		s.mu.Lock()
	}
	gone := s.mu.gone
	s.mu.gone = true
	s.mu.Unlock()
	if !gone {
		s.closeIPC()
		s.r.Close()
		e.log.Info("segment closed", "segment", s.uri)
	}
	return nil
}

func (s *RemoteSegment) admit(shard) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return false
	}
	s.mu.users++
	return true
}

func (s *RemoteSegment) done() {
	s.mu.Lock()
	s.mu.users--
	if s.mu.users == 0 && s.mu.idle != nil {
		close(s.mu.idle)
		s.mu.idle = nil
	}
	s.mu.Unlock()
}
