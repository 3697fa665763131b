// files.go owns the three generic file nodes: readFile (a snapshot taken
// at open), docFile (JSON documents assembled per handle) and cmdFile (one
// action per write).
//
// Invariants:
//   - Every handle is opened FOPEN_DIRECT_IO, so reads and writes always
//     reach these nodes, whatever size Getattr reports; writable ones
//     also FOPEN_PARALLEL_DIRECT_WRITES (writableNode).
//   - Write returns the action's error (bash's echo reports only that);
//     Flush reports a docFile handle's sticky error or an incomplete
//     document but never acts; Release drops the handle and whatever it
//     buffered (its bytes go back to the mount-wide budget).

package fusefs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/orbitefs/orbitefs/control"
	"github.com/orbitefs/orbitefs/engine"
)

// ctlNode is what every control file shares: an inode with a fixed
// owner, mode and time that reports size 0 (reads go through DIRECT_IO
// handles).
type ctlNode struct {
	fs.Inode
	f    *fsys
	o    who
	t    time.Time
	mode uint32
}

var (
	_ fs.NodeGetattrer = (*ctlNode)(nil)
	_ fs.NodeSetattrer = (*ctlNode)(nil)
)

func (n *ctlNode) fillAttr(a *fuse.Attr) { n.f.attr(a, n.o, n.mode, 0, n.t) }

func (n *ctlNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fillAttr(&out.Attr)
	out.SetTimeout(attrTTL) // cache.go
	return 0
}

func (n *ctlNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.fillAttr(&out.Attr)
	return setattr(in, false)
}

// writableNode is a ctlNode that accepts the truncate to 0 that
// `echo x > file` sends before writing.
//
// Its handles are opened writeOpenFlags and it reports a huge file
// size, so that the kernel lets writers in at once: a FUSE direct write
// takes the inode lock exclusively unless the handle allows parallel
// direct writes and the write ends within the file's size. Exclusive, one
// client whose write waits in the daemon (a segment open on a store that
// does not answer) held every other writer of the file in D state.
type writableNode struct{ ctlNode }

// writeOpenFlags open a writable control file: direct I/O (every read and
// write reaches the daemon) without the kernel serializing writers.
// FOPEN_PARALLEL_DIRECT_WRITES is the kernel's (1 << 6), Linux 6.2+;
// older kernels ignore it.
const writeOpenFlags = fuse.FOPEN_DIRECT_IO | fuse.FOPEN_PARALLEL_DIRECT_WRITES

// writableSize is the size a writableNode reports: no write offset a
// client reaches comes near it, so no write extends the file (see
// writableNode). Half the kernel's largest file size, not all of it: an
// O_APPEND write starts at the size, and one at the limit is EFBIG.
const writableSize = 1 << 62

var (
	_ fs.NodeSetattrer = (*writableNode)(nil)
	_ fs.NodeGetattrer = (*writableNode)(nil)
)

func (n *writableNode) fillAttr(a *fuse.Attr) { n.f.attr(a, n.o, n.mode, writableSize, n.t) }

func (n *writableNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fillAttr(&out.Attr)
	out.SetTimeout(attrTTL) // cache.go
	return 0
}

func (n *writableNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.fillAttr(&out.Attr)
	return setattr(in, true)
}

// readFile is a read-only file whose content is rendered at open.
type readFile struct {
	ctlNode
	render func(ctx context.Context) ([]byte, error)
}

func newReadFile(f *fsys, o who, t time.Time, render func(ctx context.Context) ([]byte, error)) *readFile {
	return &readFile{ctlNode: ctlNode{f: f, o: o, t: t, mode: modeRead}, render: render}
}

var _ fs.NodeOpener = (*readFile)(nil)

func (n *readFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if accessMode(flags) != syscall.O_RDONLY {
		return nil, 0, syscall.EACCES
	}
	b, err := n.render(ctx)
	if err != nil {
		return nil, 0, errno(err)
	}
	return &snapshot{b: b}, fuse.FOPEN_DIRECT_IO, 0
}

// snapshot is an open readFile's content. Immutable.
type snapshot struct{ b []byte }

var _ fs.FileReader = (*snapshot)(nil)

func (h *snapshot) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	return fuse.ReadResultData(window(h.b, dest, off)), 0
}

// window returns the part of b a read of len(dest) bytes at off sees.
func window(b, dest []byte, off int64) []byte {
	if off < 0 || off >= int64(len(b)) {
		return nil
	}
	end := min(off+int64(len(dest)), int64(len(b)))
	return b[off:end]
}

// docFile is a write-only file taking JSON documents. Its documents act
// for the caller that opened the handle (as a file descriptor carries
// the credentials of its open).
type docFile struct {
	writableNode
	newWriter  func(c *engine.Caller) *control.DocWriter
	opensFiles bool // its documents open files as the caller: needs groups
}

func newDocFile(f *fsys, o who, t time.Time, newWriter func(c *engine.Caller) *control.DocWriter) *docFile {
	return &docFile{writableNode: writableNode{ctlNode{f: f, o: o, t: t, mode: modeWrite}}, newWriter: newWriter}
}

var _ fs.NodeOpener = (*docFile)(nil)

func (n *docFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if accessMode(flags) != syscall.O_WRONLY {
		return nil, 0, syscall.EACCES
	}
	c := n.f.caller(ctx)
	if n.opensFiles {
		c = n.f.fileCaller(ctx)
	}
	w := n.newWriter(c)
	if flags&syscall.O_APPEND != 0 {
		w.Append()
	}
	return &docHandle{w: w}, writeOpenFlags, 0
}

// docHandle is one open docFile.
type docHandle struct{ w *control.DocWriter }

var (
	_ fs.FileWriter   = (*docHandle)(nil)
	_ fs.FileFlusher  = (*docHandle)(nil)
	_ fs.FileReleaser = (*docHandle)(nil)
)

func (h *docHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if err := h.w.Write(data, off); err != nil {
		return 0, errno(err)
	}
	return uint32(len(data)), 0
}

func (h *docHandle) Flush(ctx context.Context) syscall.Errno { return errno(h.w.Flush()) }

// Release gives an unfinished document's buffer back to the mount's
// budget of buffered document bytes.
func (h *docHandle) Release(ctx context.Context) syscall.Errno {
	h.w.Close()
	return 0
}

// cmdFile is a write-only file where each write is one action, for the
// caller of the write.
type cmdFile struct {
	writableNode
	run func(c *engine.Caller, p []byte) error
}

func newCmdFile(f *fsys, o who, t time.Time, run func(c *engine.Caller, p []byte) error) *cmdFile {
	return &cmdFile{writableNode: writableNode{ctlNode{f: f, o: o, t: t, mode: modeWrite}}, run: run}
}

var (
	_ fs.NodeOpener = (*cmdFile)(nil)
	_ fs.NodeWriter = (*cmdFile)(nil)
)

func (n *cmdFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if accessMode(flags) != syscall.O_WRONLY {
		return nil, 0, syscall.EACCES
	}
	return nil, writeOpenFlags, 0
}

func (n *cmdFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	if err := n.run(n.f.caller(ctx), data); err != nil {
		return 0, errno(err)
	}
	return uint32(len(data)), 0
}

// dataFile is a memory region's bytes.
type dataFile struct {
	fs.Inode
	f *fsys
	m *control.Memory
}

var (
	_ fs.NodeGetattrer = (*dataFile)(nil)
	_ fs.NodeSetattrer = (*dataFile)(nil)
	_ fs.NodeOpener    = (*dataFile)(nil)
	_ fs.NodeReader    = (*dataFile)(nil)
	_ fs.NodeWriter    = (*dataFile)(nil)
)

func (n *dataFile) fillAttr(a *fuse.Attr) {
	n.f.attr(a, n.f.owner(n.m.Owner()), modeData, n.m.Len(), n.m.Created())
}

func (n *dataFile) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	n.fillAttr(&out.Attr)
	out.SetTimeout(attrTTL) // cache.go
	return 0
}

func (n *dataFile) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.fillAttr(&out.Attr)
	return setattr(in, true, n.m.Len())
}

func (n *dataFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if n.f.svc.Memory(n.m.Name) != n.m {
		return nil, 0, syscall.ENOENT
	}
	// FOPEN_NOFLUSH: a data file has nothing to flush, and the kernel
	// waits for a FLUSH without interruption: a process holding a data
	// file of a stopped daemon (another orbitefs using it as a store)
	// could otherwise neither close it nor exit until the daemon resumes.
	return nil, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NOFLUSH, 0
}

func (n *dataFile) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	k, err := n.f.svc.ReadMemory(n.m, dest, off)
	if err != nil {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:k]), 0
}

func (n *dataFile) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	k, err := n.f.svc.WriteMemory(n.m, data, off)
	if err != nil {
		return 0, errno(err)
	}
	return uint32(k), 0
}

// waitFile blocks in Read until its batch is terminal.
type waitFile struct {
	ctlNode
	bt *control.Batch
}

var _ fs.NodeOpener = (*waitFile)(nil)

func (n *waitFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if accessMode(flags) != syscall.O_RDONLY {
		return nil, 0, syscall.EACCES
	}
	if n.f.svc.Batch(n.bt.ID) != n.bt {
		return nil, 0, syscall.ENOENT
	}
	return &waitHandle{svc: n.f.svc, bt: n.bt}, fuse.FOPEN_DIRECT_IO, 0
}

// waitHandle is one open wait file: the first read blocks, later reads
// serve the word it got. No lock is held while blocked.
type waitHandle struct {
	svc *control.Service
	bt  *control.Batch

	mu     sync.Mutex
	result []byte // nil until a wait succeeded
}

var _ fs.FileReader = (*waitHandle)(nil)

func (h *waitHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	res := h.result
	h.mu.Unlock()
	if res == nil {
		b, err := h.svc.Wait(ctx, h.bt)
		if err != nil {
			return nil, errno(err)
		}
		h.mu.Lock()
		h.result = b
		h.mu.Unlock()
		res = b
	}
	return fuse.ReadResultData(window(res, dest, off)), 0
}
