// owner.go owns who may do what on the mount: every object (memory,
// segment, batch) belongs to the caller that created it, and the rules
// below decide which callers may act on it. The mount's file modes
// (fusefs) make the kernel enforce the same for opens; these checks are
// the ones no file mode can express (what a submission refers to, which
// memory a mem:// segment maps) and a second line for rmdir and
// /ctl/engine.
//
// The rules:
//   - A nil *engine.Caller is the daemon itself (Go programs driving the
//     Service directly, tests): privileged.
//   - Privileged callers are uid 0 and the daemon's effective uid: they
//     may act on every object.
//   - Any other caller may act only on objects it owns (same uid); a
//     submission may name only its own segment and its own memory (or
//     raw addresses inside its own memory); a mem:// segment may map only
//     its own memory; /ctl/engine refuses it.
//   - Refusals are KindPermission (EACCES) naming the object and owner.

package control

import (
	"github.com/orbitefs/orbitefs/engine"
)

// owner is the identity that created an object; nil: the daemon.
type owner = *engine.Caller

// privileged reports whether c may act on every object.
func (s *Service) privileged(c *engine.Caller) bool {
	return c == nil || c.UID == 0 || c.UID == s.euid
}

// owns reports whether c may act on an object created by o.
func (s *Service) owns(c *engine.Caller, o owner) bool {
	return s.privileged(c) || (o != nil && o.UID == c.UID)
}

// ownerUID names an object's owner in messages.
func (s *Service) ownerUID(o owner) uint32 {
	if o == nil {
		return s.euid
	}
	return o.UID
}

// notYours is the refusal for c acting on what (created by o).
func (s *Service) notYours(c *engine.Caller, what string, o owner) error {
	return detail(engine.KindPermission, "%s belongs to uid %d, not to uid %d", what, s.ownerUID(o), c.UID)
}

// Owner returns the uid and gid of an object's creator; ok is false for
// objects the daemon created for itself.
func ownerIDs(o owner) (uid, gid uint32, ok bool) {
	if o == nil {
		return 0, 0, false
	}
	return o.UID, o.GID, true
}
