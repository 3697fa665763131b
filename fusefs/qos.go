// qos.go owns the /qos directory: contracts and usage (snapshots) and
// resolve, a read-write file that answers each request context written
// to it on the same open file.
//
//	exec 3<>/mnt/qos/resolve
//	echo '{"tenant":"tenant-a","intent":"foreground_get"}' >&3
//	cat <&3          # the resolved policy, read from where the write ended
//
// Invariants:
//   - A resolve handle's answer belongs to that handle alone; it is
//     replaced by the next document the handle commits.
//   - The answer is served from the offset of the first read after the
//     commit, so a shell's `cat <&3` (which reads at the offset the write
//     left) sees it from its first byte, and so does a pread at 0 before
//     any other read.

package fusefs

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/orbitefs/orbitefs/control"
)

func (f *fsys) qosDir() child {
	kids := fixedKids{
		{name: "contracts", ino: inoQoSContracts, node: f.staticFile(f.svc.QoSContracts)},
		{name: "usage", ino: inoQoSUsage, node: f.staticFile(f.svc.QoSUsage)},
		{name: "resolve", ino: inoQoSResolve, node: func() fs.InodeEmbedder {
			return &resolveFile{writableNode: writableNode{ctlNode{f: f, t: f.svc.Started(), mode: modeData}}}
		}},
	}
	return child{name: "qos", ino: inoQoS, dir: true, node: f.staticDir(kids)}
}

// resolveFile is /qos/resolve.
type resolveFile struct{ writableNode }

var _ fs.NodeOpener = (*resolveFile)(nil)

func (n *resolveFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	h := &resolveHandle{base: -1}
	h.w = n.f.svc.ResolveWriter(n.f.caller(ctx), h.set)
	h.w.Restartable() // each document starts where the last answer's read left off
	if flags&syscall.O_APPEND != 0 {
		h.w.Append()
	}
	return h, writeOpenFlags, 0
}

type resolveHandle struct {
	w      *control.DocWriter
	mu     sync.Mutex
	answer []byte
	base   int64 // offset of the first read after the answer; -1: none yet
}

var (
	_ fs.FileWriter   = (*resolveHandle)(nil)
	_ fs.FileReader   = (*resolveHandle)(nil)
	_ fs.FileFlusher  = (*resolveHandle)(nil)
	_ fs.FileReleaser = (*resolveHandle)(nil)
)

func (h *resolveHandle) Release(ctx context.Context) syscall.Errno {
	h.w.Close()
	return 0
}

func (h *resolveHandle) Flush(ctx context.Context) syscall.Errno { return errno(h.w.Flush()) }

func (h *resolveHandle) set(b []byte) {
	h.mu.Lock()
	h.answer, h.base = b, -1
	h.mu.Unlock()
}

func (h *resolveHandle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if err := h.w.Write(data, off); err != nil {
		return 0, errno(err)
	}
	return uint32(len(data)), 0
}

func (h *resolveHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.answer == nil {
		return fuse.ReadResultData(nil), 0
	}
	if h.base < 0 {
		h.base = off
	}
	return fuse.ReadResultData(window(h.answer, dest, off-h.base)), 0
}
