// dir.go owns the one directory node type. What a directory contains is
// asked of its children value on every Lookup and Readdir, so listings
// always match the Service's live objects.
//
// Invariants:
//   - A child's inode number identifies the object it shows (ino.go): a
//     Lookup that finds an inode already known to go-fuse keeps it, and
//     the node built for the lookup is dropped.
//   - Rmdir succeeds only when the Service removed the object; go-fuse then
//     drops the name from its tree.

package fusefs

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/orbitefs/orbitefs/engine"
)

// child describes one directory entry.
type child struct {
	name string
	ino  uint64
	dir  bool
	node func() fs.InodeEmbedder // builds the node; it implements attrFiller
}

// children is what a directory knows about its entries.
type children interface {
	list() []child
	find(name string) (child, bool)
}

// remover is implemented by children whose entries rmdir removes, for
// caller c.
type remover interface {
	remove(c *engine.Caller, name string) error
}

// dir is a directory node.
type dir struct {
	fs.Inode
	f    *fsys
	o    who
	t    time.Time
	kids children
}

var (
	_ fs.NodeGetattrer = (*dir)(nil)
	_ fs.NodeLookuper  = (*dir)(nil)
	_ fs.NodeReaddirer = (*dir)(nil)
	_ fs.NodeRmdirer   = (*dir)(nil)
	_ fs.NodeSetattrer = (*dir)(nil)
)

func (n *dir) fillAttr(a *fuse.Attr) { n.f.attr(a, n.o, modeDir, 0, n.t) }

func (n *dir) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.fillAttr(&out.Attr)
	return setattr(in, false)
}

func (n *dir) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fillAttr(&out.Attr)
	if !n.IsRoot() {
		out.SetTimeout(attrTTL) // cache.go: not the root's
	}
	return 0
}

func (n *dir) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	c, ok := n.kids.find(name)
	if !ok {
		return nil, syscall.ENOENT
	}
	node := c.node()
	node.(attrFiller).fillAttr(&out.Attr)
	out.SetAttrTimeout(attrTTL) // cache.go
	if st, ok := n.kids.(stableNames); ok && st.stable(name) {
		out.SetEntryTimeout(entryTTL) // cache.go
	}
	mode := uint32(syscall.S_IFREG)
	if c.dir {
		mode = syscall.S_IFDIR
	}
	return n.NewInode(ctx, node, fs.StableAttr{Mode: mode, Ino: c.ino}), 0
}

func (n *dir) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	kids := n.kids.list()
	out := make([]fuse.DirEntry, 0, len(kids)+2)
	self := n.StableAttr().Ino
	parent := self
	if _, p := n.Parent(); p != nil {
		parent = p.StableAttr().Ino
	}
	out = append(out, fuse.DirEntry{Name: ".", Ino: self, Mode: syscall.S_IFDIR},
		fuse.DirEntry{Name: "..", Ino: parent, Mode: syscall.S_IFDIR})
	for _, c := range kids {
		mode := uint32(syscall.S_IFREG)
		if c.dir {
			mode = syscall.S_IFDIR
		}
		out = append(out, fuse.DirEntry{Name: c.name, Ino: c.ino, Mode: mode})
	}
	return fs.NewListDirStream(out), 0
}

func (n *dir) Rmdir(ctx context.Context, name string) syscall.Errno {
	r, ok := n.kids.(remover)
	if !ok {
		return syscall.EPERM
	}
	if _, ok := n.kids.find(name); !ok {
		return syscall.ENOENT
	}
	return errno(r.remove(n.f.caller(ctx), name))
}
