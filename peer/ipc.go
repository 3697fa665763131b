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

package peer

import (
	"os"
	"strconv"
	"strings"

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

// regions lists the exports for a client on host (its claim, proved with
// the key like everything else it sends).
func (s *Server) regions(host, client string) *wire.Regions {
	var rs wire.Regions
	same := host != "" && host == s.cfg.Host
	for _, x := range s.exp.Exports() {
		d := x.Descriptor
		d.IPC = nil
		// A mapping of the handle reads and writes every byte of the
		// region, whatever the export says: only read_write hands it out.
		if same && x.IPCHandle != nil && x.Perm == wire.PermReadWrite {
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
