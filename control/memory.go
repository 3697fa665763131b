// memory.go owns the memory table: named registrations over engine
// regions, created by /memory/register, read and written through
// /memory/<name>/data, described by info, removed by rmdir.
//
// Invariants:
//   - A name maps to at most one live region; the Memory value for a
//     name is replaced only after rmdir removed the old one, and carries
//     a new Seq, so a handle opened on the old one never reaches the new.
//   - Unregister leaves the table untouched when the engine refuses
//     (EBUSY while a transfer holds a loan).

package control

import (
	"encoding/hex"
	"sort"
	"time"

	"github.com/orbitefs/orbitefs/engine"
	"github.com/orbitefs/orbitefs/internal/hostmem"
)

// Memory is one named registration. Its fields never change.
type Memory struct {
	Name     string
	Location string
	// Export is what peers may do with it: none, read, write, read_write.
	Export  string
	seq     uint64
	created time.Time
	region  *engine.Region
	owner   owner
}

// Owner is the uid and gid of the registering caller; ok is false when
// the daemon registered it for itself.
func (m *Memory) Owner() (uid, gid uint32, ok bool) { return ownerIDs(m.owner) }

// Seq is the object's unique sequence number (inode numbering).
func (m *Memory) Seq() uint64 { return m.seq }

// Created is the registration time.
func (m *Memory) Created() time.Time { return m.created }

// Len is the region's size in bytes.
func (m *Memory) Len() uint64 { return m.region.Len() }

func (m *Memory) scope(op string) scope {
	return scope{caller: m.owner, op: op, name: "memory/" + m.Name, logKey: "region", logName: m.Name}
}

// Memory returns the registration called name, or nil.
func (s *Service) Memory(name string) *Memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.memory[name]
}

// Memories returns the registrations in name order.
func (s *Service) Memories() []*Memory {
	s.mu.Lock()
	out := make([]*Memory, 0, len(s.mu.memory))
	for _, m := range s.mu.memory {
		if m != nil {
			out = append(out, m)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// RegisterWriter returns the handle state for one open of
// /memory/register by c.
func (s *Service) RegisterWriter(c *engine.Caller) *DocWriter {
	sc := scope{caller: c, op: "register", name: "memory"}
	return &DocWriter{doc: s.newDocument(c), commit: func(doc []byte) error { return s.Register(c, doc) },
		fail: func(err error) error { return s.fail(sc, err) }}
}

// Register parses a register document and registers the memory for c,
// who owns it (owner.go); an shm file is opened with c's rights. Errors:
// KindInvalid (document, name), KindTooLarge, KindExists (name taken),
// KindUnavailable (pinned, cuda:N without a usable GPU, saying why), the
// engine's kinds for the mapping.
func (s *Service) Register(c *engine.Caller, doc []byte) error {
	sc := scope{caller: c, op: "register", name: "memory"}
	if s.closing.Load() {
		return s.fail(sc, errClosing())
	}
	spec, err := ParseMemorySpec(doc, s.opts.MaxDocumentBytes)
	if err != nil {
		return s.fail(sc, err)
	}
	sc = scope{caller: c, op: "register", name: "memory/" + spec.Name, logKey: "region", logName: spec.Name}
	if spec.Shm != "" {
		if err := s.checkOutsideMount(spec.Shm); err != nil {
			return s.fail(sc, err)
		}
	}
	s.mu.Lock()
	if _, taken := s.mu.memory[spec.Name]; taken {
		s.mu.Unlock()
		return s.fail(sc, detail(engine.KindExists, "memory %q already exists; rmdir it first or pick another name", spec.Name))
	}
	s.mu.memory[spec.Name] = nil
	s.mu.Unlock()
	loc := engine.Location(spec.Location)
	dev, onDevice := loc.Device()
	var want quota
	if !onDevice {
		want.bytes = hostmem.RoundUp(uint64(spec.Bytes))
	}
	done, err := s.reserve(c, want)
	if err != nil {
		s.mu.Lock()
		delete(s.mu.memory, spec.Name)
		s.mu.Unlock()
		return s.fail(sc, err)
	}
	defer done()

	var r *engine.Region
	switch {
	case spec.Shm != "":
		r, err = s.e.RegisterSharedFileAs(c, spec.Shm, uint64(spec.Bytes))
	case loc == engine.LocationPinned:
		r, err = s.e.RegisterPinned(uint64(spec.Bytes))
	case onDevice && spec.CUDAIPCHandle != "":
		h, _ := hex.DecodeString(spec.CUDAIPCHandle) // checked by ParseMemorySpec
		r, err = s.e.ImportDevice(dev, h, uint64(spec.Bytes))
	case onDevice:
		r, err = s.e.RegisterDevice(dev, uint64(spec.Bytes))
	default:
		r, err = s.e.RegisterMemory(uint64(spec.Bytes))
	}
	s.mu.Lock()
	if err != nil {
		delete(s.mu.memory, spec.Name)
		s.mu.Unlock()
		return s.fail(sc, err)
	}
	export := spec.Export
	if export == "" {
		export = ExportNone
	}
	if export != ExportNone {
		// Checked with the insertion, under one hold of s.mu, so racing
		// registrations never pass the bound together.
		if err := s.exportFitsLocked(spec.Name, spec.Location); err != nil {
			delete(s.mu.memory, spec.Name)
			s.mu.Unlock()
			if uerr := s.e.Unregister(r); uerr != nil {
				s.log.Error("unregistering a refused export", "op", "register", "region", spec.Name, "err", uerr)
			}
			return s.fail(sc, err)
		}
	}
	m := &Memory{Name: spec.Name, Location: spec.Location, Export: export, seq: s.nextSeq(), created: time.Now(), region: r, owner: c}
	s.mu.memory[spec.Name] = m
	s.mu.Unlock()
	s.log.Info("memory registered", "op", "register", "region", m.Name, "bytes", r.Len(), "shm", spec.Shm, "export", m.Export)
	if m.Export != ExportNone {
		s.exportsChanged()
	}
	return nil
}

// Unregister removes the registration called name for c (rmdir).
// KindNotFound when there is none, KindPermission when it is not c's,
// KindBusy while a transfer holds it.
func (s *Service) Unregister(c *engine.Caller, name string) error {
	sc := scope{caller: c, op: "unregister", name: "memory/" + name, logKey: "region", logName: name}
	m := s.Memory(name)
	if m == nil {
		return s.fail(sc, notFound("no memory %q", name))
	}
	if !s.owns(c, m.owner) {
		return s.fail(sc, s.notYours(c, "memory "+name, m.owner))
	}
	if err := s.e.Unregister(m.region); err != nil {
		return s.fail(sc, err)
	}
	s.mu.Lock()
	if s.mu.memory[name] == m {
		delete(s.mu.memory, name)
	}
	s.mu.Unlock()
	s.log.Info("memory unregistered", "op", "unregister", "region", name)
	if m.Export != ExportNone {
		s.exportsChanged()
	}
	return nil
}

// MemoryInfo renders /memory/<name>/info.
func (s *Service) MemoryInfo(m *Memory) ([]byte, error) {
	if s.Memory(m.Name) != m {
		return nil, s.fail(m.scope("info"), notFound("memory %q was unregistered", m.Name))
	}
	return marshal(MemoryInfo{Name: m.Name, Location: m.Location, BaseAddress: m.region.BaseAddress(),
		Bytes: m.region.Len(), Shm: m.region.SharedPath(), Export: m.Export, CUDAIPCMappings: m.region.IPCMappings()}), nil
}

// ReadMemory copies region bytes at off into p; at or past the end it
// returns 0 (end of file). KindBusy while a transfer holds those bytes.
func (s *Service) ReadMemory(m *Memory, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, s.fail(m.scope("read"), invalid("offset %d is negative", off))
	}
	if uint64(off) >= m.Len() {
		return 0, nil
	}
	n, err := m.region.ReadAt(p, off)
	if err != nil {
		return 0, s.fail(m.scope("read"), err)
	}
	return n, nil
}

// WriteMemory copies p into the region at off: all of it or, on error,
// none (KindRange past the end, KindBusy while loaned).
func (s *Service) WriteMemory(m *Memory, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, s.fail(m.scope("write"), invalid("offset %d is negative", off))
	}
	n, err := m.region.WriteAt(p, off)
	if err != nil {
		return 0, s.fail(m.scope("write"), err)
	}
	return n, nil
}
