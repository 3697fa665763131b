// ipc.go owns what lets two engines on one host copy GPU memory without
// the network: the host identity both sides compare, the server's choice
// to put a device region's CUDA IPC handle in its descriptor, and the
// client's description of such a region to the engine
// (engine.RemoteInfo.IPC), which then copies device to device.
//
// Invariants:
//   - A handle is sent only to a client that named this server's host
//     (its boot id) in its regions request: on another host it names
//     nothing.
//   - A handle is sent only for a region exported read_write: a mapping
//     of it reads and writes every byte, whatever the export says.
//   - A handle the exporter cannot produce is left out (the region stays
//     reachable over TCP) and logged.
//   - A handle is sent only to a client that announced CapIPCMap: it
//     tells the server each mapping it opens before its first copy, so
//     the server holds the region (engine.Region.HoldIPC: rmdir is
//     EBUSY) while any client maps it. An older client gets no handle
//     and reaches the region over TCP.
//   - A session maps only regions whose handle it was sent.
//   - A session's mappings are held until it unmaps them or, when its
//     control connection ends, for IPCReleaseGrace more: a copy the
//     client queued before the connection ended may still be running on
//     the GPU, which the server cannot see.

package peer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// bootIDPath is where Linux says which boot this is, one id per host.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// HostID identifies this host: its boot id, shared by every process and
// container on it; "" when it cannot be read (no handle is then ever
// exchanged).
func HostID() string {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// DefaultIPCReleaseGrace is how long a server keeps holding a session's
// CUDA IPC mappings after its control connection ended, when
// ServerConfig.IPCReleaseGrace is 0.
const DefaultIPCReleaseGrace = 30 * time.Second

// regions lists the exports for a client on host (its claim, proved with
// the key like everything else it sends) that speaks caps.
func (s *Server) regions(host, client string, caps wire.Caps) *wire.Regions {
	var rs wire.Regions
	// Only a client that announces its mappings may map: the server must
	// know who holds a region before it frees it.
	same := host != "" && host == s.cfg.Host && caps&wire.CapIPCMap != 0
	for _, x := range s.exp.Exports() {
		d := x.Descriptor
		d.IPC = nil
		// A mapping of the handle reads and writes every byte of the
		// region, whatever the export says: only read_write hands it out.
		if same && x.IPCHandle != nil && x.HoldIPC != nil && x.Perm == wire.PermReadWrite {
			h, err := x.IPCHandle()
			if err == nil && len(h) == wire.IPCHandleLen {
				d.IPC = h
			} else {
				s.log.Warn("cuda ipc handle not sent; the region stays reachable over tcp", "op", "peer", "region", d.Name, "peer", client, "err", err, "bytes", len(h))
			}
		}
		rs.List = append(rs.List, d)
	}
	return &rs
}

// olderServer reports whether err is a server's refusal of a regions
// query that names capabilities: a server from before them decodes the
// query strictly and refuses its trailing bytes (ending the connection).
func olderServer(err error) bool {
	var r *remoteError
	return errors.As(err, &r) && r.m.Code == wire.CodeCorrupt && strings.Contains(r.m.Message, "trailing bytes after regions query")
}

// remoteIPC describes d's CUDA IPC export to the engine, or nil.
func remoteIPC(d wire.Descriptor) *engine.RemoteIPC {
	if len(d.IPC) != wire.IPCHandleLen {
		return nil
	}
	l, ok := strings.CutPrefix(d.Location, "cuda:")
	if !ok {
		return nil
	}
	dev, err := strconv.Atoi(l)
	if err != nil || dev < 0 {
		return nil
	}
	return &engine.RemoteIPC{Device: dev, Handle: d.IPC}
}

// Err is why the Remote's current connection is no longer usable (the
// peer restarted with another epoch, or the connection failed), or nil.
// The engine copies through CUDA IPC only while it is nil and Info's
// epoch is the one its mapping was opened in; the next TCP request
// redials (and Info then carries the new epoch's handle).
func (r *Remote) Err() error {
	r.mu.Lock()
	c := r.mu.c
	r.mu.Unlock()
	return c.Err()
}

// ipcHolds are one session's CUDA IPC mappings, by descriptor id.
type ipcHolds struct {
	holder  string // how the region's refusals name the session
	maps    map[uint64]*ipcHold
	offered map[uint64]bool // regions whose handle the session was sent
}

// ipcHold is a session's mappings of one region.
type ipcHold struct {
	name    string
	n       int
	release func(holder string, n int)
}

// ipcHolder names a session in an exporter's refusals and listings.
func ipcHolder(ss *session) string {
	return fmt.Sprintf("%s (epoch %016x, session %d)", ss.name, ss.epoch, ss.id)
}

// offeredIPC notes the regions whose handle rs hands the session: only
// those may it map (a client that got no handle has nothing to map, and
// must not hold the region).
func (s *Server) offeredIPC(ss *session, rs *wire.Regions) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range rs.List {
		if d.IPC != nil {
			if ss.ipc.offered == nil {
				ss.ipc.offered = map[uint64]bool{}
			}
			ss.ipc.offered[d.ID] = true
		}
	}
}

// serveIPC records a mapping (TypeIPCMap) or its end (TypeIPCUnmap) for
// the session; a refusal is a reply (nothing recorded), never the end
// of the connection.
func (s *Server) serveIPC(t wire.Type, meta []byte, ss *session, reply *wire.Frame) error {
	var m wire.IPCMap
	if err := m.Unmarshal(meta); err != nil {
		return err
	}
	refuse := func(code wire.Code, format string, args ...any) error {
		e := wire.Error{Code: code, Message: fmt.Sprintf(format, args...)}
		reply.Type, reply.Meta = wire.TypeError, e.Marshal()
		return nil
	}
	s.mu.Lock()
	hs := &ss.ipc
	if hs.maps == nil {
		hs.holder, hs.maps = ipcHolder(ss), map[uint64]*ipcHold{}
	}
	h, offered := hs.maps[m.Region], hs.offered[m.Region]
	s.mu.Unlock()
	if t == wire.TypeIPCUnmap {
		if h == nil {
			return refuse(wire.CodeProtocol, "region %d: this session holds no CUDA IPC mapping of it", m.Region)
		}
		h.release(hs.holder, 1)
		s.mu.Lock()
		if h.n--; h.n == 0 {
			delete(hs.maps, m.Region)
		}
		s.mu.Unlock()
		s.log.Info("cuda ipc mapping released", "op", "peer", "region", h.name, "peer", hs.holder, "held", h.n)
		reply.Type = wire.TypeIPCAck
		return nil
	}
	x, ok := s.exp.Export(m.Region)
	switch {
	case !ok:
		return refuse(wire.CodeNotFound, "no exported region with id %d (unregistered, or a descriptor from before a restart)", m.Region)
	case x.HoldIPC == nil || x.ReleaseIPC == nil || x.IPCHandle == nil || x.Perm != wire.PermReadWrite:
		return refuse(wire.CodeDenied, "region %q (%s, exported %s) has no CUDA IPC handle to map", x.Name, x.Location, x.Perm)
	case !offered:
		return refuse(wire.CodeDenied, "region %q: this session was not sent its CUDA IPC handle (another host, or no capability to announce mappings)", x.Name)
	}
	if err := x.HoldIPC(hs.holder); err != nil {
		return refuse(wire.CodeNotFound, "region %q: %v", x.Name, err)
	}
	s.mu.Lock()
	if h == nil {
		h = &ipcHold{name: x.Name, release: x.ReleaseIPC}
		hs.maps[m.Region] = h
	}
	h.n++
	s.mu.Unlock()
	s.log.Info("cuda ipc mapping held", "op", "peer", "region", x.Name, "peer", hs.holder, "held", h.n)
	reply.Type = wire.TypeIPCAck
	return nil
}

// dropIPC gives back a finished session's mappings, IPCReleaseGrace
// after its control connection ended: what the client queued on the GPU
// before that may still be copying, and nothing tells the server when it
// stops (a client that exits has its copies ended by the driver; one
// that lost only its connection stops starting copies at once and
// confirms those in flight within its own deadlines).
func (s *Server) dropIPC(ss *session) {
	s.mu.Lock()
	maps, holder := ss.ipc.maps, ss.ipc.holder
	ss.ipc.maps = nil
	s.mu.Unlock()
	if len(maps) == 0 {
		return
	}
	grace := s.cfg.IPCReleaseGrace
	if grace == 0 {
		grace = DefaultIPCReleaseGrace
	}
	s.log.Warn("peer session ended holding cuda ipc mappings; releasing them after the grace", "op", "peer", "peer", holder, "regions", len(maps), "grace", grace)
	release := func() {
		for _, h := range maps {
			h.release(holder, h.n)
			s.log.Info("cuda ipc mappings released at the end of their session", "op", "peer", "region", h.name, "peer", holder, "mappings", h.n)
		}
		if s.ipcDropped != nil {
			s.ipcDropped(holder)
		}
	}
	time.AfterFunc(grace, release)
}

// AnnounceIPC tells the exporter, on the current connection, that a
// CUDA IPC mapping of the region is about to be opened in the peer's
// epoch, and returns once it acknowledged (engine.IPCAnnouncer). unmap
// returns the mapping on that same connection (its session holds it);
// once that connection failed, the exporter releases it on its own.
func (r *Remote) AnnounceIPC(ctx context.Context, epoch uint64) (unmap func(), err error) {
	r.mu.Lock()
	c, region := r.mu.c, r.mu.info.Region
	r.mu.Unlock()
	if c.peerEpoch != epoch {
		return nil, fmt.Errorf("the mapping is for the peer's epoch %016x, the connection is to %016x", epoch, c.peerEpoch)
	}
	d, err := c.descriptor(ctx, "ipc map", region)
	if err != nil {
		return nil, err
	}
	meta := (&wire.IPCMap{Region: d.ID}).Marshal()
	if err := c.request(ctx, "ipc map", wire.TypeIPCMap, meta, wire.TypeIPCAck, noMeta{}); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if c.Err() != nil {
				return // the session is over: the exporter released it
			}
			if err := c.request(context.Background(), "ipc unmap", wire.TypeIPCUnmap, meta, wire.TypeIPCAck, noMeta{}); err != nil {
				c.log.Warn("cuda ipc unmap not acknowledged; the exporter releases it when the connection ends", "op", "peer", "peer", c.addr, "region", region, "err", err)
			}
		})
	}, nil
}

var _ engine.IPCAnnouncer = (*Remote)(nil)
