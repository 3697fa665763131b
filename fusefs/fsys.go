// fsys.go owns what every node shares: the Service, the owner's ids, and
// the attribute helper that gives every file its mode, owner and times.

package fusefs

import (
	"log/slog"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/orbitefs/orbitefs/control"
)

// File modes: the mount is private to its owner. With allow_other the
// same bits are granted to group and others (widen).
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

// attr fills a with permission bits, size, owner and times (the object's
// creation time). The file type bits come from the inode (go-fuse adds
// them).
func (f *fsys) attr(a *fuse.Attr, perm uint32, size uint64, t time.Time) {
	a.Mode = perm
	if f.allowOther {
		a.Mode = widen(perm)
	}
	a.Size = size
	a.Uid, a.Gid = f.uid, f.gid
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

// truncateOK accepts a Setattr whose size change (if any) is to 0 or to
// one of the allowed sizes; other attributes are accepted and ignored.
func truncateOK(in *fuse.SetAttrIn, allowed ...uint64) syscall.Errno {
	sz, ok := in.GetSize()
	if !ok || sz == 0 {
		return 0
	}
	for _, a := range allowed {
		if sz == a {
			return 0
		}
	}
	return syscall.EINVAL
}

// accessMode is the O_ACCMODE part of open flags.
func accessMode(flags uint32) uint32 { return flags & syscall.O_ACCMODE }
