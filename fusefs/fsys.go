// fsys.go owns what every node shares: the Service, the daemon's ids,
// and the attribute helper that gives every file its mode, owner and
// times.
//
// Invariants:
//   - A node is the mount's (the root, the fixed files, the creation
//     files) or one object's (everything under memory/X, segments/X,
//     ctl/batches/N). The mount's nodes belong to the daemon's user and,
//     with allow_other, grant group and others the owner's bits (widen);
//     ctl/engine is the exception, private to the daemon's user. An
//     object's nodes belong to the uid and gid that created it and are
//     never widened: with default_permissions the kernel refuses every
//     other user (root excepted) before a request reaches the daemon.
//   - Mode, owner and times never change; chmod, chown and utime fail
//     with EPERM (setattr).

package fusefs

import (
	"log/slog"
	"slices"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/orbitefs/orbitefs/control"
)

// File modes, for the owner. With allow_other the mount's own nodes
// grant the same bits to group and others (widen); objects' nodes never.
const (
	modeDir   = 0o700
	modeRead  = 0o400
	modeWrite = 0o200
	modeData  = 0o600
)

// fsys is shared by every node of one mount. Its fields never change.
type fsys struct {
	svc        *control.Service
	uid, gid   uint32
	allowOther bool
	log        *slog.Logger
}

// widen copies the owner's bits to group and others.
func widen(perm uint32) uint32 {
	u := perm & 0o700
	return u | u>>3 | u>>6
}

// who is whose a node is: the mount's (zero value) or one user's.
type who struct {
	uid, gid uint32
	owned    bool // false: the mount's, widened with allow_other
}

// owner is who for an object's Owner(): the daemon's user for an object
// the daemon created for itself.
func (f *fsys) owner(uid, gid uint32, ok bool) who {
	if !ok {
		return who{uid: f.uid, gid: f.gid, owned: true}
	}
	return who{uid: uid, gid: gid, owned: true}
}

// attr fills a with permission bits, size, owner and times (the object's
// creation time). The file type bits come from the inode (go-fuse adds
// them).
func (f *fsys) attr(a *fuse.Attr, o who, perm uint32, size uint64, t time.Time) {
	a.Mode = perm
	a.Uid, a.Gid = o.uid, o.gid
	if !o.owned {
		a.Uid, a.Gid = f.uid, f.gid
		if f.allowOther {
			a.Mode = widen(perm)
		}
	}
	a.Size = size
	a.Nlink = 1
	if perm == modeDir {
		a.Nlink = 2
	}
	sec, nsec := uint64(t.Unix()), uint32(t.Nanosecond())
	a.Atime, a.Mtime, a.Ctime = sec, sec, sec
	a.Atimensec, a.Mtimensec, a.Ctimensec = nsec, nsec, nsec
}

// errno maps a control error; the error was already recorded and logged
// by the Service.
func errno(err error) syscall.Errno { return control.Errno(err) }

// attrFiller is implemented by every node: Lookup and Getattr share it.
type attrFiller interface {
	fillAttr(a *fuse.Attr)
}

// setattr answers a Setattr. A size change is a truncate: accepted
// (changing nothing) on a writable file when it is to 0 or to one of the
// allowed sizes, so `echo x > file` works; EINVAL to any other size;
// EPERM on a file that is not writable. Without a size, a change of mode,
// owner or times (chmod, chown, utime, touch) is EPERM: they are fixed.
// The times the kernel sends along with a truncate are ignored.
func setattr(in *fuse.SetAttrIn, writable bool, allowed ...uint64) syscall.Errno {
	if sz, ok := in.GetSize(); ok {
		if !writable {
			return syscall.EPERM
		}
		if sz == 0 || slices.Contains(allowed, sz) {
			return 0
		}
		return syscall.EINVAL
	}
	const fixed = fuse.FATTR_MODE | fuse.FATTR_UID | fuse.FATTR_GID | fuse.FATTR_ATIME | fuse.FATTR_MTIME |
		fuse.FATTR_ATIME_NOW | fuse.FATTR_MTIME_NOW
	if in.Valid&fixed != 0 {
		return syscall.EPERM
	}
	return 0
}

// accessMode is the O_ACCMODE part of open flags.
func accessMode(flags uint32) uint32 { return flags & syscall.O_ACCMODE }
