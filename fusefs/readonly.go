// readonly.go owns the namespace operations the mount refuses: unlink,
// rename, link, symlink, mknod, create and mkdir fail with EPERM on every
// directory, as on sysfs. Objects are created only by writing documents
// (memory/register, segments/open) or reading clone, and removed only by
// rmdir (dir.go).
//
// go-fuse answers success for a node without Unlink and drops the name
// from its tree (so `rm` returned 0 and removed nothing), and ENOTSUP or
// EROFS for the others; EPERM says "not allowed here" the same way for
// each.

package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

var (
	_ fs.NodeUnlinker  = (*dir)(nil)
	_ fs.NodeRenamer   = (*dir)(nil)
	_ fs.NodeLinker    = (*dir)(nil)
	_ fs.NodeSymlinker = (*dir)(nil)
	_ fs.NodeMknoder   = (*dir)(nil)
	_ fs.NodeCreater   = (*dir)(nil)
	_ fs.NodeMkdirer   = (*dir)(nil)
)

func (n *dir) Unlink(ctx context.Context, name string) syscall.Errno { return syscall.EPERM }

func (n *dir) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EPERM
}

func (n *dir) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *dir) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *dir) Mknod(ctx context.Context, name string, mode, dev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *dir) Create(ctx context.Context, name string, flags, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EPERM
}

func (n *dir) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}
