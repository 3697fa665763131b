// peers.go owns the /peers directory: notifications, the completion
// notifications other daemons sent this one, read one per read(2); and
// one read-only file per peer connection (out-ID, in-ID) holding its
// figures as JSON.
//
// Invariants:
//   - Each read returns bytes of one notification line only; a line
//     longer than the reader's buffer is finished by the next reads of
//     the same open file before another notification is taken, so no
//     line is split between readers or lost to a short buffer.
//   - A read with nothing left of its line blocks until a notification
//     arrives; a signal ends it (EINTR) without taking one. Offsets are
//     ignored: the file is a stream.
//   - Connection entries are looked up again on every walk (never
//     cached): a closed connection is gone from ls and lookups at once.

package fusefs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/orbitefs/orbitefs/control"
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
	return child{name: "peers", ino: inoPeers, dir: true, node: f.staticDir(peersKids{f, kids})}
}

// peerSeqBase keeps connection inode numbers clear of the Service's
// object sequence numbers and of /cluster's; in-ID entries sit above
// out-ID ones. An ID is taken modulo 2^39 (session IDs start at a random
// number and count up, so live ones stay distinct).
const (
	peerSeqBase   = 1 << 41
	peerInSeqBase = peerSeqBase + 1<<39
	peerIDMask    = 1<<39 - 1
)

// peersKids is /peers: the fixed files, then one file per connection.
type peersKids struct {
	f     *fsys
	fixed fixedKids
}

func (k peersKids) connFile(p control.PeerConn) child {
	f, entry := k.f, p.Entry
	base := uint64(peerSeqBase)
	if p.Direction == "in" {
		base = peerInSeqBase
	}
	return child{name: entry, ino: objIno(base+p.ID&peerIDMask, slotInfo), node: func() fs.InodeEmbedder {
		return newReadFile(f, who{}, p.Since, func(context.Context) ([]byte, error) { return f.svc.PeerInfo(entry) })
	}}
}

func (k peersKids) list() []child {
	out := append([]child(nil), k.fixed...)
	for _, p := range k.f.svc.PeerConns() {
		out = append(out, k.connFile(p))
	}
	return out
}

func (k peersKids) find(name string) (child, bool) {
	if c, ok := k.fixed.find(name); ok {
		return c, true
	}
	if p, ok := k.f.svc.PeerConn(name); ok {
		return k.connFile(p), true
	}
	return child{}, false
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
