// export.go owns what other engines (peers) may reach: the
// registrations made with an export other than none, and their bytes.
// The peer server asks on every request, so an rmdir'd registration is
// unreachable at once, and a name registered again is a new object with
// a new Seq that an old descriptor never reaches.

package control

import (
	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/peer/wire"
)

// Exported returns the registrations peers may reach, in name order.
func (s *Service) Exported() []*Memory {
	var out []*Memory
	for _, m := range s.Memories() {
		if m.Export != ExportNone {
			out = append(out, m)
		}
	}
	return out
}

// ExportedBySeq finds an exported registration by its Seq, or nil.
func (s *Service) ExportedBySeq(seq uint64) *Memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range s.mu.memory {
		if m != nil && m.seq == seq && m.Export != ExportNone {
			return m
		}
	}
	return nil
}

// exportFitsLocked refuses one more export, named name at location, when
// the list of exported regions would no longer fit in one regions-ok
// frame: every peer's dial fetches that list, and a longer one is a
// frame peers refuse as corrupt. REQUIRES: s.mu.
func (s *Service) exportFitsLocked(name, location string) error {
	size, n := wire.RegionsBase+descriptorSize(name, location), 1
	for _, m := range s.mu.memory {
		if m != nil && m.Export != ExportNone {
			size += descriptorSize(m.Name, m.Location)
			n++
		}
	}
	if size > wire.MaxMetaLen {
		return detail(engine.KindTooLarge, "export %q: %d exported regions take %d bytes in the list peers fetch, over its %d; export fewer or shorter names (rmdir some, or register with \"export\": \"none\")",
			name, n, size, wire.MaxMetaLen)
	}
	return nil
}

// descriptorSize is the most an export adds to the list: a device
// region's descriptor carries its IPC handle to clients on this host.
func descriptorSize(name, location string) int {
	_, device := engine.Location(location).Device()
	return wire.DescriptorSize(name, location, device)
}

// ReadAt copies region bytes into p (the region's rules: ErrBusy while a
// transfer holds them, ErrRange past the end).
func (m *Memory) ReadAt(p []byte, off int64) (int, error) { return m.region.ReadAt(p, off) }

// WriteAt copies p into the region, with the region's rules.
func (m *Memory) WriteAt(p []byte, off int64) (int, error) { return m.region.WriteAt(p, off) }

// InPlace runs f on the region's bytes [off, off+n) in place, with the
// region's rules (engine.Region.InPlace); ok false: not host memory
// that can be, use ReadAt/WriteAt.
func (m *Memory) InPlace(off int64, n int, f func(b []byte) error) (bool, error) {
	return m.region.InPlace(off, n, f)
}

// IPCHandle is a cuda:N registration's CUDA IPC handle, for a peer on
// this host.
func (m *Memory) IPCHandle() ([]byte, error) { return m.region.IPCHandle() }

// HoldIPC records a peer's CUDA IPC mapping of the registration: rmdir
// is EBUSY, naming holder, until ReleaseIPC returns it.
func (m *Memory) HoldIPC(holder string) error { return m.region.HoldIPC(holder) }

// ReleaseIPC returns n of holder's mappings (all when n <= 0).
func (m *Memory) ReleaseIPC(holder string, n int) { m.region.ReleaseIPC(holder, n) }
