// route.go owns transport selection: the one place that decides, per
// request, which path moves its bytes, and the table that maps each
// route to its executor (routeTable), which the scheduler and the status
// readers reach every executor through.
//
// Routes:
//   - routeRing: host memory <-> file on the io_uring ring the ring
//     executor lends the batch (ringexec.go).
//   - routeStaged: any request touching device memory, through pinned
//     staging chunks on io_uring rings (staged.go); the task reports
//     transport io_uring.
//   - routeGDS: device memory <-> file through cuFile (gdsexec.go).
//   - routeHostCopy: a large single-range host request on a file in
//     memory (tmpfs), or each request of a batch of mid-size ones
//     (host_copy_min_bytes), copied in units by the host copy lanes
//     (hostcopy.go); the task reports transport copy.
//   - routeRemote: every request on a remote segment, moved by the peer
//     executor (peerexec.go); the task reports transport tcp.
//   - routeIPC: device memory and a peer's device region on this host,
//     copied device to device through CUDA IPC (ipcexec.go); the task
//     reports transport cuda_ipc. Every other request on a remote
//     segment keeps routeRemote.
//   - routeMem: between two regions of this engine, a memory segment
//     (memgroup.go); the task reports transport memory.
//   - routeMapped: device memory and a tmpfs file, copied by DMA from
//     and into the file's pages, mapped and registered once
//     (mappedexec.go); the task reports transport mapped.
//   - routeCopy: a small group on an in-memory file that its submitter
//     copies (callercopy.go); set at dispatch, when FIFO and fences let
//     Submit start it at once, on requests routed to the ring; the task
//     reports transport copy.
//
// Selection (spec "transport preference", with one documented narrowing):
//   - transport gds: honoured when cuFile is usable and the request is
//     eligible, otherwise Unavailable naming the reason; never silently
//     rerouted.
//   - transport io_uring: the ring for host memory, staging for device
//     memory.
//   - unspec: for requests that touch device memory, the mapped route
//     when eligible (a tmpfs file on a segment that can read, device
//     memory only, no padding, mapped_files on, within
//     max_mapped_bytes), else GDS when eligible and cuFile moves
//     bytes by DMA (a second narrowing: cuFile's POSIX fallback is a
//     bounce copy the staging makes faster), else staging; host-only
//     requests keep the ring (cuFile would only add a copy for DRAM,
//     and would load libcufile for every DRAM user), but for those the
//     host copy lanes take (hostCopyEligible).
//
// Eligibility for GDS: a GDS backend that probes usable, gds_enabled, an
// O_DIRECT fd on a filesystem with a block device (not tmpfs), no padding,
// device memory only, and the file offset, every length and every device
// address aligned to the file's DIO alignment.

package engine

import "fmt"

type route uint8

const (
	routeRing route = iota
	routeStaged
	routeGDS
	routeMem  // between two regions of this engine (memgroup.go)
	routeCopy // a memory-backed file, copied by the submitter (callercopy.go)
	// routeHostCopy: a large host request, or a batch of mid-size ones,
	// on a memory-backed file, cut into units copied by the host copy
	// lanes (hostcopy.go).
	routeHostCopy
	// routeRemote: a peer's region (remote.go), moved by the peer
	// executor (peerexec.go).
	routeRemote
	// routeIPC: device memory <-> a same-host peer's device region,
	// copied on the GPU through CUDA IPC (ipcexec.go).
	routeIPC
	// routeMapped: device memory <-> a tmpfs file's own pages, mapped
	// and registered for DMA (mappedexec.go).
	routeMapped
)

// routeCount is the number of routes (the size of Engine.execs).
const routeCount = int(routeMapped) + 1

// routeTable maps every route to its executor: the one place that names
// them. Adding a transport is its executor and one line here.
func (e *Engine) routeTable() {
	e.execs = [routeCount]executor{
		routeRing:     ringExec{e},
		routeStaged:   e.staged,
		routeGDS:      e.gdsExec,
		routeMem:      e.memExec,
		routeCopy:     callerCopyExec{},
		routeHostCopy: e.hostCopy,
		routeRemote:   e.peerExec,
		routeIPC:      e.ipcExec,
		routeMapped:   e.mappedExec,
	}
}

// ring returns the ring executor (routeRing's), whose rings the batch
// workers fill.
func (e *Engine) ring() ringExec { return e.execs[routeRing].(ringExec) }

// executor returns the executor of route rt.
func (e *Engine) executor(rt route) executor { return e.execs[rt] }

// jobExec returns the executor of route rt, which takes jobs: every
// route of a group dispatched as jobs (g.offRing) does, once rideAlong
// moved its host requests off the ring route.
func (e *Engine) jobExec(rt route) jobExecutor { return e.execs[rt].(jobExecutor) }

// rideAlong routes the host requests of a group that leaves the ring
// (dispatched as jobs) off the ring route: through staging when the
// group touches device memory (the task reports io_uring, as on the
// ring), else on the host copy lanes (it reports copy); it records their
// pieces, which a request on the ring has none of. Called once the
// group's routes are chosen, before anyone can read them.
func (g *group) rideAlong(reqs []Request) {
	k := 0 // g.ranges are in request order
	for i := range reqs {
		for k < len(g.ranges) && g.ranges[k].req < i {
			k++
		}
		if g.routes[i] == routeRing {
			g.addPieces(i, &reqs[i], k)
		}
	}
	device := false
	for i := 0; i < g.n; i++ {
		device = device || g.routes[i] == routeStaged || g.routes[i] == routeGDS || g.routes[i] == routeMapped
	}
	for i := 0; i < g.n; i++ {
		switch {
		case g.routes[i] != routeRing:
		case device:
			g.routes[i] = routeStaged
		default:
			g.routes[i] = routeHostCopy
		}
	}
}

// route chooses request i's route from the ranges build
// resolved for it (g.ranges[first:]), and for an off-ring request
// records its pieces in file order.
func (g *group) route(e *Engine, i int, r *Request, first int) error {
	var m reqMemory
	for _, rr := range g.ranges[first:] {
		if rr.region.dev != nil {
			m.device = true
		} else {
			m.host = true
		}
	}
	for _, el := range r.Elements {
		m.padding = m.padding || el.Padding != 0
	}
	rt, err := e.chooseRoute(g, r, m)
	if err != nil {
		return err
	}
	if rt == routeGDS {
		for _, rr := range g.ranges[first:] {
			if err := e.gdsRegister(rr.region); err != nil {
				if r.Transport == TransportGDS {
					return detail(KindUnavailable, "transport gds: %v", err)
				}
				rt = routeStaged
				break
			}
		}
	}
	g.routes[i] = rt
	g.policy[i] = reqPolicy{asked: r.Transport, vector: len(r.Elements) > 0}
	if r.Producer != nil {
		if !m.device {
			return detail(KindInvalid, "a producer event needs device memory; this request touches host memory only")
		}
		if g.producers == nil {
			g.producers = make([]Event, g.n)
		}
		g.producers[i] = r.Producer
	}
	if rt == routeRing {
		return nil
	}
	g.offRing = true
	g.addPieces(i, r, first)
	return nil
}

// nextRoute is the route after request i's current one in its candidate
// chain (failover.go decides whether to take it).
func (g *group) nextRoute(i int) (route, bool) {
	if (g.routes[i] == routeGDS || g.routes[i] == routeMapped) && g.policy[i].asked == TransportUnspec {
		return routeStaged, true
	}
	return 0, false
}

// reqMemory summarizes what local memory a request touches.
type reqMemory struct {
	device  bool // some range is device memory
	host    bool // some range is host memory
	padding bool
	devices []int // distinct CUDA devices
}

// chooseRoute picks request r's route. It may probe cuFile.
func (e *Engine) chooseRoute(g *group, r *Request, m reqMemory) (route, error) {
	ent := g.ent
	switch r.Transport {
	case TransportGDS:
		if why := e.gdsIneligible(ent, r, m); why != "" {
			return 0, detail(KindUnavailable, "transport gds: %s", why)
		}
		return routeGDS, nil
	case TransportIOUring, TransportUnspec:
	default:
		return 0, detail(KindInvalid, "transport %d unknown", r.Transport)
	}
	if !m.device {
		if e.hostCopyEligible(g, r, m) {
			return routeHostCopy, nil
		}
		return routeRing, nil
	}
	if e.mappedEligible(ent, r, m) {
		return routeMapped, nil
	}
	if r.Transport == TransportUnspec && e.gdsForUnspec(ent, r, m) {
		return routeGDS, nil
	}
	return routeStaged, nil
}

// gdsForUnspec says whether an unspecified transport takes cuFile for r:
// r is eligible and cuFile moves bytes by DMA. Without DMA each cuFile
// call is a copy through its own bounce buffers, one blocking call per
// request; the staging makes the same copies from deep rings, and
// measured faster (docs/engine.md). DMA is asked before cuFile is
// probed, so a machine without nvidia-fs never loads it for an
// unspecified transport; and again after the probe, for the policy the
// driver runs, before the eligibility check registers the file with
// cuFile (a handle the staging would never use).
func (e *Engine) gdsForUnspec(ent *segEntry, r *Request, m reqMemory) bool {
	if e.gds.b == nil || !e.cfg.GDSEnabled || !e.gds.b.DMA() {
		return false
	}
	if e.gdsReady() != nil || !e.gds.b.DMA() {
		return false
	}
	return e.gdsIneligible(ent, r, m) == ""
}

// gdsIneligible returns why r cannot use cuFile, or "".
func (e *Engine) gdsIneligible(ent *segEntry, r *Request, m reqMemory) string {
	switch {
	case !e.cfg.GDSEnabled:
		return "gds_enabled is false"
	case e.gds.b == nil:
		return "cuFile is not available in this build"
	case m.padding:
		return "a vector with padding cannot use cuFile"
	case m.host || !m.device:
		return "cuFile here serves device memory only"
	case ent.direct.FD < 0:
		return fmt.Sprintf("%s has no O_DIRECT descriptor (filesystem %s)", ent.path, ent.fsType)
	}
	if err := e.gdsReady(); err != nil {
		return err.Error()
	}
	if _, err := e.gdsHandle(ent); err != nil {
		return err.Error()
	}
	a := ent.dioOff
	if r.TargetOffset%a != 0 {
		return fmt.Sprintf("file offset %d is not a multiple of %d", r.TargetOffset, a)
	}
	if len(r.Elements) == 0 {
		if r.Length%a != 0 || r.Address%a != 0 {
			return fmt.Sprintf("address %#x or length %d is not a multiple of %d", r.Address, r.Length, a)
		}
		return ""
	}
	for j, el := range r.Elements {
		if el.Length%a != 0 || el.Address%a != 0 {
			return fmt.Sprintf("elements[%d]: address %#x or length %d is not a multiple of %d", j, el.Address, el.Length, a)
		}
	}
	return ""
}
