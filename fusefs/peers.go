// peers.go owns the /peers directory: notifications, the completion
// notifications other daemons sent this one, read one per read(2).
//
// Invariants:
//   - Each read returns bytes of one notification line only; a line
//     longer than the reader's buffer is finished by the next reads of
//     the same open file before another notification is taken, so no
//     line is split between readers or lost to a short buffer.
//   - A read with nothing left of its line blocks until a notification
//     arrives; a signal ends it (EINTR) without taking one. Offsets are
//     ignored: the file is a stream.

package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

func (f *fsys) peersDir() child {
	kids := fixedKids{
		{name: "notifications", ino: inoNotifications, node: func() fs.InodeEmbedder {
			// The daemon's user's alone (and root's), even with allow_other:
			// the messages are addressed to the daemon.
			return &notificationsFile{ctlNode{f: f, o: f.owner(0, 0, false), t: f.svc.Started(), mode: modeRead}}
		}},
		f.creditDir(), // credit.go
	}
	return child{name: "peers", ino: inoPeers, dir: true, node: f.staticDir(kids)}
}

// notificationsFile is /peers/notifications.
type notificationsFile struct{ ctlNode }

var _ fs.NodeOpener = (*notificationsFile)(nil)

func (n *notificationsFile) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	if accessMode(flags) != syscall.O_RDONLY {
		return nil, 0, syscall.EACCES
	}
	return &notificationsHandle{f: n.f, turn: make(chan struct{}, 1)}, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NONSEEKABLE, 0
}

// notificationsHandle is one open of the file: the rest of the line its
// last read took and did not finish.
type notificationsHandle struct {
	f *fsys
	// turn admits one read at a time per open file, so lines stay whole;
	// a channel, not a mutex, so a read waiting its turn is interruptible.
	turn chan struct{}
	rest []byte
}

var _ fs.FileReader = (*notificationsHandle)(nil)

func (h *notificationsHandle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	select {
	case h.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, syscall.EINTR
	}
	defer func() { <-h.turn }()
	if len(h.rest) == 0 {
		b, err := h.f.svc.NextNotification(ctx, h.f.caller(ctx))
		if err != nil {
			return nil, errno(err)
		}
		h.rest = b
	}
	k := copy(dest, h.rest)
	out := h.rest[:k]
	h.rest = h.rest[k:]
	return fuse.ReadResultData(out), 0
}
