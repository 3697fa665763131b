// segment.go owns the segment table: named segments opened through
// /segments/open, described by info, refreshed by a write to refresh,
// closed by rmdir with a bounded drain. A segment is a file
// (file:///path) or a registered memory region of this mount
// (mem://MEMORY), the target of the local memory transport, or a peer's
// exported region (tcp://HOST:PORT/REGION, hp_tcp://...: remote.go).
//
// Invariants:
//   - A name maps to at most one engine segment handle; a close that
//     times out keeps the entry (the engine keeps the segment draining)
//     so rmdir can be retried.

package control

import (
	"sort"
	"strings"
	"time"

	"github.com/orbitefs/orbitefs/engine"
)

// Segment is one named file segment. Its fields never change.
type Segment struct {
	Name    string
	URI     string
	seq     uint64
	created time.Time
	seg     *engine.Segment       // a file segment, or
	mem     *engine.MemSegment    // a memory segment
	memory  string                // the memory name of a memory segment
	remote  *engine.RemoteSegment // a peer's region
	owner   owner
}

// Owner is the uid and gid of the opening caller; ok is false when the
// daemon opened it for itself.
func (g *Segment) Owner() (uid, gid uint32, ok bool) { return ownerIDs(g.owner) }

// target is what submissions to this segment address.
func (g *Segment) target() engine.Target {
	switch {
	case g.mem != nil:
		return g.mem
	case g.remote != nil:
		return g.remote
	}
	return g.seg
}

// Seq is the object's unique sequence number (inode numbering).
func (g *Segment) Seq() uint64 { return g.seq }

// Created is the open time.
func (g *Segment) Created() time.Time { return g.created }

func (g *Segment) scope(op string) scope {
	return scope{caller: g.owner, op: op, name: "segments/" + g.Name, logKey: "segment", logName: g.Name}
}

// Segment returns the segment called name, or nil.
func (s *Service) Segment(name string) *Segment {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.segments[name]
}

// Segments returns the open segments in name order.
func (s *Service) Segments() []*Segment {
	s.mu.Lock()
	out := make([]*Segment, 0, len(s.mu.segments))
	for _, g := range s.mu.segments {
		if g != nil {
			out = append(out, g)
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// OpenWriter returns the handle state for one open of /segments/open by
// c.
func (s *Service) OpenWriter(c *engine.Caller) *DocWriter {
	sc := scope{caller: c, op: "open", name: "segments"}
	return &DocWriter{doc: s.newDocument(c), commit: func(doc []byte) error { return s.OpenSegment(c, doc) },
		fail: func(err error) error { return s.fail(sc, err) }}
}

// OpenSegment parses an open document and opens the segment for c, who
// owns it (owner.go): a file with c's rights, a memory only if it is
// c's. Errors: KindInvalid, KindTooLarge, KindExists, and the engine's
// open kinds (KindNotFound, KindPermission outside the allowed roots or
// the caller's rights, ...).
func (s *Service) OpenSegment(c *engine.Caller, doc []byte) error {
	sc := scope{caller: c, op: "open", name: "segments"}
	if s.closing.Load() {
		return s.fail(sc, errClosing())
	}
	spec, perm, err := ParseSegmentSpec(doc, s.opts.MaxDocumentBytes)
	if err != nil {
		return s.fail(sc, err)
	}
	sc = scope{caller: c, op: "open", name: "segments/" + spec.Name, logKey: "segment", logName: spec.Name}
	if path, err := engine.ParseFileURI(spec.URI); err == nil {
		if err := s.checkOutsideMount(path); err != nil {
			return s.fail(sc, err)
		}
	}
	s.mu.Lock()
	if _, taken := s.mu.segments[spec.Name]; taken {
		s.mu.Unlock()
		return s.fail(sc, detail(engine.KindExists, "segment %q already exists; rmdir it first or pick another name", spec.Name))
	}
	s.mu.segments[spec.Name] = nil
	s.mu.Unlock()
	done, err := s.reserve(c, quota{segments: 1})
	if err != nil {
		s.mu.Lock()
		delete(s.mu.segments, spec.Name)
		s.mu.Unlock()
		return s.fail(sc, err)
	}
	defer done()

	g := &Segment{Name: spec.Name, URI: spec.URI, created: time.Now(), owner: c}
	if mem, ok := strings.CutPrefix(spec.URI, "mem://"); ok {
		g.memory = mem
		if m := s.Memory(mem); m == nil {
			err = notFound("uri %s: no memory %q; register it through memory/register", spec.URI, mem)
		} else if !s.owns(c, m.owner) {
			err = s.notYours(c, "uri "+spec.URI+": memory "+mem, m.owner)
		} else {
			g.mem, err = s.e.OpenMemorySegment(spec.URI, m.region, perm)
		}
	} else if ru, ok, perr := ParseRemoteURI(spec.URI); ok {
		err = perr
		if err == nil {
			g.remote, err = s.openRemote(c, spec.URI, ru, perm)
		}
	} else {
		g.seg, err = s.e.OpenFileSegmentAs(c, spec.URI, perm)
		if err == nil {
			err = s.checkNotOwnDevice(g.seg)
		}
	}
	s.mu.Lock()
	if err != nil {
		delete(s.mu.segments, spec.Name)
		s.mu.Unlock()
		return s.fail(sc, err)
	}
	g.seq = s.nextSeq()
	s.mu.segments[spec.Name] = g
	s.mu.Unlock()
	s.log.Info("segment opened", "op", "open", "segment", g.Name, "uri", g.URI, "permission", perm.String())
	return nil
}

// checkNotOwnDevice closes seg and refuses it when its file lives on the
// daemon's own mount (no transfer has used it yet).
func (s *Service) checkNotOwnDevice(seg *engine.Segment) error {
	if s.opts.OwnDevice == nil {
		return nil
	}
	own := s.opts.OwnDevice()
	if own == "" {
		return nil
	}
	info, err := s.e.FileSegmentInfo(seg)
	if err == nil && info.Device != own {
		return nil
	}
	s.e.CloseFileSegment(seg, s.opts.CloseTimeout)
	if err != nil {
		return err
	}
	return detail(engine.KindPermission, "%s is on the orbitefs mount itself (device %s); the daemon never does I/O on its own mount", info.Path, own)
}

// CloseSegment closes the segment called name for c (rmdir), draining
// admitted transfers for at most mount.close_timeout: KindTimeout when
// they do not finish (the segment stays, closed to new work; retry
// later), KindPermission when it is not c's.
func (s *Service) CloseSegment(c *engine.Caller, name string) error {
	sc := scope{caller: c, op: "close", name: "segments/" + name, logKey: "segment", logName: name}
	g := s.Segment(name)
	if g == nil {
		return s.fail(sc, notFound("no segment %q", name))
	}
	if !s.owns(c, g.owner) {
		return s.fail(sc, s.notYours(c, "segment "+name, g.owner))
	}
	var err error
	switch {
	case g.mem != nil:
		err = s.e.CloseMemorySegment(g.mem, s.opts.CloseTimeout)
	case g.remote != nil:
		err = s.e.CloseRemoteSegment(g.remote, s.opts.CloseTimeout)
	default:
		err = s.e.CloseFileSegment(g.seg, s.opts.CloseTimeout)
	}
	if err != nil {
		return s.fail(sc, err)
	}
	s.mu.Lock()
	if s.mu.segments[name] == g {
		delete(s.mu.segments, name)
	}
	s.mu.Unlock()
	s.log.Info("segment closed", "op", "close", "segment", name)
	return nil
}

// RefreshSegment re-reads the file size into the info cache (a memory
// segment's size never changes: nothing to do).
func (s *Service) RefreshSegment(g *Segment) error {
	if g.mem != nil || g.remote != nil {
		return nil
	}
	if err := s.e.RefreshFileSegment(g.seg); err != nil {
		return s.fail(g.scope("refresh"), err)
	}
	return nil
}

// SegmentInfo renders /segments/<name>/info.
func (s *Service) SegmentInfo(g *Segment) ([]byte, error) {
	if g.mem != nil {
		return marshal(RenderMemSegmentInfo(g.Name, g.memory, g.mem.Info())), nil
	}
	if g.remote != nil {
		return marshal(RenderRemoteSegmentInfo(g.Name, g.remote.Info())), nil
	}
	info, err := s.e.FileSegmentInfo(g.seg)
	if err != nil {
		return nil, s.fail(g.scope("info"), err)
	}
	return marshal(RenderSegmentInfo(g.Name, info)), nil
}
