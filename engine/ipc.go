// ipc.go owns CUDA IPC between engines on one host: exporting a device
// region's handle (the peer server puts it in the region's descriptor
// when the client shares its host), and, on the importing side, the
// mappings a remote segment opened from such a handle, one per local
// device, and the route choice that sends device requests to them.
//
// Invariants:
//   - A request takes routeIPC only when every element is device memory
//     on one device, without padding, the Remote describes the region
//     with a handle (Info().IPC) and reports no error, and the mapping
//     for that device is open. Anything else on a remote segment keeps
//     its TCP route (whose redial after a peer restart brings the new
//     epoch's descriptor, and so its handle).
//   - A mapping belongs to the peer's epoch it was opened in; a unit uses
//     it only while the Remote reports no error and that same epoch.
//   - A mapping is closed only when no unit uses it and no uncertain
//     copy may still touch it (retained: never closed, for the engine's
//     life): at segment close, or once its epoch is over (the peer
//     restarted: its memory is not the memory the handle named).
//   - An import refused for a device is remembered for that epoch: that
//     device's requests keep TCP and the import is not tried again until
//     the peer has a new epoch.
//   - The exporter knows every mapping before it is used: a mapping is
//     opened only after the Remote's AnnounceIPC returned (the exporter
//     acknowledged it, and refuses to free the region from then on), so
//     no copy ever runs on a mapping the exporter has not acknowledged;
//     a Remote that cannot announce gets no mapping (its requests keep
//     TCP). A mapping closed is announced closed after it is unmapped.

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
)

// RemoteIPC is a same-host peer's export of a device region.
type RemoteIPC struct {
	Device int    `json:"device"` // the exporter's CUDA device
	Handle []byte `json:"-"`      // its CUDA IPC handle (64 bytes)
}

// IPCExporter is implemented by device memory that can be exported to
// another process on this host (backends/cuda: cuIpcGetMemHandle).
type IPCExporter interface {
	IPCHandle() ([]byte, error)
}

// IPCAnnouncer is implemented by a Remote whose exporter records who
// maps its region (peer.Remote). AnnounceIPC tells the exporter that a
// mapping of the region is about to be opened, in the exporter's epoch,
// and returns once it acknowledged: from then on the exporter refuses to
// free the region until unmap runs (after the mapping is closed) or the
// connection ends. An error (another epoch, the connection failed, the
// region is gone) means nothing was recorded.
type IPCAnnouncer interface {
	AnnounceIPC(ctx context.Context, epoch uint64) (unmap func(), err error)
}

// DeviceCopier is implemented by a Stream that queues device-to-device
// copies (backends/cuda: cuMemcpyDtoDAsync).
type DeviceCopier interface {
	DtoD(dst, src, n uint64) error
}

// IPCHandle returns the CUDA IPC handle another engine on this host
// opens to reach the region's device memory: KindInvalid for host
// memory, KindUnavailable when the GPU backend cannot export it.
func (r *Region) IPCHandle() ([]byte, error) {
	if r.dev == nil {
		return nil, errorf(KindInvalid, "export", r.name(), "%s memory has no CUDA IPC handle", r.Location())
	}
	x, ok := r.dev.(IPCExporter)
	if !ok {
		return nil, errorf(KindUnavailable, "export", r.name(), "the GPU backend cannot export CUDA IPC handles")
	}
	h, err := x.IPCHandle()
	if err != nil {
		return nil, wrap(KindUnavailable, "export", r.name(), err)
	}
	return h, nil
}

// ipcState is a remote segment's CUDA IPC mappings.
type ipcState struct {
	mu     sync.Mutex
	maps   map[int]*ipcMap    // by local device
	failed map[int]ipcRefusal // import refused on that device
	closed bool               // the segment closed: nothing new is imported
}

// ipcRefusal is an import refused in one of the peer's epochs.
type ipcRefusal struct {
	epoch uint64
	err   error
}

// ipcMap is the region mapped into one local device's context.
type ipcMap struct {
	mem      DeviceMemory
	unmap    func() // tells the exporter the mapping is closed
	epoch    uint64 // the peer's epoch whose handle it was opened from
	users    int    // units copying with it now
	retained bool   // an uncertain copy may still touch it: never closed
	stale    bool   // close it once users drops to 0
}

func newIPCState() *ipcState {
	return &ipcState{maps: map[int]*ipcMap{}, failed: map[int]ipcRefusal{}}
}

// health is the Remote's own verdict on its peer (nil when it has none).
func (s *RemoteSegment) health() error {
	if h, ok := s.r.(interface{ Err() error }); ok {
		return h.Err()
	}
	return nil
}

// ipcEligible reports whether request r can take routeIPC: every
// element device memory on one device, no padding, a healthy peer, and
// the mapping open on that device (imported here on first use). Errors
// in the request itself are left to buildRemote.
func (g *group) ipcEligible(e *Engine, r *Request) bool {
	s := g.remote.seg
	if e.gpu.b == nil {
		return false
	}
	elems := r.Elements
	if len(elems) == 0 {
		elems = []Element{{Address: r.Address, Length: r.Length}}
	}
	dev := -1
	for _, el := range elems {
		if el.Padding != 0 || el.Length == 0 {
			return false
		}
		reg, err := e.resolveFor(g.allowed, el.Address, el.Length)
		if err != nil || reg.dev == nil || (dev >= 0 && reg.dev.Device() != dev) {
			return false
		}
		dev = reg.dev.Device()
	}
	info := s.r.Info()
	if s.health() != nil || info.IPC == nil {
		s.staleIPC(0) // the peer is gone or changed: its handles name nothing of ours
		return false
	}
	if _, err := s.ipcMapping(e, dev, info); err != nil {
		return false
	}
	return true
}

// ipcMapping returns the mapping on device dev for the peer's epoch in
// info, importing info's handle once per epoch (a mapping of an earlier
// epoch is closed once idle).
func (s *RemoteSegment) ipcMapping(e *Engine, dev int, info RemoteInfo) (*ipcMap, error) {
	s.staleIPC(info.Epoch)
	st := s.ipc
	st.mu.Lock()
	defer st.mu.Unlock()
	if m := st.maps[dev]; m != nil && !m.stale {
		return m, nil
	}
	if f, ok := st.failed[dev]; ok && f.epoch == info.Epoch {
		return nil, f.err
	}
	if st.closed {
		return nil, errors.New("the segment is closing")
	}
	if st.maps[dev] != nil {
		// A stale mapping of this epoch still in use (its connection
		// failed, and no redial brought a new epoch yet).
		return nil, errors.New("the peer's previous mapping is still in use")
	}
	a, ok := s.r.(IPCAnnouncer)
	if !ok {
		err := fmt.Errorf("the transport of %s's region %q cannot tell the exporter about a mapping", info.Peer, info.Region)
		st.failed[dev] = ipcRefusal{epoch: info.Epoch, err: err}
		return nil, err
	}
	// Acknowledged before the handle is opened: the exporter holds the
	// region from here, so no copy can reach memory it freed.
	unmap, err := a.AnnounceIPC(context.Background(), info.Epoch)
	if err != nil {
		e.log.Warn("cuda ipc mapping not acknowledged by the exporter; this request keeps tcp", "segment", s.uri, "device", dev, "epoch", info.Epoch, "err", err)
		return nil, fmt.Errorf("%s did not acknowledge a CUDA IPC mapping of region %q: %w", info.Peer, info.Region, err)
	}
	mem, err := e.gpu.b.ImportIPC(dev, info.IPC.Handle)
	if err != nil {
		unmap()
		err = fmt.Errorf("cuda:%d cannot open %s's CUDA IPC handle for region %q: %w", dev, info.Peer, info.Region, err)
		st.failed[dev] = ipcRefusal{epoch: info.Epoch, err: err}
		e.log.Warn("cuda ipc import refused; device requests keep tcp", "segment", s.uri, "device", dev, "epoch", info.Epoch, "err", err)
		return nil, err
	}
	m := &ipcMap{mem: mem, unmap: unmap, epoch: info.Epoch}
	st.maps[dev] = m
	e.st.ipc.imports.Add(1)
	e.log.Info("cuda ipc mapping opened", "segment", s.uri, "peer", info.Peer, "epoch", info.Epoch, "region", info.Region, "device", dev)
	return m, nil
}

// ipcAcquire takes the mapping on dev for one unit, or says why the unit
// must not run: the peer is gone (the mapping is then closed once idle)
// or the segment closed.
func (s *RemoteSegment) ipcAcquire(dev int) (*ipcMap, error) {
	info := s.r.Info()
	if err := s.health(); err != nil {
		s.staleIPC(0)
		return nil, fmt.Errorf("the peer %s of region %q is gone or restarted, so its CUDA IPC mapping is closed: %w", info.Peer, info.Region, err)
	}
	s.staleIPC(info.Epoch)
	st := s.ipc
	st.mu.Lock()
	defer st.mu.Unlock()
	m := st.maps[dev]
	if m == nil || m.stale {
		return nil, fmt.Errorf("no open CUDA IPC mapping of region %q on cuda:%d in the peer's epoch %d (it restarted)", info.Region, dev, info.Epoch)
	}
	m.users++
	return m, nil
}

// ipcRelease gives a unit's mapping back; uncertain keeps it for good.
func (s *RemoteSegment) ipcRelease(m *ipcMap, uncertain bool) {
	st := s.ipc
	st.mu.Lock()
	m.users--
	if uncertain && !m.retained {
		m.retained = true
		s.e.st.ipc.retained.Add(1)
	}
	closeIt := m.stale && m.users == 0 && !m.retained
	st.mu.Unlock()
	if closeIt {
		s.closeMapping(m)
	}
}

// staleIPC marks every mapping stale (but those of epoch keep, when not
// 0) and closes the idle ones.
func (s *RemoteSegment) staleIPC(keep uint64) {
	st := s.ipc
	var idle []*ipcMap
	st.mu.Lock()
	for _, m := range st.maps {
		if m.stale || (keep != 0 && m.epoch == keep) {
			continue
		}
		m.stale = true
		if m.users == 0 && !m.retained {
			idle = append(idle, m)
		}
	}
	st.mu.Unlock()
	for _, m := range idle {
		s.closeMapping(m)
	}
}

// closeIPC closes the segment's mappings at segment close (its groups
// drained, so only retained ones remain in use).
func (s *RemoteSegment) closeIPC() {
	s.ipc.mu.Lock()
	s.ipc.closed = true
	s.ipc.mu.Unlock()
	s.staleIPC(0)
}

// closeMapping unmaps m (users 0, not retained, stale) and forgets it.
func (s *RemoteSegment) closeMapping(m *ipcMap) {
	err := m.mem.Free()
	st := s.ipc
	st.mu.Lock()
	for d, x := range st.maps {
		if x == m {
			delete(st.maps, d)
		}
	}
	st.mu.Unlock()
	if err != nil {
		// Maybe still mapped: the exporter keeps its hold until the
		// connection ends.
		s.e.log.Error("cuda ipc mapping close failed", "segment", s.uri, "err", err)
		return
	}
	m.unmap()
	s.e.st.ipc.closes.Add(1)
	s.e.log.Info("cuda ipc mapping closed", "segment", s.uri, "region", s.info.Region, "epoch", m.epoch)
}

// IPCMappings is how many CUDA IPC mappings the segment holds open.
func (s *RemoteSegment) IPCMappings() int {
	s.ipc.mu.Lock()
	defer s.ipc.mu.Unlock()
	return len(s.ipc.maps)
}

// IPCStats are the CUDA IPC executor's counters.
type IPCStats struct {
	Units    uint64 `json:"units"`    // copies completed
	Imports  uint64 `json:"imports"`  // mappings opened
	Closes   uint64 `json:"closes"`   // mappings closed
	Retained uint64 `json:"retained"` // mappings kept for good after an uncertain copy
}

type ipcCounters struct{ units, imports, closes, retained atomic.Uint64 }

func (c *ipcCounters) stats() IPCStats {
	return IPCStats{Units: c.units.Load(), Imports: c.imports.Load(), Closes: c.closes.Load(), Retained: c.retained.Load()}
}
